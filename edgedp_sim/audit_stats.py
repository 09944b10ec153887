"""Statistics of a privacy audit: from a test statistic in two worlds to a lower bound on ε.

An (ε, δ)-DP mechanism bounds every test of "world 0" (canary absent) against "world 1"
(present) by FPR + e^ε·FNR ≥ 1 − δ and FNR + e^ε·FPR ≥ 1 − δ (Kairouz et al. 2015), so

    ε ≥ max( log((1 − δ − FNR) / FPR), log((1 − δ − FPR) / FNR) )

for the true error rates of any fixed test. The audit (Jagielski et al. 2020; Nasr et al.
2021) estimates them without optimism:

* the test is "guess world 1 when S > τ" for the attacker's statistic S (a likelihood
  ratio, larger in world 1); τ is chosen on the *selection* half of the trials only
  (:func:`choose_threshold`, maximizing the same bound computed there);
* on the other, *held-out* half the numbers of false positives (world-0 trials with
  S > τ) and false negatives are Binomial; one-sided Clopper–Pearson upper bounds at level
  1 − α/2 each (α = 1 − confidence; a union bound makes the pair hold jointly with
  probability ≥ 1 − α) go into the formula above, which decreases in both rates, so
  ε_lb is a (1 − α)-confidence lower bound on ε (:func:`epsilon_lower_bound`).

A second estimate assumes S is Gaussian with equal variances in both worlds (exact for a
Gaussian mechanism and a linear statistic): μ̂ = (mean₁ − mean₀)/pooled std over all trials,
with an exact interval from the noncentral t distribution (:func:`mu_fit`); μ-GDP then
gives ε(δ) (:func:`edgedp.accounting.gdp.epsilon`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

__all__ = [
    "MuFit",
    "Threshold",
    "choose_threshold",
    "clopper_pearson_upper",
    "epsilon_bound",
    "epsilon_lower_bound",
    "gdp_ceiling",
    "mu_fit",
    "roc",
]


def clopper_pearson_upper(count, total, alpha: float):
    """One-sided (1 − α) Clopper–Pearson upper bound on a Binomial rate: the β-quantile
    Beta(1 − α; k + 1, n − k), and 1 when k = n.

    >>> round(float(clopper_pearson_upper(0, 100, 0.05)), 5)  # 1 − 0.05^(1/100)
    0.02951
    """
    k = np.asarray(count, dtype=np.float64)
    n = np.asarray(total, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ub = stats.beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
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


def epsilon_lower_bound(fp: int, negatives: int, fn: int, positives: int, *, delta, alpha):
    """ε_lb from held-out error counts (module docstring); also the two rate bounds.

    >>> eps, fpr, fnr = epsilon_lower_bound(0, 1000, 500, 1000, delta=0.0, alpha=0.05)
    >>> round(fpr, 6), round(fnr, 4)  # 1 − 0.025^(1/1000); Beta(0.975; 501, 500)
    (0.003682, 0.5315)
    >>> round(eps, 3)  # log((1 − FNR_ub) / FPR_ub)
    4.846
    """
    fpr = float(clopper_pearson_upper(fp, negatives, alpha / 2))
    fnr = float(clopper_pearson_upper(fn, positives, alpha / 2))
    return float(epsilon_bound(fpr, fnr, delta)), fpr, fnr


def gdp_ceiling(mu: float, negatives: int, positives: int, *, delta: float, alpha: float):
    """What a perfect test of a μ-GDP mechanism shows with these held-out counts: the
    largest :func:`epsilon_lower_bound` over thresholds with the error counts at their
    expectations (FPR = α, FNR = Φ(Φ⁻¹(1 − α) − μ)). Threshold audits of Gaussian
    mechanisms at small δ cannot exceed it (up to sampling), whatever the test.

    >>> round(gdp_ceiling(0.925, 2500, 2500, delta=1e-5, alpha=0.05), 2)
    1.59
    """
    if not math.isfinite(mu):
        return float(epsilon_lower_bound(0, negatives, 0, positives, delta=delta, alpha=alpha)[0])
    rates = np.logspace(-6, math.log10(0.5), 600)
    fnr = stats.norm.cdf(stats.norm.ppf(1 - rates) - mu)
    fp, fn = np.round(rates * negatives), np.round(fnr * positives)
    bound = epsilon_bound(
        clopper_pearson_upper(fp, negatives, alpha / 2),
        clopper_pearson_upper(fn, positives, alpha / 2),
        delta,
    )
    return float(np.max(bound))


@dataclass(frozen=True, slots=True)
class Threshold:
    """The test chosen on the selection half: guess world 1 when S > ``tau``."""

    tau: float
    selection_bound: float  # the bound the threshold reaches on the selection half


def choose_threshold(scores, present, *, delta: float, alpha: float) -> Threshold:
    """The τ maximizing the Clopper–Pearson bound on these trials (the selection half).

    Candidates are the midpoints between consecutive distinct scores (and ±∞).
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
    bound = epsilon_bound(
        clopper_pearson_upper(fp, n0, alpha / 2), clopper_pearson_upper(fn, n1, alpha / 2), delta
    )
    best = int(np.argmax(bound))
    i = int(cut[best])
    if i == 0:
        tau = -math.inf
    elif i == len(s):
        tau = math.inf
    else:
        tau = float(0.5 * (s[i - 1] + s[i]))
    return Threshold(tau, float(bound[best]))


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
