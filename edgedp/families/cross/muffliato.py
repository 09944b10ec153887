"""Muffliato-SGD: K gossip rounds per noisy gradient step (Cyffers et al. 2022).

Paper 000 App. A.4: rounds t = 0, …, K·T' − 1; at rounds t ≡ 0 (mod K) the node takes a
noisy local step θ − η(Σ clip(g) + ν z)/B, at the other K − 1 rounds it only gossips its
model. The engines draw the round's noise every round (the stream stays aligned with the
round counter, as when a node sits out a round); gossip-only rounds discard it unsent.

Trust model LDP: the messages of gossip-only rounds are post-processing of earlier ones,
so μ = 1/σ with k counting gradient rounds only
(:func:`edgedp.families.cross.accounting.participations`). Privacy amplification by gossip
(PNDP) is not credited.
"""

from __future__ import annotations

from edgedp import factors, mechanisms
from edgedp import gossip as _gossip
from edgedp.families import cross as family
from edgedp.families.cross import accounting as cross_agent
from edgedp.gossip import CrossExtra, StepContext, local_step

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
    "send",
]

NAME = "muffliato"
TRUST_MODEL = "LDP: every message is private; gossip-only rounds are post-processing"


def _rounds(ctx: StepContext) -> int:
    cross = ctx.extra
    return int(cross.cross_agent.gossip_rounds) if isinstance(cross, CrossExtra) else 1


def send(state, ctx: StepContext):
    """A noisy local step at rounds ≡ 0 (mod K); the plain model otherwise."""
    noise = ctx.noise()  # drawn every round, used only at gradient rounds
    if ctx.round % _rounds(ctx):
        return {"theta": state["theta"]}, state["theta"]
    half = local_step(
        state["theta"],
        ctx.gradient(state["theta"]),
        noise,
        learning_rate=ctx.learning_rate,
        batch_size=ctx.batch_size,
    )
    return {"theta": state["theta"]}, half


def check_plan(plan) -> None:
    """Muffliato plans: independent unit noise (D = 1) and T a multiple of K."""
    spec = getattr(plan, "cross_agent", None)
    if spec is None or spec.kind != NAME:
        raise ValueError(
            "Expected a cross_agent section of kind 'muffliato' (edgedp.families.cross.planning)."
        )
    if spec.rank or spec.edge_variance.size or spec.message_variance != 0:
        raise ValueError("Muffliato noise is independent per node.")
    if plan.steps % spec.gossip_rounds:
        raise ValueError(f"Expected steps={plan.steps} to be a multiple of K={spec.gossip_rounds}.")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this send and plan check.
RULES = _gossip.rules(check_plan, send=send)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "muffliato",
        RULES,
        family="cross",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=cross_agent.guarantee,
        factor=factors.Identity,
        traits=family.CrossTraits(gossip_rounds=True),
        examples={
            "muffliato": family.EXAMPLE,
            "muffliato-k2": {**family.EXAMPLE, "gossip_rounds": 2},
        },
    ),
)
