"""KSG (NPEET-style, k = 3) against the exact mutual information of jointly Gaussian samples.

Scalar channel I = V + E, V ~ N(0, 1), E ~ N(0, 1/SNR): I(V; I) = ½ log₂(1 + SNR) exactly.
For SNR from 0.01 to 100 (log grid) and N ∈ {1,000, 5,000} Monte Carlo samples, REPEATS
independent sample sets each: the mean and spread of :func:`edgedp_sim.leakage.ksg_mi` and its
error. Also a 3-dimensional V observed through a random linear map plus noise
(I = A V + E, the linear-Gaussian attacker's view; A fixed, drawn once from seed SEED + 1),
whose exact MI is ½ log₂ det(I + A Aᵀ / s²). N = 5,000 is paper 004's trial count (§6.3).
Writes experiments/out/ksg_vs_gaussian.json and .png. Run: python experiments/ksg_vs_gaussian.py
[--quick] [--out-dir DIR] (``--quick``: 5 SNRs, N = 1,000, 3 sample sets)
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

from edgedp_sim import leakage, provenance

import common

# ---------------------------------------------------------------- constants
SEED = 20240  # numpy Generator seed for samples and tie noise
SNRS = np.logspace(-2, 2, 17)  # 0.01 … 100
SAMPLES = (1000, 5000)  # N; 5,000 as in paper 004 §6.3
REPEATS = 20  # independent sample sets per (SNR, N)
K = leakage.DEFAULT_NEIGHBORS
QUICK = {"SNRS": np.logspace(-2, 2, 5), "SAMPLES": (1000,), "REPEATS": 3}


def scalar_case(g: np.random.Generator, snr: float, n: int, A) -> tuple[float, np.ndarray]:  # noqa: N803
    v = g.standard_normal((REPEATS, n, 1))
    obs = v + g.standard_normal((REPEATS, n, 1)) / math.sqrt(snr)
    exact = leakage.gaussian_mi([[1.0, 1.0], [1.0, 1.0 + 1.0 / snr]], 1)
    return exact, leakage.ksg_mi(v, obs, k=K, rng=g)


def vector_case(g: np.random.Generator, snr: float, n: int, A) -> tuple[float, np.ndarray]:  # noqa: N803
    s2 = 1.0 / snr
    v = g.standard_normal((REPEATS, n, 3))
    obs = v @ A.T + math.sqrt(s2) * g.standard_normal((REPEATS, n, 3))
    cov = np.block([[np.eye(3), A.T], [A, A @ A.T + s2 * np.eye(3)]])
    return leakage.gaussian_mi(cov, 3), leakage.ksg_mi(v, obs, k=K, rng=g)


def run() -> dict:
    g = np.random.default_rng(SEED)
    A = np.random.default_rng(SEED + 1).standard_normal((3, 3)) / math.sqrt(3)  # noqa: N806
    out = {
        "config": {
            "seed": SEED,
            "k": K,
            "repeats": REPEATS,
            "samples": list(SAMPLES),
            "snrs": [float(x) for x in SNRS],
            "linear_map": A.tolist(),
        },
        "cases": {},
    }
    for name, case in (("scalar", scalar_case), ("3-dim linear", vector_case)):
        rows = []
        for n in SAMPLES:
            for snr in SNRS:
                start = time.perf_counter()
                exact, est = case(g, float(snr), n, A)
                rows.append(
                    {
                        "snr": float(snr),
                        "n": n,
                        "exact_bits": exact,
                        "ksg_mean_bits": float(est.mean()),
                        "ksg_std_bits": float(est.std(ddof=1)),
                        "bias_bits": float(est.mean() - exact),
                        "max_abs_error_bits": float(np.max(np.abs(est - exact))),
                        "seconds": time.perf_counter() - start,
                    }
                )
                r = rows[-1]
                print(
                    f"{name:>12} N={n:>5} SNR={snr:8.3g}: exact {exact:.4f}  KSG "
                    f"{r['ksg_mean_bits']:.4f} ± {r['ksg_std_bits']:.4f}  bias "
                    f"{r['bias_bits']:+.4f}",
                    flush=True,
                )
        out["cases"][name] = rows
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for c, (name, rows) in enumerate(result["cases"].items()):
        for n, marker in zip(SAMPLES, "os^v", strict=False):
            sel = [r for r in rows if r["n"] == n]
            snr = np.array([r["snr"] for r in sel])
            mean = np.array([r["ksg_mean_bits"] for r in sel])
            std = np.array([r["ksg_std_bits"] for r in sel])
            exact = np.array([r["exact_bits"] for r in sel])
            if n == SAMPLES[0]:
                axes[0].plot(snr, exact, f"C{c}-", lw=1.5, label=f"exact, {name}")
            axes[0].errorbar(
                snr,
                mean,
                yerr=std,
                fmt=f"C{c}{marker}",
                ms=4,
                capsize=2,
                ls="none",
                label=f"KSG k={K}, N={n:,}, {name}",
            )
            axes[1].errorbar(
                snr,
                mean - exact,
                yerr=std,
                fmt=f"C{c}{marker}-",
                ms=4,
                capsize=2,
                label=f"{name}, N={n:,}",
            )
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("SNR")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("I(V; I) [bits]")
    axes[0].set_title("KSG vs exact Gaussian MI")
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_ylabel("KSG − exact [bits] (mean ± std over repeats)")
    axes[1].set_title(f"bias, {REPEATS} sample sets per point")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    args = common.parser(__doc__).parse_args()
    if args.quick:
        globals().update(QUICK)
    out = common.out_dir(args)
    result = run()
    result["config"]["quick"] = args.quick
    provenance.write_json(out / "ksg_vs_gaussian.json", result, indent=2)
    plot(result, out / "ksg_vs_gaussian.png")
    print(f"wrote {out / 'ksg_vs_gaussian.json'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
