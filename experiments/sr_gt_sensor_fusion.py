"""sr-gt vs DPOP on distributed sensor fusion (paper 004 §6.1: Fig. 2 and Fig. 5 style).

100 sensors on ER(100, 0.1) with Metropolis–Hastings weights, m = 3 observations, p = 2
(Eq. 42, :mod:`edgedp_sim.sensor_fusion`), ε ∈ {0.1, 1, 10} with the §6.1 parameters:
γ = 0.001/0.001/0.002, β = 1000/1000/100, q₂ = 0.99, q₁ = 0.92/0.97/0.97. DPOP (Eq. 45)
runs with the same γ, q₁, q₂, i.e. the same stepsizes α_k and Laplace scales ν_k, hence the
same ε: the only difference is the update rule. Residual ‖x(k) − 1x*ᵀ‖² = Σᵢ ‖xᵢ(k) − x*‖²
(from the engine's test loss, which the sensor-fusion data makes equal to ‖xᵢ − x*‖²),
mean ± std over 1,000 trials of the batch engine (trials in chunks, two worker processes).

Not stated by paper 004, our choices: δ ∈ {1, 0.1} with "problem" adjacency (Definition 1
taken as given: adjacent problems change one sensor's cost with ‖∇fᵢ − ∇fᵢ′‖₁ ≤ δ
everywhere — e.g. an observation change Δv with 2‖Mᵢᵀ Δv‖₁ ≤ δ); ν_k ∝ δ, so δ sets the
noise floor; the problem's distributions (module docstring of edgedp_sim/sensor_fusion.py);
horizon T = 300. Initial states as the paper draws them, xᵢ(0) ~ N(0, I) per node and trial
(``--initial-state normal``, the default); ``--initial-state model`` starts every node at
x(0) = 0 and writes sr_gt_sensor_fusion_x0zero.*.

Fig. 5 style: per trial, the first iteration with residual < 1e-2, and the bytes sent until
then (each iteration every node sends its p float64 to each neighbour).
Writes experiments/out/sr_gt_sensor_fusion.json, sr_gt_sensor_fusion.png and
sr_gt_iterations.png (suffix _x0zero with ``--initial-state model``: x(0) = 0).
Run: python experiments/sr_gt_sensor_fusion.py [--quick] [--out-dir DIR]
[--initial-state normal|model] [--plot-only]
(``--quick``: 20 trials x 30 iterations, δ = 1)
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp.families.laplace import accounting as laplace
from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, provenance, sensor_fusion

import common

# ---------------------------------------------------------------- constants
GRAPH = "er:100:0.1:0"  # ER(100, 0.1), graph seed 0 (resampled until connected)
PROBLEM_SEED = 0  # sensor-fusion instance (Eq. 42)
NOISE_SEED = 1  # plan seed: Laplace streams derive_key(seed, "noise", trial, node)
TRIALS = 1000
CHUNK = 100  # trials per batch-engine call
WORKERS = 2
STEPS = 300
DELTAS = (1.0, 0.1)  # δ of Definition 1 (paper 004 does not state it for §6.1)
THRESHOLD = 1e-2  # Fig. 5 stopping criterion
PAPER_61 = {  # ε: (γ, β, q1, q2), paper 004 §6.1
    0.1: (0.001, 1000.0, 0.92, 0.99),
    1.0: (0.001, 1000.0, 0.97, 0.99),
    10.0: (0.002, 100.0, 0.97, 0.99),
}
MECHANISMS = ("sr-gt", "dpop")
QUICK = {"TRIALS": 20, "CHUNK": 10, "STEPS": 30, "DELTAS": (1.0,)}
SUFFIX = ""  # output-name suffix set by main ("_x0zero" with x(0) = 0)


def plan_for(mechanism: str, eps: float, delta_grad: float):
    gamma, beta, q1, q2 = PAPER_61[eps]
    sched = LaplaceSchedule(
        gamma=gamma,
        beta=beta if mechanism == "sr-gt" else 0.0,
        q1=q1,
        q2=q2,
        delta_grad=delta_grad,
        epsilon=eps,
        adjacency="problem",
    )
    task = TaskSpec(model="least-squares", dataset=f"sensor-fusion:100:3:2:{PROBLEM_SEED}")
    return make_plan(
        mechanism,
        edgedp_topologies.parse(GRAPH),
        steps=STEPS,
        clip_norm=float("inf"),
        laplace=sched,
        task=task,
        seed=NOISE_SEED,
        topology_name=GRAPH,
    )


def run_chunk(
    mechanism: str, eps: float, delta: float, first: int, initial_state: str
) -> tuple[np.ndarray, int]:
    """Residuals ``(STEPS + 1, CHUNK)`` of trials first..first+CHUNK−1, and bytes per round."""
    sf = sensor_fusion.generate(100, seed=PROBLEM_SEED)
    plan = plan_for(mechanism, eps, delta)
    res = batch.run(
        plan,
        sf.federated(),
        trials=CHUNK,
        first_trial=first,
        eval_every=1,
        initial_state=initial_state,
    )
    residual = plan.n * np.array(res.test_loss)  # mean over nodes of ‖xᵢ − x*‖², times n
    return residual, res.bytes_sent // (STEPS * CHUNK)


def first_below(residual: np.ndarray, threshold: float) -> np.ndarray:
    """Per trial, the first iteration k ≥ 1 with residual < threshold (−1 if never)."""
    hit = residual[1:] < threshold
    return np.where(hit.any(axis=0), hit.argmax(axis=0) + 1, -1)


def summarize(residual: np.ndarray, bytes_per_round: int) -> dict:
    its = first_below(residual, THRESHOLD)
    ok = its[its > 0]
    q = (lambda a: np.percentile(a, [25, 50, 75]).tolist()) if len(ok) else (lambda a: None)
    return {
        "mean": residual.mean(axis=1).tolist(),
        "std": residual.std(axis=1).tolist(),
        "final_mean": float(residual[-1].mean()),
        "final_std": float(residual[-1].std()),
        "mean_last_50": float(residual[-50:].mean()),  # the last 50 iterations (or every one)
        "reached_threshold": float(len(ok) / residual.shape[1]),
        "iterations_q25_median_q75": q(ok),
        "bytes_q25_median_q75": q(ok * bytes_per_round),
        "bytes_per_round": int(bytes_per_round),
    }


def main() -> None:
    global SUFFIX
    ap = common.parser(__doc__)
    ap.add_argument("--initial-state", choices=("normal", "model"), default="normal")
    ap.add_argument("--plot-only", action="store_true", help="redraw from a previous JSON")
    args = ap.parse_args()
    if args.quick:
        globals().update(QUICK)
    out = common.out_dir(args)
    SUFFIX = "_x0zero" if args.initial_state == "model" else ""
    if args.plot_only:
        plot(json.loads((out / f"sr_gt_sensor_fusion{SUFFIX}.json").read_text())["results"], out)
        return
    sf = sensor_fusion.generate(100, seed=PROBLEM_SEED)
    print(
        f"sensor fusion: n=100 m=3 p=2, L={sf.smoothness:.4g} mu={sf.strong_convexity:.4g}, "
        f"x*={sf.optimum.round(4).tolist()}, {TRIALS} trials x {STEPS} iterations",
        flush=True,
    )
    jobs = [
        (m, e, dl, f)
        for dl in DELTAS
        for e in PAPER_61
        for m in MECHANISMS
        for f in range(0, TRIALS, CHUNK)
    ]
    parts: dict[tuple, dict[int, np.ndarray]] = {}
    bytes_per_round: dict[tuple, int] = {}
    start = time.time()
    with ProcessPoolExecutor(WORKERS) as pool:
        futures = {pool.submit(run_chunk, *job, args.initial_state): job for job in jobs}
        for done, fut in enumerate(as_completed(futures), 1):
            m, e, dl, f = futures[fut]
            residual, bpr = fut.result()
            parts.setdefault((dl, e, m), {})[f] = residual
            bytes_per_round[(dl, e, m)] = bpr
            print(
                f"[{done}/{len(jobs)}] {m} eps={e:g} delta={dl:g} trials {f}-{f + CHUNK - 1}: "
                f"final residual "
                f"{residual[-1].mean():.4g}  ({time.time() - start:.0f} s)",
                flush=True,
            )
    results: dict[str, dict[str, dict]] = {}
    for dl, e, m in ((dl, e, m) for dl in DELTAS for e in PAPER_61 for m in MECHANISMS):
        chunks = parts[(dl, e, m)]
        residual = np.concatenate([chunks[f] for f in sorted(chunks)], axis=1)
        cell = results.setdefault(f"{dl:g}", {}).setdefault(f"{e:g}", {})
        cell[m] = summarize(residual, bytes_per_round[(dl, e, m)])
        plan = plan_for(m, e, dl)
        cell["epsilon_spent"] = laplace.epsilon_spent(plan.laplace, STEPS)
        cell["first_noise_scale"] = plan.laplace.noise_scale(0)
    payload = {
        "config": {
            "graph": GRAPH,
            "problem_seed": PROBLEM_SEED,
            "noise_seed": NOISE_SEED,
            "trials": TRIALS,
            "steps": STEPS,
            "deltas": list(DELTAS),
            "threshold": THRESHOLD,
            "initial_state": args.initial_state,
            "command": "python experiments/sr_gt_sensor_fusion.py"
            + (" --quick" if args.quick else "")
            + ("" if args.initial_state == "normal" else " --initial-state model"),
            "paper_61": {f"{e:g}": v for e, v in PAPER_61.items()},
            "smoothness": sf.smoothness,
            "strong_convexity": sf.strong_convexity,
            "optimum": sf.optimum.tolist(),
            "quick": args.quick,
        },
        "results": results,
    }
    provenance.write_json(out / f"sr_gt_sensor_fusion{SUFFIX}.json", payload)
    plot(results, out)
    for dl, e, r in ((dl, e, r) for dl, rs in results.items() for e, r in rs.items()):
        a, b = r["sr-gt"], r["dpop"]
        print(
            f"delta={dl} eps={e}: final residual sr-gt {a['final_mean']:.4g}±{a['final_std']:.2g}, "
            f"DPOP {b['final_mean']:.4g}±{b['final_std']:.2g}; reached {THRESHOLD:g}: "
            f"sr-gt {a['reached_threshold']:.0%} (median it {_med(a)}), "
            f"DPOP {b['reached_threshold']:.0%} (median it {_med(b)})"
        )
    print(f"wrote {out}/sr_gt_sensor_fusion{SUFFIX}.json, .png and sr_gt_iterations{SUFFIX}.png")


def _med(r: dict):
    q = r["iterations_q25_median_q75"]
    return "-" if q is None else f"{q[1]:g}"


def plot(results: dict, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"sr-gt": "tab:red", "dpop": "tab:blue"}
    labels = {"sr-gt": "sr-gt (Alg. 1)", "dpop": "DPOP (Eq. 45)"}
    cells = [(dl, e, r) for dl, rs in results.items() for e, r in rs.items()]
    fig, axes = plt.subplots(len(results), 3, figsize=(13, 3.6 * len(results)), squeeze=False)
    for ax, (dl, e, r) in zip(axes.flat, cells, strict=True):
        for m in MECHANISMS:
            mean, std = np.array(r[m]["mean"]), np.array(r[m]["std"])
            k = np.arange(len(mean))
            ax.plot(k, mean, color=colors[m], label=labels[m])
            ax.fill_between(k, np.maximum(mean - std, 1e-8), mean + std, color=colors[m], alpha=0.2)
        ax.set_yscale("log")
        ax.set_title(f"ε = {e}, δ = {dl}")
        ax.set_xlabel("iteration k")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel(f"‖x(k) − x*‖² (mean ± std, {TRIALS} trials)")
    axes[0, 0].legend()
    fig.suptitle("Sensor fusion (paper 004 §6.1), 100 sensors, ER(0.1): same ε, same α_k, ν_k")
    fig.tight_layout()
    fig.savefig(out / f"sr_gt_sensor_fusion{SUFFIX}.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(len(results), 2, figsize=(11, 3.8 * len(results)), squeeze=False)
    for ax, key, ylabel, dl in (
        (ax, key, f"{label} to residual < 1e-2 (δ = {dl})", dl)
        for row, dl in zip(axes, results, strict=True)
        for ax, key, label in (
            (row[0], "iterations_q25_median_q75", "iterations"),
            (row[1], "bytes_q25_median_q75", "bytes sent"),
        )
    ):
        x = 0
        ticks, names = [], []
        for e, r in results[dl].items():
            for m in MECHANISMS:
                q = r[m][key]
                if q is not None:
                    ax.errorbar(
                        x, q[1], yerr=[[q[1] - q[0]], [q[2] - q[1]]], fmt="o", color=colors[m]
                    )
                ax.text(
                    x,
                    1.01,
                    f"{r[m]['reached_threshold']:.0%}",
                    transform=ax.get_xaxis_transform(),
                    ha="center",
                    fontsize=7,
                    color=colors[m],
                )
                ticks.append(x)
                names.append(f"{m}\nε={e}")
                x += 1
            x += 0.5
        ax.set_xticks(ticks, names, fontsize=7)
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    fig.suptitle("Fig. 5 style: median and quartiles over the trials that reach 1e-2 (share below)")
    fig.tight_layout()
    fig.savefig(out / f"sr_gt_iterations{SUFFIX}.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
