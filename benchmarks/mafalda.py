"""Time and peak memory of the MAFALDA workload Gram H (paper 000, Lemma 10) on a 271-node graph.

DESIGN §4: a 271-node graph with T = 2,000 must plan on a laptop. Prints, for a connected
Erdős–Rényi graph G(271, p) with Metropolis–Hastings weights (symmetric path) and with
uniform-neighbour weights (reversible, non-symmetric path), at T = 500 and T = 2,000:
seconds (median of repeats), the tracemalloc peak of numpy allocations during one call,
and the ratio to the brute-force construction (explicit nT × nT matrices) timed at a small
size in the same run. The process's maximum resident set size is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

from _timing import median_seconds, peak_bytes

import edgedp_topologies
from edgedp import topology
from edgedp.families.mf import mafalda


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=271)
    ap.add_argument("--p", type=float, default=0.05, help="ER edge probability")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, nargs="+", default=[500, 2000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    # brute force at a small size: n = 20, T = 50 (nT = 1,000), same weighting
    small_graph = edgedp_topologies.erdos_renyi(20, 0.2, seed=args.seed)
    small_W = topology.metropolis_hastings(small_graph)
    small_T = 50
    brute = median_seconds(
        lambda: mafalda.workload_gram_bruteforce(small_W, steps=small_T), args.repeats
    )
    fast_small = median_seconds(lambda: mafalda.workload_gram(small_W, steps=small_T), args.repeats)
    print(
        f"brute force n=20, T={small_T} (nT=1,000): {brute * 1e3:.1f} ms; "
        f"workload_gram at the same size: {fast_small * 1e3:.2f} ms "
        f"({brute / fast_small:.0f}x faster)"
    )

    graph = edgedp_topologies.erdos_renyi(args.nodes, args.p, seed=args.seed)
    print(
        f"graph {graph.name}: n={graph.n}, |E|={len(graph.edges)}, "
        f"max degree {int(graph.degrees.max())}"
    )
    print(f"{'weights':<22}{'T':>6}{'seconds':>10}{'peak MB':>10}{'H MB':>8}{'/brute':>9}")
    for name in ("metropolis-hastings", "uniform-neighbour"):
        W = topology.WEIGHTINGS[name](graph)
        for T in args.steps:

            def run(W=W, T=T):
                return mafalda.workload_gram(W, steps=T)

            sec = median_seconds(run, args.repeats)
            peak = peak_bytes(run)
            print(
                f"{name:<22}{T:>6}{sec:>10.3f}{peak / 2**20:>10.1f}"
                f"{T * T * 8 / 2**20:>8.1f}{sec / brute:>9.2f}"
            )
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    print(f"max resident set size of this process: {rss / 2**20:.0f} MB; cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
