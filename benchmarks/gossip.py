"""Round time of 16 real agent processes on loopback with d = 10^5 (ZeroMQ, CURVE).

Each agent runs DP-D-SGD on an ER(16, 0.3) graph; the round time is the median interval
between consecutive round ends over all agents. Baseline measured in the same run: the
compute of one agent's round in-process (gradient, clipping, noise, local step, mixing),
so the ratio shows what the network and encryption add.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import topologies
from edgedp import streams
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.models.linear import LinearModel
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy
from sim import datasets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    n, d, steps = args.nodes, args.dim, args.rounds
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        graph = topologies.parse(f"er:{n}:0.3:1")
        task = TaskSpec(dataset=f"synthetic-logistic:{d - 1}:{n * 5}")
        plan = make_plan(
            "dp-dsgd",
            graph,
            steps=steps,
            participation=Participation(steps, 1),
            clip_norm=1.0,
            learning_rate=0.1,
            noise_multiplier=1.0,
            task=task,
        )
        (tmp / "run.plan").write_bytes(plan.to_bytes())
        # baseline: one agent's round compute in-process (its neighbours' models faked)
        data = datasets.partition(datasets.load(task.dataset, seed=plan.seed), n, seed=plan.seed)
        keys = streams.RunKeys.simulation(plan)
        agent = Agent(
            plan.share(0),
            model=LinearModel("logistic", d - 1),
            x=data.x[0],
            y=data.y[0],
            noise_key=keys.noise(0),
            batch_key=keys.batch(0),
        )
        times = []
        for r in range(5):
            t = time.perf_counter()
            agent.begin_round()
            for v in agent.neighbours:
                agent.inbox.setdefault(r, {})[v] = agent.message
            agent.end_round()
            times.append(time.perf_counter() - t)
        compute = statistics.median(times)
        start = time.monotonic()
        run = deploy.local_run(tmp / "run.plan", tmp / "run", round_timeout=30, startup_timeout=120)
        codes = run.wait(timeout=600)
        total = time.monotonic() - start
        if any(codes):
            raise SystemExit(f"agents failed: {codes}")
        intervals = []
        for u in range(n):
            ends = [m["time"] for m in run.metrics(u) if m["event"] == "round"]
            intervals += list(np.diff(ends[2:]))  # skip the start-up rounds
        degree = np.mean(graph.degrees)
        rt = statistics.median(intervals)
        print(
            f"{n} agents, d = {d:,}, ER(16, 0.3) mean degree {degree:.1f}, {steps} rounds, "
            f"{8 * d / 1e6:.1f} MB per message"
        )
        print(f"round time (median over agents and rounds): {rt * 1e3:.1f} ms")
        print(f"baseline, one agent's compute per round in-process: {compute * 1e3:.1f} ms")
        print(f"ratio round time / compute: {rt / compute:.1f}")
        print(
            f"traffic per round: {n * degree * 8 * d / 1e6:.1f} MB; whole run incl. start-up "
            f"{total:.1f} s"
        )


if __name__ == "__main__":
    main()
