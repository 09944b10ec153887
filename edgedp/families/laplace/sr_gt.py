"""sr-gt: sensitivity-reduced DP optimization with implicit gradient tracking (paper 004 Alg. 1).

Round t is the paper's iteration k = t + 1. Node i holds x_i and y_i (y_i(0) = 0) and:

* send:    z_i(k) = x_i(k−1) + ξ_i(k),  ξ_i(k) ~ Lap(ν_k) per coordinate — the message is z_i;
* receive: z̄_i(k) = Σ_j W_ij z_j(k)                                        (4a)
           y_i(k) = y_i(k−1) + β (z_i(k) − z̄_i(k))                         (4b)
           x_i(k) = z̄_i(k) − α_k (y_i(k) + ∇f_i(z_i(k)))                   (4c)

with α_k, ν_k from the plan's schedule (Eq. 5). The noisy state z_i is used for the
consensus and the gradient (Proposition 1), and y_i never leaves the node. ∇f_i is the mean
of the per-example clipped gradients of the round's batch (``ctx.gradient(z) / B``).
The deployed model is x_i.

Trust model: pure ε-LDP against an attacker who sees every message (all links, any curious
coalition), certified by :mod:`edgedp.families.laplace.accounting` (Lemma 4.4, Thm 4.5).

>>> import numpy as np
>>> from edgedp.families.laplace.accounting import LaplaceSchedule
>>> from edgedp.gossip import LaplaceExtra, StepContext
>>> s = LaplaceSchedule(gamma=0.5, beta=1, q1=0.5, q2=0.9, delta_grad=1, epsilon=float("inf"))
>>> lap = LaplaceExtra(lambda scale: 0 * np.ones(1), s)
>>> ctx = StepContext(0, 0.5, 1.0, 1, lambda p: p, lambda: None, lap)
>>> st, z = send(init_state(np.array([2.0])), ctx)  # no noise (ε = ∞), ∇f(z) = z
>>> # z̄ = 1, y = β(z − z̄) = 1, x = z̄ − α(y + ∇f(z)) = 1 − 0.5 (1 + 2)
>>> model(receive(st, np.array([0.5, 0.5]), np.array([[2.0], [0.0]]), ctx)).tolist()
[-0.5]
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

NAME = "sr-gt"
TRUST_MODEL = (
    "LDP (pure eps): every message z is observed (eavesdroppers on all links, curious "
    "neighbours); the tracking variable y is never sent"
)


def check_plan(plan) -> None:
    """sr-gt needs a Laplace schedule with β > 0 (γβ ≤ 1 is checked by the schedule)."""
    sched = getattr(plan, "laplace", None)
    if sched is None:
        raise ValueError("Expected a Laplace schedule (gamma, beta, q1, q2, delta_grad) for sr-gt.")
    if not sched.beta > 0:
        raise ValueError(f"sr-gt needs beta > 0 (Alg. 1), got beta={sched.beta!r}.")


def init_state(theta0: np.ndarray) -> dict[str, np.ndarray]:
    """x(0) = θ₀, y(0) = 0 (Alg. 1, initialization)."""
    return {"x": theta0, "y": np.zeros_like(theta0)}


def send(state: dict[str, np.ndarray], ctx: StepContext):
    """z = x + ξ, ξ ~ Lap(ν_k) per coordinate; z is the message (Alg. 1, lines 1–2)."""
    lap = extra(ctx, LaplaceExtra)
    z = state["x"] + lap.laplace(lap.schedule.noise_scale(ctx.round))
    return {"x": state["x"], "y": state["y"], "z": z}, z


def receive(state, weights, gathered, ctx: StepContext) -> dict[str, np.ndarray]:
    """Eq. (4a)–(4c) with the gradient at the node's own noisy state z."""
    z = state["z"]
    zbar = mix_gathered(weights, gathered)
    schedule = extra(ctx, LaplaceExtra).schedule
    y = state["y"] + schedule.beta * (z - zbar)
    grad = ctx.gradient(z) / ctx.batch_size
    x = zbar - schedule.stepsize(ctx.round) * (y + grad)
    return {"x": x, "y": y}


def model(state: dict[str, np.ndarray]) -> np.ndarray:
    return state["x"]


def message_bound(share, *, dim: int, theta0: np.ndarray) -> tuple[float]:
    """B with |entry| ≤ B for every honest message z (:mod:`edgedp.bounds`).

    With X_t, Y_t bounds on every node's |x|, |y| entries (X_0 = max|θ₀|, Y_0 = 0), L_t =
    ν_t·ln(1/p) the Laplace tail of the per-coordinate budget p and G = Δ the bound on the
    mean clipped gradient: z ≤ Z_t = X_t + L_t; z̄ is a convex combination, so
    |z − z̄| ≤ 2Z_t, Y_{t+1} = Y_t + 2βZ_t and
    X_{t+1} = Z_t + α_t(Y_{t+1} + G) (Eq. 4a–4c). B = max_t Z_t; Δ = ∞ (no clipping) gives no bound.
    """
    facts = share.network
    if facts.stated is not None:
        return (facts.stated,)
    schedule = share.laplace
    tail = bounds.laplace_tail(bounds.coordinate_budget(facts, steps=share.steps, width=dim))
    x, y, top = float(np.max(np.abs(theta0))), 0.0, 0.0
    for t in range(share.steps):
        z = x + tail * schedule.noise_scale(t)
        top = max(top, z)
        y = y + 2.0 * schedule.beta * z
        x = z + schedule.stepsize(t) * (y + share.clip_norm)
    return (bounds.rounded(top),)


#: The round rules.
RULES = mechanisms.Rules(init_state, send, receive, model, check_plan, message_bound)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "sr-gt",
        RULES,
        family="laplace",
        noise="laplace",
        trust_model=TRUST_MODEL,
        accountant=laplace.plan_guarantee,
        factor=factors.Identity,
        attack="sr-gt-eq44",
        traits=family.LaplaceTraits(tracking=True),
        examples={"sr-gt": {**family.EXAMPLE, "beta": 1000}},
    ),
)
