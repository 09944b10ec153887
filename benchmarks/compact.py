"""Compact factors (banded, BLT) fitted to a workload: loss ratio to the dense optimum.

For prefix sums at T = 2000, (k, b) = (20, 100) (``--quick``: T = 500, (5, 100)) and for
MAFALDA's H on ER(100, 0.1) with Metropolis-Hastings weights at T = 500, (5, 100), prints
the dense optimum (``mf_optimal.optimize``: loss, gap, seconds), then for each fit its loss
ratio to that optimum, whether the sensitivity is exact, fit wall time and the device state
for d = 10⁶ (``factor.state_bytes``). Fits: banded p ∈ {2, 8, 32, 100} (banded Toeplitz and
refined), positive BLTs with 1–4 buffers (each warm-started from the previous one), signed
BLTs with 1–4 buffers and, for reference, the best Toeplitz C found with free coefficients
(signed, Thm 7 bound) — not streamable with O(1) state, an estimate of what any BLT can reach.
Reference from the brief: jax_privacy's 2-buffer BLT is at 1.40× for T = 2000, (20, 100).

    python benchmarks/compact.py [--quick] [--skip-mafalda] [--skip-toeplitz]
"""

# ruff: noqa: N803, N806
from __future__ import annotations

import argparse
import time

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp import topology
from edgedp.accounting.participation import Participation
from edgedp.families.mf import compact, compact_banded, compact_blt, mafalda
from edgedp.planning import mf_optimal

D = 10**6
BANDWIDTHS = (2, 8, 32, 100)
BUFFERS = (1, 2, 3, 4)


def line(name: str, fit: compact.CompactFit) -> None:
    print(
        f"  {name:<24} ratio {fit.loss_ratio:7.4f}  exact={str(fit.exact):<5}  "
        f"{fit.seconds:7.1f} s  {fit.evaluations:6d} evals  "
        f"state {fit.factor.state_bytes(D) / 1e6:7.0f} MB (d=1e6)",
        flush=True,
    )


def free_toeplitz(H: np.ndarray, part: Participation, dense_loss: float) -> tuple[float, float]:
    """Best lower-triangular Toeplitz C found (all T − 1 coefficients free, signed)."""
    t0 = time.perf_counter()
    T = H.shape[0]
    toe = compact._Toeplitz(H, part)
    c = compact_banded._sqrt_coefficients(T)

    def objective(x, smooth):
        full = np.concatenate([[1.0], x])
        out = toe(full, compact._impulse(np.ones(1), full, T), smooth)
        return None if out is None else (np.log(out[0]), out[1][1:] / out[0])

    counter = compact._Counter(None, None)
    x = c[1:]
    for smooth in (30.0, 300.0, 3000.0, None):
        counter.fun = lambda y, s=smooth: objective(y, s)
        x = compact._lbfgs(counter, x, None, 3000)
    full = np.concatenate([[1.0], x])
    loss = compact.toeplitz_loss(full, H, participation=part)
    return loss / dense_loss, time.perf_counter() - t0


def run(title: str, H: np.ndarray, part: Participation, toeplitz: bool) -> None:
    T = H.shape[0]
    print(f"{title}: T={T} (k,b)=({part.k},{part.b})", flush=True)
    dense = mf_optimal.optimize(H, participation=part)
    print(
        f"  dense optimum: loss {dense.loss:.6e}  gap {dense.gap:.1e}  {dense.seconds:.1f} s  "
        f"(dense C⁻¹: state 8 MB, t+1 draws per step)",
        flush=True,
    )
    for p in BANDWIDTHS:
        if p >= T:
            continue
        fit = compact_banded.fit_banded(
            H, participation=part, bandwidth=p, refine=False, dense_loss=dense.loss
        )
        line(f"banded-toeplitz p={p}", fit)
        if p <= part.b:
            fit = compact_banded.fit_banded(
                H, participation=part, bandwidth=p, dense_loss=dense.loss, max_iterations=300
            )
            line(f"banded p={p}", fit)
    previous = None
    for n in BUFFERS:
        fit = compact_blt.fit_blt(
            H, participation=part, buffers=n, initial=previous, dense_loss=dense.loss
        )
        previous = fit.factor
        line(f"blt n={n}", fit)
    print(f"    decays {np.round(previous.decays, 4)} weights {np.round(previous.weights, 4)}")
    previous = None
    for n in BUFFERS:
        fit = compact_blt.fit_blt(
            H,
            participation=part,
            buffers=n,
            initial=previous,
            signed=True,
            restarts=12,
            dense_loss=dense.loss,
        )
        previous = fit.factor
        line(f"blt-signed n={n}", fit)
    print(f"    decays {np.round(previous.decays, 4)} weights {np.round(previous.weights, 2)}")
    if toeplitz:
        ratio, seconds = free_toeplitz(H, part, dense.loss)
        print(f"  free Toeplitz (reference)  ratio {ratio:7.4f}  {seconds:7.1f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="prefix sums at T = 500, (5, 100)")
    ap.add_argument("--skip-mafalda", action="store_true")
    ap.add_argument("--skip-toeplitz", action="store_true", help="skip the free Toeplitz fit")
    args = ap.parse_args()
    T, part = (500, Participation(5, 100)) if args.quick else (2000, Participation(20, 100))
    run("prefix sum", mf_optimal.prefix_sum_gram(T), part, not args.skip_toeplitz)
    if not args.skip_mafalda:
        W = topology.metropolis_hastings(edgedp_topologies.parse("er:100:0.1:1"))
        H = mafalda.workload_gram(W, steps=500)
        run("MAFALDA H, ER(100, 0.1) MH", H, Participation(5, 100), not args.skip_toeplitz)


if __name__ == "__main__":
    main()
