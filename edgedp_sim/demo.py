"""The demo: a private network end to end, at one common guarantee.

Four private mechanisms — DP-D-SGD, MAFALDA (temporal correlation optimised for the
topology), Whisper (noise correlated across agents) and DOME (sketched messages) — are
planned by the planners behind ``edgedp plan`` at the same certified ε at δ (zero-out
adjacency), with D-SGD without noise as the reference, for logistic regression on the
bundled 8×8 digits (label: the digit is odd) split IID over a 100-node small-world graph.
Then:

1. each plan runs in the SimPy event engine over a lossy network (lognormal latency, message
   loss, per-round dropouts), once per noise seed, the runs spread over worker processes;
2. one plan runs on real ``edgedp-agent`` processes over CURVE-encrypted ZeroMQ on
   127.0.0.1, and their model digest is compared with the event engine's on an ideal
   network (public-seed noise, as ``edgedp local-run``);
3. adversary probes (:mod:`edgedp_sim.leak`, with the audit of :mod:`edgedp_sim.audit`
   beside them) attack every private mechanism, re-planned at the same guarantee on a
   16-node graph — and D-SGD without noise, which gives M-NMI its scale: M-NMI needs
   hundreds of Monte Carlo trials, which the 100-node network does not fit in the demo's
   time.

:func:`run_demo` writes ``results.json``, the PNG plots and ``report.html``
(:mod:`edgedp_sim.demo_report`); the setting, the plans and the attackers are
:mod:`edgedp_sim.demo_plans`. Every ε printed comes from a plan's accountant at the plan's
δ, against each attacker of :data:`edgedp_sim.demo_plans.ATTACKER_CLASSES` (Whisper's only
against the eavesdropper).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from edgedp_sim import datasets, demo_plans, training_check
from edgedp_sim.demo_plans import VICTIM, DemoConfig

__all__ = ["run_demo"]


def _summarize(config, infos, events, leaks, agents, timings) -> dict[str, Any]:
    rows, curves = [], {}
    plan_dim = 1 + datasets.load(config.dataset, seed=0).x_train.shape[1]  # logistic
    local = datasets.local_size(config.dataset, infos["dsgd"]["plan"].n)
    for label, mech in demo_plans.MECHANISMS:
        runs = sorted(events[mech], key=lambda r: r["trial"])
        loss = np.array([r["test_loss"] for r in runs])
        acc = np.array([r["test_accuracy"] for r in runs])
        d = demo_plans.describe(infos[mech]["plan"], config.delta)
        plan = infos[mech]["plan"]
        warning = training_check.worse_than_start(
            plan,
            float(loss[:, 0].mean()),
            float(loss[:, -1].mean()),
            dim=plan_dim,
            local_size=local,
            worse_trials=int(np.sum(loss[:, -1] > loss[:, 0])),
            trials=len(runs),
            skipped_rounds=runs[0]["skipped_rounds"],
            dropout=config.dropout,
        )
        rows.append(
            {
                "algorithm": label,
                **d,
                "warnings": [] if warning is None else [warning],
                "predicted_noise_ratio": infos[mech]["predicted"],
                "predicted_kind": infos[mech]["predicted_kind"],
                "final_test_loss": float(loss[:, -1].mean()),
                "final_test_loss_std": float(loss[:, -1].std()),
                "final_test_accuracy": float(acc[:, -1].mean()),
                "final_test_accuracy_std": float(acc[:, -1].std()),
                "bytes": runs[0]["bytes"],
                "bytes_per_round": runs[0]["bytes"] / config.steps,
                "messages": runs[0]["messages"],
                "lost_messages": runs[0]["lost_messages"],
                "dropped_messages": runs[0]["dropped_messages"],
                "simulated_seconds": runs[0]["simulated_seconds"],
                "model_digests": [r["model_digest"] for r in runs],
            }
        )
        curves[mech] = {
            "rounds": runs[0]["rounds"],
            "test_loss_mean": loss.mean(axis=0).tolist(),
            "test_loss_std": loss.std(axis=0).tolist(),
        }
    graph_n = infos["dsgd"]["plan"].n
    leak_rows = []
    for label, mech in demo_plans.MECHANISMS:
        rep = leaks[mech]
        for e in rep["attackers"]:
            leak_rows.append({"algorithm": label, "mechanism": mech, **e})
    return {
        "config": dataclasses.asdict(config),
        "nodes": graph_n,
        "local_examples": datasets.local_size(config.dataset, graph_n),
        "participation": rows[1]["participation"],
        "comparison_protocol": training_check.comparison_protocol(
            [training_check.step_size_entry(infos[m]["plan"]) for _, m in demo_plans.MECHANISMS]
        ),
        "results": rows,
        "curves": curves,
        "leakage": {
            "topology": config.leak_topology,
            "steps": config.leak_steps,
            "victim": VICTIM,
            "coordinate": leaks["dp-dsgd"]["coordinate"],
            "trials": config.leak_trials,
            "audit_trials": config.audit_trials,
            "delta": config.delta,
            "rows": leak_rows,
        },
        "agents": agents,
        "timings": timings,
    }


#: The embedded default setting (``edgedp demo`` without --quick).
DEFAULT = DemoConfig()


def run_demo(
    out_dir: str | Path,
    config: DemoConfig = DEFAULT,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Plan, simulate, deploy, probe; write the report. Returns the summary (JSON-ready)."""
    from edgedp_sim import demo_jobs, demo_report

    say = progress or (lambda line: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    say(
        f"planning 5 mechanisms at epsilon = {config.target_epsilon:g}, delta = "
        f"{config.delta:g} against an eavesdropper on every link, on {config.topology} ..."
    )
    infos = demo_plans.make_plans(config, dropout=config.dropout)
    for label, mech in demo_plans.MECHANISMS:
        d = demo_plans.describe(infos[mech]["plan"], config.delta)
        ratio = infos[mech]["predicted"]
        by = "/".join(_num(v) for v in d["epsilon_by_attacker"].values())
        say(
            f"  {label:<17} epsilon {by} (tap/1 nbr/nbhd)  predicted noise vs DP-D-SGD "
            f"{'-' if ratio is None else f'{ratio:.3f}'}  step size {d['learning_rate']:g}"
        )
    say(
        "  "
        + training_check.comparison_protocol(
            [training_check.step_size_entry(infos[m]["plan"]) for _, m in demo_plans.MECHANISMS]
        )
    )
    leak_infos = demo_plans.make_plans(
        config,
        topology=config.leak_topology,
        steps=config.leak_steps,
        batch_size=config.leak_batch_size,
    )
    timings = {"planning_seconds": time.perf_counter() - started}
    attackers = demo_plans.attackers(config.leak_topology)
    events: dict[str, list] = {m: [] for _, m in demo_plans.MECHANISMS}
    worker_cpu = 0.0
    leaks: dict[str, dict] = {}
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=config.workers, mp_context=ctx) as pool:
        jobs = {}
        for _, mech in demo_plans.MECHANISMS:
            blob = infos[mech]["plan"].to_bytes()
            for trial in range(config.trials):
                jobs[pool.submit(demo_jobs.event_job, blob, config, trial)] = ("event", mech, trial)
        # D-SGD too: the same probes without noise (the scale)
        for _, mech in demo_plans.MECHANISMS:
            audit = 0 if mech in ("dome", "dsgd") else config.audit_trials
            blob = leak_infos[mech]["plan"].to_bytes()
            fut = pool.submit(demo_jobs.leak_job, blob, attackers, config.leak_trials, audit)
            jobs[fut] = ("leak", mech, 0)
        say(
            f"running {len(jobs)} jobs on {config.workers} worker processes; meanwhile "
            f"{config.agents_mechanism} on real agents ({config.agents_topology}) ..."
        )
        with tempfile.TemporaryDirectory(prefix="edgedp-demo-") as tmp:
            agents = demo_jobs.agents_job(config, Path(tmp))
        say(
            f"  real agents: {agents['agents']} edgedp-agent processes, {agents['steps']} "
            f"rounds, digest {agents['real_digest'][:16]} "
            f"{'==' if agents['equal'] else '!='} simulated {agents['simulated_digest'][:16]}"
        )
        for i, fut in enumerate(as_completed(jobs), start=1):
            kind, mech, trial = jobs[fut]
            res = fut.result()
            worker_cpu += res["cpu_seconds"]
            if kind == "event":
                events[mech].append(res)
                say(
                    f"  [{i}/{len(jobs)}] event engine {mech} seed {trial}: test loss "
                    f"{res['test_loss'][-1]:.4f} ({res['wall_seconds']:.1f} s)"
                )
            else:
                leaks[mech] = res
                say(f"  [{i}/{len(jobs)}] leakage probes {mech} ({res['wall_seconds']:.1f} s)")
    timings["total_seconds"] = time.perf_counter() - started
    timings["worker_cpu_seconds"] = worker_cpu
    summary = _summarize(config, infos, events, leaks, agents, timings)
    summary["files"] = demo_report.write(out, summary)
    return summary


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"
