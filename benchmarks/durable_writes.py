"""The per-round durable writes of 16 agents writing at the same moment, as in a gossip round.

``--nodes`` processes (default 16) each own a state folder in one temporary folder (where
benchmarks/gossip.py puts the agents') and, released together by a barrier every round,
time one of:

* ``release ledger, in place``: :meth:`firmware_py.ledger.ReleaseLedger.advance` (one
  ``pwrite`` and one ``fdatasync`` of a slot), the record written before each send;
* ``record, renamed``: the same record as a JSON object written by
  :func:`firmware_py.checkpoint.atomic_write` (temporary file, fsync, rename, fsync the
  folder) — the baseline;
* ``checkpoint``: :func:`firmware_py.checkpoint.save` of a d-dimensional model (default
  d = 10⁵, 0.8 MB);
* ``model bytes, in place``: what a checkpoint written in place would cost (not built):
  the same model's bytes ``pwrite``-n into alternate halves of a preallocated file, one
  ``fdatasync``.

The kinds are interleaved ``--repeats`` times. Printed: the load average, per kind the
median over processes and rounds and the median of each round's slowest process (the one
its neighbours wait for), and the ratio in-place / renamed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

from firmware_py import checkpoint, ledger

SKIP = 2  # first rounds left out (file creation)
KINDS = ("release ledger, in place", "record, renamed", "checkpoint", "model bytes, in place")


def _node(u, folder, kind, dim, rounds, barrier, queue) -> None:
    folder = Path(folder) / f"node-{u}"
    folder.mkdir()
    ledger.create(folder / "ledger", b"a benchmark's noise secret, 32 B")
    record = ledger.ReleaseLedger(folder / "ledger", b"a benchmark's noise secret, 32 B")
    stream = ledger.stream_id("0" * 64, "run", u)
    record.claim(stream)
    body = {"round": 0, "state": {"theta": np.random.default_rng(u).random(dim)}}
    raw = memoryview(body["state"]["theta"]).cast("B")
    if kind == KINDS[3]:
        fd = os.open(folder / "slots", os.O_RDWR | os.O_CREAT, 0o600)
        os.write(fd, bytes(2 * len(raw)))  # allocated blocks: no metadata to commit later
        os.fsync(fd)
    times = []
    for r in range(rounds):
        barrier.wait()
        start = time.perf_counter()
        if kind == KINDS[0]:
            record.advance(stream, r, r.to_bytes(32, "little"))
        elif kind == KINDS[1]:
            checkpoint.atomic_write(folder / "sent.json", b'{"run": "run", "round": %d}' % r)
        elif kind == KINDS[2]:
            checkpoint.save(folder / "checkpoint", {**body, "round": r})
        else:
            os.pwrite(fd, raw, (r % 2) * len(raw))
            os.fdatasync(fd)
        times.append(time.perf_counter() - start)
    if kind == KINDS[3]:
        os.close(fd)
    queue.put(times[SKIP:])


def measure(kind: str, nodes: int, dim: int, rounds: int) -> tuple[float, float]:
    """(median over processes and rounds, median of each round's slowest) in seconds."""
    mp = multiprocessing.get_context("spawn")
    barrier, queue = mp.Barrier(nodes), mp.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            mp.Process(target=_node, args=(u, tmp, kind, dim, rounds, barrier, queue))
            for u in range(nodes)
        ]
        for p in procs:
            p.start()
        times = np.array([queue.get() for _ in procs])
        for p in procs:
            p.join()
    return float(np.median(times)), float(np.median(times.max(axis=0)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.rounds <= SKIP or args.repeats < 1 or args.nodes < 1:
        raise SystemExit(f"--rounds must be more than {SKIP}; --repeats and --nodes at least 1")
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2-core machine shared)")
    got = {kind: [] for kind in KINDS}
    for _ in range(args.repeats):
        for kind in KINDS:
            got[kind].append(measure(kind, args.nodes, args.dim, args.rounds))
    for kind, values in got.items():
        median = statistics.median(v[0] for v in values)
        slowest = statistics.median(v[1] for v in values)
        print(
            f"{kind:22s} median {median * 1e3:6.2f} ms, slowest per round {slowest * 1e3:6.2f} ms"
        )
    new, old = (statistics.median(v[0] for v in got[k]) for k in KINDS[:2])
    print(
        f"{args.nodes} processes writing together, {args.rounds} rounds x {args.repeats} "
        f"repeats; record in place / renamed: {new / old:.2f}; load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
