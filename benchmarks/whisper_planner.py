"""Planner time for Whisper's covariance program (paper 001 Eq. 10) and its compact forms.

For ER graphs with mean degree ≈ 10 and n ∈ {20, 100, 300, 1000}: the structured dual solver
(:func:`edgedp.families.cross.covariance.optimal_covariance`, one BLAS thread), the compact fits
(``local`` and ``lowrank`` r = 8, n <= 300; :mod:`edgedp.families.cross.compact_covariance`) and,
for n <= 50, cvxpy/Clarabel on the 2n × 2n LMI form, with the certified gap and the compact /
dense utility ratio. Run: python benchmarks/whisper_planner.py [--max-n 300]
"""

from __future__ import annotations

import argparse
import time

import edgedp_topologies
from edgedp import topology
from edgedp.families.cross import compact_covariance
from edgedp.families.cross import covariance as whisper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-n", type=int, default=1000)
    ap.add_argument("--cvxpy-max-n", type=int, default=50)
    args = ap.parse_args()
    print(
        f"{'n':>5} {'edges':>6} {'dense s':>8} {'gap':>8} {'local s':>8} {'ratio':>7} "
        f"{'lowrank8 s':>10} {'ratio':>7} {'cvxpy s':>8} {'rel.diff':>9}"
    )
    for n in (20, 50, 100, 300, 1000):
        if n > args.max_n:
            break
        g = edgedp_topologies.parse(f"er:{n}:{min(1.0, 10 / n)}:0")
        W = topology.metropolis_hastings(g)
        dense = whisper.optimal_covariance(W)
        t = time.perf_counter()
        local = (
            compact_covariance.fit(W, g.edges, dense.covariance, form="local") if n <= 300 else None
        )
        t_local = time.perf_counter() - t
        t = time.perf_counter()
        low = None
        if n <= 300:
            low = compact_covariance.fit(W, g.edges, dense.covariance, form="lowrank", rank=8)
        t_low = time.perf_counter() - t
        cvx = ""
        if n <= args.cvxpy_max_n:
            ref = whisper.optimal_covariance_cvxpy(W)
            cvx = (
                f"{ref.seconds:>8.2f} {abs(ref.objective - dense.objective) / ref.objective:>9.1e}"
            )
        loc = f"{t_local:>8.2f} {local.ratio:>7.4f}" if local else f"{'-':>8} {'-':>7}"
        lo = f"{t_low:>10.2f} {low.ratio:>7.4f}" if low else f"{'-':>10} {'-':>7}"
        print(
            f"{n:>5} {len(g.edges):>6} {dense.seconds:>8.2f} {dense.gap:>8.1e} {loc} {lo} {cvx}",
            flush=True,
        )


if __name__ == "__main__":
    main()
