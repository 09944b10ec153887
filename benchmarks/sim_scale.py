"""Event-engine scale: 1,000 agents, 200 rounds, d = 100, lognormal latency, 5% dropouts.

Runs on one core (the process is pinned to CPU 0 where the OS allows it). Prints wall and
CPU time (the machine is shared: CPU seconds of this process are the steadier measure,
and the ratios use them), heap events and instant callbacks (edgedp_sim/clock.py), messages and
events per message, peak memory (ru_maxrss), and two ratios measured in the same run:
against a bare SimPy model with the same semantics (below: each node a process that
computes nothing, sends to its neighbours through its uplink, a SimPy Resource held for
each message's serialization time, over the same latencies, and waits for all their
messages or the deadline) and against the batch engine on the same plan without network
or faults.

``--curve`` runs sizes 100 / 300 / 1,000 / 3,000 / 10,000 agents (or ``--sizes``), each in a
fresh process (so peak memory is per size), and writes a table,
``benchmarks/out/sim_scale.json`` and ``benchmarks/out/sim_scale.png``; ``--curve-rounds``
caps the rounds of sizes above 1,000 agents (printed in the table).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import simpy

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine, provenance
from edgedp_sim.churn import Faults
from edgedp_sim.links import Latency, Network

OUT = Path(__file__).parent / "out"
SIZES = (100, 300, 1000, 3000, 10000)
TEST = 2000  # test examples at most


def _setup(n: int, T: int, d: int):  # noqa: N803
    # mean degree 6; ER graphs are connected only for p > ln(n)/n, so above 1,000 agents
    # p = 1.25 ln(n)/n (mean degree printed with each size)
    p = 6 / n if n <= 1000 else 1.25 * math.log(n) / n
    graph = edgedp_topologies.parse(f"er:{n}:{p}:1")
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
    # the test set grows with the data (20%): capped at 1,000 agents' 2,000 examples, so
    # evaluating n models stays O(n) (uncapped: 134 CPU s per evaluation at 10,000 agents)
    data = dataclasses.replace(data, x_test=data.x_test[:TEST], y_test=data.y_test[:TEST])
    net = Network(
        latency=Latency.from_dict({"kind": "lognormal", "median_ms": 30, "sigma": 0.5}),
        bandwidth_mbps=50,
        round_timeout_s=1.0,
    )
    return graph, plan, data, net


def bare_model(neighbours, latency, dropped, *, rounds: int, timeout: float, send_s: float):
    """A bare SimPy model of the same protocol: returns (events, messages).

    Node u is a process: unless it sits the round out, it starts a process that sends to
    every neighbour in turn, holding u's uplink (a ``simpy.Resource(1)``) for ``send_s``
    per message, then a timeout of the link's latency whose callback files the message;
    u waits for all of its neighbours' messages or the deadline. No model, no wire.
    """
    env = simpy.Environment()
    n = len(neighbours)
    inbox = [dict() for _ in range(n)]
    arrival = [env.event() for _ in range(n)]
    uplink = [simpy.Resource(env, 1) for _ in range(n)]
    counts = {"messages": 0}

    def file(u, v, r):
        def callback(_event):
            inbox[v][r] = inbox[v].get(r, 0) + 1
            if not arrival[v].triggered:
                arrival[v].succeed()

        return callback

    def send(u, r):
        for v in neighbours[u]:
            with uplink[u].request() as req:
                yield req
                yield env.timeout(send_s)
            counts["messages"] += 1
            env.timeout(float(latency[(u, v)][r])).callbacks.append(file(u, v, r))

    def node(u):
        for r in range(rounds):
            if dropped[u, r]:
                yield env.timeout(0)
                continue
            env.process(send(u, r))
            deadline = env.timeout(timeout)
            while inbox[u].get(r, 0) < len(neighbours[u]) and not deadline.processed:
                arrival[u] = env.event()
                yield arrival[u] | deadline
            inbox[u].pop(r, None)

    for u in range(n):
        env.process(node(u))
    events = 0
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            return events, counts["messages"]
        events += 1


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def measure(n: int, T: int, d: int, *, with_batch: bool, with_bare: bool) -> dict:  # noqa: N803
    graph, plan, data, net = _setup(n, T, d)
    out = {"nodes": n, "rounds": T, "dim": d, "degree": float(graph.degrees.mean())}
    ev, out["wall_s"], out["cpu_s"] = _timed(
        lambda: engine.run(
            plan, data, network=net, faults=Faults(dropout=0.05), seed=1, eval_every=T
        )
    )
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["events"], out["messages"] = ev.events, ev.messages
    out["digest"] = ev.model_digest[:16]  # the same in every engine version (tests pin it)
    out["counters"] = [ev.lost_messages, ev.offline_drops, ev.rejected, ev.missing]
    out["planned_uplinks"] = getattr(ev, "planned_uplinks", False)
    out["instants"] = getattr(ev, "instants", 0)  # (0: an engine without instant callbacks)
    out["simulated_s"] = ev.simulated_seconds
    if with_bare:
        sim = engine._Sim(plan, data, net, Faults(dropout=0.05), 1, T, None)
        neighbours = [a.neighbours for a in sim.agents]
        send_s = net.serialization_s(ev.bytes_sent // ev.messages)
        (events, messages), out["bare_wall_s"], out["bare_cpu_s"] = _timed(
            lambda: bare_model(
                neighbours, sim.links.latency, sim.dropped, rounds=T, timeout=1.0, send_s=send_s
            )
        )
        out["bare_events"], out["bare_messages"] = events, messages
    if with_batch:
        _, out["batch_wall_s"], out["batch_cpu_s"] = _timed(
            lambda: batch.run(plan, data, eval_every=T)
        )
    return out


def _curve(args) -> None:
    rows = []
    for n in args.sizes:
        T = args.rounds if n <= 1000 else min(args.rounds, args.curve_rounds)  # noqa: N806
        cmd = [sys.executable, __file__, "--nodes", str(n), "--rounds", str(T), "--json"]
        cmd += ["--dim", str(args.dim)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.splitlines()[-1])
        rows.append(row)
        print(
            f"{n:>6} agents (mean degree {row['degree']:4.1f}) {row['rounds']:>4} rounds: "
            f"{row['cpu_s']:8.1f} s CPU "
            f"({row['wall_s']:8.1f} s wall, "
            f"{row['cpu_s'] / (n * row['rounds']) * 1e6:6.0f} us CPU per node-round), "
            f"{row['events'] / row['cpu_s']:9,.0f} events/CPU s, peak {row['peak_mb']:7.0f} MB",
            flush=True,
        )
    OUT.mkdir(exist_ok=True)
    provenance.write_json(OUT / "sim_scale.json", {"rows": rows})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    nodes = [r["nodes"] for r in rows]
    per = [r["cpu_s"] / (r["nodes"] * r["rounds"]) * 1e6 for r in rows]
    a.loglog(nodes, [r["cpu_s"] * 200 / r["rounds"] for r in rows], "o-")
    a.set(xlabel="agents", ylabel="CPU s per 200 rounds (one core)", title="time")
    a.twinx().semilogx(nodes, per, "s--", color="grey")
    b.loglog(nodes, [r["peak_mb"] for r in rows], "o-")
    b.set(xlabel="agents", ylabel="peak RSS (MB)", title="memory")
    fig.suptitle("event engine, d = 100, lognormal latency, 5% dropouts (grey: CPU us/node-round)")
    fig.tight_layout()
    fig.savefig(OUT / "sim_scale.png", dpi=120)
    print(f"wrote {OUT / 'sim_scale.json'} and {OUT / 'sim_scale.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--curve", action="store_true", help="growth curve over agent counts")
    ap.add_argument("--curve-rounds", type=int, default=20, help="rounds above 1,000 agents")
    ap.add_argument(
        "--sizes",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=SIZES,
        help="agent counts of --curve, comma-separated (default: %(default)s)",
    )
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.nodes, args.rounds, args.dim, args.curve_rounds, *args.sizes) < 1:
        ap.error("--nodes, --rounds, --dim, --curve-rounds and --sizes must be >= 1")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared)", flush=True)
    if args.curve:
        _curve(args)
        return
    if args.json:
        row = measure(args.nodes, args.rounds, args.dim, with_batch=False, with_bare=False)
        print(json.dumps(row))
        return
    r = measure(args.nodes, args.rounds, args.dim, with_batch=True, with_bare=True)
    print(
        f"{r['nodes']} agents, {r['rounds']} rounds, d = {r['dim']}, mean degree "
        f"{r['degree']:.1f}, lognormal latency (median 30 ms), 50 Mbit/s uplinks, "
        "5% dropouts, one core"
    )
    print(
        f"event engine: {r['cpu_s']:.1f} s CPU ({r['wall_s']:.1f} s wall), "
        f"{r['events']:,} heap events ({r['events'] / r['cpu_s']:,.0f}/CPU s) + "
        f"{r['instants']:,} instant callbacks, {r['messages']:,} messages, "
        f"{r['events'] / r['messages']:.2f} events/message, {r['simulated_s']:.1f} simulated s"
    )
    print(
        f"model digest {r['digest']}, lost/offline/rejected/missing {r['counters']}, "
        f"uplinks planned ahead: {r['planned_uplinks']}"
    )
    print(f"peak memory (ru_maxrss): {r['peak_mb']:.0f} MB")
    print(
        f"bare SimPy model, same links, uplinks and dropouts: {r['bare_cpu_s']:.1f} s CPU "
        f"({r['bare_wall_s']:.1f} s wall), {r['bare_events']:,} events, "
        f"{r['bare_messages']:,} messages; ratio event/bare = {r['cpu_s'] / r['bare_cpu_s']:.2f}"
    )
    print(
        f"batch engine, same plan without network/faults: {r['batch_cpu_s']:.1f} s CPU "
        f"({r['batch_wall_s']:.1f} s wall); ratio event/batch = "
        f"{r['cpu_s'] / r['batch_cpu_s']:.2f}"
    )


if __name__ == "__main__":
    main()
