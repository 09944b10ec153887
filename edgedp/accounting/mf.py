"""Local-DP accountant for MF-D-SGD (paper 000, Alg. 1, §5–6).

With local noise correlation C = C_local ⊗ I_n, each node u adds (C_local⁻¹ Z_u)[t] at step
t, built only from its own standard normals. Against the LDP attacker, who sees every
message, the decoder is square and invertible (000 App. A, "LDP"), so
sens(C; B) = sens(C) = sens_Πlocal(C_local) over the node's local participation schema
(000 Thm 7 and Lemma 10). The noise rows have std

    ν = noise_multiplier · sens · clip_norm,   sens = sens_Πlocal(C_local) over T steps,

and the run is (1/noise_multiplier)-GDP, also for adaptively chosen gradients, because
C_local is lower-triangular (Thm 7's column-echelon condition).

Privacy spent after t < T steps. The first t messages are the MF mechanism of the leading
t × t block C_t = C_local[:t, :t] (lower-triangular: (C⁻¹)[:t, :t] = C_t⁻¹, so they only
use the first t noise rows) with the same noise std ν, under the patterns truncated to the
first t steps. Hence μ_t = sens_t / (noise_multiplier · sens_T) <= 1/noise_multiplier.
μ_t is non-decreasing in t whenever X = C_localᵀC_local >= 0 (paper 003's exact case); with
negative entries each μ_t is still a valid bound, but Thm 7's bound may be looser at some t
than at a later one, so callers tracking a budget should keep the running maximum.
"""

# Paper letter C (strategy); see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgedp._validate import finite_array, integer, non_negative
from edgedp.accounting import factor_sensitivity, gdp
from edgedp.accounting import rdp as renyi
from edgedp.accounting import sensitivity as sens_lib
from edgedp.accounting.participation import Participation

__all__ = [
    "LDPGuarantee",
    "calibrate",
    "factor_guarantee",
    "ldp_guarantee",
    "plan_guarantee",
    "planned_guarantee",
]


@dataclass(frozen=True, slots=True)
class LDPGuarantee:
    """μ-GDP guarantee of MF-D-SGD against the LDP attacker.

    Attributes:
        mu: GDP parameter of the accounted steps.
        noise_multiplier: σ; noise std per coordinate is σ · sensitivity · clip_norm.
        sensitivity: sens_Πlocal(C_local) of the full T-step strategy (scales the noise).
        exact: Whether the sensitivity of the accounted steps is exact (paper 003, Eq. 3)
            rather than the Thm 7 upper bound; mu is an upper bound either way.
        steps: Number of steps accounted (T, or steps_done).
    """

    mu: float
    noise_multiplier: float
    sensitivity: float
    exact: bool
    steps: int

    def epsilon(self, delta: float) -> float:
        """Smallest ε with (ε, delta)-LDP; see :func:`edgedp.accounting.gdp.epsilon`."""
        return gdp.epsilon(self.mu, delta=delta)

    def delta(self, epsilon: float) -> float:
        """δ(epsilon); see :func:`edgedp.accounting.gdp.delta`."""
        return gdp.delta(self.mu, epsilon=epsilon)

    def rdp(self, orders: Sequence[float] | np.ndarray = renyi.DEFAULT_ORDERS) -> np.ndarray:
        """RDP curve αμ²/2 at the given orders; see :func:`edgedp.accounting.rdp.rdp_of_gdp`."""
        return renyi.rdp_of_gdp(self.mu, orders)


def _strategy(strategy) -> np.ndarray:
    C = finite_array("strategy", strategy)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] == 0:
        raise ValueError(f"Expected strategy to be a square T x T matrix, got shape {C.shape}.")
    C = C.astype(np.float64, copy=False)
    if np.any(np.triu(C, 1)):
        raise ValueError(
            "Expected strategy to be lower-triangular (C_local[s, t] == 0 for t > s): noise "
            "must not depend on future steps; it has nonzero entries above the diagonal."
        )
    if np.any(np.diagonal(C) == 0):
        raise ValueError(
            "Expected strategy to have a nonzero diagonal (nonsingular); "
            f"zero at steps {np.flatnonzero(np.diagonal(C) == 0).tolist()[:5]}."
        )
    return C


def _sens(C: np.ndarray, participation, t: int) -> sens_lib.Sensitivity:
    if isinstance(participation, Participation):
        return sens_lib.sensitivity(C[:t, :t], participation)
    if t == C.shape[0]:
        return sens_lib.sensitivity(C, participation)  # validates every index < T
    pats = [np.asarray(p)[np.asarray(p) < t] for p in participation]
    return sens_lib.sensitivity(C[:t, :t], pats)


def ldp_guarantee(
    strategy,
    *,
    participation: Participation | Sequence,
    noise_multiplier: float,
    steps_done: int | None = None,
) -> LDPGuarantee:
    """GDP guarantee of MF-D-SGD with local correlation C_local under LDP (000, Thm 7).

    Args:
        strategy: C_local, a T × T lower-triangular matrix with nonzero diagonal.
        participation: Local participation schema: a Participation or explicit patterns
            (index arrays into the T local steps).
        noise_multiplier: σ >= 0 (inf allowed); noise std is σ · sens · clip_norm.
        steps_done: Account only the first t steps ("privacy spent so far"); default T.

    Returns:
        LDPGuarantee with μ = sens_t / (σ · sens_T) (= 1/σ when t = T); μ = inf when σ = 0,
        μ = 0 when nothing data-dependent has been released (t = 0 or σ = inf).

    Raises:
        ValueError: If the strategy is not square, lower-triangular, finite and nonsingular,
            or an argument is out of range.

    >>> g = ldp_guarantee(np.eye(100), participation=Participation(4, 25), noise_multiplier=2.0)
    >>> print(f"sens={g.sensitivity:.1f} mu={g.mu:.2f} eps={g.epsilon(1e-5):.4f}")
    sens=2.0 mu=0.50 eps=1.9931
    """
    C = _strategy(strategy)
    T = C.shape[0]
    non_negative(noise_multiplier=noise_multiplier)
    if steps_done is None:
        steps_done = T
    integer(0, steps_done=steps_done)
    if steps_done > T:
        raise ValueError(f"Expected steps_done={steps_done!r} <= T={T}.")
    t = int(steps_done)
    full = _sens(C, participation, T)
    done = full if t == T else _sens(C, participation, t)
    return _guarantee(full, done, noise_multiplier, t)


def _guarantee(full, done, noise_multiplier, t: int) -> LDPGuarantee:
    if done.value > full.value:
        # Thm 7 bounds need not grow with t when X has negative entries, but the true
        # sensitivity does: sens_t <= sens_T <= full.value is the tighter valid bound.
        done = sens_lib.Sensitivity(full.value, False)
    sigma = float(noise_multiplier)
    if done.value == 0.0 or sigma == math.inf:
        mu = 0.0
    elif sigma == 0.0:
        mu = math.inf
    else:
        mu = done.value / (sigma * full.value)
    return LDPGuarantee(
        mu=mu, noise_multiplier=sigma, sensitivity=full.value, exact=done.exact, steps=t
    )


def factor_guarantee(
    factor,
    *,
    participation: Participation,
    noise_multiplier: float,
    steps: int,
    steps_done: int | None = None,
    certified: float | None = None,
    gram: bool = False,
) -> LDPGuarantee:
    """:func:`ldp_guarantee` of ``factor.strategy(steps)`` without T×T matrices.

    The sensitivities come from :func:`edgedp.accounting.factor_sensitivity.sensitivity`
    (equal to the dense ones up to summation order). When a factor's exact value needs the
    Gram matrix, the caller passes ``certified``, the sensitivity its plan certified (checked
    by :mod:`edgedp.plan`; only for such factors): the full run uses it, and t < T steps
    use the cheap upper bound on sens_t, capped at ``certified`` (μ_t <= 1/σ always
    holds), flagged not exact. ``gram`` (planner side) computes such values from the T×T
    strategy instead. Without either, such a factor raises ValueError.

    >>> from edgedp import factors
    >>> g = factor_guarantee(factors.Identity(), participation=Participation(4, 25),
    ...                      noise_multiplier=2.0, steps=100)
    >>> print(f"sens={g.sensitivity:.1f} mu={g.mu:.2f}")
    sens=2.0 mu=0.50
    """
    non_negative(noise_multiplier=noise_multiplier)
    integer(1, steps=steps)
    T = int(steps)
    t = T if steps_done is None else steps_done
    integer(0, steps_done=t)
    if t > T:
        raise ValueError(f"Expected steps_done={t!r} <= T={T}.")
    t = int(t)

    def sens(n: int) -> sens_lib.Sensitivity:
        if n == 0:
            return sens_lib.Sensitivity(0.0, True)
        fs = factor_sensitivity.sensitivity(factor, participation, steps=n)
        if fs.value is not None:
            return fs.value
        if gram:
            return _sens(_strategy(factor.strategy(n)), participation, n)
        if certified is None:
            raise ValueError(
                f"The {factor.kind} factor's exact sensitivity over {n} steps needs its "
                f"{n}x{n} Gram matrix; pass the plan's certified value."
            )
        return sens_lib.Sensitivity(min(fs.upper, float(certified)), False)

    full = sens(T) if certified is None else sens_lib.Sensitivity(float(certified), False)
    done = full if t == T else sens(t)
    return _guarantee(full, done, noise_multiplier, t)


def calibrate(
    strategy,
    *,
    participation: Participation | Sequence,
    target_epsilon: float,
    delta: float,
) -> LDPGuarantee:
    """Noise multiplier for which the full run is (target_epsilon, delta)-LDP.

    σ = 1/μ with μ = :func:`edgedp.accounting.gdp.mu` (target_epsilon, delta) (000, Thm 7).

    Args:
        strategy: C_local, as in :func:`ldp_guarantee`.
        participation: Local participation schema.
        target_epsilon: ε >= 0.
        delta: δ >= 0.

    Returns:
        LDPGuarantee whose ``epsilon(delta)`` is <= target_epsilon (equal up to ~1e-12).

    >>> g = calibrate(np.tril(np.ones((8, 8))), participation=Participation(2, 4),
    ...               target_epsilon=2.0, delta=1e-5)
    >>> print(f"sigma={g.noise_multiplier:.6f} sens={g.sensitivity:.6f}")
    sigma=1.993812 sens=4.472136
    """
    sigma = gdp.noise_multiplier(target_epsilon, delta=delta)
    return ldp_guarantee(strategy, participation=participation, noise_multiplier=sigma)


def plan_guarantee(plan, *, steps_done: int | None = None) -> LDPGuarantee:
    """The accountant of the D-SGD family's plans (temporal factor, Gaussian noise of σ).

    μ-GDP against the LDP attacker, re-derived from ``plan.factor`` (never from stored
    numbers); ``inf`` for a plan without noise (``dsgd``).
    """
    return factor_guarantee(
        plan.factor,
        participation=plan.participation,
        noise_multiplier=plan.noise_multiplier,
        steps=plan.steps,
        steps_done=steps_done,
        certified=getattr(plan, "certified_sensitivity", None),
        gram=bool(getattr(plan, "_gram", False)),
    )


#: Up to this horizon the planner certifies from the T×T Gram matrix even when the compact
#: route applies (the plans planned before it existed keep their bits and hashes).
PLANNER_GRAM_STEPS = 2048


def planned_guarantee(factor, participation, sigma: float, steps: int) -> LDPGuarantee:
    """The planner's guarantee: from the Gram matrix up to PLANNER_GRAM_STEPS or when the
    compact route has only bounds, else from the compact route (equal up to rounding)."""
    fs = None
    if steps > PLANNER_GRAM_STEPS:
        fs = factor_sensitivity.sensitivity(factor, participation, steps=steps)
    if fs is not None and fs.value is not None:
        return factor_guarantee(
            factor, participation=participation, noise_multiplier=sigma, steps=steps
        )
    return ldp_guarantee(
        factor.strategy(steps), participation=participation, noise_multiplier=sigma
    )
