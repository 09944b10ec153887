"""D-SGD without privacy: local gradient step, then gossip averaging (paper 000 Alg. 1, Z = 0)."""

from __future__ import annotations

from edgedp import factors, mechanisms
from edgedp import gossip as _gossip
from edgedp.accounting import mf

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
]

NAME = "dsgd"
TRUST_MODEL = "none: messages carry un-noised models; no privacy guarantee"


def check_plan(plan) -> None:
    """D-SGD plans carry no noise."""
    if plan.noise_multiplier != 0.0:
        raise ValueError(f"Expected noise_multiplier=0 for dsgd, got {plan.noise_multiplier}.")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this plan check.
RULES = _gossip.rules(check_plan)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "dsgd",
        RULES,
        family="sgd",
        noise="none",
        trust_model=TRUST_MODEL,
        accountant=mf.plan_guarantee,
        factor=factors.Identity,
        examples={"dsgd": {}},
    ),
)
