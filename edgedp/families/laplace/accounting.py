"""Pure ε-DP of the Laplace mechanisms sr-gt and DPOP (paper 004, Lemma 4.4, Thm 4.5).

Notation (docs/NOTATION.md): the paper counts iterations from k = 1; the engines count
rounds from t = 0, so round t sends the paper's message z(t + 1).

**What is released, and with which noise.** In Alg. 1 (and DPOP, Eq. 45) node i sends
z_i(k) = x_i(k−1) + ξ_i(k) with ξ_i(k) ~ Lap(ν_k) per coordinate, then computes
x_i(k) = z̄_i(k) − α_k(y_i(k) + ∇f_i(z_i(k))). Given the whole observation sequence, y_i and
z̄_i are functions of what was observed, so two adjacent problems change x_i(k) by at most
δα_k in L1 (Thm 4.5, Eq. 11; App. 8 Eq. 46 for DPOP) — and x_i(k) is released in the
*next* message z_i(k + 1), whose noise has scale ν_{k+1}. Lemma 4.4 therefore gives

    ε_K = Σ_{k=1}^{K−1} δ α_k / ν_{k+1}      for the messages z(1), …, z(K)

(z(1) = x(0) + ξ(1) carries no data: x(0) is public). Paper 004's proof of Thm 4.5 pairs
δα_k with ν_k instead, and its Eq. (5), ν_k = γδq₂/(ε(q₂ − q₁)) · q₂^{k−1}, is calibrated for
that pairing: with it the messages spend ε/q₂ (ε(1 − (q₁/q₂)^{K−1})/q₂ after K rounds), not
ε. This module departs from Eq. (5) so that the target holds: with

    ν_k = γ δ / (ε (q₂ − q₁)) · q₂^{k−1}                          (Eq. 5 without the q₂ factor)

each release of x(k) costs δα_k/ν_{k+1} = ε (1 − q₁/q₂)(q₁/q₂)^{k−1} and

    ε_K = ε (1 − (q₁/q₂)^{K−1}),   ε_∞ = ε.

The noise is 1/q₂ times Eq. (5)'s (1 % more at q₂ = 0.99). The final state x(K) carries one
gradient step that no message noised: publishing it is not covered. Devices publish the
noised release z(K + 1) = x(K) + ξ(K + 1) instead (:func:`epsilon_spent` with
``final_release=True``: ε(1 − (q₁/q₂)^K) ≤ ε).

**Trust model** (pure ε-LDP of every node): the attacker observes every message z of every
node on every link — eavesdroppers of all links and any coalition of curious nodes — and
knows W, γ, β, the schedules and every other node's cost. The tracking variable y is never
sent. δ is the L1 bound of Definition 1 on the gradient difference of adjacent inputs:

* ``adjacency="zero-out"`` (learning tasks, the default): one example of one node is
  replaced by one whose gradient is zero. The engines clip per-example gradients in L2 at
  Δ and average over the round's batch of public size B, so the averaged gradients differ
  by at most Δ/B in L2 and Δ√d/B in L1 (Cauchy–Schwarz). The batch schedule does not depend
  on the example's value, so this is exactly the adjacency the Gaussian accountants
  certify.
* ``adjacency="replace-one"``: one example is replaced by any other: 2Δ√d/B.
* ``adjacency="problem"``: Definition 1 as stated — δ is the user's bound on
  ‖∇f_i − ∇f_i′‖₁ over the whole domain (e.g. sensor fusion with analytic gradients; the
  clip norm may be ``inf``). Nothing in a run can check it.

:func:`example_delta` gives the bound of the two example adjacencies and the engines refuse
a plan whose δ is smaller for the task they run (every round is counted, so the bound holds
for any batch schedule). Since ε is linear in δ at fixed noise, a zero-out plan is
2ε-DP under replace-one (:func:`replace_one_epsilon`).

Everything here is numpy/stdlib only (it runs on devices); (ε, δ) from a privacy-loss
distribution is offline (:mod:`edgedp.families.laplace.pld`).

>>> s = LaplaceSchedule(gamma=0.001, beta=1000, q1=0.97, q2=0.99, delta_grad=1.0, epsilon=1.0)
>>> round(epsilon_spent(s, 100), 6), epsilon(s)
(0.867408, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADJACENCIES",
    "LaplaceSchedule",
    "PureGuarantee",
    "check_task",
    "epsilon",
    "epsilon_spent",
    "example_delta",
    "plan_guarantee",
    "release_epsilons",
    "replace_one_epsilon",
    "rounds_within",
    "sensitivity",
]

#: What two adjacent inputs are (see the module docstring).
ADJACENCIES = ("zero-out", "replace-one", "problem")
#: Per-example adjacencies: δ is certified from the clip norm (L1 bound of one clipped row).
_EXAMPLE_FACTOR = {"zero-out": 1.0, "replace-one": 2.0}


@dataclass(frozen=True, slots=True)
class LaplaceSchedule:
    """The stepsize and Laplace-noise schedules, validated against Thm 4.5.

    Args:
      gamma: γ > 0, the first stepsize α₁.
      beta: β, the gain of the tracking variable y (sr-gt; 0 for DPOP, which has no y).
      q1: q₁, the stepsize decay, 0 < q₁ < q₂.
      q2: q₂, the noise decay, q₁ < q₂ < 1.
      delta_grad: δ > 0, the L1 bound on gradient differences of adjacent inputs.
      epsilon: ε > 0, the privacy budget (``inf``: no noise, no privacy — references only;
        such plans never load from a file or run on a device).
      adjacency: ``"zero-out"``, ``"replace-one"`` or ``"problem"`` (module docstring).

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
    adjacency: str = "zero-out"

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
    def private(self) -> bool:
        """False for the no-noise reference (ε = ∞)."""
        return self.epsilon < math.inf

    @property
    def first_noise_scale(self) -> float:
        """ν₁ = γδ / (ε(q₂ − q₁)) (module docstring: Eq. 5 without q₂); 0 when ε = ∞."""
        return self.gamma * self.delta_grad / (self.epsilon * (self.q2 - self.q1))

    def stepsize(self, round_: int) -> float:
        """α_{t+1} = γ q₁^t for engine round t (paper iteration k = t + 1)."""
        return self.gamma * self.q1**round_

    def noise_scale(self, round_: int) -> float:
        """ν_{t+1} = ν₁ q₂^t, the Laplace scale of the message sent in round t."""
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
    """L1 sensitivity of the message sent in round t: that of x(t), δα_t (0 for t = 0).

    The message of round t is z(t + 1) = x(t) + ξ(t + 1); x(0) is public and x(t) moves by
    at most δα_t between adjacent inputs (Thm 4.5, Eq. 11).

    >>> s = LaplaceSchedule(gamma=0.5, beta=0, q1=0.5, q2=0.9, delta_grad=2, epsilon=1)
    >>> sensitivity(s, 0), sensitivity(s, 1), sensitivity(s, 3)
    (0.0, 1.0, 0.25)
    """
    if isinstance(round_, bool) or not isinstance(round_, int) or round_ < 0:
        raise ValueError(f"Expected round_={round_!r} to be an integer >= 0.")
    return 0.0 if round_ == 0 else schedule.delta_grad * schedule.stepsize(round_ - 1)


def release_epsilons(schedule: LaplaceSchedule, rounds: int) -> list[float]:
    """ε of each message sent in rounds 0, …, rounds − 1: sensitivity(t) / ν_{t+1}.

    The privacy loss of each release given everything observed before it (Lemma 4.4);
    their sum is :func:`epsilon_spent`. Each term is δα_t/ν_{t+1} = ε(1 − r)r^{t−1}
    (r = q₁/q₂), evaluated as a power of r so that the underflow of q₁^t and q₂^t cannot
    round it to 0; terms below 1e-30 of the first are replaced by the geometric tail of
    everything left (conservative). A schedule whose noise scale underflows to 0 while its
    stepsize does not (the engines would send a gradient step without noise) gives ``inf``.

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3)
    >>> release_epsilons(s, 3)
    [0.0, 1.0, 0.6666666666666666]
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"Expected rounds={rounds!r} to be an integer >= 0.")
    if rounds == 0:
        return []
    if not schedule.private or _noise_underflows(schedule, rounds):
        return [0.0] + [math.inf] * (rounds - 1)
    ratio = schedule.q1 / schedule.q2
    first = schedule.epsilon * (schedule.q2 - schedule.q1) / schedule.q2  # t = 1
    terms = [0.0]
    for t in range(1, rounds):
        term = first * ratio ** (t - 1)
        if term < first * 1e-30:
            terms[-1] += term / (1 - ratio)
            break
        terms.append(term)
    return terms


def _noise_underflows(schedule: LaplaceSchedule, rounds: int) -> bool:
    """True if some round t < rounds has ν_{t+1} == 0.0 in floating point but α_t > 0."""
    if schedule.noise_scale(rounds - 1) > 0:
        return False
    lo, hi = 0, rounds - 1  # noise_scale is non-increasing: find the first zero
    while lo < hi:
        mid = (lo + hi) // 2
        if schedule.noise_scale(mid) > 0:
            lo = mid + 1
        else:
            hi = mid
    return sensitivity(schedule, lo) > 0


def epsilon_spent(schedule: LaplaceSchedule, rounds: int, *, final_release: bool = False) -> float:
    """ε spent by the messages of ``rounds`` rounds (Lemma 4.4), summed exactly.

    Computed from the per-round stepsizes and noise scales the nodes actually use (not from
    the closed form ε(1 − (q₁/q₂)^{K−1}), which the tests compare against).

    Args:
      schedule: the plan's schedule.
      rounds: K ≥ 0 rounds released.
      final_release: also count the noised final model z(K + 1) = x(K) + ξ(K + 1) that a
        device publishes at the end (so ε(1 − (q₁/q₂)^K)).

    Returns:
      ε_K (0 while nothing data-dependent was sent; ``inf`` without noise).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3)
    >>> epsilon_spent(s, 1), epsilon_spent(s, 2), epsilon_spent(s, 1, final_release=True)
    (0.0, 1.0, 1.0)
    """
    terms = release_epsilons(schedule, rounds + 1 if final_release else rounds)
    if math.inf in terms:
        return math.inf
    return math.fsum(terms)


def epsilon(schedule: LaplaceSchedule) -> float:
    """ε of the infinite horizon, final release included: Σ_k δα_k/ν_{k+1} = ε.

    The noise scales are defined from ε (module docstring), so the geometric series sums
    to ε in exact arithmetic; the float sum differs by rounding only (the tests check
    |Σ − ε| ≤ 1e-12 ε). Returning ε itself keeps the reported guarantee from drifting an
    ulp below the plan's budget.

    >>> epsilon(LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3))
    3.0
    """
    return schedule.epsilon


def replace_one_epsilon(schedule: LaplaceSchedule, value: float) -> float:
    """The ε of the same noise under replace-one adjacency (ε is linear in δ).

    Zero-out plans: 2ε (one replaced example moves the mean by 2Δ√d/B instead of Δ√d/B).
    Replace-one plans: ε. ``problem`` plans: ε (Definition 1 replaces a node's cost).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3)
    >>> replace_one_epsilon(s, 3.0)
    6.0
    """
    return 2.0 * value if schedule.adjacency == "zero-out" else value


def rounds_within(schedule: LaplaceSchedule, budget: float) -> int | float:
    """The most rounds whose messages spend ε ≤ ``budget`` (``inf`` if budget ≥ ε_∞).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.75, delta_grad=1, epsilon=3)
    >>> rounds_within(s, 1.7), rounds_within(s, 3.0)
    (3, inf)
    """
    if not budget >= 0:
        raise ValueError(f"Expected budget={budget!r} >= 0.")
    if budget >= epsilon(schedule):
        return math.inf
    if not schedule.private:
        return 1  # round 0's message carries no data
    # ε_K = ε (1 − r^{K−1}) ≤ budget ⇔ K ≤ 1 + log(1 − budget/ε) / log r; then confirm.
    r = schedule.q1 / schedule.q2
    k = max(1, int(math.floor(math.log1p(-budget / epsilon(schedule)) / math.log(r))) + 2)
    while k > 1 and epsilon_spent(schedule, k) > budget:
        k -= 1
    return k


def example_delta(
    *, clip_norm: float, dim: int, batch_size: int, adjacency: str = "zero-out"
) -> float:
    """δ certified for an example adjacency: Δ√d/B (zero-out) or 2Δ√d/B (replace-one).

    Args:
      clip_norm: Δ, the per-example L2 clip norm.
      dim: d, the model dimension.
      batch_size: B, the public number of examples averaged per round.
      adjacency: ``"zero-out"`` or ``"replace-one"``.

    >>> example_delta(clip_norm=1.0, dim=4, batch_size=8)
    0.25
    >>> example_delta(clip_norm=1.0, dim=4, batch_size=8, adjacency="replace-one")
    0.5
    """
    if adjacency not in _EXAMPLE_FACTOR:
        raise ValueError(f"Expected adjacency={adjacency!r} in {tuple(_EXAMPLE_FACTOR)}.")
    if not (0 < clip_norm < math.inf):
        raise ValueError(f"Expected clip_norm={clip_norm!r} > 0 (finite) for {adjacency}.")
    if dim < 1 or batch_size < 1:
        raise ValueError(f"Expected dim={dim} >= 1 and batch_size={batch_size} >= 1.")
    return _EXAMPLE_FACTOR[adjacency] * clip_norm * math.sqrt(dim) / batch_size


def check_task(
    schedule: LaplaceSchedule,
    *,
    clip_norm: float,
    dim: int | None = None,
    batch_size: int | None = None,
) -> None:
    """Check that δ is certified for a task: ValueError naming the fix otherwise.

    Example adjacencies need a finite clip norm and, once the task is known (``dim`` and
    ``batch_size`` given), δ ≥ :func:`example_delta`; engines call this before round 0.
    Problem adjacency takes δ as given (``clip_norm`` may be ``inf``: no clipping).

    >>> s = LaplaceSchedule(gamma=1, beta=0, q1=0.5, q2=0.9, delta_grad=0.1, epsilon=1)
    >>> check_task(s, clip_norm=1.0, dim=4, batch_size=8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: delta_grad=0.1 is below clip*sqrt(d)/B = 0.25 ...; re-plan with --delta-grad 0.25.
    """
    if not clip_norm > 0:
        raise ValueError(f"Expected clip_norm={clip_norm!r} > 0.")
    if schedule.adjacency not in _EXAMPLE_FACTOR:
        return
    if not math.isfinite(clip_norm):
        raise ValueError(
            f"adjacency {schedule.adjacency!r} certifies delta_grad from the clip norm; it "
            f"needs a finite clip_norm, got {clip_norm!r} (use adjacency 'problem' for "
            "unclipped gradients)."
        )
    if dim is None or batch_size is None:
        return
    need = example_delta(
        clip_norm=clip_norm, dim=dim, batch_size=batch_size, adjacency=schedule.adjacency
    )
    if schedule.delta_grad < need:
        factor = "2*" if schedule.adjacency == "replace-one" else ""
        raise ValueError(
            f"delta_grad={schedule.delta_grad:g} is below {factor}clip*sqrt(d)/B = {need:g} "
            f"for this task ({schedule.adjacency}; clip {clip_norm:g}, d {dim}, batch "
            f"{batch_size}); re-plan with --delta-grad {need:.17g}."
        )


@dataclass(frozen=True, slots=True)
class PureGuarantee:
    """Pure ε-DP (δ = 0) of a Laplace plan's releases, against every observer of messages.

    ``epsilon(delta)`` is ε for every δ ≥ 0; ``delta(epsilon)`` is 0 from ε on and, below
    it, the bound 1 − e^(epsilon − ε) that every ε-DP mechanism meets (its privacy loss never
    exceeds ε, so E[(1 − e^(epsilon − L))₊] ≤ 1 − e^(epsilon − ε)).

    >>> g = PureGuarantee(value=1.0, steps=10, adjacency="zero-out", final_release=True)
    >>> g.epsilon(1e-6), g.delta(1.0), round(g.delta(0.5), 4)
    (1.0, 0.0, 0.3935)
    """

    value: float
    steps: int
    adjacency: str
    final_release: bool

    def epsilon(self, delta: float) -> float:
        """ε: pure DP needs no δ."""
        if not 0 <= delta <= 1:
            raise ValueError(f"Expected 0 <= delta={delta!r} <= 1.")
        return self.value

    def delta(self, epsilon: float) -> float:
        """The smallest δ this guarantee certifies at ``epsilon``."""
        if epsilon >= self.value:
            return 0.0
        if math.isinf(self.value):
            return 1.0
        return -math.expm1(epsilon - self.value)


def plan_guarantee(plan, *, steps_done: int | None = None) -> PureGuarantee:
    """The accountant of Laplace plans (sr-gt, dpop; paper 004 Lemma 4.4).

    For the whole plan (``steps_done`` None): the ε of its T messages and of the noised
    final model a device publishes, x(T) + Lap(ν_{T+1}) — what a finished run released.
    After ``steps_done`` rounds: the ε of the messages sent so far.
    """
    s = plan.laplace
    if s is None:
        raise ValueError("Expected a plan with a laplace section (sr-gt, dpop).")
    if steps_done is None:
        return PureGuarantee(
            epsilon_spent(s, plan.steps, final_release=True), plan.steps, s.adjacency, True
        )
    return PureGuarantee(epsilon_spent(s, steps_done), steps_done, s.adjacency, False)
