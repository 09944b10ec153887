"""The demo's jobs, each a plain function of picklable arguments run in a worker process.

:func:`event_job` runs one noise seed of a plan in the event engine over the demo's lossy
network; :func:`leak_job` probes one plan; :func:`agents_job` runs one plan on real agent
processes and on the event engine (ideal network) and compares their model digests.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from edgedp import plan as plan_mod
from edgedp_sim import datasets
from edgedp_sim.demo_plans import VICTIM, DemoConfig, describe, make_plans

__all__ = ["agents_job", "event_job", "leak_job"]


def _data(dataset: str, n: int, seed: int) -> datasets.FederatedData:
    return datasets.partition(datasets.load(dataset, seed=seed), n, seed=seed)


def _network(config: DemoConfig):
    from edgedp_sim.churn import Faults
    from edgedp_sim.links import Latency, Network

    latency = Latency(
        "lognormal", {"median_ms": config.latency_median_ms, "sigma": config.latency_sigma}
    )
    network = Network(
        latency=latency,
        bandwidth_mbps=config.bandwidth_mbps,
        loss=config.loss,
        round_timeout_s=config.round_timeout_s,
        startup_timeout_s=4 * config.round_timeout_s,
        compute_s=0.005,
    )
    return network, Faults(dropout=config.dropout, dropout_rule="renormalize")


def event_job(plan_bytes: bytes, config: DemoConfig, trial: int) -> dict[str, Any]:
    """Noise seed ``trial`` of a plan in the event engine over the demo's network."""
    from edgedp_sim import engine

    base = plan_mod.NoisePlan.from_bytes(plan_bytes)
    data = _data(config.dataset, base.n, base.seed)  # the same split for every noise seed
    network, faults = _network(config)
    started, cpu = time.perf_counter(), time.process_time()
    res = engine.run(
        base, data, network=network, faults=faults, seed=config.network_seed,
        eval_every=config.eval_every, trial=trial,
    )  # fmt: skip
    return {
        "mechanism": base.mechanism,
        "trial": trial,
        "rounds": list(res.eval_rounds),
        "test_loss": list(res.test_loss),
        "test_accuracy": list(res.test_accuracy),
        "messages": res.messages,
        "bytes": res.bytes_sent,
        "lost_messages": res.lost_messages,
        "dropped_messages": res.dropped_messages,
        "missing": res.missing,
        "skipped_rounds": res.skipped_rounds,
        "simulated_seconds": res.simulated_seconds,
        "model_digest": res.model_digest,
        "wall_seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu,
    }


def leak_job(
    plan_bytes: bytes, attackers: list[str], trials: int, audit_trials: int
) -> dict[str, Any]:
    """The leakage probes (and audit) of one plan on an ideal network (batch engine); a plan
    without noise (D-SGD) gives the scale of M-NMI.

    M-NMI is estimated on the gradient's last coordinate (the bias) and the matching
    coordinates of what the attacker computes: a KSG estimate from a few hundred trials
    is meaningful in one dimension, not in the model's 65. DOME's private value is the
    sketched gradient (k floats, no model coordinate): its M-NMI takes the whole of it."""
    from edgedp_sim import adversary, leak, scenarios

    p = plan_mod.NoisePlan.from_bytes(plan_bytes)
    atts = [adversary.parse_attacker(a) for a in attackers]
    started, cpu = time.perf_counter(), time.process_time()
    sc = scenarios.from_plan(p)
    # θ = (weights, bias): the bias is entry `features`
    bias = None if p.sketch is not None else sc.data().features
    rep = leak.run(
        sc, atts, trials=trials, victim=VICTIM, audit_trials=audit_trials, coordinate=bias
    )
    keys = ("attacker", "m_nmi", "cosine", "mse", "epsilon", "delta", "adjacency", "mu")
    keys += ("epsilon_lb", "estimator", "guarantee", "covers_attacker")
    keys += ("audit_mu_hat", "audit_mu_low", "audit_mu_high", "audit_mu_view")
    return {
        "mechanism": p.mechanism,
        "trials": rep["n_trials"],
        "coordinate": bias,
        "audit_trials": rep.get("audit", {}).get("n_trials", 0),
        "attackers": [{k: e.get(k) for k in keys} for e in rep["attackers"]],
        "wall_seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu,
    }


def agents_job(config: DemoConfig, workdir: Path) -> dict[str, Any]:
    """One plan on real agent processes (CURVE ZeroMQ, 127.0.0.1) vs the event engine."""
    from edgedp import models
    from edgedp_sim import engine
    from firmware_py import deploy

    info = make_plans(
        config,
        topology=config.agents_topology,
        steps=config.agents_steps,
        batch_size=0,
        mechanisms=(config.agents_mechanism,),
    )
    p = info[config.agents_mechanism]["plan"]
    plan_file = workdir / "agents.plan"
    plan_file.write_bytes(p.to_bytes())
    started = time.perf_counter()
    run = deploy.local_run(plan_file, workdir / "agents")
    codes = run.wait(timeout=600)
    wall = time.perf_counter() - started
    if codes != [0] * p.n:
        raise RuntimeError(f"agent exit codes {codes} (logs in {workdir / 'agents'})")
    real = models.model_digest(run.final_models())
    sim_digest = engine.run(p, _data(config.dataset, p.n, p.seed), eval_every=p.steps)
    return {
        "mechanism": p.mechanism,
        "topology": config.agents_topology,
        "agents": p.n,
        "steps": p.steps,
        "plan_hash": p.plan_hash,
        "epsilon": describe(p)["epsilon"],  # with private noise; this run uses the public seed
        "delta": p.delta,
        "real_digest": real,
        "simulated_digest": sim_digest.model_digest,
        "equal": real == sim_digest.model_digest,
        "wall_seconds": wall,
    }
