"""DP-D-SGD: independent Gaussian noise at every step (paper 000 Alg. 1 with C = I).

Trust model LDP: the attacker sees every message of every node; each node's example-level
guarantee is certified by :func:`edgedp.accounting.mf.ldp_guarantee` with C_local = I, i.e.
√k/σ-GDP for k participations.
"""

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

NAME = "dp-dsgd"
TRUST_MODEL = "LDP: every message is private against an attacker who sees all messages"
ACCOUNTANT = "edgedp.accounting.mf.ldp_guarantee (C_local = I)"
combine = mix
combine_node = mix_node


def check_plan(plan) -> None:
    """DP-D-SGD plans use the identity temporal factor."""
    if plan.factor.kind != "identity":
        raise ValueError(f"Expected the identity factor for dp-dsgd, got {plan.factor.kind!r}.")
