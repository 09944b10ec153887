"""Scale on one machine: the event engine's cost per node-round at 10⁴ nodes against 10³, and
the batch engine at 10⁵ nodes, with memory per node; ratios measured in the same run.

Every size runs in a fresh child process (one thread; ``--pin``: on CPU 0), so
its peak resident memory (``ru_maxrss``) is its own; "per node" is (peak − the child's
resident memory after its imports) / n: everything the run holds that grows with n — graph,
plan, data, link draws, agents or the batch engine's arrays. Times are CPU seconds of the
child (the machine is shared; its CPU time is the steadier measure).

* **event engine** (``--event-sizes``, default 1,000 and 10,000): ER graphs of the same mean
  degree at every size (``--degree``, default 12: the cost of a node-round grows with its
  messages, so growing the degree with n, as ``sim_scale.py --curve`` does to stay
  connected, would measure the degree, not the scale), d = 100, lognormal latency (median
  30 ms), 50 Mbit/s uplinks, 5 % dropouts, ``--event-rounds`` rounds. Setup (agents, keys,
  link draws) and the run are timed separately; the ratio is of the whole engine call.
* **batch engine** (``--batch-sizes``, default 10,000 and 100,000): the same graphs and plan
  (DP-D-SGD, sparse gossip over the plan's (n, slots) weight table), logistic regression
  with d = ``--batch-dim`` (default 11), ``--batch-rounds`` (default 100) rounds, one trial.

With ``--before TREE`` (a checkout, e.g. ``git archive main | tar -x -C /tmp/before``) every
size also runs on that tree's code, and the table shows both.

Run: python benchmarks/scale.py [--event-sizes 1000,10000] [--event-rounds 10]
     [--batch-sizes 10000,100000] [--batch-rounds 100] [--before TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)
import dataclasses, gc, json, os, resource, sys, time
import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine
from edgedp_sim.churn import Faults
from edgedp_sim.links import Latency, Network

kind, n, T, d, degree = sys.argv[1], *map(int, sys.argv[2:5]), float(sys.argv[5])
if sys.argv[6] == "pin" and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {0})
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
base = rss()
cpu = time.process_time()
graph = edgedp_topologies.parse(f"er:{n}:{degree / n}:1")
task = TaskSpec(dataset=f"synthetic-logistic:{d - 1}:{n * 10}")
plan = make_plan("dp-dsgd", graph, steps=T, participation=Participation(T, 1), clip_norm=1.0,
                 learning_rate=0.3, noise_multiplier=1.0, task=task)
data = datasets.partition(datasets.load(task.dataset, seed=0), n, seed=0)
data = dataclasses.replace(data, x_test=data.x_test[:2000], y_test=data.y_test[:2000])
out = {"kind": kind, "nodes": n, "rounds": T, "dim": d, "degree": float(graph.degrees.mean()),
       "inputs_cpu_s": time.process_time() - cpu, "base_mb": base}
if kind == "event":
    net = Network(latency=Latency.from_dict({"kind": "lognormal", "median_ms": 30, "sigma": 0.5}),
                  bandwidth_mbps=50, round_timeout_s=1.0)
    cpu = time.process_time()
    sim = engine._Sim(plan, data, net, Faults(dropout=0.05), 1, T, None)
    out["setup_cpu_s"] = time.process_time() - cpu
    del sim
    gc.collect()  # the agents' callbacks hold the set-up in cycles
    cpu = time.process_time()
    res = engine.run(plan, data, network=net, faults=Faults(dropout=0.05), seed=1, eval_every=T)
    out["digest"], out["messages"] = res.model_digest[:16], res.messages
else:
    cpu = time.process_time()
    res = batch.run(plan, data, trials=1, eval_every=T)
    out["digest"] = res.digests[0][:16]
out["cpu_s"] = time.process_time() - cpu
out["peak_mb"] = rss()
print(json.dumps(out))
"""


def _child(tree: Path, kind: str, n: int, rounds: int, dim: int, degree: float, pin: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-c", CHILD, kind, str(n), str(rounds), str(dim), str(degree)]
    cmd.append("pin" if pin else "any")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode:
        raise SystemExit(f"{kind} at {n} nodes failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _row(label: str, r: dict, first: dict | None) -> str:
    per = r["cpu_s"] / (r["nodes"] * r["rounds"]) * 1e6
    ratio = (
        ""
        if first is None
        else f"{per / (first['cpu_s'] / (first['nodes'] * first['rounds']) * 1e6):6.2f}x"
    )
    per_node_kb = (r["peak_mb"] - r["base_mb"]) * 1024 / r["nodes"]
    setup = f"{r['setup_cpu_s']:7.1f}" if "setup_cpu_s" in r else f"{'-':>7}"
    return (
        f"{label:<14}{r['nodes']:>8,}{r['degree']:>7.1f}{r['rounds']:>7}{r['cpu_s']:>9.1f}"
        f"{setup}{per:>10.1f}{ratio:>8}{r['peak_mb']:>9.0f}{per_node_kb:>10.1f}  {r['digest']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sizes = lambda s: tuple(int(x) for x in s.split(","))  # noqa: E731
    ap.add_argument("--event-sizes", type=sizes, default=(1000, 10000))
    ap.add_argument("--event-rounds", type=int, default=10)
    ap.add_argument("--batch-sizes", type=sizes, default=(10000, 100000))
    ap.add_argument("--batch-rounds", type=int, default=100)
    ap.add_argument("--batch-dim", type=int, default=11)
    ap.add_argument("--degree", type=float, default=12.0)
    ap.add_argument("--before", type=Path, help="also run every size on this checkout")
    ap.add_argument(
        "--pin", action="store_true", help="pin each child to CPU 0 (one thread either way)"
    )
    args = ap.parse_args()
    trees = [("this tree", HERE)] + ([("before", args.before.resolve())] if args.before else [])
    print(f"load average {os.getloadavg()[0]:.2f} at the start (2 cores shared)", flush=True)
    head = (
        f"{'code':<14}{'nodes':>8}{'degree':>7}{'rounds':>7}{'CPU s':>9}{'setup':>7}"
        f"{'us/n-rnd':>10}{'ratio':>8}{'peak MB':>9}{'KB/node':>10}  digest"
    )
    for kind, sizes_, rounds, dim in (
        ("event", args.event_sizes, args.event_rounds, 100),
        ("batch", args.batch_sizes, args.batch_rounds, args.batch_dim),
    ):
        print(
            f"\n{kind} engine, d = {dim}, ER mean degree {args.degree:g}; ratio: CPU per "
            "node-round against the first size of the same code",
            flush=True,
        )
        print(head, flush=True)
        for label, tree in trees:
            first = None
            for n in sizes_:
                r = _child(tree, kind, n, rounds, dim, args.degree, args.pin)
                print(_row(label, r, first), flush=True)
                first = first or r
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
