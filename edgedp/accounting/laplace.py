"""Pure ε-DP of the Laplace mechanisms sr-gt and DPOP (paper 004, Lemma 4.4, Thm 4.5).

Notation (docs/NOTATION.md): the paper counts iterations from k = 1; the engines count
rounds from t = 0, so round t is iteration k = t + 1. With Eq. (5)

    α_k = γ q₁^{k−1},   ν_k = γ δ q₂ / (ε (q₂ − q₁)) · q₂^{k−1},

and the sensitivity of one iteration Δ(k) ≤ δ α_k (Thm 4.5, Eq. 11; App. 8 Eq. 46 for DPOP),
Lemma 4.4 gives ε-DP for the whole (infinite) observation sequence whenever
Σ_k Δ(k)/ν_k ≤ ε. After K iterations the spent budget is the partial sum

    ε_K = Σ_{k=1}^{K} δ α_k / ν_k = ε (1 − (q₁/q₂)^K)  < ε,

and every finite prefix of an ε-DP sequence is ε-DP (Remark 4.8), so a device may stop at
any round, or keep going up to the plan's horizon, without ever exceeding ε.

Trust model (pure ε-LDP of every node): the attacker observes every message z of every
node on every link — eavesdroppers of all links and any coalition of curious nodes — and
knows W, γ, β, the schedules and every other node's cost. The tracking variable y is never
sent. δ is the L1 bound of Definition 1 on the gradient difference of adjacent problems:

* ``adjacency="example"`` (learning tasks): one example of one node's local dataset is
  replaced. The engines clip per-example gradients in L2 at Δ and average over the round's
  batch of public size B, so the averaged gradients of adjacent datasets differ by at most
  2Δ/B in L2 and 2Δ√d/B in L1 (Cauchy–Schwarz). :func:`example_delta` gives that bound and
  the engines refuse a plan whose δ is smaller for the task they run (every round is
  counted, so the bound holds for any batch schedule).
* ``adjacency="problem"`` (Definition 1 as stated, e.g. sensor fusion with analytic
  gradients and no clipping): δ is the user's bound on ‖∇f_i − ∇f_i′‖₁ over the whole
  domain; nothing in the run can check it.

Everything here is numpy/stdlib only (it runs on devices).

>>> s = LaplaceSchedule(gamma=0.001, beta=1000, q1=0.97, q2=0.99, delta_grad=1.0, epsilon=1.0)
>>> round(epsilon_spent(s, 100), 6), epsilon(s)
(0.870087, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADJACENCIES",
    "LaplaceSchedule",
    "epsilon",
    "epsilon_spent",
    "example_delta",
    "check_task",
    "rounds_within",
    "sensitivity",
]

#: What two adjacent inputs are (see the module docstring).
ADJACENCIES = ("example", "problem")


@dataclass(frozen=True, slots=True)
class LaplaceSchedule:
    """The stepsize and Laplace-noise schedules of Eq. (5), validated against Thm 4.5.

    Args:
      gamma: γ > 0, the first stepsize α₁.
      beta: β, the gain of the tracking variable y (sr-gt; 0 for DPOP, which has no y).
      q1: q₁, the stepsize decay, 0 < q₁ < q₂.
      q2: q₂, the noise decay, q₁ < q₂ < 1.
      delta_grad: δ > 0, the L1 bound on gradient differences of adjacent inputs.
      epsilon: ε > 0, the privacy budget (``inf``: no noise, no privacy — references only).
      adjacency: ``"example"`` or ``"problem"`` (module docstring).

    Raises:
      ValueError: naming the violated condition of Thm 4.5 (γ > 0, 0 < q₁ < q₂ < 1,
        γβ ≤ 1 when β > 0, δ > 0, ε > 0).

    >>> LaplaceSchedule(gamma=0.01, beta=1000, q1=0.9, q2=0.99, delta_grad=1, epsilon=1)
    Traceback (most recent call last):
    ...
    ValueError: Theorem 4.5 needs gamma*beta <= 1, got gamma=0.01, beta=1000 (product 10).
    """

    gamma: float
    beta: float
    q1: float
    q2: float
    delta_grad: float
    epsilon: float
    adjacency: str = "example"

    def __post_init__(self) -> None:
        for name in ("gamma", "beta", "q1", "q2", "delta_grad", "epsilon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Expected {name}={value!r} to be a number.")
            if math.isnan(value):
                raise ValueError(f"Expected {name} to be a number, got nan.")
            object.__setattr__(self, name, float(value))
        g, b, q1, q2 = self.gamma, self.beta, self.q1, self.q2
        if not (0 < g < math.inf):
            raise ValueError(f"Theorem 4.5 needs gamma > 0 (finite), got gamma={g!r}.")
        if not 0 < q1 < 1:
            raise ValueError(f"Theorem 4.5 needs 0 < q1 < 1, got q1={q1!r}.")
        if not q1 < q2 < 1:
            raise ValueError(f"Theorem 4.5 needs q1 < q2 < 1, got q1={q1!r}, q2={q2!r}.")
        if not 0 <= b < math.inf:
            raise ValueError(f"Expected beta={b!r} >= 0 (finite).")
        if g * b > 1 + 1e-12:
            raise ValueError(
                f"Theorem 4.5 needs gamma*beta <= 1, got gamma={g:g}, beta={b:g} "
                f"(product {g * b:g})."
            )
        if not (0 < self.delta_grad < math.inf):
            raise ValueError(f"Expected delta_grad={self.delta_grad!r} > 0 (finite).")
        if not self.epsilon > 0:
            raise ValueError(f"Expected epsilon={self.epsilon!r} > 0.")
        if self.adjacency not in ADJACENCIES:
            raise ValueError(f"Unknown adjacency={self.adjacency!r}; expected {ADJACENCIES}.")

    @property
    def first_noise_scale(self) -> float:
        """ν₁ = γδq₂ / (ε(q₂ − q₁)) (Eq. 5); 0 when ε = ∞."""
        return self.gamma * self.delta_grad * self.q2 / (self.epsilon * (self.q2 - self.q1))

    def stepsize(self, round_: int) -> float:
        """α_{t+1} = γ q₁^t for engine round t (paper iteration k = t + 1)."""
        return self.gamma * self.q1**round_

    def noise_scale(self, round_: int) -> float:
        """ν_{t+1} = ν₁ q₂^t, the Laplace scale of round t."""
        return self.first_noise_scale * self.q2**round_

    def to_dict(self) -> dict[str, Any]:
        return {
            "gamma": self.gamma,
            "beta": self.beta,
            "q1": self.q1,
            "q2": self.q2,
            "delta_grad": self.delta_grad,
            "epsilon": self.epsilon,
            "adjacency": self.adjacency,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaplaceSchedule:
        return cls(
            gamma=float(d["gamma"]),
            beta=float(d["beta"]),
            q1=float(d["q1"]),
            q2=float(d["q2"]),
            delta_grad=float(d["delta_grad"]),
            epsilon=float(d["epsilon"]),
            adjacency=str(d["adjacency"]),
        )


def sensitivity(schedule: LaplaceSchedule, round_: int) -> float:
    """Δ(k) ≤ δ α_k, the L1 sensitivity of round t = k − 1 (Thm 4.5, Eq. 11).

    >>> s = LaplaceSchedule(gamma=0.5, beta=0, q1=0.5, q2=0.9, delta_grad=2, epsilon=1)
    >>> sensitivity(s, 0), sensitivity(s, 2)
    (1.0, 0.25)
    """
    return schedule.delta_grad * schedule.stepsize(round_)


def epsilon_spent(schedule: LaplaceSchedule, rounds: int) -> float:
    """ε spent after ``rounds`` rounds: Σ_{k=1}^{K} Δ(k)/ν_k (Lemma 4.4), summed exactly.

    Computed from the per-round stepsizes and noise scales the nodes actually use (not
    from the closed form ε(1 − (q₁/q₂)^K), which the tests compare against).

    Args:
      schedule: the plan's schedule.
      rounds: K ≥ 0 rounds released.

    Returns:
      ε_K (0 for K = 0; ``inf`` when the schedule adds no noise and K > 0).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3)
    >>> epsilon_spent(s, 1), epsilon_spent(s, 2)
    (1.0, 1.6666666666666665)
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"Expected rounds={rounds!r} to be an integer >= 0.")
    if rounds == 0:
        return 0.0
    if schedule.first_noise_scale == 0:
        return math.inf
    ratio = schedule.q1 / schedule.q2
    first = schedule.delta_grad * schedule.gamma / schedule.first_noise_scale
    # terms below 1e-30 of the first cannot move a double; stop there (conservatively add
    # the geometric tail bound of what is left).
    terms, tail = [], 0.0
    for k in range(rounds):
        term = first * ratio**k
        if term < first * 1e-30:
            tail = term / (1 - ratio)
            break
        terms.append(term)
    return math.fsum(terms) + tail


def epsilon(schedule: LaplaceSchedule) -> float:
    """ε of the infinite horizon: Σ_{k≥1} δα_k/ν_k = ε exactly (Thm 4.5, Eq. 12).

    ν_k is defined from ε by Eq. (5), so the geometric series sums to ε in exact arithmetic;
    the float sum differs by rounding only (the tests check |Σ − ε| ≤ 1e-12 ε). Returning ε
    itself keeps the reported guarantee from drifting an ulp below the plan's budget.

    >>> epsilon(LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3))
    3.0
    """
    return schedule.epsilon


def rounds_within(schedule: LaplaceSchedule, budget: float) -> int | float:
    """The most rounds whose spent ε stays ≤ ``budget`` (``inf`` if the budget ≥ ε_∞).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3)
    >>> rounds_within(s, 1.7), rounds_within(s, 3.0)
    (2, inf)
    """
    if not budget >= 0:
        raise ValueError(f"Expected budget={budget!r} >= 0.")
    if budget >= epsilon(schedule):
        return math.inf
    # ε_K = ε_∞ (1 − r^K) ≤ budget  ⇔  K ≤ log(1 − budget/ε_∞) / log r; then confirm by summing.
    r = schedule.q1 / schedule.q2
    k = max(0, int(math.floor(math.log1p(-budget / epsilon(schedule)) / math.log(r))) + 1)
    while k > 0 and epsilon_spent(schedule, k) > budget:
        k -= 1
    return k


def example_delta(*, clip_norm: float, dim: int, batch_size: int) -> float:
    """δ certified for replace-one-example adjacency: 2 Δ √d / B (L2 clip → L1 bound).

    Args:
      clip_norm: Δ, the per-example L2 clip norm.
      dim: d, the model dimension.
      batch_size: B, the public number of examples averaged per round.

    >>> example_delta(clip_norm=1.0, dim=4, batch_size=8)
    0.5
    """
    if not (0 < clip_norm < math.inf):
        raise ValueError(f"Expected clip_norm={clip_norm!r} > 0 (finite) for example adjacency.")
    if dim < 1 or batch_size < 1:
        raise ValueError(f"Expected dim={dim} >= 1 and batch_size={batch_size} >= 1.")
    return 2.0 * clip_norm * math.sqrt(dim) / batch_size


def check_task(
    schedule: LaplaceSchedule,
    *,
    clip_norm: float,
    dim: int | None = None,
    batch_size: int | None = None,
) -> None:
    """Check that δ is certified for a task: ValueError naming the fix otherwise.

    Example adjacency needs a finite clip norm and, once the task is known (``dim`` and
    ``batch_size`` given), δ ≥ :func:`example_delta`; engines call this before round 0.
    Problem adjacency takes δ as given (``clip_norm`` may be ``inf``: no clipping).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.9, delta_grad=0.1, epsilon=1)
    >>> check_task(s, clip_norm=1.0, dim=4, batch_size=8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: delta_grad=0.1 is below 2*clip*sqrt(d)/B = 0.5 ...; re-plan with --delta-grad 0.5.
    """
    if not clip_norm > 0:
        raise ValueError(f"Expected clip_norm={clip_norm!r} > 0.")
    if schedule.adjacency != "example":
        return
    if not math.isfinite(clip_norm):
        raise ValueError(
            "adjacency 'example' certifies delta_grad from the clip norm; it needs a finite "
            f"clip_norm, got {clip_norm!r} (use adjacency 'problem' for unclipped gradients)."
        )
    if dim is None or batch_size is None:
        return
    need = example_delta(clip_norm=clip_norm, dim=dim, batch_size=batch_size)
    if schedule.delta_grad < need:
        raise ValueError(
            f"delta_grad={schedule.delta_grad:g} is below 2*clip*sqrt(d)/B = {need:g} for this "
            f"task (clip {clip_norm:g}, d {dim}, batch {batch_size}); re-plan with "
            f"--delta-grad {need:.17g}."
        )
