"""Time and peak memory of the PNDP accountant (paper 000 §7.1) for every attacker→victim pair.

The issue's target: a 150-node graph with T = 200 in minutes, not hours. Prints, for a
connected Erdős–Rényi graph G(150, p) with Metropolis–Hastings weights, DP-D-SGD with (T, 1)
participation and every node in turn as the attacker (all n(n−1) pairs): wall time, the
tracemalloc peak of numpy allocations during the same run, and the process's max RSS. For
scale it times the naive computation — B = [P W_T; K_Z] materialized, B†B from a
pseudo-inverse of the (m+1)T × nT matrix per attacker — against the structured one at a small
size (n = 24, T = 40) in the same run. OpenBLAS threads are limited with threadpoolctl
(default 1: on a shared 2-core machine, multithreaded small GEMMs stall under load).
"""

# ruff: noqa: N806

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds

import edgedp_topologies
from edgedp import topology
from edgedp.accounting import pndp
from edgedp.accounting.participation import Participation


def naive_all_pairs(W: np.ndarray, graph, T: int) -> np.ndarray:
    """Σ|X_vv| for all pairs from explicit nT × nT matrices (App. A.2 + Lemma 11, C = I)."""
    n = W.shape[0]
    WT = np.zeros((n * T, n * T))
    power = np.eye(n)
    for k in range(T):
        for t in range(k, T):
            WT[t * n : (t + 1) * n, (t - k) * n : (t - k + 1) * n] = power
        power = power @ W
    out = np.zeros((n, n))
    for a in range(n):
        rows = [t * n + i for t in range(T) for i in graph.neighbours(a)]
        own = [t * n + a for t in range(T)]
        B = np.vstack([WT[rows], np.eye(n * T)[own]])
        proj = np.linalg.pinv(B) @ B
        for v in range(n):
            if v != a:
                idx = np.arange(T) * n + v
                out[a, v] = np.abs(proj[np.ix_(idx, idx)]).sum()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=150)
    ap.add_argument("--p", type=float, default=0.2, help="ER edge probability")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, default=1)
    args = ap.parse_args()
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads)
        threads = str(args.blas_threads)
    except ImportError:
        threads = "library default (threadpoolctl not installed)"
    print(f"BLAS threads: {threads}; load average at start: {os.getloadavg()[0]:.2f}")

    small = edgedp_topologies.erdos_renyi(24, 0.25, seed=args.seed)
    W_small, T_small = topology.metropolis_hastings(small), 40
    setting = pndp.PNDPSetting(
        W_small, np.eye(T_small), Participation(T_small, 1), 1.0, np.asarray(small.edges)
    )
    naive = median_seconds(lambda: naive_all_pairs(W_small, small, T_small), 1)
    fast = median_seconds(lambda: pndp.pndp_guarantees(setting), 3)
    ref = naive_all_pairs(W_small, small, T_small)
    res = pndp.pndp_guarantees(setting)
    got = res.sensitivity**2
    want = np.minimum(ref[res.attacker_index, res.victim], T_small)
    print(
        f"small n=24, T={T_small} (nT={24 * T_small}), all {len(res)} pairs: naive "
        f"{naive:.2f} s, structured {fast:.3f} s ({naive / fast:.0f}x faster); "
        f"max |Δ sens²| = {np.abs(got - want).max():.1e}"
    )

    graph = edgedp_topologies.erdos_renyi(args.nodes, args.p, seed=args.seed)
    W, T = topology.metropolis_hastings(graph), args.steps
    print(
        f"graph {graph.name}: n={graph.n}, |E|={len(graph.edges)}, degree "
        f"min/mean/max {graph.degrees.min()}/{graph.degrees.mean():.1f}/{graph.degrees.max()}, "
        f"T={T}, nT={graph.n * T}"
    )
    setting = pndp.PNDPSetting(W, np.eye(T), Participation(T, 1), 1.0, np.asarray(graph.edges))
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done % 25 == 0 or done == total:
            print(f"  {done}/{total} attackers, {time.perf_counter() - start:.0f} s", flush=True)

    tracemalloc.start()
    try:
        res = pndp.pndp_guarantees(setting, progress=progress)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    sec = time.perf_counter() - start
    print(
        f"all {len(res)} pairs: {sec:.1f} s ({sec / graph.n:.2f} s per attacker), "
        f"peak numpy memory {peak / 2**20:.0f} MB; naive estimate at this size "
        f"(pinv of an (m+1)T x nT matrix, ~(nT)^3 per attacker) would be about "
        f"{naive * (graph.n / 24) ** 4 * (T / T_small) ** 3 / 3600:.0f} h"
    )
    for d in np.unique(res.distance):
        sel = res.distance == d
        print(
            f"  distance {d:.0f}: {sel.sum():5d} pairs, mu/mu_LDP min {res.mu[sel].min():.4f} "
            f"mean {res.mu[sel].mean():.4f} max {res.mu[sel].max():.4f}"
        )
    scale = 1 if sys.platform == "darwin" else 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    print(f"max resident set size of this process: {rss / 2**20:.0f} MB; cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
