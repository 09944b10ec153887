"""Whisper D-SGD: D-SGD whose noise is correlated across agents by a planned covariance.

Paper 001, Alg. 1: the nodes' noises are v ~ N(0, ν² R̃) with R̃ = diag(D) + UUᵀ + Σ_e c_e
a_e a_eᵀ solving (a compact form of) Eq. (10), so the correlated part cancels when mixed
(Thm 1: the variance after mixing is Tr(W R Wᵀ)). The update rules are D-SGD's
(:mod:`edgedp.gossip`); the engines compose each node's noise from its own
stream, the shared seed and its edges' streams (:class:`edgedp.families.cross.noise.CrossNoise`).

Trust model: eavesdroppers who see every message but know no seed are covered by
μ = 1/σ (001 Thm 2, exact GDP form; :func:`edgedp.families.cross.accounting.guarantee`).
Insiders know the shared seed (DESIGN §6): against them only D (and the edges they are
not on) protect — ``edgedp plan`` reports that ε too
(:func:`~edgedp.families.cross.accounting.trust_report`).
"""

from __future__ import annotations

from edgedp import factors, mechanisms
from edgedp import gossip as _gossip
from edgedp.families import cross as family
from edgedp.families.cross import accounting as cross_agent

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
]

NAME = "whisper"
TRUST_MODEL = (
    "eavesdropper: every message seen, shared seed unknown (paper 001 Thm 2); insiders who "
    "know the seed face only each node's independent part (reported separately)"
)


def check_plan(plan) -> None:
    """Whisper plans carry a cross_agent section of kind 'whisper' and identity time factor."""
    spec = getattr(plan, "cross_agent", None)
    if spec is None or spec.kind != NAME:
        raise ValueError(
            "Expected a cross_agent section of kind 'whisper' (edgedp.families.cross.planning)."
        )
    if spec.gossip_rounds != 1 or spec.message_variance != 0:
        raise ValueError("Whisper plans have one gossip round per step and no message noise.")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this plan check.
RULES = _gossip.rules(check_plan)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "whisper",
        RULES,
        family="cross",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=cross_agent.guarantee,
        factor=factors.Identity,
        attack="whisper-known-noise",
        traits=family.CrossTraits(correlated=True, shared_seed=True, sketchable=True),
        examples={
            "whisper": family.EXAMPLE,
            "whisper-lowrank": {**family.EXAMPLE, "form": "lowrank", "rank": 2},
            "whisper-sketched": {**family.EXAMPLE, "sketch_dim": 8},
        },
    ),
)
