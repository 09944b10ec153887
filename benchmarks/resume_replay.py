"""Resume cost: regenerating a temporal factor's state at step t (checkpoints hold no noise).

A checkpoint holds no noise buffers; on resume ``NoiseSource.state_at(t)`` rebuilds the
factor's state from the key (edgedp.factors ``state_at``): nothing for identity and dense,
one draw for AntiPGD, a replay of t steps for banded and BLT. Prints seconds per factor at
d = 10^5, t = 1,000 (defaults), next to the cost of one step's noise, and checks the rebuilt
state equals the streamed one bit for bit.
"""

from __future__ import annotations

import argparse
import time

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

from edgedp import factors, rng
from edgedp.noise import NoiseSource


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--step", type=int, default=1000)
    args = ap.parse_args()
    d, t = args.dim, args.step
    T = t + 1  # noqa: N806 (a horizon covering step t)
    C = np.tril(np.full((T, T), 0.3)) + np.eye(T)  # noqa: N806
    key = np.array(rng.derive_key(rng.seed_secret(0), "bench"), dtype=object)
    cases = [
        ("identity", factors.Identity()),
        ("antipgd", factors.AntiPGD()),
        ("banded (p=4)", factors.Banded.from_matrix(np.tril(C) - np.tril(C, k=-4), 4)),
        ("banded (p=16)", factors.Banded.from_matrix(np.tril(C) - np.tril(C, k=-16), 16)),
        ("blt (4 buffers)", factors.BLT((0.99, 0.9, 0.6, 0.1), (0.05, 0.2, 0.3, 0.1))),
        ("dense", factors.Dense(C)),
    ]
    print(f"d = {d:,}, resume at step t = {t:,}")
    print(f"{'factor':<18}{'state_at (s)':>14}{'one step (s)':>14}{'state bytes':>14}")
    for name, factor in cases:
        src = NoiseSource(factor, key, d, 1.0)
        start = time.perf_counter()
        rebuilt = src.state_at(t)
        replay = time.perf_counter() - start
        start = time.perf_counter()
        src.next(rebuilt)
        one = time.perf_counter() - start
        if t <= 200:  # the streamed state, for a bit-for-bit check (slow for large t)
            state = src.init()
            for _ in range(t):
                _, state = src.next(state)
            assert [b.tobytes() for b in state.buffers] == [b.tobytes() for b in rebuilt.buffers]
        print(f"{name:<18}{replay:>14.3f}{one:>14.4f}{factor.state_bytes(d):>14,}")


if __name__ == "__main__":
    main()
