"""The matrix-factorization family (``edgedp plan mf``): MF-D-SGD, noise correlated in time
by a temporal factor C (paper 000).

Rules: :mod:`~edgedp.families.mf.mf_dsgd` (every factor kind, and ``dense``). Planners: the
factor of a ``planned`` mechanism comes from :mod:`~edgedp.families.mf.factorization`, which
optimizes it on the MAFALDA workload (:mod:`~edgedp.families.mf.mafalda`) or fits a compact
banded / BLT factor (:mod:`~edgedp.families.mf.compact`, ``compact_banded``, ``compact_blt``).
The accountant (:mod:`edgedp.accounting.mf`) and the optimal factorization
(:mod:`edgedp.planning.mf_optimal`) stay in the kernel: other families use them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgedp.mechanisms import Family

__all__ = ["FAMILY", "MfTraits"]


@dataclass(frozen=True, slots=True)
class MfTraits:
    """planned: its factor comes from :mod:`edgedp.families.mf.factorization`;
    factor_options: the planner options its factor takes (``bandwidth``, ``buffers``), spelled
    as ``edgedp plan`` flags with ``_`` for ``-``."""

    planned: bool = False
    factor_options: tuple[str, ...] = ()


FAMILY = Family("mf", MfTraits)
