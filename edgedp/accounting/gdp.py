"""μ-Gaussian differential privacy: privacy profile, conversion and calibration.

A mechanism is μ-GDP (Dong, Roth & Su, "Gaussian Differential Privacy", JRSS-B 2022) when
telling neighbouring inputs apart is no easier than telling N(0, 1) from N(μ, 1). A Gaussian
mechanism whose noise std is σ times its L2 sensitivity is (1/σ)-GDP, also for matrix
factorization mechanisms with adaptive inputs (paper 000, Thm 7). The (ε, δ) profile of
μ-GDP (Dong et al., Cor. 2.13; Balle & Wang 2018, Thm 8) is

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

Numerics. Write a = −ε/μ + μ/2, b = a − μ and R(x) = Φ(x)/φ(x) (Mills ratio). Because
e^ε φ(b) = φ(a), the profile is δ = Φ(a) · (1 − R(b)/R(a)); we evaluate
log δ = log Φ(a) + log(−expm1(log R(b) − log R(a))), which neither overflows e^ε nor
loses the difference of two nearly equal tail probabilities. log R uses Laplace's
continued fraction for x < −3 (no cancellation against x²/2) and math.erfc above; for
μ < 0.01, log R(b) − log R(a) is Simpson's rule on (log R)' instead of a difference. Pure
Python + math only (this package runs on devices). Root finding (epsilon, mu) keeps a
bracket whose one end is always on the private side and returns that end, so a search that
stops early still returns a valid (only looser) answer.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from edgedp._validate import non_negative

__all__ = [
    "GaussianDPGuarantee",
    "delta",
    "epsilon",
    "log_ndtr",
    "mu",
    "noise_multiplier",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)
_TAIL = -20.0  # below this, log Φ comes from the continued fraction
_MILLS_TAIL = -3.0  # below this, log(Φ/φ) comes from the continued fraction
_CF_TERMS = 80  # continued-fraction depth; converged to 1 ulp for |x| >= 3
_SMALL_MU = 1e-2  # below this, log R(b) − log R(a) is integrated instead of subtracted
# Beyond this μ the rounding of a = −ε/μ + μ/2 (ε ≈ μ²/2) costs ~μ·1e-16 relative in δ:
# epsilon() reports inf and mu() never returns more (ε would exceed 5e11 anyway).
_MU_MAX = 1e6
_RTOL = 1e-13  # relative width of the final bracket in epsilon / mu searches
_MAX_ITER = 300
_TINY = 1e-300


def _log_ndtr_erfc(x: float) -> float:
    if x > 0.0:
        return math.log1p(-0.5 * math.erfc(x * _SQRT_HALF))
    return math.log(0.5 * math.erfc(-x * _SQRT_HALF))


def _log_mills(x: float) -> float:
    """log(Φ(x)/φ(x)) for any real x (−inf at −inf)."""
    if x < _MILLS_TAIL:
        # Laplace: Φ(−z)/φ(z) = 1/(z + 1/(z + 2/(z + 3/(z + …)))), evaluated bottom-up.
        z = -x
        f = z
        for j in range(_CF_TERMS, 0, -1):
            f = z + j / f
        return -math.log(f)
    return _log_ndtr_erfc(x) + 0.5 * x * x + _LOG_SQRT_2PI


def _dlog_mills(x: float) -> float:
    """d/dx log(Φ(x)/φ(x)) = φ(x)/Φ(x) + x > 0, without cancellation in the far tail."""
    if x < _MILLS_TAIL:
        # From the continued fraction: φ/Φ(−z) − z = 1/(z + 2/(z + 3/(z + …))).
        z = -x
        h = z
        for j in range(_CF_TERMS, 1, -1):
            h = z + j / h
        return 1.0 / h
    return math.exp(-_log_mills(x)) + x


def log_ndtr(x: float) -> float:
    """Natural log of the standard normal CDF, accurate far into both tails.

    Args:
        x: Any real number (±inf allowed).

    Returns:
        log Φ(x), relative error about 1e-15 for x down to about −1e150.

    Raises:
        ValueError: If x is NaN.

    >>> print(f"{log_ndtr(-40.0):.10f}")
    -804.6084420138
    """
    x = float(x)
    if math.isnan(x):
        raise ValueError("Expected x to be a number, got nan.")
    if x == -math.inf:
        return -math.inf
    if x < _TAIL:
        return _log_mills(x) - 0.5 * x * x - _LOG_SQRT_2PI
    return _log_ndtr_erfc(x)


def _log_delta(mu_: float, eps: float) -> float:
    """log δ(ε) of μ-GDP for 0 < mu_ < inf and 0 <= eps < inf."""
    if eps == 0.0:
        # δ(0) = Φ(μ/2) − Φ(−μ/2) = erf(μ/(2√2)), exact for tiny μ.
        return math.log(math.erf(0.5 * mu_ * _SQRT_HALF))
    a = -eps / mu_ + 0.5 * mu_
    if a == -math.inf:
        return -math.inf
    if mu_ < _SMALL_MU:
        # y = −∫ (log R)' over [b, a] by Simpson's rule: the difference of two nearly equal
        # logs would lose ~log10(1/μ) digits.
        y = -mu_ / 6.0 * (_dlog_mills(a - mu_) + 4.0 * _dlog_mills(a - 0.5 * mu_) + _dlog_mills(a))
    else:
        y = _log_mills(a - mu_) - _log_mills(a)  # log(e^ε Φ(b) / Φ(a)) < 0
    if not y < 0.0:
        # Only when μ·(log R)' underflows. (log R)' is increasing, so −y <= μ·(log R)'(a)
        # and δ <= Φ(a)·μ·(log R)'(a): return that bound, never 0.
        return log_ndtr(a) + math.log(mu_) + math.log(_dlog_mills(a))
    return log_ndtr(a) + math.log(-math.expm1(y))


def delta(mu: float, *, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism: the smallest δ such that it is (ε, δ)-DP.

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su 2022, Cor. 2.13), computed
    in log space; measured within 1e-12 relative of a 80-digit evaluation for μ in
    [1e-9, 1e3] and ε in [0, 1e4] (wherever δ > 1e-300).

    Args:
        mu: GDP parameter μ >= 0 (inf allowed: no privacy).
        epsilon: ε >= 0 (inf allowed).

    Returns:
        δ in [0, 1]; 0 when μ = 0 or ε = inf, 1 when μ = inf (and ε finite).

    Raises:
        ValueError: If mu or epsilon is negative or NaN.

    >>> print(f"{delta(1.0, epsilon=1.0):.10f}")
    0.1269367375
    """
    non_negative(mu=mu, epsilon=epsilon)
    if mu == 0 or epsilon == math.inf:
        return 0.0
    if mu == math.inf:
        return 1.0
    return math.exp(_log_delta(float(mu), float(epsilon)))


def _search(f: Callable[[float], float], safe: float, unsafe: float) -> tuple[float, bool]:
    """Shrink a bracket of positive numbers around the boundary of {x: f(x) <= 0}.

    f is monotone; f(safe) <= 0 < f(unsafe). Geometric bisection while the bracket spans
    more than a factor 2, then Illinois false position with a bisection step whenever two
    steps failed to halve the bracket. Returns (the safe end, converged).
    """
    fs, fu = f(safe), f(unsafe)
    last_side = 0
    widths = [math.inf, math.inf]
    for _ in range(_MAX_ITER):
        lo, hi = min(safe, unsafe), max(safe, unsafe)
        width = hi - lo
        if width <= _RTOL * hi:
            return safe, True
        if hi > 2.0 * lo:
            x = math.sqrt(lo * hi)
        elif width > 0.5 * widths[0] or not (math.isfinite(fs) and math.isfinite(fu)):
            x = 0.5 * (lo + hi)
        else:
            x = safe - fs * (unsafe - safe) / (fu - fs)
            if not lo < x < hi:
                x = 0.5 * (lo + hi)
        widths = [widths[1], width]
        if x in (lo, hi):  # bracket is down to adjacent floats
            return safe, True
        fx = f(x)
        if math.isnan(fx):
            return safe, False
        if fx <= 0.0:
            safe, fs = x, fx
            if last_side == 1:
                fu *= 0.5
            last_side = 1
        else:
            unsafe, fu = x, fx
            if last_side == -1:
                fs *= 0.5
            last_side = -1
    return safe, False


def _gap(log_d: float, log_t: float, target: float) -> float:
    """log δ − log target, with the sign of exp(log δ) <= target (what :func:`delta` reports)."""
    g = log_d - log_t
    if math.exp(log_d) <= target:
        return min(g, 0.0)
    return max(g, 5e-324)


def _not_converged(what: str, fallback: float) -> float:
    warnings.warn(
        f"GDP {what} search did not converge; returning the conservative {fallback!r}.",
        RuntimeWarning,
        stacklevel=3,
    )
    return fallback


def epsilon(mu: float, *, delta: float) -> float:
    """Smallest ε >= 0 such that a μ-GDP mechanism is (ε, δ)-DP.

    Inverts δ(ε) of Dong, Roth & Su (2022, Cor. 2.13) by a bracketing search to ~1e-13
    relative; the returned ε always satisfies δ(ε) <= delta.

    Args:
        mu: GDP parameter μ >= 0 (inf allowed).
        delta: Target δ >= 0; any δ >= 1 gives ε = 0.

    Returns:
        ε; 0 when μ = 0 or δ >= 1, inf when δ = 0 or μ > 1e6 (with δ < 1, μ > 0).

    Raises:
        ValueError: If mu or delta is negative or NaN.

    >>> print(f"{epsilon(1.0, delta=1e-5):.10f}")
    4.3771780957
    """
    non_negative(mu=mu, delta=delta)
    if delta >= 1 or mu == 0:
        return 0.0
    if mu > _MU_MAX or delta == 0:
        return math.inf
    mu_, log_t = float(mu), math.log(delta)
    if _log_delta(mu_, 0.0) <= log_t:
        return 0.0

    def f(eps: float) -> float:
        return _gap(_log_delta(mu_, eps), log_t, delta)

    # Safe start: δ(ε) <= Φ(−ε/μ + μ/2) <= exp(−(ε/μ − μ/2)²/2) for ε >= μ²/2.
    hi = 0.5 * mu_ * mu_ + mu_ * math.sqrt(-2.0 * log_t)
    for _ in range(_MAX_ITER):
        if hi == math.inf:
            return _not_converged("epsilon", math.inf)
        if f(hi) <= 0.0:
            break
        hi *= 2.0
    else:
        return _not_converged("epsilon", math.inf)
    lo = hi
    while True:
        lo *= 0.0625
        if lo < _TINY:
            return hi  # δ(hi) <= delta with hi < 1e-299: as good as 0, still safe
        if f(lo) > 0.0:
            break
        hi = lo
    eps, converged = _search(f, hi, lo)
    return eps if converged else _not_converged("epsilon", eps)


def mu(epsilon: float, *, delta: float) -> float:
    """Largest μ such that μ-GDP implies (ε, δ)-DP (calibration; δ_μ(ε) increases with μ).

    Args:
        epsilon: Target ε >= 0 (inf allowed).
        delta: Target δ >= 0.

    Returns:
        μ with δ_μ(ε) <= delta, within ~1e-13 relative of the largest such μ, capped at
        1e6; inf when δ >= 1 or ε = inf, 0 when δ = 0.

    Raises:
        ValueError: If epsilon or delta is negative or NaN.

    >>> print(f"{mu(1.0, delta=1e-5):.10f}")
    0.2680511232
    """
    non_negative(epsilon=epsilon, delta=delta)
    if delta >= 1 or epsilon == math.inf:
        return math.inf
    if delta == 0:
        return 0.0
    eps, log_t = float(epsilon), math.log(delta)

    def f(m: float) -> float:
        return _gap(_log_delta(m, eps), log_t, delta)

    # Safe start: δ_μ(ε) <= exp(−(ε/μ − μ/2)²/2) and δ_μ(0) = erf(μ/(2√2)) <= μ/√(2π).
    z = math.sqrt(-2.0 * log_t)
    root = eps / (0.5 * z + math.sqrt(0.25 * z * z + 0.5 * eps))  # μ²/2 + zμ = ε
    lo = max(root, delta * math.sqrt(2.0 * math.pi))
    lo = max(lo, _TINY)
    for _ in range(_MAX_ITER):
        if f(lo) <= 0.0:
            break
        lo *= 0.5
    else:
        return _not_converged("mu", 0.0)
    hi = lo
    for _ in range(_MAX_ITER):
        hi = min(2.0 * hi, _MU_MAX)
        if f(hi) > 0.0:
            break
        if hi == _MU_MAX:
            return _MU_MAX  # cap: a smaller μ than allowed is still (ε, δ)-DP
        lo = hi
    else:
        return _not_converged("mu", lo)
    m, converged = _search(f, lo, hi)
    return m if converged else _not_converged("mu", m)


def noise_multiplier(epsilon: float, *, delta: float) -> float:
    """Noise multiplier σ = 1/μ (noise std over L2 sensitivity) that gives (ε, δ)-DP.

    Calibration targets a real guarantee: a δ outside (0, 1) or an ε that is not finite
    and positive would give a plan without noise (σ = 0) or without a finite σ, so both are
    refused — a mistyped ``--delta 1`` must never produce a noiseless "private" plan.

    Args:
        epsilon: Target ε, 0 < ε < inf.
        delta: Target δ, 0 < δ < 1.

    Returns:
        σ > 0.

    Raises:
        ValueError: If epsilon or delta is out of range or NaN.

    >>> print(f"{noise_multiplier(1.0, delta=1e-5):.10f}")
    3.7306316348
    >>> noise_multiplier(4.0, delta=1.0)
    Traceback (most recent call last):
    ...
    ValueError: Expected 0 < delta=1.0 < 1 (a target delta of 1 or more needs no noise).
    """
    if not 0 < epsilon < math.inf:
        raise ValueError(f"Expected 0 < epsilon={epsilon!r} < inf for a calibrated plan.")
    if not 0 < delta < 1:
        raise ValueError(
            f"Expected 0 < delta={delta!r} < 1 (a target delta of 1 or more needs no noise)."
        )
    m = mu(epsilon, delta=delta)
    if m == math.inf:
        return 0.0
    if m == 0.0:
        return math.inf
    sigma = 1.0 / m
    if 1.0 / sigma > m:  # rounding must not make the guarantee weaker than calibrated
        sigma = math.nextafter(sigma, math.inf)
    return sigma


@dataclass(frozen=True, slots=True)
class GaussianDPGuarantee:
    """A μ-GDP guarantee with its (ε, δ) conversions.

    >>> print(f"{GaussianDPGuarantee(1.0).epsilon(1e-5):.6f}")
    4.377178
    """

    mu: float

    def __post_init__(self) -> None:
        non_negative(mu=self.mu)

    def epsilon(self, delta: float) -> float:
        """Smallest ε with (ε, delta)-DP; see :func:`epsilon`."""
        return epsilon(self.mu, delta=delta)

    def delta(self, epsilon: float) -> float:
        """δ(epsilon); see :func:`delta`."""
        return delta(self.mu, epsilon=epsilon)
