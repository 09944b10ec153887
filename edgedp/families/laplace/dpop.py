"""DPOP / DP-DGD: decentralized gradient descent on Laplace-noised states (paper 004 Eq. 45).

The baseline of paper 004 (Huang, Mitra & Vaidya 2015, "DPOP"): round t is iteration
k = t + 1 and node i

* send:    z_i(k) = x_i(k−1) + ξ_i(k),  ξ_i(k) ~ Lap(ν_k) per coordinate — the message;
* receive: x_i(k) = Σ_j W_ij z_j(k) − α_k ∇f_i(z_i(k))                    (45)

with the same schedules α_k = γq₁^{k−1}, ν_k (Eq. 5) and the same sensitivity
Δ(k) ≤ δα_k (App. 8, Eq. 46), hence the same accountant as sr-gt; β is unused (0).

Trust model: pure ε-LDP against an attacker who sees every message, certified by
:mod:`edgedp.families.laplace.accounting`.

>>> import numpy as np
>>> from edgedp.families.laplace.accounting import LaplaceSchedule
>>> from edgedp.gossip import LaplaceExtra, StepContext
>>> s = LaplaceSchedule(gamma=0.5, beta=0, q1=0.5, q2=0.9, delta_grad=1, epsilon=float("inf"))
>>> lap = LaplaceExtra(lambda scale: 0 * np.ones(1), s)
>>> ctx = StepContext(0, 0.5, 1.0, 1, lambda p: p, lambda: None, lap)
>>> st, z = send(init_state(np.array([2.0])), ctx)
>>> model(receive(st, np.array([0.5, 0.5]), np.array([[2.0], [0.0]]), ctx)).tolist()
[0.0]
"""

from __future__ import annotations

import numpy as np

from edgedp import bounds, factors, mechanisms
from edgedp.families import laplace as family
from edgedp.families.laplace import accounting as laplace
from edgedp.gossip import LaplaceExtra, StepContext, extra, mix_gathered

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
    "init_state",
    "message_bound",
    "model",
    "receive",
    "send",
]

NAME = "dpop"
TRUST_MODEL = "LDP (pure eps): every message z is observed (eavesdroppers, curious neighbours)"


def check_plan(plan) -> None:
    """DPOP needs a Laplace schedule and has no tracking gain (β = 0)."""
    sched = getattr(plan, "laplace", None)
    if sched is None:
        raise ValueError("Expected a Laplace schedule (gamma, q1, q2, delta_grad) for dpop.")
    if sched.beta != 0:
        raise ValueError(f"dpop has no tracking variable: expected beta=0, got {sched.beta!r}.")


def init_state(theta0: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": theta0}


def send(state: dict[str, np.ndarray], ctx: StepContext):
    """z = x + ξ, ξ ~ Lap(ν_k) per coordinate; z is the message."""
    lap = extra(ctx, LaplaceExtra)
    z = state["x"] + lap.laplace(lap.schedule.noise_scale(ctx.round))
    return {"x": state["x"], "z": z}, z


def receive(state, weights, gathered, ctx: StepContext) -> dict[str, np.ndarray]:
    """x = Σ_j W_ij z_j − α_k ∇f_i(z_i)   (Eq. 45, fixed-order mixing)."""
    schedule = extra(ctx, LaplaceExtra).schedule
    grad = ctx.gradient(state["z"]) / ctx.batch_size
    return {"x": mix_gathered(weights, gathered) - schedule.stepsize(ctx.round) * grad}


def model(state: dict[str, np.ndarray]) -> np.ndarray:
    return state["x"]


def message_bound(share, *, dim: int, theta0: np.ndarray) -> tuple[float]:
    """B with |entry| ≤ B for every honest message z (:mod:`edgedp.bounds`).

    With X_t a bound on every node's |x| entries (X_0 = max|θ₀|), L_t =
    ν_t·ln(1/p) the Laplace tail of the per-coordinate budget p and G = Δ the bound on the
    mean clipped gradient: z ≤ Z_t = X_t + L_t; z̄ is a convex combination, so
    X_{t+1} = Z_t + α_t G (Eq. 45). B = max_t Z_t; Δ = ∞ (no clipping) gives no bound.
    """
    facts = share.network
    if facts.stated is not None:
        return (facts.stated,)
    schedule = share.laplace
    tail = bounds.laplace_tail(bounds.coordinate_budget(facts, steps=share.steps, width=dim))
    x, top = float(np.max(np.abs(theta0))), 0.0
    for t in range(share.steps):
        z = x + tail * schedule.noise_scale(t)
        top = max(top, z)
        x = z + schedule.stepsize(t) * share.clip_norm
    return (bounds.rounded(top),)


#: The round rules.
RULES = mechanisms.Rules(init_state, send, receive, model, check_plan, message_bound)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "dpop",
        RULES,
        family="laplace",
        noise="laplace",
        trust_model=TRUST_MODEL,
        accountant=laplace.plan_guarantee,
        factor=factors.Identity,
        attack="dpop-inversion",
        examples={
            "dpop": family.EXAMPLE,
            "dpop-zero-out": {**family.EXAMPLE, "adjacency": "zero-out"},
        },
    ),
)
