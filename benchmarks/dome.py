"""Per-round cost of DOME's shared sketch on a device, as a ratio to drawing d iid normals.

For each (d, k) and basis family: building the round's basis S_t (every node does it, from
the public seed), projecting Sᵀx, lifting S c, and the whole sketched round of one node
(project the gradient, k normals, lift, project the half-step model, lift the mixed
coefficients); the baseline is DP-D-SGD's one ``rng.gaussian(key, t, (d,))``. Also prints
the message size (wire frames: msgpack header + 8 bytes per float) relative to d floats.
The ``gaussian`` family (CGS2 of k Gaussian vectors, O(d·k²)) is timed only where it fits
a few seconds; numpy's LAPACK QR of the same d×k matrix is shown for reference (BLAS: fast,
but not the fixed summation order the engines need for identical bits).

Run: python benchmarks/dome.py [--repeats 3]
"""

from __future__ import annotations

import argparse

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds

from edgedp import rng, wire
from edgedp.families.dome import sketch

CASES = [(19_210, 192), (19_210, 1_921), (100_000, 1_000), (100_000, 10_000)]
GAUSSIAN_MAX_WORK = 2e10  # d·k² above which the CGS2 basis is not timed


def _wire_bytes(k: int) -> int:
    frames = wire.encode(wire.Message(bytes(32), 0, 0, "model", (np.zeros(k),)))
    return sum(len(f) for f in frames)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    key = rng.derive_key(rng.seed_secret(0), "bench")
    print(
        f"{'d':>8}{'k':>7} {'basis':<9}{'build ms':>10}{'proj ms':>9}{'lift ms':>9}"
        f"{'round ms':>10}{'x normals':>11}{'msg bytes':>11}{'ratio':>8}"
    )
    for d, k in CASES:
        base = median_seconds(lambda d=d: rng.gaussian(key, 0, (d,)), args.repeats)
        x = rng.gaussian(key, 1, (d,))
        full_bytes = _wire_bytes(d)
        for kind in sketch.BASES:
            spec = sketch.SketchSpec(dim=k, basis=kind, seed=1)
            if kind == "gaussian" and d * k * k > GAUSSIAN_MAX_WORK:
                work = d * k * k
                print(f"{d:>8}{k:>7} {kind:<9}  (not timed: d·k² = {work:.1e})")
                continue
            build = median_seconds(lambda s=spec, d=d: sketch.basis(s, 0, d), args.repeats)
            S = sketch.basis(spec, 0, d)  # noqa: N806
            c = S.project(x)
            proj = median_seconds(lambda S=S, x=x: S.project(x), args.repeats)
            lift = median_seconds(lambda S=S, c=c: S.lift(c), args.repeats)

            def one_round(S=S, k=k, x=x):  # noqa: N803
                coef = S.project(x) + rng.gaussian(key, 2, (k,))
                half = x - 0.1 * S.lift(coef)
                msg = S.project(half)
                return half + S.lift(msg - S.project(half))

            rnd = median_seconds(one_round, args.repeats)
            total = build + rnd
            msg = _wire_bytes(k)
            print(
                f"{d:>8}{k:>7} {kind:<9}{build * 1e3:>10.2f}{proj * 1e3:>9.2f}"
                f"{lift * 1e3:>9.2f}{total * 1e3:>10.2f}{total / base:>11.1f}{msg:>11,}"
                f"{msg / full_bytes:>8.4f}"
            )
        if d * k * k <= 50 * GAUSSIAN_MAX_WORK:
            G = rng.gaussian(key, 3, (d, k))  # noqa: N806
            qr = median_seconds(lambda G=G: np.linalg.qr(G), 1)
            print(f"{d:>8}{k:>7} {'lapack qr':<9}{qr * 1e3:>10.2f}  (reference, BLAS)")
        print(
            f"{d:>8}{'':>7} {'d normals':<9}{base * 1e3:>10.2f}"
            f"  (DP-D-SGD's noise; d floats = {full_bytes:,} bytes)"
        )


if __name__ == "__main__":
    main()
