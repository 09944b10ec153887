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

The measurements are interleaved ``--repeats`` times (raw CURVE, edgedp, raw plain, ...) so
that the load of the shared machine falls on all of them alike; ``--compare-tree PATH`` also
runs the agents from another checkout (e.g. the main branch) in each repeat, the two trees
taking turns to go first. Printed: the
load average at the start, each median over all repeats, and the ratios edgedp / raw CURVE
and edgedp / raw plain (of the pooled medians, and their range over the repeats). Also the
CPU time of one process's round (user + system, all its threads: compute, CURVE, writes;
the median over processes and rounds of the difference of ``time.process_time()`` between
round ends), which depends far less on the other work of a shared machine than the round
time does; agents of a checkout whose metrics lines carry no ``cpu`` have none.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
import zmq

import edgedp_topologies
from edgedp import streams
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.models.linear import LinearModel
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import datasets
from firmware_py import deploy

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
    ends, cpu = [], []
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
        cpu.append(time.process_time())
    conn.send((ends, cpu))
    for s in push.values():
        s.close(linger=-1)
    pull.close(linger=0)
    ctx.term()


def raw_gossip_intervals(
    graph, size: int, rounds: int, *, curve: bool
) -> tuple[list[float], list[float]]:
    """Round-end intervals of bare pyzmq gossip, and the processes' CPU seconds per round:
    one process per node of ``graph``, every node sends ``size`` bytes to each neighbour
    per round and waits for theirs."""
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
    intervals, cpu = [], []
    for p in pipes:
        ends, times = p.recv()
        intervals += list(np.diff(ends[SKIP:]))
        cpu += list(np.diff(times[SKIP:]))
    for proc in procs:
        proc.join()
    return intervals, cpu


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


#: Run in another checkout (``--compare-tree``): the same plan and run, made by its own
#: code (its plan format may differ), its round intervals and CPU printed as JSON.
_TREE_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import gossip
print(json.dumps(gossip.edgedp_round(gossip.the_plan({n}, {d}, {steps}), Path({directory!r}), {n})))
"""


def the_plan(n: int, d: int, steps: int):
    """The benchmark's DP-D-SGD plan."""
    graph = edgedp_topologies.parse(f"er:{n}:0.3:1")
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
    return plan


def edgedp_round(plan, directory: Path, n: int) -> tuple[list[float], list[float]]:
    """Round-end intervals of ``n`` real agent processes of ``plan``, and their CPU seconds
    per round (empty if the agents' metrics lines have no ``cpu``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.plan").write_bytes(plan.to_bytes())
    run = deploy.local_run(
        directory / "run.plan", directory / "run", round_timeout=30, startup_timeout=120
    )
    codes = run.wait(timeout=600)
    if any(codes):
        raise SystemExit(f"agents failed: {codes} (logs in {directory})")
    intervals, cpu = [], []
    for u in range(n):
        lines = [m for m in run.metrics(u) if m["event"] == "round"]
        intervals += list(np.diff([m["time"] for m in lines][SKIP:]))
        if all("cpu" in m for m in lines):
            cpu += list(np.diff([m["cpu"] for m in lines][SKIP:]))
    return intervals, cpu


def tree_round(tree: str, directory: Path, n: int, d: int, steps: int):
    """:func:`edgedp_round` of the same plan, run by the code of checkout ``tree``."""
    script = _TREE_RUN.format(
        bench=str(Path(__file__).resolve().parent), n=n, d=d, steps=steps, directory=str(directory)
    )
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    intervals, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return intervals, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--compare-tree",
        metavar="PATH",
        help="also run the agents of another checkout (e.g. a git worktree of an earlier "
        "commit) in every repeat",
    )
    args = ap.parse_args()
    n, d, steps = args.nodes, args.dim, args.rounds
    if steps <= SKIP + 1 or args.repeats < 1:
        raise SystemExit(f"--rounds must be more than {SKIP + 1} and --repeats at least 1")
    if args.compare_tree and not (Path(args.compare_tree) / "firmware_py").is_dir():
        raise SystemExit(f"--compare-tree {args.compare_tree}: no firmware_py folder there")
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2-core machine shared)")
    plan = the_plan(n, d, steps)
    graph, task = edgedp_topologies.parse(f"er:{n}:0.3:1"), plan.task
    compute = one_agent_compute(plan, task, n, d)
    trees = {"edgedp": None}
    if args.compare_tree:
        trees[f"edgedp from {args.compare_tree}"] = args.compare_tree
    pooled = {name: [] for name in [*trees, "raw CURVE", "raw plain"]}
    per_repeat = {name: [] for name in pooled}
    cpu: dict[str, list[float]] = {name: [] for name in pooled}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(args.repeats):
            samples, times = {}, {}
            samples["raw CURVE"], times["raw CURVE"] = raw_gossip_intervals(
                graph, 8 * d, steps, curve=True
            )
            order = list(trees.items())
            for name, tree in order[i % len(order) :] + order[: i % len(order)]:
                folder = tmp / f"run-{i}-{len(samples)}"
                if tree is None:
                    samples[name], times[name] = edgedp_round(plan, folder, n)
                else:  # that checkout's own plan and agents
                    samples[name], times[name] = tree_round(tree, folder, n, d, steps)
            samples["raw plain"], times["raw plain"] = raw_gossip_intervals(
                graph, 8 * d, steps, curve=False
            )
            for name, values in samples.items():
                pooled[name] += values
                per_repeat[name].append(statistics.median(values))
                cpu[name] += times[name]
            print(
                f"repeat {i + 1}: "
                + ", ".join(f"{k} {statistics.median(v) * 1e3:.1f} ms" for k, v in samples.items())
                + f"; load {os.getloadavg()[0]:.2f}"
            )
    median = {name: statistics.median(values) for name, values in pooled.items()}
    degree = float(np.mean(graph.degrees))
    print(
        f"{n} agents, d = {d:,}, ER({n}, 0.3) mean degree {degree:.1f}, {steps} rounds x "
        f"{args.repeats} repeats, {8 * d / 1e6:.1f} MB per message, "
        f"{n * degree * 8 * d / 1e6:.1f} MB per round"
    )
    print(
        f"raw pyzmq gossip, same {n} processes, graph and bytes: CURVE "
        f"{median['raw CURVE'] * 1e3:.1f} ms, plain TCP {median['raw plain'] * 1e3:.1f} ms"
    )
    for name in trees:
        ratios = [a / b for a, b in zip(per_repeat[name], per_repeat["raw CURVE"], strict=True)]
        print(
            f"{name} round time (median over agents, rounds, repeats): "
            f"{median[name] * 1e3:.1f} ms; / raw CURVE {median[name] / median['raw CURVE']:.2f} "
            f"(repeats {min(ratios):.2f}-{max(ratios):.2f}); "
            f"/ raw plain {median[name] / median['raw plain']:.2f}"
        )
    print(
        "CPU per process and round (user + system, all threads; median over processes, "
        "rounds, repeats): "
        + ", ".join(
            f"{k} {statistics.median(v) * 1e3:.2f} ms" if v else f"{k} n/a" for k, v in cpu.items()
        )
    )
    print(f"one agent's compute per round in-process: {compute * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
