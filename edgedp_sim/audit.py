"""Empirical privacy auditing: a statistically valid lower bound on ε, beside the certified ε.

:func:`run` (behind ``edgedp audit``) runs N trials of a scenario, trial i in world
i mod 2 — canary absent (0) or present (1), the two neighbouring inputs of the plan's
certified adjacency (:mod:`edgedp_sim.canary`) — with one :class:`~edgedp_sim.adversary.Probe` per
attacker, computes each attacker's test statistic (:mod:`edgedp_sim.audit_view`: the
Neyman–Pearson likelihood ratio its view allows) and turns the statistic into

* ``epsilon_lb``: a lower bound on ε at the plan's δ holding with the stated confidence —
  the threshold is chosen on the trials with (i // 2) mod 2 = 0 and the error rates are
  counted on the others, with one-sided Clopper–Pearson bounds (:mod:`edgedp_sim.audit_stats`);
* ``mu_hat`` with its interval (Gaussian mechanisms): the GDP parameter fitted to the two
  distributions of the statistic, and ``epsilon_mu`` = ε(μ̂, δ);
* ``mu_view`` (Gaussian) / ``epsilon_view`` (Laplace, full view): the exact privacy loss of
  the attacker's view with this canary, from the linear view — what μ̂ / ε_lb estimate,
  and never more than the certificate when the accountant is right;

beside the certified ε (and μ) of the plan's accountant for that attacker
(:func:`edgedp_sim.leak.formal_guarantee`) and the ratios ε_lb/ε, μ̂/μ. A certificate that is too
small shows as ``epsilon_lb > epsilon``, a violation at the stated confidence.

Trials run on the batch engine in chunks, or on the event engine one at a time (a fresh
plan seed each, as :mod:`edgedp_sim.leak`) when the scenario has latency, loss or faults; there
the attacker's model of the mechanism is the ideal network's and unseen messages count as
their expected value — a valid test, weaker when the network changes what is mixed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgedp import models, runtime
from edgedp.accounting import gdp
from edgedp_sim import adversary, audit_stats, audit_view, batch, engine, leak, linear_view
from edgedp_sim import canary as canary_mod
from edgedp_sim.adversary import Attacker

__all__ = ["run"]


def world(trial: int) -> bool:
    """Trial i runs with the canary present iff i is odd."""
    return trial % 2 == 1


def selection(trial: int) -> bool:
    """Trial i selects the threshold iff (i // 2) is even; the others evaluate it."""
    return (trial // 2) % 2 == 0


def run(
    sc,
    attackers: Sequence[Attacker],
    *,
    trials: int,
    victim: int = 0,
    canary: str = "gradient",
    background: str | None = None,
    confidence: float = 0.95,
    delta: float | None = None,
    engine_name: str = "auto",
    chunk: int = 1000,
    progress: Callable[[str], None] | None = None,
    data: Any = None,
    keep_scores: bool = False,
) -> dict[str, Any]:
    """Audit ``sc``'s plan against each attacker (module docstring); a JSON-ready report.

    Args:
      sc: a :class:`~edgedp_sim.scenarios.Scenario` (``scenarios.from_plan`` for a bare plan).
      attackers: who attacks (:func:`edgedp_sim.adversary.parse_attacker`).
      trials: N ≥ 8 (half of them per world; half of each world selects the threshold).
      victim: the node holding the canary.
      canary: ``"gradient"`` (white-box) or ``"example"`` (black-box, crafted input).
      background: ``"zero"`` or ``"data"`` (:mod:`edgedp_sim.canary`; default by canary kind).
      confidence: 1 − α of ε_lb and of the μ interval.
      delta: δ of the certified (ε, δ) and of ε_lb, in (0, 1); default the plan's δ
        (ignored for pure-ε Laplace plans: 0).
      engine_name: ``"auto"``, ``"batch"`` or ``"event"``.
      chunk: trials per batch-engine call (memory).
      progress: called with a line of text now and then.
      data: the engines' data instead of ``sc.data()``.
      keep_scores: also return each attacker's statistic and worlds (``scores``, not JSON).
    """
    plan = sc.plan
    if trials < 8:
        raise ValueError(f"Expected trials={trials} >= 8 (both worlds in both halves).")
    if not 0 < confidence < 1:
        raise ValueError(f"Expected confidence={confidence} in (0, 1).")
    if not plan.private:
        raise ValueError("The plan adds no noise: there is no finite epsilon to audit.")
    if engine_name == "auto":
        engine_name = "event" if leak.has_network_effects(sc) else "batch"
    if engine_name == "batch" and leak.has_network_effects(sc):
        raise ValueError("The scenario has network effects; the batch engine cannot run them.")
    if engine_name not in ("batch", "event"):
        raise ValueError(f"Unknown engine {engine_name!r}; expected auto, batch or event.")
    delta = plan.delta if delta is None else delta
    if not 0 < delta < 1:
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    delta = 0.0 if plan.laplace is not None else float(delta)
    data = sc.data() if data is None else data
    model = models.for_task(plan.task, data.features)
    d = model.dim
    theta0 = np.asarray(model.init_params(), dtype=np.float64)
    can = canary_mod.for_plan(
        plan,
        victim=victim,
        local_size=data.local_size,
        dim=d,
        kind=canary,
        background=background,
        model=model,
        data=data,
    )
    started = time.perf_counter()
    tr = linear_view.trace(plan, batch_size=can.batch_size, dim=d, theta0=theta0)
    src = linear_view.sources(plan, slots=tr.slots)
    views = [
        audit_view.build(attacker=a, plan=plan, tr=tr, src=src, canary=can, theta0=theta0)
        for a in attackers
    ]
    view_seconds = time.perf_counter() - started
    scores = [np.empty(trials) for _ in attackers]
    sim_seconds = stat_seconds = 0.0
    common = dict(plan=plan, canary=can, model=model, src=src)
    if engine_name == "batch":
        keys = runtime.simulation_keys(plan)
        done = 0
        while done < trials:
            count = min(chunk, trials - done)
            ids = range(done, done + count)
            present = np.array([world(i) for i in ids])
            positions = np.array([can.position(keys, i, data.local_size) for i in ids])
            probes = [adversary.Probe(a, plan, trials=count, dim=d) for a in attackers]
            t0 = time.perf_counter()
            batch.run(
                plan,
                data,
                trials=count,
                first_trial=done,
                eval_every=plan.steps,
                observers=probes,
                gradient_transform=can.batch_transform(model, present, positions),
            )
            t1 = time.perf_counter()
            for i, (view, probe) in enumerate(zip(views, probes, strict=True)):
                scores[i][done : done + count] = audit_view.statistic(
                    view, probe.log, keys=[(keys, j) for j in ids], **common
                )
            sim_seconds += t1 - t0
            stat_seconds += time.perf_counter() - t1
            done += count
            if progress is not None:
                progress(f"simulated {done}/{trials} trials (batch engine)")
    else:
        keys = runtime.simulation_keys(plan)
        for i in range(trials):
            position = can.position(keys, i, data.local_size)
            probes = [adversary.Probe(a, plan, trials=1, dim=d) for a in attackers]
            t0 = time.perf_counter()
            engine.run(
                plan,
                data,
                trial=i,
                network=sc.network,
                faults=sc.faults,
                seed=sc.seed + i,
                eval_every=plan.steps,
                observers=probes,
                gradient_transforms={victim: can.node_transform(model, world(i), position)},
            )
            t1 = time.perf_counter()
            for j, (view, probe) in enumerate(zip(views, probes, strict=True)):
                scores[j][i] = audit_view.statistic(view, probe.log, keys=[(keys, i)], **common)[0]
            sim_seconds += t1 - t0
            stat_seconds += time.perf_counter() - t1
            if progress is not None and ((i + 1) % max(1, trials // 20) == 0 or i + 1 == trials):
                progress(f"simulated {i + 1}/{trials} trials (event engine)")
    present = np.array([world(i) for i in range(trials)])
    pick = np.array([selection(i) for i in range(trials)])
    results = []
    for att, view, s in zip(attackers, views, scores, strict=True):
        entry = _evaluate(plan, att, view, s, present, pick, confidence=confidence, delta=delta)
        if keep_scores:
            entry["scores"] = s
            entry["present"] = present
        results.append(entry)
        if progress is not None:
            progress(
                f"{att.label}: epsilon_lb {entry['epsilon_lb']:.3f} vs certified "
                f"{entry['epsilon']:.3f}"
            )
    total = time.perf_counter() - started
    return {
        "scenario": sc.name,
        "mechanism": plan.mechanism,
        "adjacency": plan.adjacency,
        "engine": engine_name,
        "victim": victim,
        "canary": can.kind,
        "background": can.background,
        "canary_rounds": list(can.steps),
        "batch_size": can.batch_size,
        "n_trials": trials,
        "confidence": confidence,
        "delta": delta,
        "seconds": round(total, 3),
        "simulation_seconds": round(sim_seconds, 3),
        "statistic_seconds": round(stat_seconds + view_seconds, 3),
        "trials_per_second": trials / total if total > 0 else None,
        "method": (
            "threshold on half the trials ((i // 2) even), error counts on the other half, "
            "one-sided Clopper-Pearson bounds at 1 - alpha/2 each (union bound), "
            "eps_lb = max(log((1 - delta - FNR)/FPR), log((1 - delta - FPR)/FNR)); "
            "mu: Gaussian fit of the statistic over all trials, noncentral-t interval"
        ),
        "attackers": results,
    }


def _evaluate(plan, att, view, s, present, pick, *, confidence, delta) -> dict[str, Any]:
    if not np.all(np.isfinite(s)):  # a test must decide every trial
        raise FloatingPointError(f"{att.label}: the audit statistic is not finite in some trials.")
    alpha = 1.0 - confidence
    cert = leak.formal_guarantee(plan, att, delta=delta if delta > 0 else None)
    eps = float(cert["epsilon"])
    if delta == 0:  # pure ε (Laplace): the certificate has δ = 0
        cert["delta"] = 0.0
    th = audit_stats.choose_threshold(s[pick], present[pick], delta=delta, alpha=alpha)
    held, yh = s[~pick], present[~pick]
    fp = int(np.sum(held[~yh] > th.tau))
    fn = int(np.sum(held[yh] <= th.tau))
    n0, n1 = int((~yh).sum()), int(yh.sum())
    lb, fpr, fnr = audit_stats.epsilon_lower_bound(fp, n0, fn, n1, delta=delta, alpha=alpha)
    entry: dict[str, Any] = {
        "attacker": att.label,
        "test": view.method,
        "epsilon": eps,
        "delta": cert["delta"],
        "adjacency": plan.adjacency,
        "guarantee": cert["guarantee"],
        "covers_attacker": cert.get("covers_attacker"),
        "epsilon_lb": lb,
        "confidence": confidence,
        "ratio": lb / eps if eps > 0 and math.isfinite(eps) else None,
        "threshold": th.tau,
        "false_positives": fp,
        "false_negatives": fn,
        "heldout_negatives": n0,
        "heldout_positives": n1,
        "fpr_upper": fpr,
        "fnr_upper": fnr,
        "n_trials": int(len(s)),
        "violation": bool(lb > eps),
    }
    if plan.laplace is None:
        mu_cert = float(cert.get("mu", math.nan))
        fit = audit_stats.mu_fit(s, present, confidence=confidence)
        entry.update(
            mu=mu_cert,
            mu_hat=fit.mu,
            mu_low=fit.low,
            mu_high=fit.high,
            mu_ratio=fit.mu / mu_cert if mu_cert > 0 else None,
            epsilon_mu=_eps(fit.mu, delta),
            epsilon_mu_low=_eps(fit.low, delta),
            mu_view=view.mu_view,
            # what a perfect test of the certified μ could show with these trials
            epsilon_lb_ceiling=audit_stats.gdp_ceiling(mu_cert, n0, n1, delta=delta, alpha=alpha),
        )
    else:
        entry.update(epsilon_view=view.epsilon_view)
    return entry


def _eps(mu: float, delta: float) -> float:
    if not mu > 0:
        return 0.0
    return gdp.epsilon(mu, delta=delta) if math.isfinite(mu) else math.inf
