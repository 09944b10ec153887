"""Round time of 16 real agent processes on loopback with d = 10^5 (ZeroMQ, CURVE).

Each agent (``edgedp-agent``, firmware_py/daemon.py) runs DP-D-SGD on an ER(16, 0.3) graph;
the round time is the median interval between consecutive round ends over all agents and
rounds (the first two rounds of each agent skipped). Baselines measured in the same run:

* raw gossip: the same number of processes, the same graph and the same bytes, with bare
  pyzmq and no agent — each process binds a PULL socket, connects a PUSH socket to each
  neighbour, and per round sends every neighbour a message (an 8-byte round frame and 8d
  bytes) and waits for every neighbour's message of that round; once with CURVE on every
  link (keypair per process, as the agents) and once without (plain TCP);
* the compute of one agent's round in-process (gradient, clipping, noise, local step,
  mixing; its neighbours' models faked).

Printed: the load average at the start, each median and the ratios edgedp / raw CURVE and
edgedp / raw plain.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import struct
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

SKIP = 2  # start-up rounds left out of every median (handshakes, process start)


def _raw_node(u, neighbours, size, rounds, keys, conn) -> None:
    """One process of the raw gossip baseline; sends its round-end times through ``conn``."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    if keys is not None:
        pull.curve_server = True
        pull.curve_publickey, pull.curve_secretkey = keys[u]
    conn.send(pull.bind_to_random_port("tcp://127.0.0.1"))
    ports = conn.recv()
    push = {}
    for v in neighbours:
        s = ctx.socket(zmq.PUSH)
        if keys is not None:
            s.curve_serverkey = keys[v][0]
            s.curve_publickey, s.curve_secretkey = keys[u]
        s.connect(f"tcp://127.0.0.1:{ports[v]}")
        push[v] = s
    payload = b"\x01" * size
    early: dict[int, int] = {}  # round -> messages that came before their round
    ends = []
    for r in range(rounds):
        head = struct.pack("<q", r)
        for s in push.values():
            s.send_multipart([head, payload], copy=False)
        got = early.pop(r, 0)
        while got < len(neighbours):
            frames = pull.recv_multipart(copy=False)
            k = struct.unpack("<q", frames[0].bytes)[0]
            if k == r:
                got += 1
            else:
                early[k] = early.get(k, 0) + 1
        ends.append(time.monotonic())
    conn.send(ends)
    for s in push.values():
        s.close(linger=-1)
    pull.close(linger=0)
    ctx.term()


def raw_gossip_round(graph, size: int, rounds: int, *, curve: bool) -> float:
    """Median round time of bare pyzmq gossip: one process per node of ``graph``, every
    node sends ``size`` bytes to each neighbour per round and waits for theirs."""
    mp = multiprocessing.get_context("spawn")
    keys = [zmq.curve_keypair() for _ in range(graph.n)] if curve else None
    pipes, procs = [], []
    for u in range(graph.n):
        parent, child = mp.Pipe()
        proc = mp.Process(
            target=_raw_node, args=(u, graph.neighbours(u), size, rounds, keys, child)
        )
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    ports = [p.recv() for p in pipes]
    for p in pipes:
        p.send(ports)
    intervals = []
    for p in pipes:
        intervals += list(np.diff(p.recv()[SKIP:]))
    for proc in procs:
        proc.join()
    return statistics.median(intervals)


def one_agent_compute(plan, task, n: int, d: int) -> float:
    """Median seconds of one agent's round in-process (its neighbours' models faked)."""
    data = datasets.partition(datasets.load(task.dataset, seed=plan.seed), n, seed=plan.seed)
    keys = streams.RunKeys.simulation(plan)
    agent = Agent(
        plan.share(0),
        model=LinearModel("logistic", d - 1),
        x=data.x[0],
        y=data.y[0],
        noise_key=keys.noise(0),
        batch_key=keys.batch(0),
        keep_gradient=False,
    )
    times = []
    for r in range(5):
        t = time.perf_counter()
        agent.begin_round()
        for v in agent.neighbours:
            agent.inbox.setdefault(r, {})[v] = agent.message
        agent.end_round()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    n, d, steps = args.nodes, args.dim, args.rounds
    if steps <= SKIP + 1:
        raise SystemExit(f"--rounds must be more than {SKIP + 1}")
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2-core machine shared)")
    graph = topologies.parse(f"er:{n}:0.3:1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
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
        compute = one_agent_compute(plan, task, n, d)
        start = time.monotonic()
        run = deploy.local_run(tmp / "run.plan", tmp / "run", round_timeout=30, startup_timeout=120)
        codes = run.wait(timeout=600)
        total = time.monotonic() - start
        if any(codes):
            raise SystemExit(f"agents failed: {codes}")
        intervals = []
        for u in range(n):
            ends = [m["time"] for m in run.metrics(u) if m["event"] == "round"]
            intervals += list(np.diff(ends[SKIP:]))
        rt = statistics.median(intervals)
    raw_curve = raw_gossip_round(graph, 8 * d, steps, curve=True)
    raw_plain = raw_gossip_round(graph, 8 * d, steps, curve=False)
    degree = float(np.mean(graph.degrees))
    print(
        f"{n} agents, d = {d:,}, ER({n}, 0.3) mean degree {degree:.1f}, {steps} rounds, "
        f"{8 * d / 1e6:.1f} MB per message, {n * degree * 8 * d / 1e6:.1f} MB per round"
    )
    print(f"edgedp round time (median over agents and rounds): {rt * 1e3:.1f} ms")
    print(
        f"raw pyzmq gossip, same {n} processes, graph and bytes, CURVE: {raw_curve * 1e3:.1f} ms; "
        f"plain TCP: {raw_plain * 1e3:.1f} ms"
    )
    print(f"ratio edgedp / raw CURVE: {rt / raw_curve:.2f}")
    print(f"ratio edgedp / raw plain: {rt / raw_plain:.2f}")
    print(f"one agent's compute per round in-process: {compute * 1e3:.1f} ms")
    print(f"whole edgedp run incl. start-up: {total:.1f} s")


if __name__ == "__main__":
    main()
