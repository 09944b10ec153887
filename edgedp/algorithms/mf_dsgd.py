"""MF-D-SGD: Gaussian noise correlated in time by the plan's factor C_local (paper 000 Alg. 1).

Node u adds ``ν (C_local⁻¹ Z_u)[t]`` at step t, built from its own past normals only
(``C = C_local ⊗ I_n``), so the noise is local. AntiPGD (C_local = lower-triangular ones),
banded and any dense lower-triangular C_local run through this module; MAFALDA and D-MF are
the same rule with a planned C_local.

Trust model LDP: certified by :func:`edgedp.accounting.mf.ldp_guarantee` with sens(C_local)
under the plan's (k, b) participation (paper 000 Thm 7, Lemma 10).
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

NAME = "mf-dsgd"
TRUST_MODEL = "LDP: every message is private against an attacker who sees all messages"
ACCOUNTANT = "edgedp.accounting.mf.ldp_guarantee (C_local from the plan)"
combine = mix
combine_node = mix_node


def check_plan(plan) -> None:
    """MF-D-SGD needs a lower-triangular temporal factor covering the plan's horizon."""
    steps = getattr(plan.factor, "steps", None)
    if steps is not None and steps < plan.steps:
        raise ValueError(f"Expected the factor's horizon {steps} >= steps={plan.steps}.")
