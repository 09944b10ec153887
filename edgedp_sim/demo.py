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
(:mod:`edgedp_sim.demo_report`). Every ε printed comes from a plan's accountant at the plan's
δ, against each attacker of :data:`ATTACKER_CLASSES` (Whisper's only against the eavesdropper).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from edgedp import _validate, step_size
from edgedp import plan as plan_mod
from edgedp_sim import datasets, training_check

__all__ = ["MECHANISMS", "QUICK", "DemoConfig", "make_plans", "run_demo"]


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """The embedded default of ``make demo`` (seeded: the run is reproducible)."""

    # --- the training run ---
    topology: str = "smallworld:100:6:0.1:7"  # Watts–Strogatz, 100 nodes, degree 6
    dataset: str = "digits-parity"
    batch_size: int = 3  # 14 examples per node: 4 batches per epoch
    steps: int = 60
    trials: int = 3  # noise seeds per mechanism
    target_epsilon: float = 4.0
    delta: float = 1e-6
    clip_norm: float = 1.0
    #: None: each private plan at its own step size from the planner's noise-budget rule
    #: (edgedp.planning.step_rule; D-SGD the noiseless default); a number: one shared step size
    learning_rate: float | None = None
    sketch_dim: int = 16  # DOME: floats per message (the model has 65)
    seed: int = 2026  # plans, data split; noise draw i is the plan's trial i
    eval_every: int = 5
    # --- the simulated network (event engine) ---
    latency_median_ms: float = 20.0
    latency_sigma: float = 0.5
    bandwidth_mbps: float = 50.0
    loss: float = 0.01
    dropout: float = 0.05
    round_timeout_s: float = 0.5
    network_seed: int = 11
    # --- adversary probes: the same mechanisms at the same guarantee on a smaller graph ---
    leak_topology: str = "smallworld:16:4:0.1:7"
    leak_steps: int = 20
    leak_batch_size: int = 22  # 89 examples per node: 4 batches per epoch
    leak_trials: int = 200
    audit_trials: int = 200  # 0: no audit
    # --- real agent processes ---
    agents_topology: str = "ring:6"
    agents_steps: int = 20
    agents_mechanism: str = "mafalda"
    workers: int = 2

    def __post_init__(self) -> None:
        _validate.integer(
            minimum=1,
            steps=self.steps,
            trials=self.trials,
            leak_steps=self.leak_steps,
            agents_steps=self.agents_steps,
            workers=self.workers,
            eval_every=self.eval_every,
        )
        if self.leak_trials < 8:
            raise ValueError(f"Expected leak_trials={self.leak_trials} >= 8.")
        if self.audit_trials and self.audit_trials < 8:
            raise ValueError(f"Expected audit_trials={self.audit_trials} = 0 or >= 8.")
        _validate.positive(target_epsilon=self.target_epsilon, delta=self.delta)


#: A small setting for tests (seconds, not minutes); ``edgedp demo --quick``.
QUICK = DemoConfig(
    topology="smallworld:20:4:0.1:7",
    steps=8,
    trials=2,
    eval_every=2,
    leak_topology="ring:6",
    leak_steps=6,
    leak_batch_size=60,  # 239 examples per node: 4 batches per epoch
    leak_trials=24,
    audit_trials=16,
    agents_topology="ring:4",
    agents_steps=6,
)

#: (label, mechanism) in table order; the first is the reference without noise.
MECHANISMS = (
    ("D-SGD (no noise)", "dsgd"),
    ("DP-D-SGD", "dp-dsgd"),
    ("MAFALDA", "mafalda"),
    ("Whisper", "whisper"),
    ("DOME", "dome"),
)
#: Who every results row states an ε against: (trust_report key, column, in words).
ATTACKER_CLASSES = (
    ("eavesdropper", "tap", "an eavesdropper on every link"),
    ("insider", "1 nbr", "one curious neighbour with its pairwise secrets and any shared seed"),
    ("neighbourhood", "nbhd", "the victim's whole neighbourhood colluding"),
)
#: Attackers of the leakage table: a curious neighbour pair of the victim (filled in per
#: graph), every link tapped, every link tapped but CURVE-encrypted.
VICTIM = 0


def _task(config: DemoConfig, batch_size: int) -> plan_mod.TaskSpec:
    return plan_mod.TaskSpec(
        model="logistic", dataset=config.dataset, partition="iid", batch_size=batch_size
    )


def make_plans(
    config: DemoConfig,
    *,
    topology: str | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    mechanisms: tuple[str, ...] = tuple(m for _, m in MECHANISMS),
    dropout: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Plan ``mechanisms`` at ``config.target_epsilon`` with the planners ``edgedp plan`` uses;
    without ``config.learning_rate``, each private plan takes the noise-budget rule's step
    size for nodes sitting out rounds with probability ``dropout``.

    Returns ``{mechanism: {"plan": NoisePlan, "predicted": ratio or None, "predicted_kind":
    str, "planner_seconds": float}}``.
    """
    import edgedp_topologies
    from edgedp import topology as topo_mod
    from edgedp.accounting import dome as dome_acc
    from edgedp.planning import cross_agent, factorization, step_rule
    from edgedp.sketch import SketchSpec

    spec = topology or config.topology
    steps = steps or config.steps
    graph = edgedp_topologies.parse(spec)
    task = _task(config, config.batch_size if batch_size is None else batch_size)
    part = datasets.task_participation(task, nodes=graph.n, steps=steps)
    shared = config.learning_rate
    common = dict(
        steps=steps,
        participation=part,
        clip_norm=config.clip_norm,
        learning_rate=step_rule.MAX_STEP if shared is None else shared,
        task=task,
        seed=config.seed,
        topology_name=spec,
    )
    private = dict(target_epsilon=config.target_epsilon, delta=config.delta)
    W = topo_mod.WEIGHTINGS["metropolis-hastings"](graph)  # noqa: N806
    dim = 1 + datasets.load(config.dataset, seed=0).x_train.shape[1]  # logistic: f + bias
    out: dict[str, dict[str, Any]] = {}
    for mech in mechanisms:
        started = time.perf_counter()
        predicted, kind = None, ""
        if mech == "dsgd":
            p = plan_mod.make_plan("dsgd", graph, **common)
        elif mech == "dp-dsgd":
            p = plan_mod.make_plan("dp-dsgd", graph, **common, **private)
            predicted, kind = 1.0, "reference"
        elif mech == "mafalda":
            planned = factorization.plan_factor("mafalda", W, steps=steps, participation=part)
            p = plan_mod.make_plan("mafalda", graph, factor=planned.factor, **common, **private)
            predicted = factorization.relative_loss(
                p.factor.strategy(steps), p.mixing_matrix(), participation=part
            )
            kind = "noise in the gossip average (factorization loss)"
        elif mech == "whisper":
            p = cross_agent.plan_cross_agent("whisper", graph, **common, **private).plan
            rep = cross_agent.report(p, delta=config.delta)
            predicted = rep["post_mixing_variance"] / rep["ldp_post_mixing_variance"]
            kind = "post-mixing noise variance"
        elif mech == "dome":
            sketch = SketchSpec(dim=config.sketch_dim)
            p = plan_mod.make_plan("dome", graph, sketch=sketch, **common, **private)
            predicted = dome_acc.noise_energy(p, model_dim=dim)["ratio"]
            kind = "noise energy per step (k of d floats)"
        else:
            raise ValueError(f"The demo has no mechanism {mech!r}.")
        if shared is None:  # the planner's default (edgedp.planning.build)
            local = datasets.local_size(config.dataset, graph.n)
            p = step_rule.apply(p, dim=dim, local_size=local, dropout=dropout)
        out[mech] = {
            "plan": p,
            "predicted": predicted,
            "predicted_kind": kind,
            "planner_seconds": time.perf_counter() - started,
        }
    return out


def describe(p: plan_mod.NoisePlan, delta: float | None = None) -> dict[str, Any]:
    """Certified guarantee and trust model of a plan (its accountant's numbers only): ε at
    ``delta`` (default the plan's) against the plan's own attacker (``attacker``) and
    against each of :data:`ATTACKER_CLASSES` (``epsilon_by_attacker``)."""
    from edgedp import mechanisms

    delta = p.delta if delta is None else delta
    mech = mechanisms.get(p.mechanism)
    out: dict[str, Any] = {
        "mechanism": p.mechanism,
        "plan_hash": p.plan_hash,
        "trust_model": mech.trust_model,
        "attacker": mech.attacker,
        "adjacency": p.adjacency,
        "participation": [p.participation.k, p.participation.b],
        "noise_multiplier": p.noise_multiplier,
        "noise_std": p.noise_std,
        "delta": delta,
        "learning_rate": p.learning_rate,
        "step_size": step_size.line(p.learning_rate, p.step_size, private=p.private),
    }
    classes = [c for c, _, _ in ATTACKER_CLASSES]
    if not p.private:
        out.update(mu=math.inf, epsilon=math.inf)
        out["epsilon_by_attacker"] = dict.fromkeys(classes, math.inf)
        return out
    g = p.guarantee()
    eps = g.epsilon(delta)
    out.update(mu=g.mu, epsilon=eps, sensitivity_exact=bool(g.exact))
    by = dict.fromkeys(classes, eps)  # node-private noise: every attacker (LDP)
    if p.cross_agent is not None and mechanisms.get(p.cross_agent.kind).correlated:
        from edgedp.accounting import cross_agent as cross_acc

        by = cross_acc.trust_report(p, delta=delta)
    out["epsilon_by_attacker"] = {c: by[c] for c in classes}
    return out


# ------------------------------------------------------------------ the whole demo
def _attackers(topology: str) -> list[str]:
    import edgedp_topologies

    pair = sorted(edgedp_topologies.parse(topology).neighbours(VICTIM))[:2]
    return [f"hbc:{pair[0]},{pair[1]}", "eavesdropper:all", "eavesdropper:all:encrypted"]


def _summarize(config, infos, events, leaks, agents, timings) -> dict[str, Any]:
    rows, curves = [], {}
    plan_dim = 1 + datasets.load(config.dataset, seed=0).x_train.shape[1]  # logistic
    local = datasets.local_size(config.dataset, infos["dsgd"]["plan"].n)
    for label, mech in MECHANISMS:
        runs = sorted(events[mech], key=lambda r: r["trial"])
        loss = np.array([r["test_loss"] for r in runs])
        acc = np.array([r["test_accuracy"] for r in runs])
        d = describe(infos[mech]["plan"], config.delta)
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
    for label, mech in MECHANISMS:
        rep = leaks[mech]
        for e in rep["attackers"]:
            leak_rows.append({"algorithm": label, "mechanism": mech, **e})
    return {
        "config": dataclasses.asdict(config),
        "nodes": graph_n,
        "local_examples": datasets.local_size(config.dataset, graph_n),
        "participation": rows[1]["participation"],
        "comparison_protocol": training_check.comparison_protocol(
            [training_check.step_size_entry(infos[m]["plan"]) for _, m in MECHANISMS]
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


def run_demo(
    out_dir: str | Path,
    config: DemoConfig = DemoConfig(),
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
    infos = make_plans(config, dropout=config.dropout)
    for label, mech in MECHANISMS:
        d = describe(infos[mech]["plan"], config.delta)
        ratio = infos[mech]["predicted"]
        by = "/".join(_num(v) for v in d["epsilon_by_attacker"].values())
        say(
            f"  {label:<17} epsilon {by} (tap/1 nbr/nbhd)  predicted noise vs DP-D-SGD "
            f"{'-' if ratio is None else f'{ratio:.3f}'}  step size {d['learning_rate']:g}"
        )
    say(
        "  "
        + training_check.comparison_protocol(
            [training_check.step_size_entry(infos[m]["plan"]) for _, m in MECHANISMS]
        )
    )
    leak_infos = make_plans(
        config,
        topology=config.leak_topology,
        steps=config.leak_steps,
        batch_size=config.leak_batch_size,
    )
    timings = {"planning_seconds": time.perf_counter() - started}
    attackers = _attackers(config.leak_topology)
    events: dict[str, list] = {m: [] for _, m in MECHANISMS}
    worker_cpu = 0.0
    leaks: dict[str, dict] = {}
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=config.workers, mp_context=ctx) as pool:
        jobs = {}
        for _, mech in MECHANISMS:
            blob = infos[mech]["plan"].to_bytes()
            for trial in range(config.trials):
                jobs[pool.submit(demo_jobs.event_job, blob, config, trial)] = ("event", mech, trial)
        for _, mech in MECHANISMS:  # D-SGD too: the same probes without noise (the scale)
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
