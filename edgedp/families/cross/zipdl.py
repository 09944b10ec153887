"""Zip-DL: one noise per outgoing message, cancelling in the recipients' weighted sum.

Paper 000 App. A.6 (Biswas et al. 2025): node u sends recipient j the message
θ_u − η(Σ clip(g) + n_uj)/B with n_uj = √D_u ν z_u + ν√m (y_j − w_j Σ_k w_k y_k / Σ_k w_k²),
w_j = W[j, u] (symmetric W), so Σ_j w_j n_uj = (Σ_j w_j) √D_u ν z_u: the message-wise part
vanishes from the network average. ``send`` returns per-slot messages ``(..., m, d)``
aligned with the padded mixing row; the engines deliver slot j to the j-th row entry, and
the node keeps the common-part message (its own slot) for itself.

Trust model: all noise is node-private, so every attacker (eavesdropper, curious
neighbours, colluders) sees at most the node's messages; their covariance D_u 11ᵀ + m P
gives μ = 1/σ (:func:`edgedp.families.cross.accounting.guarantee`). The message-wise part is
not credited (it protects against single neighbours; PNDP for Zip-DL is not implemented).
"""

from __future__ import annotations

import numpy as np

from edgedp import factors, mechanisms
from edgedp import gossip as _gossip
from edgedp.families import cross as family
from edgedp.families.cross import accounting as cross_agent
from edgedp.gossip import StepContext

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
    "local_step",
    "send",
]

NAME = "zipdl"
TRUST_MODEL = (
    "LDP (every attacker): node-private noise; the message-wise part cancels in the network "
    "average and is not credited"
)


def local_step(theta, gradient_sum, noise, *, learning_rate: float, batch_size: int):
    """Per-slot half steps θ − η(Σ clip(g) + n_j)/B, shape ``(..., m, d)``."""
    total = gradient_sum[..., None, :] + noise
    return theta[..., None, :] - learning_rate * (total / batch_size)


def send(state, ctx: StepContext):
    """One message per padded-row slot (the noise is ``(..., m, d)``)."""
    gsum = ctx.gradient(state["theta"])
    noise = ctx.noise()
    if noise is None or noise.ndim != state["theta"].ndim + 1:
        raise ValueError("Zip-DL needs per-slot noise (..., m, d) from the engine.")
    messages = local_step(
        state["theta"],
        gsum,
        noise,
        learning_rate=ctx.learning_rate,
        batch_size=ctx.batch_size,
    )
    return {"theta": state["theta"]}, messages


def check_plan(plan) -> None:
    """Zip-DL plans: a cross_agent section of kind 'zipdl' and a symmetric mixing matrix."""
    spec = getattr(plan, "cross_agent", None)
    if spec is None or spec.kind != NAME:
        raise ValueError(
            "Expected a cross_agent section of kind 'zipdl' (edgedp.families.cross.planning)."
        )
    if spec.rank or spec.edge_variance.size or spec.gossip_rounds != 1:
        raise ValueError("Zip-DL noise is node-private: no shared seed, no edge terms.")
    W = plan.mixing_matrix()  # noqa: N806
    if not np.allclose(W, W.T, rtol=0.0, atol=1e-12):
        raise ValueError("Zip-DL needs a symmetric mixing matrix (w_j = W[j, u] = W[u, j]).")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this send and plan check.
RULES = _gossip.rules(check_plan, send=send)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "zipdl",
        RULES,
        family="cross",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=cross_agent.guarantee,
        factor=factors.Identity,
        attack="zipdl-weighted-sum",
        traits=family.CrossTraits(message_noise=True),
        examples={
            "zipdl": family.EXAMPLE,
            "zipdl-sigma": {"noise_multiplier": 1.5, "clip_norm": 0.1, "message_variance": 0.5},
        },
    ),
)
