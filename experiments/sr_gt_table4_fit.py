"""Paper 004 Table 4's accuracy column, decomposed: random start + δ² × noise, exactly.

Alg. 1 (sr-gt) on a quadratic problem is linear, so its expected accuracy follows exactly
from the mean and covariance of its state (x, y), propagated through the update rules
(4a–4c) with the §6.1 schedule of each ε (Laplace noise of variance 2ν_k², ν_k ∝ δ):

    E[accuracy] = R (the random start x(0) ~ N(0, I), y(0) = 0, and the problem's offsets,
                     carried to iteration K without noise)  +  δ² · N (the noise, δ = 1),

for two metrics: "sum" Σᵢ ‖xᵢ(K) − x*‖² (paper 004 §6.1's ‖x(k) − 1x*ᵀ‖²) and "network
average" ‖x̄(K) − x*‖² (Thm 5.18's d). The script

1. checks the exact value on edgedp's Table 4 instance (3 agents, m = p = 1, complete graph,
   Metropolis–Hastings, sensor-fusion seed 0, δ = 1, K = 1,000) against the Monte Carlo
   accuracy stored by experiments/leakage_table4.py;
2. gives the decomposition per ε on that instance;
3. computes an exact lower bound over every homogeneous instance (every agent's curvature a,
   any offsets): the start term of a zero-mean error plus δ² N, minimized over a on a grid
   of 241 values in [10⁻², 10⁴] (the offsets only add a non-negative mean term);
4. finds the stiffness and δ the paper's three numbers imply: edgedp's instance with every
   curvature multiplied by c (M → √c M, v → √c v, ω → c ω: x* unchanged) and δ, fitted by
   least squares on log10 accuracy over the three cells (grid c ∈ [0.1, 10³], 161 values;
   δ ∈ [10⁻⁴, 10], 251 values), for each metric — once over every c, and once over the
   stable c only: those where no iteration's matrix F_k (below) of any ε has spectral radius
   above 1, so the random start is never amplified (an amplifying instance's float64
   simulation loses the exact value to rounding, and the paper reports converging runs);
5. runs Alg. 1 at the stable fitted (c, δ) of the "sum" metric with the Table 4 machinery
   (edgedp_sim.leak: 5,000 trials × 1,000 iterations, random x(0), KSG k = 3, Eq. 44 for
   the colluders 2, 3 — the eavesdropper on every link sees the same, Table 4's ℐ_e = ℐ₂):
   M-NMI and Monte Carlo accuracy per cell.

Writes <out-dir>/sr_gt_table4_fit.json and .png.
Run: python experiments/sr_gt_table4_fit.py [--quick] [--out-dir DIR]
"""

# Paper letters W, A, F, G, P (matrices of the update rules).
# ruff: noqa: N803, N806, E741

from __future__ import annotations

import json
import sys
import time
import tomllib
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp_sim import adversary, leak, provenance, scenarios, sensor_fusion

import common

# ---------------------------------------------------------------- constants
STEPS = 1000  # K (Table 4: 1,000 iterations)
TRIALS = 5000  # Monte Carlo trials of the leakage runs (Table 4: 5,000)
EPSILONS = (10.0, 1.0, 0.1)
PAPER_61 = {  # ε: (γ, β, q1, q2), paper 004 §6.1
    0.1: (0.001, 1000.0, 0.92, 0.99),
    1.0: (0.001, 1000.0, 0.97, 0.99),
    10.0: (0.002, 100.0, 0.97, 0.99),
}
PAPER_ACCURACY = {10.0: 1.9e-4, 1.0: 2.0e-3, 0.1: 3.0e-2}  # Table 4, "Accuracy"
PAPER_M_NMI = {10.0: 0.52, 1.0: 0.24, 0.1: 0.047}  # Table 4 (both attackers)
INSTANCE_SEED = 0  # edgedp's Table 4 instance (sensor-fusion:3:1:1:0)
CURVATURES = np.logspace(-2, 4, 241)  # homogeneous a for the lower bound
STIFFNESS = np.logspace(-1, 3, 161)  # c for the fit
DELTAS = np.logspace(-4, 1, 251)  # δ for the fit
METRICS = ("sum", "network average")
SCENARIO = Path(scenarios.__file__).parent / "leakage_table4.toml"
STORED = Path(__file__).resolve().parent / "out" / "leakage_table4.json"
COMMAND = "python experiments/sr_gt_table4_fit.py"


def schedule(eps: float, delta: float = 1.0) -> LaplaceSchedule:
    gamma, beta, q1, q2 = PAPER_61[eps]
    return LaplaceSchedule(
        gamma=gamma, beta=beta, q1=q1, q2=q2, delta_grad=delta, epsilon=eps, adjacency="problem"
    )


def moments(curv, offset, W, sched: LaplaceSchedule, steps: int):
    """Exact (R, N) per metric: start term and noise term (δ = 1) after ``steps`` rounds.

    Rules (p = 1): z = x + ξ, y' = y + β(I − W) z, x' = W z − α(y' + A z − b), with
    ∇fᵢ(z) = aᵢ z − bᵢ; x(0) ~ N(0, I), y(0) = 0. The state is s' = F_k s + G_k ξ + c_k.
    Computed backwards, Ψ_k = S F_K ⋯ F_{k+1} (S: the x rows), so that nothing large has to
    cancel (a forward covariance of a stiff instance first grows by 10⁶ and loses the
    result to rounding): x(K) = Ψ_0 s(0) + Σ_k Ψ_k (G_k ξ_k + c_k).
    """
    n = len(curv)
    b, I = np.asarray(offset, dtype=float), np.eye(n)
    x_star = b.sum() / np.sum(curv)
    one = np.ones(n) / n
    scale = sched.noise_scale(0) / sched.delta_grad  # ν₁ at δ = 1
    Psi = np.hstack([I, np.zeros((n, n))])
    mean = np.zeros(n)
    N = {"sum": 0.0, "network average": 0.0}
    alphas, F = transitions(curv, W, sched, steps)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in reversed(range(steps)):
            PG = Psi @ F[t][:, :n]  # G_k: the noise enters where z = x + ξ does
            nu2 = 2.0 * (scale * sched.q2**t) ** 2
            N["sum"] += nu2 * float(np.sum(PG * PG))
            N["network average"] += nu2 * float(np.sum((one @ PG) ** 2))
            mean += alphas[t] * (Psi[:, :n] @ b)
            Psi = Psi @ F[t]
        start = Psi[:, :n]  # x(0) ~ N(0, I), y(0) = 0
        err = mean - x_star
        R = {
            "sum": float(err @ err + np.sum(start * start)),
            "network average": float((one @ err) ** 2 + np.sum((one @ start) ** 2)),
        }
    for d in (R, N):  # a diverging run (α_k a > 2 for too long) overflows: its accuracy is inf
        for m in METRICS:
            if not np.isfinite(d[m]) or d[m] < 0:
                d[m] = float("inf")
    return R, N, None


def curvatures(sf, c: float):
    """The agents' curvatures aᵢ and offsets bᵢ of edgedp's instance at stiffness c."""
    M, v, w = sf.measurement[:, 0, 0], sf.observation[:, 0], sf.regularization
    return 2.0 * c * (M * M + w), 2.0 * c * M * v


def instance_terms(sf, c: float, W, eps: float, steps: int):
    curv, offset = curvatures(sf, c)
    return moments(curv, offset, W, schedule(eps), steps)


def transitions(curv, W, sched: LaplaceSchedule, steps: int):
    """(α_k, F_k) for k < ``steps``: F_k = [[W − α_k A − α_k β(I − W), −α_k I],
    [β(I − W), I]] carries (x, y) from one iteration to the next; its first n columns are
    G_k, where the noise enters."""
    n = len(curv)
    A, I = np.diag(curv), np.eye(n)
    alphas = np.array([sched.stepsize(t) for t in range(steps)])
    beta = sched.beta
    F = np.zeros((steps, 2 * n, 2 * n))
    F[:, :n, :n] = W - alphas[:, None, None] * A - alphas[:, None, None] * beta * (I - W)
    F[:, :n, n:] = -alphas[:, None, None] * I
    F[:, n:, :n] = beta * (I - W)
    F[:, n:, n:] = I
    return alphas, F


def largest_radius(curv, W, sched: LaplaceSchedule, steps: int) -> float:
    """max over k of the spectral radius of F_k (:func:`transitions`)."""
    return float(np.abs(np.linalg.eigvals(transitions(curv, W, sched, steps)[1])).max())


def lower_bound(W, eps: float, delta: float, steps: int) -> dict:
    best = {}
    n = W.shape[0]
    for a in CURVATURES:
        R, N, _ = moments(np.full(n, a), np.zeros(n), W, schedule(eps), steps)
        for m in METRICS:
            val = R[m] + delta**2 * N[m]
            if m not in best or val < best[m]["value"]:
                best[m] = {"value": val, "curvature": float(a), "start": R[m], "noise": N[m]}
    return best


def fit(table: dict, stiffness) -> dict:
    """(c, δ) minimizing Σ_ε (log10 model − log10 paper)² per metric over the stiffness values
    ``stiffness`` (None if it is empty); table[c][eps] = (R, N)."""
    out = {}
    for m in METRICS:
        best = None
        for c in stiffness:
            cells = table[c]
            R = np.array([cells[e][0][m] for e in EPSILONS])
            N = np.array([cells[e][1][m] for e in EPSILONS])
            target = np.log10([PAPER_ACCURACY[e] for e in EPSILONS])
            with np.errstate(over="ignore", invalid="ignore"):
                model = np.log10(R[None, :] + (DELTAS**2)[:, None] * N[None, :])
            loss = ((model - target) ** 2).sum(axis=1)
            i = int(np.argmin(loss))
            if best is None or loss[i] < best["loss"]:
                best = {
                    "loss": float(loss[i]),
                    "stiffness": float(c),
                    "delta": float(DELTAS[i]),
                    "cells": {
                        f"{e:g}": {
                            "model": float(10 ** model[i, j]),
                            "start": float(R[j]),
                            "noise": float(DELTAS[i] ** 2 * N[j]),
                            "paper": PAPER_ACCURACY[e],
                        }
                        for j, e in enumerate(EPSILONS)
                    },
                }
        out[m] = best
    return out


def stiff_data(sf, c: float):
    """edgedp's instance with every curvature times c (x* unchanged)."""
    scaled = sensor_fusion.SensorFusion(
        measurement=np.sqrt(c) * sf.measurement,
        observation=np.sqrt(c) * sf.observation,
        regularization=c * sf.regularization,
    )
    return scaled


def leakage_runs(sf, c: float, delta: float, trials: int, steps: int) -> dict:
    data = stiff_data(sf, c)
    rows = {}
    attacker = [adversary.parse_attacker("hbc:1,2")]
    for eps in EPSILONS:
        raw = tomllib.loads(SCENARIO.read_text())
        gamma, beta, q1, q2 = PAPER_61[eps]
        raw["privacy"].update(
            target_epsilon=eps, gamma=gamma, beta=beta, q1=q1, q2=q2, delta_grad=delta
        )
        raw["steps"] = raw["eval_every"] = steps
        sc = scenarios.parse(raw, base=SCENARIO.parent)
        t0 = time.perf_counter()
        rep = leak.run(
            sc,
            attacker,
            trials=trials,
            data=data.federated(),
            final=lambda models, first: data.residual(models),
            point_curve=True,
        )
        e = rep["attackers"][0]
        rows[f"{eps:g}"] = {
            "m_nmi": e["m_nmi"],
            "m_nmi_scalar_inversion": e.get("m_nmi_point"),
            "paper_m_nmi": PAPER_M_NMI[eps],
            "accuracy_sum_mc": rep["final_mean"],
            "accuracy_sum_mc_std": rep["final_std"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(
            f"  eps={eps:g}: M-NMI {e['m_nmi']:.3f} "
            f"(scalar {e.get('m_nmi_point', float('nan')):.3f}; "
            f"paper {PAPER_M_NMI[eps]}), accuracy {rep['final_mean']:.3g} (paper "
            f"{PAPER_ACCURACY[eps]:.2g})",
            flush=True,
        )
    return rows


def _fitted_verdict(close: bool, exact: float, run: dict, trials: int) -> str:
    """A cell at the fitted stiffness and δ: the fit was chosen to match the paper's three
    accuracies, so a close value there reproduces nothing unless the simulated run agrees
    with the exact moments it was fitted on (within 3 standard errors of its Monte Carlo
    mean); when they disagree the fitted instance is numerically unstable in float64 (a
    first step size times the largest curvature above 2 amplifies the random start)."""
    mc, std = run["accuracy_sum_mc"], run["accuracy_sum_mc_std"]
    if abs(mc - exact) > 3 * std / np.sqrt(trials):
        return (
            f"not established: at the fitted instance the simulation gives {mc:.3g} against "
            f"the exact {exact:.3g} (unstable fit)"
        )
    return "close to the paper at a fitted instance" if close else "differs"


def main() -> int:
    args = common.parser(__doc__).parse_args()
    out_dir = common.out_dir(args)
    global CURVATURES, STIFFNESS
    trials, steps = (200, 300) if args.quick else (TRIALS, STEPS)
    if args.quick:
        CURVATURES, STIFFNESS = CURVATURES[::8], STIFFNESS[::8]
    started = time.perf_counter()
    sf = sensor_fusion.generate(3, observations=1, dim=1, seed=INSTANCE_SEED)
    W = np.full((3, 3), 1.0 / 3.0)  # complete:3, Metropolis–Hastings
    curv = 2.0 * (sf.measurement[:, 0, 0] ** 2 + sf.regularization)
    print(f"edgedp instance: curvatures {np.round(curv, 2).tolist()}, x* = {sf.optimum[0]:.4f}")

    stored = json.loads(STORED.read_text())["ours"] if STORED.exists() else {}
    decomposition = {}
    for eps in EPSILONS:
        R, N, _ = instance_terms(sf, 1.0, W, eps, steps)
        mc = stored.get(f"sr-gt eps={eps:g} (random x(0))", {}).get("accuracy")
        decomposition[f"{eps:g}"] = {
            m: {"start": R[m], "noise_delta1": N[m], "total_delta1": R[m] + N[m]} for m in METRICS
        }
        decomposition[f"{eps:g}"]["paper"] = PAPER_ACCURACY[eps]
        decomposition[f"{eps:g}"]["stored_monte_carlo_sum"] = mc
        print(
            f"eps={eps:g}: sum = {R['sum']:.4g} (start) + δ² {N['sum']:.4g} (noise) = "
            f"{R['sum'] + N['sum']:.4g} at δ = 1 (stored Monte Carlo {mc}); "
            f"paper {PAPER_ACCURACY[eps]}"
        )

    bounds = {}
    for delta in (1.0, 0.1):
        bounds[f"{delta:g}"] = {f"{e:g}": lower_bound(W, e, delta, steps) for e in EPSILONS}
        for e in EPSILONS:
            b = bounds[f"{delta:g}"][f"{e:g}"]["sum"]
            print(
                f"lower bound, homogeneous, δ = {delta:g}, eps = {e:g}: sum >= {b['value']:.4g} "
                f"at a = {b['curvature']:.3g} (paper {PAPER_ACCURACY[e]})"
            )

    table = {
        float(c): {e: instance_terms(sf, float(c), W, e, steps)[:2] for e in EPSILONS}
        for c in STIFFNESS
    }
    radius = {
        float(c): max(
            largest_radius(curvatures(sf, float(c))[0], W, schedule(e), steps) for e in EPSILONS
        )
        for c in STIFFNESS
    }
    stable = [c for c, r in radius.items() if r <= 1.0 + 1e-9]
    fits = {"every stiffness": fit(table, list(table)), "stable stiffness": fit(table, stable)}
    print(
        f"stable (no F_k with spectral radius > 1): {len(stable)} of {len(radius)} stiffness "
        f"values" + (f", up to x{max(stable):.3g}" if stable else "")
    )
    for scope, by_metric in fits.items():
        for m, f in by_metric.items():
            print(
                f"fit over {scope} ({m}): x{f['stiffness']:.3g}, δ = {f['delta']:.3g}, "
                f"log10 loss {f['loss']:.3g}, radius {radius[f['stiffness']]:.4g}: "
                + ", ".join(f"{k}: {v['model']:.3g}" for k, v in f["cells"].items())
            )
    chosen = fits["stable stiffness"]["sum"]
    if chosen is None:
        raise SystemExit("no stiffness on the grid gives a non-amplifying iteration")
    c, delta = chosen["stiffness"], chosen["delta"]
    print(f"leakage runs at stiffness x{c:.3g}, δ = {delta:.3g}: {trials} trials x {steps} its")
    runs = leakage_runs(sf, c, delta, trials, steps)

    verdict_rows = []
    for e in EPSILONS:
        k = f"{e:g}"
        lb = bounds["1"][k]["sum"]["value"]
        verdict_rows.append(
            {
                "item": f"accuracy (sum over agents), eps = {k}, edgedp instance, δ = 1",
                "paper": PAPER_ACCURACY[e],
                "edgedp": decomposition[k]["sum"]["total_delta1"],
                "verdict": "differs: lower bound over homogeneous instances at δ = 1 is "
                f"{lb:.3g}" + (" (above the paper)" if lb > PAPER_ACCURACY[e] else ""),
            }
        )
        verdict_rows.append(
            {
                "item": f"accuracy (sum), eps = {k}, fitted stable stiffness and δ",
                "paper": PAPER_ACCURACY[e],
                "edgedp": chosen["cells"][k]["model"],
                "verdict": _fitted_verdict(
                    abs(np.log10(chosen["cells"][k]["model"] / PAPER_ACCURACY[e])) < 0.15,
                    chosen["cells"][k]["model"],
                    runs[k],
                    trials,
                ),
            }
        )
        verdict_rows.append(
            {
                "item": f"M-NMI, eps = {k}, fitted stable stiffness and δ",
                "paper": PAPER_M_NMI[e],
                "edgedp": runs[k]["m_nmi"],
                "verdict": _fitted_verdict(
                    abs(runs[k]["m_nmi"] - PAPER_M_NMI[e]) <= 0.25 * PAPER_M_NMI[e],
                    chosen["cells"][k]["model"],
                    runs[k],
                    trials,
                ),
            }
        )
    result = {
        "paper": "004",
        "table": verdict_rows,
        "command": COMMAND + (" --quick" if args.quick else ""),
        "config": {
            "steps": steps,
            "trials": trials,
            "instance_seed": INSTANCE_SEED,
            "graph": "complete:3, Metropolis-Hastings",
            "initial_state": "x_i(0) ~ N(0, 1), y(0) = 0",
            "adjacency": "problem (Definition 1, delta on the gradient's L1 distance)",
            "curvature_grid": [float(CURVATURES[0]), float(CURVATURES[-1]), len(CURVATURES)],
            "stiffness_grid": [float(STIFFNESS[0]), float(STIFFNESS[-1]), len(STIFFNESS)],
            "delta_grid": [float(DELTAS[0]), float(DELTAS[-1]), len(DELTAS)],
        },
        "instance_curvatures": curv.tolist(),
        "decomposition": decomposition,
        "lower_bound_homogeneous": bounds,
        "fit": fits,
        "stable_stiffness": {
            "rule": "max over eps and k of the spectral radius of F_k <= 1",
            "count": len(stable),
            "of": len(radius),
            "largest": max(stable),
            "radius_at_fit": {
                scope: radius[by_metric["sum"]["stiffness"]] for scope, by_metric in fits.items()
            },
        },
        "leakage_at_fit": runs,
        "seconds": time.perf_counter() - started,
    }
    path = out_dir / "sr_gt_table4_fit.json"
    provenance.write_json(path, result, indent=2, sort_keys=True)
    plot(result, out_dir / "sr_gt_table4_fit.png")
    print(f"wrote {path} ({result['seconds']:.0f} s)")
    return 0


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    eps = np.array(EPSILONS)
    ax1.loglog(eps, [PAPER_ACCURACY[e] for e in EPSILONS], "k*-", ms=10, label="paper 004 Table 4")
    d = result["decomposition"]
    ax1.loglog(
        eps,
        [d[f"{e:g}"]["sum"]["total_delta1"] for e in EPSILONS],
        "o-",
        label="edgedp instance, δ = 1",
    )
    ax1.loglog(
        eps, [d[f"{e:g}"]["sum"]["start"] for e in EPSILONS], "o:", label="  its random-start term"
    )
    lb = result["lower_bound_homogeneous"]["1"]
    ax1.loglog(
        eps,
        [lb[f"{e:g}"]["sum"]["value"] for e in EPSILONS],
        "s--",
        label="lower bound, homogeneous, δ = 1",
    )
    f = result["fit"]["stable stiffness"]["sum"]
    ax1.loglog(
        eps,
        [f["cells"][f"{e:g}"]["model"] for e in EPSILONS],
        "^-",
        label=f"stable fit: stiffness ×{f['stiffness']:.3g}, δ = {f['delta']:.2g}",
    )
    ax1.set_xlabel("ε")
    ax1.set_ylabel("E Σᵢ (xᵢ(K) − x*)²  (exact)")
    ax1.legend(fontsize=7)
    ax1.grid(True, which="both", alpha=0.3)
    runs = result["leakage_at_fit"]
    ax2.semilogx(eps, [PAPER_M_NMI[e] for e in EPSILONS], "k*-", ms=10, label="paper 004 Table 4")
    ax2.semilogx(
        eps, [runs[f"{e:g}"]["m_nmi"] for e in EPSILONS], "^-", label="edgedp at the fit (Eq. 44)"
    )
    ax2.set_xlabel("ε")
    ax2.set_ylabel("M-NMI")
    ax2.legend(fontsize=8)
    ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        "Paper 004 Table 4: accuracy decomposition, lower bound, fitted stiffness and δ",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=130)


if __name__ == "__main__":
    sys.exit(main())
