"""Per-agent cost of generating noise correlated across agents at d = 10^5.

One node's step (:meth:`edgedp.families.cross.noise.CrossNoise.compose`) for the forms of a Whisper
covariance: dense (row of R^½: n shared draws, Remark 1 of paper 001 with the independent
part from the node's own key), low rank r (r shared draws) and graph-local (one draw per
incident edge), as milliseconds per step and as a ratio to drawing d iid normals. The cost is
(1 + r)·d draws plus r multiply-adds; it does not depend on n except through r.
Run: python benchmarks/cross_noise.py [--dim 100000]
"""

from __future__ import annotations

import argparse

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds

from edgedp import rng, streams
from edgedp.families.cross import noise as cross_agent


def _share(r: int, edges: int) -> cross_agent.NodeCrossAgent:
    return cross_agent.NodeCrossAgent(
        kind="whisper",
        node=0,
        diag_sqrt=0.5,
        factor_row=tuple(np.linspace(0.1, 1.0, r)),
        edge_terms=tuple((v, 0.3) for v in range(1, edges + 1)),
        message_scale=0.0,
        recipients=(),
        recipient_weights=(),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    d = args.dim
    secret = rng.seed_secret(0)
    own_key = rng.derive_key(secret, "own")
    base = median_seconds(lambda: rng.gaussian(own_key, 0, (d,)), args.repeats)
    print(f"d = {d:,}; baseline {base * 1e3:.2f} ms per step to draw d iid normals")
    print(f"{'form':<28}{'draws/step':>11}{'ms/step':>10}{'ratio':>8}")
    cases = [
        ("dense, n = 100", 99, 0),
        ("dense, n = 300", 299, 0),
        ("low rank r = 4", 4, 0),
        ("low rank r = 16", 16, 0),
        ("local, degree 10", 0, 10),
        ("local, degree 30", 0, 30),
    ]
    for name, r, edges in cases:
        keys = streams.RunKeys(secret, "0" * 64, "bench").cross(0, range(1, edges + 1))
        noise = cross_agent.CrossNoise.for_node(_share(r, edges), keys, scale=1.0)

        def step(noise=noise):
            own = rng.gaussian(own_key, 0, (d,))
            return noise.compose(own, 0)

        t = median_seconds(step, args.repeats)
        print(f"{name:<28}{1 + r + edges:>11}{t * 1e3:>10.2f}{t / base:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
