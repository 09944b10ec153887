"""Statistics of a privacy audit: from a test statistic in two worlds to lower bounds on the
privacy parameters that hold with a stated confidence.

Any test of "world 0" (canary absent) against "world 1" (present) has a false positive rate
(FPR, world-0 trials called world 1) and a false negative rate (FNR). A certificate bounds
the pair (Kairouz et al. 2015; Dong, Roth & Su 2022, f-DP):

* (ε, δ)-DP: FPR + e^ε·FNR ≥ 1 − δ and FNR + e^ε·FPR ≥ 1 − δ, so
  ε ≥ max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR)) (:func:`epsilon_bound`);
* μ-GDP: FNR ≥ G_μ(FPR) = Φ(Φ⁻¹(1 − FPR) − μ), so μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR)
  (:func:`mu_bound`; the GDP audit of Nasr et al. 2023, "Tight auditing of differentially
  private machine learning").

Both decrease in each rate, so upper confidence bounds on the two rates give a lower bound
on the parameter. The audit (Jagielski et al. 2020; Nasr et al. 2021) gets them without
optimism: the test is "guess world 1 when S > τ" for the attacker's statistic S; τ is chosen
on the *selection* half of the trials only (:func:`choose_threshold`, maximizing the bound
there); on the *held-out* half the false positives and negatives are Binomial and one-sided
Clopper–Pearson upper bounds at level 1 − α/2 each (a union bound: both hold with probability
≥ 1 − α) give the bound (:func:`held_out_bound`) — valid whatever the law of S. Its p-value
(:func:`p_value`) is the smallest α at which the bound passes a certified value.

Threshold tests of ε at small δ cannot show much more than log N (:func:`most_shown`, the
bound without any held-out error); the μ bound is read at moderate error rates, where N
trials measure the rates well — it detects a view whose μ exceeds the certified μ with a few
hundred trials.

A Gaussian fit (:func:`mu_fit`) estimates μ from all trials assuming S is Gaussian with
equal variances in both worlds (exact for a Gaussian mechanism and a linear statistic):
μ̂ = (mean₁ − mean₀)/pooled std with the exact noncentral-t interval — an estimate beside
the bounds, not a test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

__all__ = [
    "Bound",
    "MuFit",
    "Threshold",
    "choose_threshold",
    "clopper_pearson_upper",
    "epsilon_bound",
    "epsilon_lower_bound",
    "held_out_bound",
    "most_shown",
    "mu_bound",
    "mu_fit",
    "p_value",
    "roc",
]

#: A lower bound on a privacy parameter from a test's (FPR, FNR), decreasing in both.
Bound = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: The smallest level :func:`p_value` resolves.
_TINY = 1e-300


def clopper_pearson_upper(count, total, alpha: float):
    """One-sided (1 − α) Clopper–Pearson upper bound on a Binomial rate: the upper
    α-quantile of Beta(k + 1, n − k) (from the upper tail: exact for tiny α), 1 when k = n.

    >>> round(float(clopper_pearson_upper(0, 100, 0.05)), 5)  # 1 − 0.05^(1/100)
    0.02951
    """
    k = np.asarray(count, dtype=np.float64)
    n = np.asarray(total, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):  # scipy.stats.beta.isf, without its checks
        ub = special.betainccinv(k + 1.0, np.maximum(n - k, 1e-300), alpha)
    return np.where(k >= n, 1.0, ub)


def epsilon_bound(fpr, fnr, delta: float):
    """max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR)), clipped below at 0 (rates may be
    arrays; 0 rates give ∞ where the numerator is positive).

    >>> round(float(epsilon_bound(0.05, 0.5, 0.0)), 12) == round(math.log(10), 12)
    True
    """
    fpr, fnr = np.asarray(fpr, dtype=np.float64), np.asarray(fnr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(1 - delta - fnr > 0, np.log(1 - delta - fnr) - np.log(fpr), -np.inf)
        b = np.where(1 - delta - fpr > 0, np.log(1 - delta - fpr) - np.log(fnr), -np.inf)
    return np.maximum(np.maximum(a, b), 0.0)


def mu_bound(fpr, fnr):
    """Φ⁻¹(1 − FPR) − Φ⁻¹(FNR), clipped below at 0: the μ of the Gaussian trade-off curve
    through (FPR, FNR) — no μ-GDP mechanism has a test with both rates smaller.

    >>> round(float(mu_bound(0.05, stats.norm.cdf(stats.norm.isf(0.05) - 1.5))), 12)
    1.5
    """
    fpr, fnr = np.asarray(fpr, dtype=np.float64), np.asarray(fnr, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        mu = stats.norm.isf(fpr) - stats.norm.ppf(fnr)
    return np.where(np.isnan(mu), 0.0, np.maximum(mu, 0.0))


def _epsilon_at(delta: float) -> Bound:
    return lambda fpr, fnr: epsilon_bound(fpr, fnr, delta)


def held_out_bound(fp: int, negatives: int, fn: int, positives: int, *, alpha, bound: Bound):
    """``bound`` at the Clopper–Pearson upper bounds (1 − α/2 each) of the held-out error
    rates: a (1 − α)-confidence lower bound; also the two rate bounds.

    >>> b, fpr, fnr = held_out_bound(100, 1000, 100, 1000, alpha=0.05, bound=mu_bound)
    >>> round(fpr, 4), round(b, 3)  # Beta(0.975; 101, 900) each: μ ≥ 2Φ⁻¹(1 − 0.1203)
    (0.1203, 2.347)
    """
    fpr = float(clopper_pearson_upper(fp, negatives, alpha / 2))
    fnr = float(clopper_pearson_upper(fn, positives, alpha / 2))
    return float(bound(fpr, fnr)), fpr, fnr


def epsilon_lower_bound(fp: int, negatives: int, fn: int, positives: int, *, delta, alpha):
    """ε_lb from held-out error counts (:func:`held_out_bound` of :func:`epsilon_bound`).

    >>> eps, fpr, fnr = epsilon_lower_bound(0, 1000, 500, 1000, delta=0.0, alpha=0.05)
    >>> round(fpr, 6), round(fnr, 4)  # 1 − 0.025^(1/1000); Beta(0.975; 501, 500)
    (0.003682, 0.5315)
    >>> round(eps, 3)  # log((1 − FNR_ub) / FPR_ub)
    4.846
    """
    return held_out_bound(fp, negatives, fn, positives, alpha=alpha, bound=_epsilon_at(delta))


def most_shown(negatives: int, positives: int, *, alpha: float, bound: Bound) -> float:
    """The largest :func:`held_out_bound` these held-out counts can give (no error in either
    world): a ceiling of every bound of the audit, whatever the mechanism.

    >>> u = 1 - 0.025 ** (1 / 2500)  # Clopper–Pearson of 0 errors in 2,500 at 97.5%
    >>> top = most_shown(2500, 2500, alpha=0.05, bound=_epsilon_at(1e-6))
    >>> round(top, 9) == round(math.log((1 - 1e-6 - u) / u), 9), round(top, 3)
    (True, 6.518)
    """
    return held_out_bound(0, negatives, 0, positives, alpha=alpha, bound=bound)[0]


def p_value(fp: int, negatives: int, fn: int, positives: int, *, bound: Bound, certified):
    """The smallest α at which :func:`held_out_bound` exceeds ``certified`` (1 if none does):
    the one-sided p-value of "the mechanism satisfies the certificate" for this test.

    >>> p_value(100, 1000, 100, 1000, bound=mu_bound, certified=2.0) < 1e-6
    True
    """

    def gap(log_alpha: float) -> float:
        value = held_out_bound(fp, negatives, fn, positives, alpha=math.exp(log_alpha), bound=bound)
        return value[0] - certified

    if not math.isfinite(certified) or gap(0.0) <= 0:
        return 1.0
    lo = math.log(_TINY)
    if gap(lo) > 0:
        return _TINY
    return math.exp(optimize.brentq(gap, lo, 0.0, xtol=1e-6))


@dataclass(frozen=True, slots=True)
class Threshold:
    """The test chosen on the selection half: guess world 1 when S > ``tau``."""

    tau: float
    selection_bound: float  # the bound the threshold reaches on the selection half


def choose_threshold(scores, present, *, alpha: float, bound: Bound) -> Threshold:
    """The τ maximizing :func:`held_out_bound`'s ``bound`` on these trials (the selection
    half). Candidates are the midpoints between consecutive distinct scores (and ±∞).
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(present, dtype=bool)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        raise ValueError("Expected trials of both worlds in the selection half.")
    order = np.argsort(s, kind="stable")
    s, y = s[order], y[order]
    # cut after position i (i = -1..N-1): predicted world 1 = s[i+1:], only between ties
    ones_below = np.concatenate([[0], np.cumsum(y)])  # world-1 trials at or below the cut
    zeros_below = np.concatenate([[0], np.cumsum(~y)])
    valid = np.concatenate([[True], s[1:] > s[:-1], [True]])
    fn = ones_below[valid]
    fp = n0 - zeros_below[valid]
    cut = np.flatnonzero(valid)
    values = bound(
        clopper_pearson_upper(fp, n0, alpha / 2), clopper_pearson_upper(fn, n1, alpha / 2)
    )
    best = int(np.argmax(values))
    i = int(cut[best])
    if i == 0:
        tau = -math.inf
    elif i == len(s):
        tau = math.inf
    else:
        tau = float(0.5 * (s[i - 1] + s[i]))
    return Threshold(tau, float(values[best]))


@dataclass(frozen=True, slots=True)
class MuFit:
    """Gaussian fit of the statistic: μ̂ and its interval (noncentral t, two-sided)."""

    mu: float
    low: float
    high: float
    confidence: float


def mu_fit(scores, present, *, confidence: float) -> MuFit:
    """μ̂ = (mean₁ − mean₀) / pooled std, with the exact interval for Cohen's d under
    normality and equal variances: t = μ̂·√(n₀n₁/(n₀+n₁)) is noncentral t with n₀+n₁−2
    degrees of freedom and noncentrality μ·√(n₀n₁/(n₀+n₁)).

    >>> g = np.random.default_rng(0)
    >>> s = np.concatenate([g.normal(0, 1, 4000), g.normal(1, 1, 4000)])
    >>> f = mu_fit(s, np.arange(8000) >= 4000, confidence=0.95)
    >>> f.low < 1 < f.high, round(f.high - f.low, 2)
    (True, 0.09)
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(present, dtype=bool)
    a, b = s[~y], s[y]
    n0, n1 = len(a), len(b)
    df = n0 + n1 - 2
    pooled = math.sqrt(((n0 - 1) * a.var(ddof=1) + (n1 - 1) * b.var(ddof=1)) / df)
    if pooled == 0:
        gap = float(b.mean() - a.mean())
        mu = math.inf if gap > 0 else (-math.inf if gap < 0 else 0.0)
        return MuFit(mu, mu, mu, confidence)
    mu = float((b.mean() - a.mean()) / pooled)
    scale = math.sqrt(n0 * n1 / (n0 + n1))
    t = mu * scale
    tail = (1 - confidence) / 2

    spread = math.sqrt(1.0 + t * t / (2.0 * df))  # large-sample sd of T (Hedges & Olkin)

    def nc_for(p):  # the noncentrality at which P(T <= t) = p
        f = lambda nc: stats.nct.cdf(t, df, nc) - p  # noqa: E731
        lo, hi = t - 8 * spread - 1, t + 8 * spread + 1
        try:
            root = optimize.brentq(f, lo, hi, xtol=1e-10)
        except ValueError:  # scipy's nct.cdf can return NaN far in a tail
            root = math.nan
        if not math.isfinite(root):  # fall back to the normal approximation of T
            root = t - stats.norm.ppf(p) * spread
        return root

    return MuFit(mu, nc_for(1 - tail) / scale, nc_for(tail) / scale, confidence)


def roc(scores, present) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of "S > τ" over every threshold, for plots."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(present, dtype=bool)
    order = np.argsort(-s, kind="stable")
    y = y[order]
    tpr = np.concatenate([[0.0], np.cumsum(y) / max(1, y.sum())])
    fpr = np.concatenate([[0.0], np.cumsum(~y) / max(1, (~y).sum())])
    return fpr, tpr
