"""Event-engine scale: 1,000 agents, 200 rounds, d = 100, lognormal latency, 5% dropouts.

Runs on one core (the process is pinned to CPU 0 where the OS allows it). Prints wall time,
simulated events per second, peak memory (ru_maxrss), and the wall time of the same plan
in the batch engine measured in the same run (without network or faults) for the ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from sim import batch, datasets, engine
from sim.churn import Faults
from sim.links import Latency, Network


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--dim", type=int, default=100)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    n, T, d = args.nodes, args.rounds, args.dim  # noqa: N806
    graph = topologies.parse(f"er:{n}:{6 / n}:1")
    task = TaskSpec(dataset=f"synthetic-logistic:{d - 1}:{n * 10}")
    plan = make_plan(
        "dp-dsgd",
        graph,
        steps=T,
        participation=Participation(T, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        task=task,
    )
    data = datasets.partition(datasets.load(task.dataset, seed=0), n, seed=0)
    net = Network(
        latency=Latency.from_dict({"kind": "lognormal", "median_ms": 30, "sigma": 0.5}),
        bandwidth_mbps=50,
        round_timeout_s=1.0,
    )
    last = [time.perf_counter()]

    def progress(r: int) -> None:
        if r % 20 == 0:
            print(
                f"  event engine: round {r}/{T} ({time.perf_counter() - last[0]:.1f} s)", flush=True
            )

    start = time.perf_counter()
    ev = engine.run(
        plan,
        data,
        network=net,
        faults=Faults(dropout=0.05),
        seed=1,
        eval_every=T,
        progress=progress,
    )
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    batch.run(plan, data, eval_every=T)
    wall_batch = time.perf_counter() - start
    print(
        f"{n} agents, {T} rounds, d = {d}, mean degree {graph.degrees.mean():.1f}, "
        f"lognormal latency (median 30 ms), 5% dropouts, one core"
    )
    print(
        f"event engine: {wall:.1f} s wall, {ev.events:,} events "
        f"({ev.events / wall:,.0f} events/s), "
        f"{ev.messages:,} messages, {ev.simulated_seconds:.1f} simulated s"
    )
    print(f"peak memory (ru_maxrss): {peak:.0f} MB")
    print(
        f"batch engine, same plan without network/faults: {wall_batch:.1f} s; "
        f"ratio event/batch = {wall / wall_batch:.1f}"
    )


if __name__ == "__main__":
    main()
