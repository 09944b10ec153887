"""Round time of 16 real agent processes on loopback with d = 10^5 (ZeroMQ, CURVE).

Each agent runs DP-D-SGD on an ER(16, 0.3) graph; the round time is the median interval
between consecutive round ends over all agents. Baselines measured in the same run: the
compute of one agent's round in-process (gradient, clipping, noise, local step, mixing),
and raw pyzmq: one CURVE PUSH process streaming the messages of one whole round (n · mean
degree messages of 8d bytes) to a CURVE PULL socket, with no agent, codec or checks. The
ratios show what the agents add to the bare compute and to the bare encrypted transfer.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

import topologies
from edgedp import streams
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.models.linear import LinearModel
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy
from sim import datasets


def _curve_sender(endpoint: str, server_public: bytes, size: int, count: int) -> None:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.curve_publickey, push.curve_secretkey = zmq.curve_keypair()
    push.curve_serverkey = server_public
    push.connect(endpoint)
    payload = b"\x01" * size
    for _ in range(count):
        push.send(payload, copy=False)
    push.close(linger=-1)
    ctx.term()


def raw_curve_seconds(size: int, count: int, repeats: int = 3) -> float:
    """Median seconds for raw pyzmq CURVE PUSH/PULL (two processes, loopback) to move
    ``count`` messages of ``size`` bytes, from the first to the last byte received."""
    ctx = zmq.Context()
    public, secret = zmq.curve_keypair()
    samples = []
    for _ in range(repeats):
        pull = ctx.socket(zmq.PULL)
        pull.curve_server = True
        pull.curve_publickey, pull.curve_secretkey = public, secret
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        proc = multiprocessing.get_context("spawn").Process(
            target=_curve_sender, args=(f"tcp://127.0.0.1:{port}", public, size, count)
        )
        proc.start()
        pull.recv(copy=False)  # the handshake and process start are not timed
        start = time.perf_counter()
        for _ in range(count - 1):
            pull.recv(copy=False)
        samples.append((time.perf_counter() - start) * count / (count - 1))
        proc.join()
        pull.close(linger=0)
    ctx.term()
    return statistics.median(samples)


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
        per_round = max(2, round(n * degree))
        raw = raw_curve_seconds(8 * d, per_round)
        print(
            f"{n} agents, d = {d:,}, ER(16, 0.3) mean degree {degree:.1f}, {steps} rounds, "
            f"{8 * d / 1e6:.1f} MB per message"
        )
        print(f"round time (median over agents and rounds): {rt * 1e3:.1f} ms")
        print(f"baseline, one agent's compute per round in-process: {compute * 1e3:.1f} ms")
        print(f"ratio round time / compute: {rt / compute:.1f}")
        print(
            f"baseline, raw pyzmq CURVE moving one round's {per_round} messages "
            f"(one PUSH -> one PULL process): {raw * 1e3:.1f} ms "
            f"({per_round * 8 * d / raw / 1e6:.0f} MB/s)"
        )
        print(f"ratio round time / raw CURVE transfer of a round: {rt / raw:.1f}")
        print(
            f"traffic per round: {n * degree * 8 * d / 1e6:.1f} MB; whole run incl. start-up "
            f"{total:.1f} s"
        )


if __name__ == "__main__":
    main()
