"""MAFALDA planning for a 271-node connected ER graph, T = 2,000, (k, b) = (20, 100).

DESIGN §4: "a 271-node graph with T = 2,000 must plan on a laptop". Measures, for
G(271, p = 0.05) with Metropolis–Hastings weights:

(a) the workload Gram H = Σᵢ AᵢᵀAᵢ of paper 000 Lemma 10 (``mafalda.workload_gram``): median
    wall time over repeats and the tracemalloc peak of one call;
(b) the optimal factorization for H (``mf_optimal.optimize``): loss, dual bound, gap,
    iterations, wall time (one run, traced by tracemalloc, as benchmarks/mf_optimal.py does)
    and its tracemalloc peak;

then the process's peak RSS (``resource.getrusage``) after each phase. For context it also
prices C = I (DP-D-SGD) and C = lower-triangular ones (AntiPGD) on the same H, and, unless
``--no-dmf``, the D-MF factor (the prefix-sum optimum under the same participation, planned
the same way) — the loss ratios say how much a topology-aware factor saves.

    python benchmarks/mafalda_plan.py [--quick] [--no-dmf]

``--quick``: T = 500 with (k, b) = (5, 100).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds, peak_bytes

import edgedp_topologies
from edgedp import topology
from edgedp.accounting.participation import Participation
from edgedp.families.mf import mafalda
from edgedp.planning import mf_optimal

NODES = 271
EDGE_P = 0.05
GRAPH_SEED = 0
TOLERANCE = 1e-4  # optimize's default: stop at a 1e-4 relative duality gap


def rss_mib() -> float:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def solve(H: np.ndarray, part: Participation, label: str):
    start = time.perf_counter()
    last = [start]

    def progress(iteration: int, loss: float, bound: float) -> None:
        now = time.perf_counter()
        if now - last[0] >= 5.0 or iteration == 0:
            last[0] = now
            gap = loss / bound - 1.0
            print(
                f"  [{label}] iteration {iteration:4d}  loss {loss:.6e}  bound {bound:.6e}  "
                f"gap {gap:.2e}  {now - start:6.1f} s",
                flush=True,
            )

    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        f = mf_optimal.optimize(H, participation=part, tolerance=TOLERANCE, progress=progress)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return f, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="T = 500, (k, b) = (5, 100)")
    ap.add_argument("--no-dmf", action="store_true", help="skip the D-MF comparison")
    ap.add_argument("--repeats", type=int, default=3, help="repeats for the Gram timing")
    args = ap.parse_args()
    T, part = (500, Participation(5, 100)) if args.quick else (2000, Participation(20, 100))

    t0 = time.perf_counter()
    graph = edgedp_topologies.erdos_renyi(NODES, EDGE_P, seed=GRAPH_SEED)
    W = topology.metropolis_hastings(graph)
    print(
        f"graph {graph.name}: n={graph.n}, |E|={len(graph.edges)}, degrees "
        f"{int(graph.degrees.min())}..{int(graph.degrees.max())}, spectral gap "
        f"{topology.spectral_gap(W):.4f} (Metropolis-Hastings); T={T}, "
        f"(k,b)=({part.k},{part.b}); built in {time.perf_counter() - t0:.2f} s",
        flush=True,
    )
    print(f"RSS before planning: {rss_mib():.0f} MiB")

    # (a) workload Gram
    def gram():
        return mafalda.workload_gram(W, steps=T)

    sec = median_seconds(gram, args.repeats)
    peak = peak_bytes(gram)
    H = gram()
    print(
        f"(a) workload_gram: {sec:.3f} s (median of {args.repeats}), tracemalloc peak "
        f"{peak / 2**20:.1f} MiB (H itself {H.nbytes / 2**20:.1f} MiB); "
        f"peak RSS so far {rss_mib():.0f} MiB",
        flush=True,
    )

    # (b) optimal factorization for H
    print("(b) mf_optimal.optimize(H) ...", flush=True)
    f, opt_peak = solve(H, part, "mafalda")
    print(
        f"(b) loss {f.loss:.6e}  dual bound {f.dual_bound:.6e}  gap {f.gap:.2e}  "
        f"iterations {f.iterations}  {f.seconds:.1f} s  converged={f.converged}\n"
        f"    tracemalloc peak {opt_peak / 2**20:.0f} MiB; peak RSS so far {rss_mib():.0f} MiB",
        flush=True,
    )
    total = sec + f.seconds
    print(f"MAFALDA planning total (Gram + optimize): {total:.1f} s")

    identity = mf_optimal.loss(np.eye(T), H, part)
    antipgd = mf_optimal.loss(np.tril(np.ones((T, T))), H, part)
    print(
        f"loss on this H relative to MAFALDA's: DP-D-SGD (C=I) {identity / f.loss:.3f}, "
        f"AntiPGD {antipgd / f.loss:.3f}",
        flush=True,
    )
    if not args.no_dmf:
        print("D-MF: optimize(prefix-sum Gram) under the same participation ...", flush=True)
        d, _ = solve(mf_optimal.prefix_sum_gram(T), part, "dmf")
        dmf = mf_optimal.loss(d.C, H, part)
        print(
            f"D-MF factor ({d.seconds:.1f} s, gap {d.gap:.1e} on the prefix sum): loss on "
            f"this H relative to MAFALDA's {dmf / f.loss:.3f}; relative to DP-D-SGD "
            f"{dmf / identity:.3f} (MAFALDA: {f.loss / identity:.3f})"
        )
    print(f"process peak RSS {rss_mib():.0f} MiB; wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
