"""The audit's report: per attacker the certificate, the verdict's bounds and tests, the
estimates, each ε named with its δ, adjacency and attacker (JSON-ready entries of
:func:`edgedp_sim.audit.run`).

Per attacker: ``mu`` and ``epsilon`` (at ``delta``; pure ε at δ = 0 for Laplace plans) of
the plan's accountant for that attacker (:func:`edgedp_sim.probing.formal_guarantee`);
``mu_lb`` / ``epsilon_lb`` and ``tests`` (:mod:`edgedp_sim.audit_verdict`: bounds at
confidence ``test_confidence`` = 1 − α/m, simultaneous over the m tests); ``epsilon_lb_max``
(:func:`edgedp_sim.audit_stats.most_shown`: ε_lb never exceeds it) and
``epsilon_lb_typical`` (:func:`edgedp_sim.audit_verdict.typical_epsilon_lb`); the estimates
``mu_hat`` [``mu_low``, ``mu_high``] (:func:`edgedp_sim.audit_stats.mu_fit`, at the stated
confidence) and ε(μ̂, δ); ``mu_view`` / ``epsilon_view``, the exact privacy loss of the view.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgedp.accounting import gdp
from edgedp_sim import audit_stats, audit_verdict, probing

__all__ = ["METHOD", "evaluate", "summary"]

METHOD = (
    "per attacker, threshold tests 'world 1 when S > tau': tau chosen on the trials with "
    "(i // 2) even, error rates counted on the others with one-sided Clopper-Pearson bounds "
    "(1 - level/2 each); mu_lb = Phi^-1(1 - FPR) - Phi^-1(FNR) (Gaussian trade-off, Gaussian "
    "plans), eps_lb = max(log((1 - delta - FNR)/FPR), log((1 - delta - FPR)/FNR)); level = "
    "alpha/m over the m tests (Bonferroni); mu_hat: Gaussian fit of the statistic over all "
    "trials, noncentral-t interval (an estimate)"
)


def evaluate(plan, attackers, views, scores, ids: range, *, confidence: float, delta: float):
    """Per-attacker entries and the family's verdict (:func:`edgedp_sim.audit_verdict.decide`)
    of the statistics ``scores`` of trials ``ids``, at ``delta`` (0: pure ε)."""
    present, pick = audit_verdict.layout(ids)
    alpha = 1.0 - confidence
    certs, entries = [], []
    for att in attackers:
        cert = probing.formal_guarantee(plan, att, delta=delta if delta > 0 else None)
        if delta == 0:  # pure ε (Laplace): the certificate has δ = 0
            cert["delta"] = 0.0
        mu = None if plan.laplace is not None else float(cert.get("mu", math.nan))
        certs.append((cert, audit_verdict.Certificate(mu=mu, epsilon=float(cert["epsilon"]))))
    try:
        decision = audit_verdict.decide(
            [s if view.informative else None for s, view in zip(scores, views, strict=True)],
            present,
            pick,
            certificates=[c for _, c in certs],
            alpha=alpha,
            delta=delta,
        )
    except FloatingPointError as exc:
        raise FloatingPointError(f"{plan.mechanism}: {exc}") from None
    level = decision.level
    held = (int(np.sum(~present & ~pick)), int(np.sum(present & ~pick)))  # (n0, n1)
    for att, view, s, (cert, c), tests in zip(
        attackers, views, scores, certs, decision.tests, strict=True
    ):
        entry = _entry(att, view, s, present, cert, c, tests, decision, delta=delta, held=held)
        entry.update(confidence=confidence, test_confidence=1.0 - level)
        if c.mu is not None and tests:
            entry["epsilon_lb_typical"] = audit_verdict.typical_epsilon_lb(
                c.mu, ids, delta=delta, level=level
            )
        entries.append(entry)
    verdict = {
        "violation": decision.violation,
        "tests": decision.tests_in_family,
        "correction": decision.correction,
        "confidence": confidence,
        "test_confidence": 1.0 - level,
        "flagged": [
            f"{e['attacker']}: {kind}"
            for e, tests in zip(entries, decision.tests, strict=True)
            for kind, t in tests.items()
            if t.rejected
        ],
    }
    return entries, verdict


def _entry(att, view, s, present, cert, c, tests, decision, *, delta, held) -> dict[str, Any]:
    eps_test = tests.get("epsilon")
    level = decision.level
    eps = c.epsilon
    lb = eps_test.bound if eps_test else 0.0
    entry: dict[str, Any] = {
        "attacker": att.label,
        "test": view.method,
        "epsilon": eps,
        "delta": cert["delta"],
        "adjacency": cert["adjacency"],
        "guarantee": cert["guarantee"],
        "covers_attacker": cert.get("covers_attacker"),
        "epsilon_lb": lb,
        "epsilon_lb_max": audit_stats.most_shown(
            *held,
            alpha=level,
            bound=lambda a, b: audit_stats.epsilon_bound(a, b, delta),
        ),
        "ratio": lb / eps if eps > 0 and math.isfinite(eps) else None,
        "n_trials": int(len(s)),
        "tests": {k: t.to_dict(decision.tests_in_family) for k, t in tests.items()},
        "violation": any(t.rejected for t in tests.values()),
    }
    if eps_test:
        entry.update(
            threshold=eps_test.threshold,
            false_positives=eps_test.false_positives,
            false_negatives=eps_test.false_negatives,
            heldout_negatives=eps_test.negatives,
            heldout_positives=eps_test.positives,
            fpr_upper=eps_test.fpr_upper,
            fnr_upper=eps_test.fnr_upper,
        )
    if c.mu is None:
        entry.update(epsilon_view=view.epsilon_view)
        return entry
    fit = audit_stats.mu_fit(s, present, confidence=1.0 - decision.alpha)
    mu_test = tests.get("mu")
    mu_lb = mu_test.bound if mu_test else 0.0
    entry.update(
        mu=c.mu,
        mu_lb=mu_lb,
        mu_hat=fit.mu,
        mu_low=fit.low,
        mu_high=fit.high,
        mu_ratio=fit.mu / c.mu if c.mu > 0 else None,
        epsilon_mu=_eps(fit.mu, delta),
        epsilon_mu_low=_eps(fit.low, delta),
        mu_view=view.mu_view,
    )
    return entry


def summary(entry: dict[str, Any]) -> str:
    """One progress line per attacker."""
    line = f"{entry['attacker']}: epsilon_lb {entry['epsilon_lb']:.3f} vs certified "
    line += f"{entry['epsilon']:.3f} (delta {entry['delta']:g})"
    if entry.get("mu") is not None:
        line += f"; mu_lb {entry['mu_lb']:.3f} vs certified {entry['mu']:.3f}"
    return line + (" VIOLATION" if entry["violation"] else "")


def _eps(mu: float, delta: float) -> float:
    if not mu > 0:
        return 0.0
    return gdp.epsilon(mu, delta=delta) if math.isfinite(mu) else math.inf
