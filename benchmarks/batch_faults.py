"""Faults in the batch engine at scale: 10,000 agents with dropouts, loss and churn.

Each phase runs in its own process on one core where the OS allows it, on a torus of
R x R nodes (degree 4; ``--nodes`` is rounded to R²). Time and peak memory are those of the
engine call alone (``tracemalloc``: every numpy allocation); ru_maxrss, printed too, also
holds the plan (its dense n x n mixing matrix). The load average is printed, and the ratios
compare phases measured in this same run:

* ``ideal``: the plan in the batch engine without faults (the baseline);
* ``faults``: the same plan with 5% dropouts, 2% message loss and Poisson churn (one crash
  per node per 2 s, down 50 ms, a round computing 10 ms) — the masks of edgedp_sim/round_faults.py;
* ``event`` (``--event-nodes``, default 500): the event engine on the same fault scenario
  with fewer nodes, and the batch engine on that smaller scenario, for the speed-up.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
import tracemalloc

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine, round_faults
from edgedp_sim.churn import Faults
from edgedp_sim.links import Network


def _scenario(n: int, rounds: int, dim: int):
    side = max(3, math.isqrt(n))
    graph = edgedp_topologies.parse(f"torus:{side}:{side}")
    n = side * side
    task = TaskSpec(dataset=f"synthetic-logistic:{dim - 1}:{n * 10}")
    plan = make_plan(
        "dp-dsgd",
        graph,
        steps=rounds,
        participation=Participation(rounds, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        task=task,
    )
    data = datasets.partition(datasets.load(task.dataset, seed=0), n, seed=0)
    net = Network(loss=0.02, compute_s=0.01, round_timeout_s=0.5)
    faults = Faults(
        dropout=0.05, churn_rate_per_s=0.5, churn_down_s=0.05, churn_horizon_s=rounds * 0.01
    )
    return plan, data, net, faults


def _phase(name: str, n: int, rounds: int, dim: int) -> dict:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    plan, data, net, faults = _scenario(n, rounds, dim)
    out: dict = {"phase": name, "nodes": plan.n, "rounds": rounds}
    tracemalloc.start()
    start = time.perf_counter()
    if name == "ideal":
        res = batch.run(plan, data, eval_every=rounds)
    elif name == "masks":
        rf = round_faults.RoundFaults(plan, faults, net, seed=1)
        out["mask_bytes"] = rf.nbytes
        out["crashes"] = rf.crashes
        res = None
    elif name == "faults":
        res = batch.run(plan, data, eval_every=rounds, faults=faults, network=net, seed=1)
        out.update(lost=res.lost_messages, skipped=res.skipped_rounds, crashes=res.crashes)
    else:
        res = engine.run(plan, data, network=net, faults=faults, seed=1, eval_every=rounds)
        out.update(lost=res.lost_messages, skipped=res.skipped_rounds, crashes=res.crashes)
    out["seconds"] = time.perf_counter() - start
    out["peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if res is not None:
        out["loss"] = float(res.test_loss[-1] if name == "event" else res.test_loss[-1][0])
    return out


def _run(phase: str, n: int, rounds: int, dim: int) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--nodes", str(n)]
    cmd += ["--rounds", str(rounds), "--dim", str(dim)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--event-nodes", type=int, default=500, help="0: skip the event engine")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(_phase(args.phase, args.nodes, args.rounds, args.dim)))
        return
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}", flush=True)
    n, T, d = args.nodes, args.rounds, args.dim  # noqa: N806
    ideal, masks, faulty = (_run(p, n, T, d) for p in ("ideal", "masks", "faults"))
    print(f"{ideal['nodes']} agents, {T} rounds, d = {d}: 5% dropouts, 2% loss, churn")
    print(f"  batch, no faults : {ideal['seconds']:7.1f} s  peak {ideal['peak_mb']:6.0f} MB")
    print(
        f"  masks alone      : {masks['seconds']:7.1f} s  peak {masks['peak_mb']:6.0f} MB"
        f"  ({masks['mask_bytes'] / 1e6:.1f} MB of masks, {masks['crashes']} crashes)"
    )
    print(
        f"  batch, faults    : {faulty['seconds']:7.1f} s  peak {faulty['peak_mb']:6.0f} MB"
        f"  lost {faulty['lost']}, rounds sat out {faulty['skipped']}, crashes {faulty['crashes']}"
    )
    print(f"  process peak (ru_maxrss, with the plan): {faulty['maxrss_mb']:.0f} MB")
    print(
        f"  ratio faults/ideal: time {faulty['seconds'] / ideal['seconds']:.2f}, "
        f"peak memory {faulty['peak_mb'] / ideal['peak_mb']:.2f}"
    )
    if args.event_nodes:
        m = args.event_nodes
        small, ev = _run("faults", m, T, d), _run("event", m, T, d)
        print(
            f"{small['nodes']} agents, same faults: event engine {ev['seconds']:.1f} s "
            f"(peak {ev['peak_mb']:.0f} MB), batch {small['seconds']:.2f} s "
            f"(peak {small['peak_mb']:.0f} MB): batch is {ev['seconds'] / small['seconds']:.0f}x "
            "faster"
        )
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")


if __name__ == "__main__":
    main()
