"""Time for a node that fell behind to rejoin: real agent processes on 127.0.0.1.

8 agents (ER(8, 0.5), DP-D-SGD, 1 s round deadline) run a few rounds; then 25% of them
are killed (SIGKILL) and restarted after 20 s, by which time their neighbours are ~20
rounds ahead — more than the 8-round receive window. Measured per restarted node: the time
from its restart to the end of the first round in which it mixed a neighbour's message
and a neighbour mixed its message ("exchange again"), the rounds it skipped to rejoin,
and the neighbours' missing count after the restart. "never" means no such round came
before the run ended. Baseline in the same run: the median round time before the kill.
A restarted node first uses the messages its neighbours' links queued for it (16 each) and
skips rounds only if they are still past its window after that (e.g. ``--down 40``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy


def _round_lines(run, u):
    return [m for m in run.metrics(u) if m["event"] == "round"]


def _wait_round(run, u, r, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(m["round"] >= r for m in _round_lines(run, u)):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"node {u} did not reach round {r}")


def recovery(run, plan, u, restarted_at):
    """(seconds from restart to the first two-way exchange or None, rounds skipped)."""
    lines = run.metrics(u)
    skipped = sum(m.get("skipped", 0) for m in lines if m["event"] == "rejoin")
    nbrs = set(plan.share(u).neighbours) - {u}
    heard_by = {}  # round -> neighbours that mixed u's message of that round
    for v in nbrs:
        for m in _round_lines(run, v):
            if m["time"] >= restarted_at and u not in m["missing"]:
                heard_by.setdefault(m["round"], set()).add(v)
    for m in lines:
        if m["event"] != "round" or m["time"] < restarted_at:
            continue
        if set(m["missing"]) != nbrs and heard_by.get(m["round"]):
            return m["time"] - restarted_at, skipped
    return None, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="er:8:0.5:4")
    ap.add_argument("--kill-fraction", type=float, default=0.25)
    ap.add_argument("--down", type=float, default=20.0, help="seconds the victims stay down")
    ap.add_argument("--round-timeout", type=float, default=1.0)
    ap.add_argument("--after", type=int, default=30, help="rounds planned after the restart")
    args = ap.parse_args()
    graph = edgedp_topologies.parse(args.topology)
    n, warm = graph.n, 6
    steps = warm + int(args.down / args.round_timeout) + args.after
    victims = sorted(
        int(v)
        for v in np.random.default_rng(0).choice(
            n, size=max(1, round(args.kill_fraction * n)), replace=False
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plan = make_plan(
            "dp-dsgd",
            graph,
            steps=steps,
            participation=Participation(steps, 1),
            clip_norm=1.0,
            learning_rate=0.3,
            noise_multiplier=1.5,
            seed=21,
            topology_name=args.topology,
            task=TaskSpec(dataset="synthetic-logistic"),
        )
        (tmp / "run.plan").write_bytes(plan.to_bytes())
        run = deploy.local_run(
            tmp / "run.plan", tmp / "run", round_timeout=args.round_timeout, startup_timeout=60
        )
        _wait_round(run, victims[0], warm)
        for u in victims:
            os.kill(run.processes[u].pid, signal.SIGKILL)
            run.processes[u].wait()
        killed_at = time.time()
        time.sleep(args.down)
        restarted_at = time.time()
        fronts = [max(m["round"] for m in _round_lines(run, u)) for u in range(n)]
        for u in victims:
            run.start(u)
        codes = run.wait(timeout=steps * args.round_timeout * 3 + 120)
        before = []
        for u in range(n):
            ends = [m["time"] for m in _round_lines(run, u) if m["time"] < killed_at]
            before += list(np.diff(ends))
        print(
            f"{n} agents ({args.topology}), {steps} rounds, deadline {args.round_timeout:g} s; "
            f"killed {victims} after round {warm}, restarted {args.down:g} s later"
        )
        print(f"exit codes: {codes}")
        print(f"baseline: median round time before the kill {statistics.median(before):.3f} s")
        print(
            f"rounds at restart: victims {[fronts[u] for u in victims]}, others "
            f"{[fronts[u] for u in range(n) if u not in victims]}"
        )
        for u in victims:
            seconds, skipped = recovery(run, plan, u, restarted_at)
            nbrs = sorted(set(plan.share(u).neighbours) - {u})
            missing_after = sum(
                u in m["missing"]
                for v in nbrs
                for m in _round_lines(run, v)
                if m["time"] >= restarted_at
            )
            shown = "never" if seconds is None else f"{seconds:.2f} s"
            print(
                f"node {u}: time to exchange again {shown}; rounds skipped {skipped}; "
                f"neighbours {nbrs} missed it {missing_after} times after the restart"
            )


if __name__ == "__main__":
    main()
