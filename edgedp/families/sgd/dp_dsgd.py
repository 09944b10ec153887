"""DP-D-SGD: independent Gaussian noise at every step (paper 000 Alg. 1 with C = I).

Trust model LDP: the attacker sees every message of every node; each node's example-level
guarantee is certified by :func:`edgedp.accounting.mf.ldp_guarantee` with C_local = I, i.e.
√k/σ-GDP for k participations.
"""

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

NAME = "dp-dsgd"
TRUST_MODEL = "LDP: every message is private against an attacker who sees all messages"


def check_plan(plan) -> None:
    """DP-D-SGD plans use the identity temporal factor."""
    if plan.factor.kind != "identity":
        raise ValueError(f"Expected the identity factor for dp-dsgd, got {plan.factor.kind!r}.")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this plan check.
RULES = _gossip.rules(check_plan)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "dp-dsgd",
        RULES,
        family="sgd",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=mf.plan_guarantee,
        factor=factors.Identity,
        examples={
            "dp-dsgd": {**mechanisms.GAUSSIAN_EXAMPLE},
            "dp-dsgd-sigma": {"noise_multiplier": 1.5},
        },
    ),
)
