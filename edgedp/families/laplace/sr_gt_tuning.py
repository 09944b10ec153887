"""Parameter search for sr-gt on the accuracy bound of paper 004 (Thm 5.18, Remark 5.20).

The bound on d = lim E‖x̄(k) − x*‖² (Eq. 25) is

    d(γ, q₁, q₂) = e^{−μγ/(1−q₁)} c₁ + γ c₂ L² / (n μ (1−q₁))
                   + 2pδ²γ² / (ε²(q₂−q₁)²(1−q₂²))
                   + (4pL + 2pL²/μ) δ²γ³ / (ε²(q₂−q₁)²(1−q₁q₂²)),

with L, μ the smoothness and strong convexity of every fᵢ (Assumption 1), n nodes,
dimension p, the gradient bound δ, the budget ε, and c₁, c₂ the (problem-dependent, not
computable) bounds on E‖x̄(k) − x*‖² and E‖x(k) − 1x̄(k)‖² of the proof — the user
supplies estimates. The two noise terms are Σ_k 2pν_k² and Σ_k α_k·ν_k² written out with the
noise scale the engines use, ν₁ = γδ/(ε(q₂ − q₁)) (:mod:`edgedp.families.laplace.accounting`; paper
004 prints them with its Eq. (5) scale, which carries an extra factor q₂ and spends ε/q₂).
Problem (41) minimizes d over γ > 0, 0 < q₁ < q₂ < 1; it is non-convex,
and Remark 5.20's heuristic is what :func:`tune` runs: random feasible starts, then
repeatedly fix two parameters and minimize over the third (bounded scalar searches, γ on
a log scale), keeping the best start. The bound is loose: when c₂L²/(nμ) outweighs the
gain e^{−μγ/(1−q₁)}c₁, its minimum is "do not move" (γ → 0); the result then names the
parameters stuck at their search bounds (``at_bounds``) — raise c₁ or lower c₂.
β = 1/γ (γβ ≤ 1 with equality, as in §6.1 for ε ∈ {0.1, 1}) unless β is given, which then
caps γ ≤ 1/β. γ is also capped at 2/(μ + L), the stepsize condition of Lemma 5.15.

Offline tooling: scipy is allowed here, never on devices.

>>> b = accuracy_bound(gamma=0.001, q1=0.97, q2=0.99, epsilon=1.0, delta_grad=1.0,
...                    smoothness=10.0, strong_convexity=1.0, nodes=100, dim=2)
>>> round(b, 6)
1.527401
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

__all__ = ["TuningResult", "accuracy_bound", "bound_terms", "tune"]

_EPS = 1e-9


def bound_terms(
    *,
    gamma: float,
    q1: float,
    q2: float,
    epsilon: float,
    delta_grad: float,
    smoothness: float,
    strong_convexity: float,
    nodes: int,
    dim: int,
    c1: float = 1.0,
    c2: float = 1.0,
) -> tuple[float, float, float, float]:
    """The four terms of Eq. (25): (initial error, consensus, noise, noise × stepsize)."""
    g, L, mu, p, n = gamma, smoothness, strong_convexity, dim, nodes  # noqa: N806
    s = g / (1 - q1)
    noise = delta_grad**2 / (epsilon**2 * (q2 - q1) ** 2)  # ν₁²/γ² (corrected Eq. 5)
    return (
        math.exp(-mu * s) * c1,
        s * c2 * L**2 / (n * mu),
        2 * p * noise * g**2 / (1 - q2**2),
        (4 * p * L + 2 * p * L**2 / mu) * noise * g**3 / (1 - q1 * q2**2),
    )


def accuracy_bound(**kwargs) -> float:
    """d(γ, q₁, q₂) of Eq. (25): the sum of :func:`bound_terms` (same keyword arguments)."""
    return math.fsum(bound_terms(**kwargs))


@dataclass(frozen=True, slots=True)
class TuningResult:
    """The best parameters found, their bound and how the search went."""

    gamma: float
    beta: float
    q1: float
    q2: float
    bound: float
    terms: tuple[float, float, float, float]
    start_bound: float
    restarts: int
    history: list[float] = field(default_factory=list)  # best bound after each restart
    at_bounds: tuple[str, ...] = ()  # parameters that ended on a search bound


def tune(
    *,
    epsilon: float,
    delta_grad: float,
    smoothness: float,
    strong_convexity: float,
    nodes: int,
    dim: int,
    c1: float = 1.0,
    c2: float = 1.0,
    beta: float | None = None,
    restarts: int = 8,
    sweeps: int = 30,
    seed: int = 0,
) -> TuningResult:
    """Remark 5.20's coordinate search on Eq. (25) (module docstring).

    Args:
      epsilon, delta_grad: the budget ε and gradient bound δ.
      smoothness, strong_convexity: L ≥ μ > 0 of every local cost.
      nodes, dim: n and p.
      c1, c2: estimates of the proof's constants (see the module docstring).
      beta: fix β (then γ ≤ 1/β); default β = 1/γ.
      restarts: random feasible starts; sweeps: coordinate rounds per start.
      seed: the starts' seed.

    Returns:
      A :class:`TuningResult`; its parameters satisfy Thm 4.5 (0 < q₁ < q₂ < 1, γβ ≤ 1).

    Raises:
      ValueError: bad values, or constants for which the bound's minimum is γ → 0
        (c₂L²/(nμ) ≥ μc₁: every step adds more consensus error than it removes initial
        error), which no search can turn into a usable schedule.

    >>> r = tune(epsilon=1.0, delta_grad=1.0, smoothness=10.0, strong_convexity=1.0,
    ...          nodes=100, dim=2, c1=10.0, restarts=2, sweeps=5)
    >>> 0 < r.q1 < r.q2 < 1 and r.gamma * r.beta <= 1 and r.bound <= r.start_bound
    True
    """
    if not (epsilon > 0 and delta_grad > 0 and 0 < strong_convexity <= smoothness):
        raise ValueError(
            f"Expected epsilon={epsilon!r} > 0, delta_grad={delta_grad!r} > 0 and "
            f"0 < strong_convexity={strong_convexity!r} <= smoothness={smoothness!r}."
        )
    if nodes < 1 or dim < 1 or restarts < 1 or sweeps < 1:
        raise ValueError("Expected nodes, dim, restarts and sweeps >= 1.")
    if beta is not None and not beta > 0:
        raise ValueError(f"Expected beta={beta!r} > 0.")
    if not (c1 > 0 and c2 >= 0):
        raise ValueError(f"Expected c1={c1!r} > 0 and c2={c2!r} >= 0.")
    drift = c2 * smoothness**2 / (nodes * strong_convexity)
    if drift >= strong_convexity * c1:
        raise ValueError(
            f"The bound (Eq. 25) is smallest when sr-gt does not move (gamma -> 0): its "
            f"consensus term grows by c2*L^2/(n*mu) = {drift:.4g} per unit of gamma/(1-q1), "
            f"faster than the initial error shrinks (mu*c1 = {strong_convexity * c1:.4g}). "
            f"Tuning needs c1 > {drift / strong_convexity:.4g}*c2 (c1, c2 estimate the "
            "proof's error and consensus constants); otherwise take paper 004 §6.1's "
            "schedule (e.g. gamma 0.001, beta 1000, q1 0.97, q2 0.99) and check it in simulation."
        )
    gamma_max = 2.0 / (strong_convexity + smoothness)
    if beta is not None:
        gamma_max = min(gamma_max, 1.0 / beta)
    fixed: dict[str, Any] = dict(
        epsilon=epsilon,
        delta_grad=delta_grad,
        smoothness=smoothness,
        strong_convexity=strong_convexity,
        nodes=nodes,
        dim=dim,
        c1=c1,
        c2=c2,
    )

    def d(g: float, q1: float, q2: float) -> float:
        return accuracy_bound(gamma=g, q1=q1, q2=q2, **fixed)

    gen = np.random.default_rng(seed)
    best: tuple[float, float, float, float] | None = None
    history, start_bound = [], math.inf
    for _ in range(restarts):
        g = float(gamma_max * 10 ** gen.uniform(-4, 0))
        q2 = float(gen.uniform(0.5, 1 - 1e-4))
        q1 = float(gen.uniform(_EPS, q2 - _EPS))
        start_bound = min(start_bound, d(g, q1, q2))
        lg_hi = math.log10(gamma_max)
        for _ in range(sweeps):
            g = 10 ** _argmin(lambda x, q1=q1, q2=q2: d(10**x, q1, q2), lg_hi - 8, lg_hi)
            q1 = _argmin(lambda x, g=g, q2=q2: d(g, x, q2), _EPS, q2 - _EPS)
            q2 = _argmin(lambda x, g=g, q1=q1: d(g, q1, x), q1 + _EPS, 1 - _EPS)
        value = d(g, q1, q2)
        if best is None or value < best[0]:
            best = (value, g, q1, q2)
        history.append(best[0])
    assert best is not None  # restarts >= 1 (checked above)
    value, g, q1, q2 = best
    lg_lo = math.log10(gamma_max) - 8
    stuck = tuple(
        name
        for name, hit in (
            ("gamma", math.log10(g) < lg_lo + 1e-3 or g > gamma_max * (1 - 1e-6)),
            ("q1", q1 < 1e-6),
            ("q2", q2 > 1 - 1e-6),
        )
        if hit
    )
    return TuningResult(
        gamma=g,
        beta=beta if beta is not None else 1.0 / g,
        q1=q1,
        q2=q2,
        bound=value,
        terms=bound_terms(gamma=g, q1=q1, q2=q2, **fixed),
        start_bound=start_bound,
        restarts=restarts,
        history=history,
        at_bounds=stuck,
    )


def _argmin(f, lo: float, hi: float) -> float:
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return float(res.x)
