"""The audit's verdict: which certificates the trials refute, family-wise over attackers.

Trial i runs in world i mod 2 (canary present iff i is odd) and selects the threshold iff
(i // 2) is even, the other trials evaluating it (:func:`layout`): both depend on the trial's
index only, so any block of trials can be simulated anywhere and the blocks' statistics
joined. For every attacker whose view depends on the data, the audit tests the null
hypothesis "this attacker's view satisfies the plan's certificate for it":

* **μ test** (Gaussian plans: their accountants certify μ-GDP, and ε at δ follows from μ):
  on held-out trials the attacker's test shows a Gaussian trade-off of at least μ_lb
  (:func:`edgedp_sim.audit_stats.mu_bound` at the threshold chosen on the selection half,
  Clopper–Pearson rates); flagged when μ_lb > μ. This is the test with power: it reads the
  trade-off at moderate error rates, which a few hundred trials measure, and any μ-GDP
  mechanism stays below the certified curve there. Valid whatever the law of the statistic.
* **ε test** (every plan): ε_lb at the report's δ (pure ε, δ = 0, for Laplace plans, whose
  certificate is not a GDP one); flagged when ε_lb > ε. At δ = 1e-6 it cannot show much more
  than log N (:func:`edgedp_sim.audit_stats.most_shown`) and is kept for Laplace plans and as
  the familiar number.

**Family-wise level: Bonferroni** over the m tests run (tests per attacker × attackers with a
statistic; an encrypted tap, or an attacker that sees no message, has a constant statistic
and no test). Every bound is computed at confidence 1 − α/m, so all of them hold together
with probability ≥ 1 − α and a sound plan is flagged with probability ≤ α, whatever the
dependence between the attackers' statistics (they share trials). Bonferroni rather than
Holm: each printed bound is then a simultaneous bound and "flagged" means exactly "a printed
bound passes its certificate"; p-values are reported with the adjustment min(1, m·p).

:func:`gaussian_statistic` draws the statistic of a view of GDP parameter μ directly — the
Gaussian likelihood ratio of a linear view is N(−μ²/2, μ²) without the canary and N(μ²/2, μ²)
with it — so the verdict's power and level can be measured over many repeated audits at the
cost of the statistics alone (experiments/audit_power.py; whole audits on keyed trial blocks
beside them). :func:`typical_epsilon_lb` uses it for the ε_lb a mechanism exactly at its
certified μ typically shows with the audit's trials.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp_sim import audit_stats

__all__ = [
    "Certificate",
    "Decision",
    "CertificateTest",
    "decide",
    "gaussian_statistic",
    "layout",
    "run_test",
    "typical_epsilon_lb",
]

CORRECTION = "Bonferroni"


def layout(trial_ids) -> tuple[np.ndarray, np.ndarray]:
    """``(present, pick)`` of these trials: world 1 iff i is odd; the threshold is chosen on
    the trials with (i // 2) even and evaluated on the others."""
    ids = np.asarray(list(trial_ids), dtype=np.int64)
    return ids % 2 == 1, (ids // 2) % 2 == 0


@dataclass(frozen=True, slots=True)
class Certificate:
    """What the plan's accountant certifies for one attacker's view: ``mu`` (μ-GDP; None
    when the certificate is not a GDP one, e.g. pure ε of Laplace plans) and ``epsilon`` at
    the report's δ."""

    mu: float | None
    epsilon: float


@dataclass(frozen=True, slots=True)
class CertificateTest:
    """One test of one attacker: its held-out counts and the bound at confidence 1 − level."""

    kind: str  # "mu" or "epsilon"
    certified: float
    bound: float
    level: float
    p_value: float  # one-sided, before the family's adjustment
    threshold: float
    false_positives: int
    false_negatives: int
    negatives: int
    positives: int
    fpr_upper: float
    fnr_upper: float

    @property
    def rejected(self) -> bool:
        """The bound passes the certificate: the certificate is refuted."""
        return self.bound > self.certified

    def to_dict(self, tests_in_family: int) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]
        out["p_adjusted"] = min(1.0, tests_in_family * self.p_value)
        out["rejected"] = self.rejected
        return out


@dataclass(frozen=True, slots=True)
class Decision:
    """The tests of every attacker (``{}`` for one without a statistic) and the family."""

    tests: tuple[dict[str, CertificateTest], ...]
    tests_in_family: int
    alpha: float
    correction: str = CORRECTION

    @property
    def level(self) -> float:
        """The level of each test (α/m)."""
        return self.alpha / max(1, self.tests_in_family)

    @property
    def violation(self) -> bool:
        return any(t.rejected for tests in self.tests for t in tests.values())


def _bound(kind: str, delta: float) -> audit_stats.Bound:
    if kind == "mu":
        return audit_stats.mu_bound
    return functools.partial(audit_stats.epsilon_bound, delta=delta)


def run_test(
    kind, scores, present, pick, *, certified: float, delta: float, level: float
) -> CertificateTest:
    """The ``kind`` test ("mu" or "epsilon") of one attacker's statistic at confidence
    1 − ``level``: threshold from the selection trials, bound from the held-out ones."""
    if kind not in ("mu", "epsilon"):
        raise ValueError(f"Unknown test kind={kind!r}; expected 'mu' or 'epsilon'.")
    s = np.asarray(scores, dtype=np.float64)
    bound = _bound(kind, delta)
    th = audit_stats.choose_threshold(s[pick], present[pick], alpha=level, bound=bound)
    held, yh = s[~pick], present[~pick]
    fp, fn = int(np.sum(held[~yh] > th.tau)), int(np.sum(held[yh] <= th.tau))
    n0, n1 = int((~yh).sum()), int(yh.sum())
    value, fpr, fnr = audit_stats.held_out_bound(fp, n0, fn, n1, alpha=level, bound=bound)
    p = audit_stats.p_value(fp, n0, fn, n1, bound=bound, certified=certified)
    return CertificateTest(kind, certified, value, level, p, th.tau, fp, fn, n0, n1, fpr, fnr)


def decide(
    scores: Sequence[np.ndarray | None],
    present: np.ndarray,
    pick: np.ndarray,
    *,
    certificates: Sequence[Certificate],
    alpha: float,
    delta: float = 0.0,
) -> Decision:
    """Test every attacker's statistic (``None``: no statistic, no test) against its
    certificate, Bonferroni over the family (module docstring)."""
    if not 0 < alpha < 1:
        raise ValueError(f"Expected 0 < alpha={alpha} < 1.")
    kinds = []
    for s, cert in zip(scores, certificates, strict=True):
        if s is None:
            kinds.append(())
            continue
        if not np.all(np.isfinite(s)):  # a test must decide every trial
            raise FloatingPointError("The audit statistic is not finite in some trials.")
        kinds.append(("epsilon",) if cert.mu is None else ("mu", "epsilon"))
    m = sum(len(k) for k in kinds)
    level = alpha / max(1, m)
    tests = []
    for s, cert, ks in zip(scores, certificates, kinds, strict=True):
        certified = {"mu": cert.mu, "epsilon": cert.epsilon}
        tests.append(
            {
                k: run_test(k, s, present, pick, certified=certified[k], delta=delta, level=level)
                for k in ks
            }
        )
    return Decision(tuple(tests), m, alpha)


def gaussian_statistic(mu: float, present: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws of the likelihood-ratio statistic of a view of GDP parameter ``mu``:
    N(−μ²/2, μ²) in world 0 and N(μ²/2, μ²) in world 1 (``present``)."""
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"Expected a finite mu={mu} >= 0.")
    present = np.asarray(present, dtype=bool)
    return mu * rng.standard_normal(present.size) + np.where(present, 0.5, -0.5) * mu * mu


@functools.lru_cache(maxsize=64)
def _typical(mu: float, ids: tuple[int, int], delta: float, level: float, reps: int) -> float:
    present, pick = layout(range(*ids))
    rng = np.random.default_rng(20260)  # fixed: the same reference in every report
    shown = [
        run_test(
            "epsilon",
            gaussian_statistic(mu, present, rng),
            present,
            pick,
            certified=math.inf,
            delta=delta,
            level=level,
        ).bound
        for _ in range(reps)
    ]
    return float(np.median(shown))


def typical_epsilon_lb(
    mu: float, trial_ids: range, *, delta: float, level: float, reps: int = 51
) -> float:
    """The median ε_lb of ``reps`` simulated audits of a mechanism exactly at GDP parameter
    ``mu`` (its statistic's law, this layout of trials, this δ and level; seeded). Sound
    audits show more about half the time: a reference, not a ceiling (that is
    :func:`edgedp_sim.audit_stats.most_shown`)."""
    if not math.isfinite(mu):
        return math.inf
    first = trial_ids.start % 4  # the layout repeats every 4 trials
    ids = (first, first + len(trial_ids))
    return _typical(float(mu), ids, float(delta), float(level), int(reps))
