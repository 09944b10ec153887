"""Optimal prefix-sum factorizations (paper 003, Eq. 5-6): loss, certificate, time, memory.

For each setting prints the loss, the dual lower bound, the gap, the iterations and seconds
to reach a 1e-3 gap and to finish (default tolerance 1e-4), the peak traced memory
(tracemalloc, numpy allocations included) and the ratios of the DP-SGD (C = I) and
C = A (B = I) losses to the optimum. Reference point from the brief: the dense jax_privacy
optimizer needs ~26 min for T = 2000, (k, b) = (20, 100) on the same 2-core machine.
Paper 003 App. D.5, Table 1 (T = 2000, (20, 100)): optimal MF loss 6.5e5, dual bound 6.53e5.

    python benchmarks/mf_optimal.py [--quick] [--blas-threads N|none]
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

from edgedp.accounting.participation import Participation
from edgedp.planning import mf_optimal

SETTINGS = [(2000, 20, 100), (2000, 1, 2000), (500, 5, 100)]  # (T, k, b)


def run(T: int, k: int, b: int, blas_threads: int | None) -> None:
    H = mf_optimal.prefix_sum_gram(T)
    part = Participation(k, b)
    start = time.perf_counter()
    reached: dict[float, tuple[int, float]] = {}

    def progress(iteration: int, loss: float, bound: float) -> None:
        for tol in (1e-2, 1e-3):
            if tol not in reached and loss <= (1 + tol) * bound:
                reached[tol] = (iteration, time.perf_counter() - start)

    tracemalloc.start()
    tracemalloc.reset_peak()
    f = mf_optimal.optimize(H, participation=part, progress=progress, blas_threads=blas_threads)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    identity = mf_optimal.loss(np.eye(T), H, part)
    antipgd = mf_optimal.loss(np.tril(np.ones((T, T))), H, part)
    it3, sec3 = reached.get(1e-3, (-1, float("nan")))
    print(f"T={T} (k,b)=({k},{b})")
    print(f"  loss {f.loss:.6e}  dual bound {f.dual_bound:.6e}  gap {f.gap:.2e}")
    print(f"  gap<=1e-3 after {it3} iterations, {sec3:.1f} s")
    print(f"  finished: {f.iterations} iterations, {f.seconds:.1f} s, converged={f.converged}")
    print(f"  peak traced memory {peak / 2**20:.0f} MiB;  min X entry {f.X.min():.2e}")
    print(
        f"  loss ratio to optimum: identity (DP-SGD) {identity / f.loss:.3f}, "
        f"C=A (B=I) {antipgd / f.loss:.3f}"
    )
    if (T, k, b) == (2000, 20, 100):
        print("  paper 003 Table 1: MF loss 6.5e5, dual lower bound 6.53e5 (within 0.2%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only T = 500, (5, 100)")
    ap.add_argument("--blas-threads", default="1", help="BLAS threads in the solve, or 'none'")
    args = ap.parse_args()
    threads = None if args.blas_threads.lower() == "none" else int(args.blas_threads)
    print(f"blas_threads={threads}")
    for T, k, b in SETTINGS[2:] if args.quick else SETTINGS:
        run(T, k, b, threads)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"process peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
