"""DOME on gossip vs DP-D-SGD: bytes per round and test loss at equal ε (paper 002 on gossip).

Offline data: scikit-learn's 8×8 digits (10 classes, 1,437 training / 360 test images,
standardised), split IID over 16 agents on ER(16, 0.3) with Metropolis–Hastings weights.
Models: ``mlp:64-256-10`` (d = 19,210) at ε ∈ {1, 4, 16} and ``mlp:64-1024-10``
(d = 76,810) at ε = 4, δ = 1e-5. Every round uses the agent's whole local set (B = 89),
per-example gradients clipped at Δ = 1 in ℝᵈ, T = 200 rounds, so every example participates
at every round: participation (T, 1), μ = 1/σ-GDP per agent and example (LDP: every message
is released). DP-D-SGD and DOME at the same ε have the same σ, sensitivity and ν; DOME adds
its noise in ℝᵏ (k = d/100 and d/10, ``block`` bases from the plan's public seed, a new basis
every round, per-example gradients clipped after projection as in paper 002 Alg. 1) and
sends k floats instead of d.

Variants at ε = 4 (d = 19,210, k = d/10): a fixed basis (``refresh=0``), a fixed basis with
AntiPGD noise in the sketched space (certified: same sensitivity as MF-D-SGD's), Adam (plain;
noise-aware second moments with γ' = 1e-8 and 1e-4), and clipping in ℝᵈ instead of after
projection.

Adaptive bases at ε = 4 on ``mlp:64-32-10`` (d = 2,410; k = d/100 = 24 and d/10 = 241):
paper 002 Alg. 2 fed by the spanning-tree sum of the releases with the shortest lag the
BFS tree of ER(16, 0.3) allows (:mod:`edgedp.families.dome.sketch_adaptive`), with and without mean
removal, against random ``block`` and ``gaussian`` bases and DP-D-SGD on the same model.
The adaptive and Gaussian bases are dense (O(d·k) per projection of every per-example
gradient), too slow for d = 19,210 here.

The learning rate of each method is the best final test loss over a small grid (the same
selection for every method; optimistic for all alike); the large model runs one learning
rate per method. Bytes per round: payload bytes of
all messages of one round (8 bytes per float) from the batch engine, and the wire size of
one message (msgpack header + payload) from :mod:`edgedp.wire`.

Seed replication at ε = 4 on ``mlp:64-256-10``: every run above uses one noise seed
(plan seed ``NOISE_SEED`` = 1: noise streams and batch order), so single-run rankings are
not significant. DP-D-SGD, DOME k = d/100 and k = d/10 and the fixed basis (``refresh=0``)
at k = d/10 are rerun with the plan seeds ``EXTRA_SEEDS`` (2–5) at the learning rate already
selected for each on seed 1 (graph, data split and public basis seed stay fixed). The JSON
key ``seed_runs`` holds the new runs and ``seeds_eps4`` per method the learning rate, the
seeds used and their number, mean ± sample sd (ddof = 1) of final test loss and accuracy
over seed 1 and the finished extra seeds, the difference to DP-D-SGD with its Welch
standard error, and the bytes per round; the fourth PNG panel shows mean ± sd and the
single seeds. The learning rate was selected on seed 1, which slightly favours that seed.

Writes experiments/out/dome_tradeoff.json and dome_tradeoff.png when every run is done.
Run: python experiments/dome_tradeoff.py [--quick] [--out-dir DIR] (``--quick``: T = 10, ε = 4,
one learning rate per method, a few variants and one extra seed)
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp import factors, models, wire
from edgedp.accounting.participation import Participation
from edgedp.families.dome import sketch_adaptive
from edgedp.families.dome.sketch import SketchSpec
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, provenance

import common

# ---------------------------------------------------------------- constants
GRAPH = "er:16:0.3:0"  # graph seed 0
DATA_SEED = 0  # train/test split and IID partition
NOISE_SEED = 1  # plan seed: noise streams and batch order
SKETCH_SEED = 0  # public seed of the shared bases
STEPS = 200
EVAL_EVERY = 20
CLIP_NORM = 1.0
DELTA = 1e-5
WORKERS = 2
SMALL, LARGE = "mlp:64-256-10", "mlp:64-1024-10"
SETTINGS = [(SMALL, eps) for eps in (1.0, 4.0, 16.0)] + [(LARGE, 4.0)]
#: method -> (fraction k/d or None for DP-D-SGD, learning-rate grid for the small model)
METHODS = {
    "dp-dsgd": (None, (0.25, 0.5)),
    "dome k=d/100": (0.01, (2.0, 4.0)),
    "dome k=d/10": (0.1, (0.5, 1.0)),
}
#: the large model runs one learning rate per method (runtime)
LARGE_LR = {"dp-dsgd": 0.5, "dome k=d/100": 2.0, "dome k=d/10": 0.5}
#: variants run at (SMALL, ε = 4) only: (k/d, learning-rate grid, SketchSpec options)
EXTRAS = {
    "dome k=d/10 fixed basis": (0.1, (0.5, 1.0), {"refresh": 0}),
    "dome k=d/10 fixed basis + antipgd": (0.1, (0.5, 1.0), {"refresh": 0, "temporal": True}),
    "dome k=d/10 adam noise-aware": (0.1, (0.003,), {"optimizer": "adam", "noise_aware": True}),
    "dome k=d/10 adam": (0.1, (0.003,), {"optimizer": "adam"}),
    "dome k=d/10 adam noise-aware floor 1e-4": (
        0.1,
        (0.003,),
        {"optimizer": "adam", "noise_aware": True, "floor": 1e-4},
    ),
    "dome k=d/10 clip in R^d": (0.1, (0.5, 1.0), {"clip": "model"}),
}
EXTRA_SETTING = (SMALL, 4.0)
#: the adaptive basis (paper 002 Alg. 2 from the lagged spanning-tree aggregate) against the
#: random ones at ε = 4 on a smaller MLP: its basis is dense (O(d·k) per projection of each
#: per-example gradient, O(d·k²) per update), too slow for d = 19,210 on 2 cores
TINY = "mlp:64-32-10"  # d = 2,410
ADAPTIVE_SETTING = (TINY, 4.0)
#: method -> (k/d or None for DP-D-SGD, learning-rate grid, SketchSpec options)
ADAPTIVE_METHODS = {
    "dp-dsgd": (None, (0.125, 0.25, 0.5), {}),
    "dome k=d/100": (0.01, (1.0, 2.0, 4.0), {}),
    "dome k=d/10": (0.1, (0.25, 0.5, 1.0), {}),
    "dome k=d/100 gaussian": (0.01, (1.0, 2.0, 4.0), {"basis": "gaussian"}),
    "dome k=d/10 gaussian": (0.1, (0.25, 0.5, 1.0), {"basis": "gaussian"}),
    "dome k=d/100 adaptive": (0.01, (1.0, 2.0, 4.0), {"basis": "adaptive"}),
    "dome k=d/10 adaptive": (0.1, (0.25, 0.5, 1.0), {"basis": "adaptive"}),
    "dome k=d/100 adaptive + mean removal": (
        0.01,
        (1.0, 2.0, 4.0),
        {"basis": "adaptive", "mean_removal": True},
    ),
    "dome k=d/10 adaptive + mean removal": (
        0.1,
        (0.25, 0.5, 1.0),
        {"basis": "adaptive", "mean_removal": True},
    ),
}
#: seed replication at (SMALL, ε = 4): extra plan seeds, methods rerun at their selected lr
SEED_SETTING = (SMALL, 4.0)
EXTRA_SEEDS = (2, 3, 4, 5)
SEED_METHODS = ("dp-dsgd", "dome k=d/100", "dome k=d/10", "dome k=d/10 fixed basis")
QUICK = {
    "STEPS": 10,
    "EVAL_EVERY": 5,
    "SETTINGS": [(SMALL, 4.0)],
    "METHODS": {m: (f, grid[:1]) for m, (f, grid) in METHODS.items()},
    "EXTRAS": {m: EXTRAS[m] for m in ("dome k=d/10 fixed basis", "dome k=d/10 adam")},
    "ADAPTIVE_METHODS": {
        m: (f, grid[1:2], o)
        for m, (f, grid, o) in ADAPTIVE_METHODS.items()
        if m in ("dp-dsgd", "dome k=d/10", "dome k=d/100 adaptive")
    },
    "EXTRA_SEEDS": (2,),
}


def load():
    return datasets.partition(datasets.load("digits", seed=DATA_SEED), 16, seed=DATA_SEED)


def run_one(model: str, eps: float, method: str, lr: float, seed: int = NOISE_SEED) -> dict:
    data = load()
    task = TaskSpec(model=model, dataset="digits", partition="iid", batch_size=0)
    d = models.for_task(task, data.features).dim
    if model == TINY:
        frac, _, opts = ADAPTIVE_METHODS[method]
    else:
        frac, _, opts = (*METHODS[method], {}) if method in METHODS else EXTRAS[method]
    opts = dict(opts)
    if opts.get("basis") == "adaptive":  # the shortest lag the BFS tree allows
        graph = edgedp_topologies.parse(GRAPH)
        tree = sketch_adaptive.spanning_tree([graph.neighbours(u) for u in range(graph.n)])
        opts["lag"] = sketch_adaptive.min_lag(tree.height, 1)
    extra = {}
    if opts.pop("temporal", False):
        extra["factor"] = factors.AntiPGD()
    k = d
    if frac is not None:
        k = max(1, round(frac * d))
        extra["sketch"] = SketchSpec(dim=k, seed=SKETCH_SEED, **opts)
    plan = make_plan(
        "dp-dsgd" if frac is None else "dome",
        edgedp_topologies.parse(GRAPH),
        steps=STEPS,
        participation=Participation(STEPS, 1),
        clip_norm=CLIP_NORM,
        learning_rate=lr,
        target_epsilon=eps,
        delta=DELTA,
        task=task,
        seed=seed,
        topology_name=GRAPH,
        **extra,
    )
    start = time.time()
    try:
        res = batch.run(plan, data, eval_every=EVAL_EVERY)
    except FloatingPointError:
        out = {"diverged": True, "lr": lr, "model": model, "eps": eps, "method": method}
        return out if seed == NOISE_SEED else {**out, "seed": seed}
    header = wire.encode(wire.Message(bytes(32), 0, 0, "model", (np.zeros(k),)))
    loss = np.array(res.test_loss)[:, 0]
    acc = np.array(res.test_accuracy)[:, 0]
    out = {
        "diverged": False,
        "model": model,
        "eps": eps,
        "method": method,
        "lr": lr,
        "d": d,
        "k": k,
        "sigma": plan.noise_multiplier,
        "epsilon_certified": plan.guarantee().epsilon(DELTA),
        "noise_energy_per_message": k * plan.noise_std**2,
        "steps": res.eval_steps,
        "test_loss": loss.tolist(),
        "test_accuracy": acc.tolist(),
        "test_loss_of_mean": np.array(res.test_loss_of_mean)[:, 0].tolist(),
        "consensus_distance": np.array(res.consensus_distance)[:, 0].tolist(),
        "final_loss": float(loss[-1]) if np.isfinite(loss[-1]) else None,
        "final_accuracy": float(acc[-1]),
        "messages_per_round": res.messages // STEPS,
        "payload_bytes_per_round": res.bytes_sent // STEPS,
        "aggregate_bytes_per_round": res.aggregate_bytes // STEPS,  # adaptive: tree frames
        "sketch_lag": opts.get("lag"),
        "wire_bytes_per_message": sum(len(f) for f in header),
        "seconds": time.time() - start,
    }
    return out if seed == NOISE_SEED else {**out, "seed": seed}


def _best(runs: list[dict]) -> dict:
    ok = [r for r in runs if not r["diverged"] and r["final_loss"] is not None]
    if not ok:
        return runs[0]
    return min(ok, key=lambda r: r["final_loss"])


_COLUMNS = (
    "d",
    "k",
    "lr",
    "sigma",
    "epsilon_certified",
    "final_loss",
    "final_accuracy",
    "payload_bytes_per_round",
    "aggregate_bytes_per_round",
    "sketch_lag",
    "wire_bytes_per_message",
    "messages_per_round",
    "noise_energy_per_message",
)


def _row(key: tuple, r: dict) -> dict:
    model, eps, method = key
    return {"model": model, "eps": eps, "method": method, **{c: r.get(c) for c in _COLUMNS}}


def _seed_summary(best: dict, seed_runs: dict) -> dict:
    """Mean ± sample sd over seed 1 (the selected run) and the finished extra seeds."""
    model, eps = SEED_SETTING
    out = {}
    for method in SEED_METHODS:
        first = best[(model, eps, method)]
        rs = [first] + [seed_runs[key] for key in sorted(seed_runs) if key[0] == method]
        ok = [r for r in rs if not r["diverged"] and r["final_loss"] is not None]
        loss = np.array([r["final_loss"] for r in ok])
        acc = np.array([r["final_accuracy"] for r in ok])
        n = len(ok)
        out[method] = {
            "lr": first["lr"],
            "k": first.get("k"),
            "seeds": [r.get("seed", NOISE_SEED) for r in rs],
            "n_seeds": len(rs),
            "n_finite": n,
            "final_loss": [r.get("final_loss") for r in rs],
            "final_accuracy": [r.get("final_accuracy") for r in rs],
            "loss_mean": float(loss.mean()) if n else None,
            "loss_sd": float(loss.std(ddof=1)) if n > 1 else None,
            "accuracy_mean": float(acc.mean()) if n else None,
            "accuracy_sd": float(acc.std(ddof=1)) if n > 1 else None,
            "payload_bytes_per_round": first.get("payload_bytes_per_round"),
        }
    base = out["dp-dsgd"]
    for s in out.values():  # difference to DP-D-SGD and its Welch standard error
        for q in ("loss", "accuracy"):
            ok = s[f"{q}_sd"] is not None and base[f"{q}_sd"] is not None
            var = (
                s[f"{q}_sd"] ** 2 / s["n_finite"] + base[f"{q}_sd"] ** 2 / base["n_finite"]
                if ok
                else 0.0
            )
            s[f"{q}_minus_dpdsgd"] = s[f"{q}_mean"] - base[f"{q}_mean"] if ok else None
            s[f"{q}_minus_dpdsgd_se"] = float(np.sqrt(var)) if ok else None
    return out


def _write(path, data, runs: dict, table: list, seed_runs: dict, seeds: dict, *, quick) -> None:
    payload = {
        "config": {
            "graph": GRAPH,
            "data_seed": DATA_SEED,
            "noise_seed": NOISE_SEED,
            "sketch_seed": SKETCH_SEED,
            "steps": STEPS,
            "clip_norm": CLIP_NORM,
            "delta": DELTA,
            "local_size": data.local_size,
            "settings": SETTINGS,
            "methods": {m: {"k_over_d": f, "lr_grid": g} for m, (f, g) in METHODS.items()},
            "large_model_lr": LARGE_LR,
            "extras": {
                m: {"k_over_d": f, "lr_grid": g, "options": o} for m, (f, g, o) in EXTRAS.items()
            },
            "extra_setting": EXTRA_SETTING,
            "adaptive_methods": {
                m: {"k_over_d": f, "lr_grid": g, "options": o}
                for m, (f, g, o) in ADAPTIVE_METHODS.items()
            },
            "adaptive_setting": ADAPTIVE_SETTING,
            "seed_setting": SEED_SETTING,
            "extra_seeds": EXTRA_SEEDS,
            "seed_methods": SEED_METHODS,
            "quick": quick,
        },
        "table": table,
        "runs": [r for rs in runs.values() for r in rs],
        "seed_runs": list(seed_runs.values()),
        "seeds_eps4": seeds,
    }
    provenance.write_json(path, payload)


def main() -> None:
    args = common.parser(__doc__).parse_args()
    if args.quick:
        globals().update(QUICK)
    out = common.out_dir(args)
    data = load()
    print(
        f"digits: 16 agents x {data.local_size} images on {GRAPH}, T={STEPS}, "
        f"clip {CLIP_NORM}, delta {DELTA}; settings {SETTINGS}",
        flush=True,
    )
    jobs = [
        (model, eps, method, lr)
        for model, eps in SETTINGS
        for method, (_, grid) in METHODS.items()
        for lr in (grid if model == SMALL else (LARGE_LR[method],))
    ] + [(*EXTRA_SETTING, method, lr) for method, (_, grid, _) in EXTRAS.items() for lr in grid]
    jobs += [
        (*ADAPTIVE_SETTING, method, lr)
        for method, (_, grid, _) in ADAPTIVE_METHODS.items()
        for lr in grid
    ]
    # the longest runs first: the large model, then the dense k = d/10 bases
    jobs.sort(key=lambda j: (j[0] != LARGE, "d/10 " not in j[2] + " "))
    runs: dict[tuple, list[dict]] = {}
    seed_runs: dict[tuple, dict] = {}  # (method, lr, seed) -> run
    start = time.time()
    with ProcessPoolExecutor(WORKERS) as pool:
        futures = {pool.submit(run_one, *job): job for job in jobs}
        for done, fut in enumerate(as_completed(futures), 1):
            model, eps, method, lr = futures[fut]
            r = fut.result()
            runs.setdefault((model, eps, method), []).append(r)
            status = (
                "diverged"
                if r["diverged"]
                else f"loss {r['final_loss']:.3f} acc {r['final_accuracy']:.3f}"
            )
            print(
                f"[{done}/{len(jobs)}] {model} eps={eps:g} {method} lr={lr:g}: {status} "
                f"({time.time() - start:.0f} s)",
                flush=True,
            )
    for rs in runs.values():  # in grid order, whichever finished first
        rs.sort(key=lambda r: r["lr"])
    best = {key: _best(rs) for key, rs in runs.items()}
    # seed replication at the learning rate selected on seed NOISE_SEED
    seed_jobs = [
        (*SEED_SETTING, method, best[(*SEED_SETTING, method)]["lr"], seed)
        for method in SEED_METHODS
        for seed in EXTRA_SEEDS
    ]
    print(f"seed block: {len(seed_jobs)} runs", flush=True)
    start = time.time()
    with ProcessPoolExecutor(WORKERS) as pool:
        futures = {pool.submit(run_one, *job): job for job in seed_jobs}
        for done, fut in enumerate(as_completed(futures), 1):
            model, eps, method, lr, seed = futures[fut]
            r = fut.result()
            seed_runs[(method, lr, seed)] = r
            status = (
                "diverged"
                if r["diverged"]
                else f"loss {r['final_loss']:.3f} acc {r['final_accuracy']:.3f}"
            )
            print(
                f"[{done}/{len(seed_jobs)}] seed {seed} {method} lr={lr:g}: {status} "
                f"({time.time() - start:.0f} s)",
                flush=True,
            )
    seed_runs = {key: seed_runs[key] for key in sorted(seed_runs)}
    runs = {key: runs[key] for key in sorted(runs)}
    seeds = _seed_summary(best, seed_runs)
    keys = [(m, e, method) for m, e in SETTINGS for method in METHODS]
    keys += [(*EXTRA_SETTING, method) for method in EXTRAS]
    keys += [(*ADAPTIVE_SETTING, method) for method in ADAPTIVE_METHODS]
    table = [_row(key, best[key]) for key in keys]
    _write(out / "dome_tradeoff.json", data, runs, table, seed_runs, seeds, quick=args.quick)
    plot(best, seeds, out / "dome_tradeoff.png")
    head = ("model", "eps", "method", "k", "lr", "loss", "acc", "B/round")
    print("{:<16}{:>5}  {:<34}{:>7}{:>7}{:>8}{:>7}{:>12}".format(*head))
    for row in table:
        loss = row["final_loss"]
        print(
            f"{row['model']:<16}{row['eps']:>5g}  {row['method']:<34}{row['k'] or 0:>7}"
            f"{row['lr'] or 0:>7g}{(loss if loss is not None else float('nan')):>8.3f}"
            f"{row['final_accuracy'] or 0:>7.3f}{row['payload_bytes_per_round'] or 0:>12}"
        )
    print(f"\n{SEED_SETTING[0]} eps={SEED_SETTING[1]:g}: mean ± sd over seeds")
    head = ("method", "lr", "n", "loss", "acc", "d loss vs dp-dsgd", "B/round")
    print("{:<26}{:>6}{:>3}{:>17}{:>17}{:>20}{:>10}".format(*head))
    for method, s in seeds.items():
        diff = s["loss_minus_dpdsgd"]
        print(
            f"{method:<26}{s['lr']:>6g}{s['n_finite']:>3}"
            f"{_num(s['loss_mean']):>9.3f} ± {_num(s['loss_sd']):.3f}"
            f"{_num(s['accuracy_mean']):>9.3f} ± {_num(s['accuracy_sd']):.3f}"
            + (
                f"{diff:>+12.3f} ± {s['loss_minus_dpdsgd_se']:.3f}"
                if diff is not None
                else " " * 20
            )
            + f"{s['payload_bytes_per_round']:>10}"
        )
    print(f"wrote {out / 'dome_tradeoff.json'}, dome_tradeoff.png")


def _num(x) -> float:
    return float("nan") if x is None else x


def plot(best: dict, seeds: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    colors = dict(zip(METHODS, ("tab:red", "tab:blue", "tab:green"), strict=True))
    eps_small = [e for m, e in SETTINGS if m == SMALL]
    ax = axes[0]
    for method in METHODS:
        ys = [best[(SMALL, e, method)].get("final_loss") for e in eps_small]
        ax.plot(eps_small, [np.nan if y is None else y for y in ys], "o-", c=colors[method])
        ax.plot([], [], "o-", c=colors[method], label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε (δ = 1e-5)")
    ax.set_ylabel("final test loss (mean over agents)")
    ax.set_title(f"{SMALL} (d = 19,210), T = {STEPS}")
    ax.legend()
    ax.grid(alpha=0.3)
    ax = axes[1]
    for model, eps in SETTINGS:
        for method in METHODS:
            r = best[(model, eps, method)]
            if r.get("diverged", True):
                continue
            x = np.array(r["steps"][1:]) * r["payload_bytes_per_round"]
            style = "-" if model == SMALL else ":"
            if eps == 4.0:
                ax.plot(x, r["test_accuracy"][1:], style, c=colors[method])
    ax.set_xscale("log")
    ax.set_xlabel("cumulative payload bytes sent (whole network)")
    ax.set_ylabel("test accuracy")
    ax.set_title("ε = 4: accuracy vs bytes (solid d=19k, dotted d=77k)")
    ax.grid(alpha=0.3)
    ax = axes[2]
    markers = {1.0: "v", 4.0: "o", 16.0: "^"}
    for model, eps in SETTINGS:
        for method in METHODS:
            r = best[(model, eps, method)]
            if r.get("diverged", True):
                continue
            ax.scatter(
                r["payload_bytes_per_round"],
                r["final_accuracy"],
                marker=markers[eps],
                c=colors[method],
                edgecolors="k" if model == LARGE else "none",
                s=60,
            )
    for eps, mk in markers.items():
        ax.scatter([], [], marker=mk, c="grey", label=f"ε = {eps:g}")
    ax.scatter([], [], marker="o", c="white", edgecolors="k", label="d = 77k")
    ax.set_xscale("log")
    ax.set_xlabel("payload bytes per round (whole network)")
    ax.set_ylabel(f"final test accuracy after {STEPS} rounds")
    ax.set_title("utility–bytes trade-off")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes[3]
    for i, (method, s) in enumerate(seeds.items()):
        c = colors.get(method, "tab:purple")
        ys = [y for y in s["final_accuracy"] if y is not None]
        ax.scatter(np.full(len(ys), i) + 0.15, ys, c=c, s=12, alpha=0.6)
        ax.errorbar(i, s["accuracy_mean"], yerr=s["accuracy_sd"] or 0, fmt="o", c=c, capsize=4)
    ax.set_xticks(range(len(seeds)))
    labels = [f"{m}\n(n = {s['n_finite']})" for m, s in seeds.items()]
    ax.set_xticklabels([lab.replace("dome ", "DOME ") for lab in labels], fontsize=7)
    ax.set_ylabel(f"final test accuracy after {STEPS} rounds")
    ax.set_title(f"ε = {SEED_SETTING[1]:g}, d = 19,210: mean ± sd over noise seeds")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
