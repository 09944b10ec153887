"""D-SGD without privacy: local gradient step, then gossip averaging (paper 000 Alg. 1, Z = 0)."""

from __future__ import annotations

from edgedp.algorithms._gossip import (
    init_state,
    local_step,
    message_bound,
    mix,
    mix_node,
    model,
    receive,
    send,
)

__all__ = [
    "ACCOUNTANT",
    "NAME",
    "TRUST_MODEL",
    "check_plan",
    "combine",
    "combine_node",
    "init_state",
    "local_step",
    "message_bound",
    "model",
    "receive",
    "send",
]

NAME = "dsgd"
TRUST_MODEL = "none: messages carry un-noised models; no privacy guarantee"
ACCOUNTANT = "none"
combine = mix
combine_node = mix_node


def check_plan(plan) -> None:
    """D-SGD plans carry no noise."""
    if plan.noise_multiplier != 0.0:
        raise ValueError(f"Expected noise_multiplier=0 for dsgd, got {plan.noise_multiplier}.")
