"""D-SGD without privacy: local gradient step, then gossip averaging (paper 000 Alg. 1, Z = 0)."""

from __future__ import annotations

import sys

from edgedp import factors, mechanisms
from edgedp.accounting import mf
from edgedp.algorithms._gossip import (
    init_state,
    local_step,
    message_bound,
    model,
    receive,
    send,
)

__all__ = [
    "MECHANISMS",
    "NAME",
    "TRUST_MODEL",
    "check_plan",
    "init_state",
    "local_step",
    "message_bound",
    "model",
    "receive",
    "send",
]

NAME = "dsgd"
TRUST_MODEL = "none: messages carry un-noised models; no privacy guarantee"


def check_plan(plan) -> None:
    """D-SGD plans carry no noise."""
    if plan.noise_multiplier != 0.0:
        raise ValueError(f"Expected noise_multiplier=0 for dsgd, got {plan.noise_multiplier}.")


_rules = sys.modules[__name__]
#: The mechanisms these rules run (registered by :mod:`edgedp.algorithms`).
MECHANISMS = (
    mechanisms.Mechanism(
        "dsgd",
        _rules,
        family="sgd",
        noise="none",
        trust_model=TRUST_MODEL,
        accountant=mf.plan_guarantee,
        factor=factors.Identity,
    ),
)
