"""The Laplace family (``edgedp plan laplace``): sr-gt and DPOP with the decaying Laplace
schedules of paper 004, pure ε-DP.

Rules: :mod:`~edgedp.families.laplace.sr_gt`, :mod:`~edgedp.families.laplace.dpop`.
Accountant: :mod:`~edgedp.families.laplace.accounting` (with its PLD cross-check
:mod:`~edgedp.families.laplace.pld`, offline). Planner: the schedule search of
:mod:`~edgedp.families.laplace.sr_gt_tuning` (``edgedp tune``).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgedp.mechanisms import Family

__all__ = ["EXAMPLE", "FAMILY", "LaplaceTraits"]


@dataclass(frozen=True, slots=True)
class LaplaceTraits:
    """tracking: its Laplace schedule carries the gradient-tracking stepsize β (sr-gt)."""

    tracking: bool = False


FAMILY = Family("laplace", LaplaceTraits)
#: Example options (:data:`edgedp.mechanisms.EXAMPLE_FRAME`) its mechanisms share.
EXAMPLE = {"target_epsilon": 1.0, "gamma": 0.001, "q1": 0.97, "q2": 0.98}
