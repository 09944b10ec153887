"""Per-step cost of each temporal factor at d = 10^6, as a ratio to drawing d iid normals.

Prints, for each factor: seconds per step (median of repeats), the ratio to one
``rng.gaussian(key, t, (d,))`` call measured in the same run, and the streaming state's
memory in bytes. The dense factor regenerates past normals, so its cost grows with t; it is
reported at t = 1, 8 and 32.
"""

from __future__ import annotations

import argparse

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds

from edgedp import factors, rng


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    d = args.dim
    key = rng.derive_key(rng.seed_secret(0), "bench")

    def draw(t):
        return rng.gaussian(key, t, (d,))

    base = median_seconds(lambda: draw(0), args.repeats)
    print(f"d = {d:,}; baseline: {base * 1e3:.2f} ms per step to draw d iid normals")
    print(f"{'factor':<22}{'ms/step':>10}{'ratio':>8}{'state bytes':>14}")
    T = 64  # noqa: N806
    C = np.tril(np.full((T, T), 0.3)) + np.eye(T)  # noqa: N806
    cases = [
        ("identity", factors.Identity(), [1]),
        ("antipgd", factors.AntiPGD(), [1]),
        ("banded (p=4)", factors.Banded.from_matrix(np.tril(C) - np.tril(C, k=-4), 4), [8]),
        ("banded (p=16)", factors.Banded.from_matrix(np.tril(C) - np.tril(C, k=-16), 16), [32]),
        ("dense", factors.Dense(C), [1, 8, 32]),
    ]
    for name, f, at_steps in cases:
        for t in at_steps:
            state = f.init((d,))
            for _ in range(t):
                _, state = f.next(draw, state)
            frozen = state
            sec = median_seconds(lambda f=f, s=frozen: f.next(draw, s), args.repeats)
            label = f"{name} t={t}" if len(at_steps) > 1 else name
            print(f"{label:<22}{sec * 1e3:>10.2f}{sec / base:>8.2f}{f.state_bytes(d):>14,}")


if __name__ == "__main__":
    main()
