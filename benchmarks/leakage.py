"""Time of the M-NMI estimates of paper 004 Table 4: 1,000 KSG estimates at N = 5,000.

Scalar V and I (I = V + E, SNR 1) for every iteration; our batched
:func:`sim.leakage.ksg_mi` against npeet-plus's ``mi`` called once per iteration on the
same samples (each adds its own tie noise; the printed difference is the largest gap
between the two estimates). Partial for now: the full Table 4 computation (simulation of
paper 004's Alg. 1 plus the estimates, per attacker) is added once sr-gt lands (issue 5).
Needs the dev extra (npeet-plus). Run: python benchmarks/leakage.py [--iterations 1000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _timing import median_seconds

from sim import leakage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of our estimator (median)")
    args = ap.parse_args()
    from npeet_plus import mi as npeet_mi

    g = np.random.default_rng(0)
    v = g.standard_normal((args.iterations, args.samples, 1))
    obs = v + g.standard_normal(v.shape)

    def ours(workers):
        return leakage.ksg_mi(v, obs, rng=np.random.default_rng(1), workers=workers)

    t1 = median_seconds(lambda: ours(1), args.repeats)
    tall = median_seconds(lambda: ours(-1), args.repeats)
    est = ours(1)
    start = time.perf_counter()
    ref = np.array([npeet_mi(a, b) for a, b in zip(v, obs, strict=True)])
    theirs = time.perf_counter() - start
    it = args.iterations
    print(f"{it} MI estimates, N = {args.samples:,}, k = {leakage.DEFAULT_NEIGHBORS}, scalar V, I")
    for label, sec in (("1 thread", t1), ("all cores", tall)):
        print(
            f"  sim.leakage.ksg_mi ({label:>9}): {sec:8.2f} s  ({sec / it * 1e3:6.2f} ms per "
            f"estimate)  ratio npeet / ours: {theirs / sec:.1f}x"
        )
    print(
        f"  npeet-plus mi, one call each: {theirs:8.2f} s  ({theirs / it * 1e3:6.2f} ms per call)"
    )
    print(f"  largest |difference| (independent tie noise): {np.max(np.abs(est - ref)):.2e} bits")


if __name__ == "__main__":
    main()
