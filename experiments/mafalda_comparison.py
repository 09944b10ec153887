"""MAFALDA-SGD vs D-MF vs AntiPGD vs DP-D-SGD vs D-SGD under LDP (paper 000 §7.2, App. C).

Paper 000 trains an MLP (one hidden layer of 64, ReLU, MSE) on Housing over the Ego,
PeerTube and Florentine graphs with (k, b) = (20, 19)-cyclic participation, calibrates every
private mechanism to the same LDP guarantee and reports the test loss over steps, the final
test loss against ε at δ = 1e-6, and the "% improvement in test loss in the last 50 training
steps" of MAFALDA over the private baselines (31% on average). Here, on this 2-core machine:

* task: ``mlp:F-64-1:relu`` with ``loss="mse"`` (½ squared error) on ``diabetes``
  (scikit-learn's bundled 442-row set) and ``synthetic-regression:8:1000`` (8 features like
  Housing, 1,000 rows: linear + a sine of a second direction); standardised features/target.
* graphs: Florentine families (15 nodes), ER(30, 0.2) (``er:30:0.2:0``), Zachary's karate
  club (34 nodes); Metropolis–Hastings weights; IID partitions with equal local sizes m.
* data: the dataset's seeded 80/20 train/test split is fixed (seed 0); from the training
  set a validation split (20%) is carved per split seed; the rest is partitioned. Learning
  rates are tuned on the **validation** split (test is never used for tuning).
* (k, b)-cyclic participation: batch B = max(1, round(m / 8)) so each node cycles through
  b = m // B ≈ 8 minibatches; T = 160 steps, so k = ⌈T / b⌉ ≈ 20 as in the paper (20, 19).
  T is bounded by the 20-minute budget on 2 cores (the dense factors cost O(t) per step).
* privacy: every private mechanism calibrated to the same ε ∈ {2, 8, 32} at δ = 1e-6
  (the same μ: 0.45, 1.53, 4.63), LDP accountant (paper 000 Thm 7); clip norm Δ = 1.
  ε = 2 is the paper's regime (Fig. 5: μ = 0.5–1); 8 and 32 are added because a node here
  holds 8–42 examples, not ~140: at ε = 2 on diabetes no private method gets far below the
  untrained model's loss.
* factors: dp-dsgd C = I; antipgd C = lower-triangular ones; dmf = the optimal prefix-sum
  factorization under (k, b) (003); mafalda = the optimum for H of Lemma 10 for this W.
  The factorization loss of each, relative to C = I on the MAFALDA objective of the graph
  (``factorization.relative_loss``), is reported.
* seeds: 20 independent seeds (``SEEDS``); seed s draws its own validation carve, partition,
  noise and minibatch order (plan seed s, one noise draw), and every mechanism sees the same
  ones (paired comparison). 10 seeds (2 splits × 5 noise draws) and tuning on one split let
  cells move by up to 14 points between two runs; this protocol's spread is in
  docs/RESULTS.md.
* learning-rate tuning: per (graph, dataset, ε, mechanism) a 4-value grid (``LR_GRID``),
  criterion = mean validation loss over the last 50 steps of ``TUNE_SEEDS`` (seeds of their
  own, not reported); a diverged run (non-finite model) scores ∞; when the best value is at
  an edge of the grid the next value of a 1–3–10 ladder beyond it is tried (at most twice).
* reported per (graph, dataset, ε, mechanism): final test loss and the mean test loss over
  the last 50 steps (mean over nodes of each node's loss; evaluated every 5 steps), mean and
  95% t-interval over the seeds; MAFALDA's % improvement over DP-D-SGD (and D-MF, AntiPGD),
  100·(1 − L_maf/L_base) with L the last-50-step mean, computed per seed (paired), then mean
  and 95% t-interval; the mean over settings with its t-interval over seeds (each seed's
  average over the settings).

Writes experiments/out/mafalda_comparison.json and .png. Runs jobs on ``WORKERS`` processes.

    python experiments/mafalda_comparison.py [--quick] [--out-dir DIR] [--replicate R]

``--replicate R`` shifts every seed by 1000·R: an independent repetition of the whole
experiment (how the spread between two runs was measured).
"""

# Paper letters W (gossip matrix), T (steps), B (batch): see docs/NOTATION.md.
# ruff: noqa: N806

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp import factors, topology
from edgedp.accounting.participation import Participation
from edgedp.families.mf import factorization
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, provenance

import common

# ---------------------------------------------------------------- constants
DATA_SEED = 0  # train/test split of each dataset (and the synthetic draw)
SEEDS = tuple(range(20))  # each: validation carve, partition, plan seed (noise, batches)
TUNE_SEEDS = (100, 101, 102, 103)  # the same, for learning-rate tuning only
CONFIDENCE = 0.95  # t-intervals over seeds
STEPS = 160  # T
EPOCH_BATCHES = 8  # target b: B = max(1, round(m / 8)), so k = ⌈T / b⌉ ≈ 20
EPSILONS = (2.0, 8.0, 32.0)
DELTA = 1e-6
CLIP_NORM = 1.0
# Per-mechanism grids. A pilot (T = 200, ε ∈ {1, 4, 16}, lr ∈ {0.003, …, 1}) put D-SGD's
# optimum at 0.1–0.3, DP-D-SGD/D-MF/MAFALDA's at 0.003–0.03 and AntiPGD's at 0.003 or below.
LR_GRID = {
    "dsgd": (0.03, 0.1, 0.3, 1.0),
    "dp-dsgd": (0.003, 0.01, 0.03, 0.1),
    "antipgd": (0.0003, 0.001, 0.003, 0.01),
    "dmf": (0.003, 0.01, 0.03, 0.1),
    "mafalda": (0.003, 0.01, 0.03, 0.1),
}
LR_LADDER = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)  # grid extensions
EXTEND_ROUNDS = 2  # a best lr at a grid edge adds the next ladder value, at most twice
VAL_FRACTION = 0.2
EVAL_EVERY = 5
TUNE_EVAL_EVERY = 10
LAST = 50  # "last 50 training steps" (paper 000 §7.2)
GRAPHS = {"Florentine": "florentine", "ER(30,0.2)": "er:30:0.2:0", "Karate": "karate"}
DATASETS = ("diabetes", "synthetic-regression:8:1000")
MECHANISMS = ("dsgd", "dp-dsgd", "antipgd", "dmf", "mafalda")
WORKERS = min(2, os.cpu_count() or 1)

QUICK = {
    "STEPS": 60,
    "EPSILONS": (4.0,),
    "LR_GRID": {m: (0.01, 0.03) for m in ("dsgd", "dp-dsgd", "antipgd", "dmf", "mafalda")},
    "GRAPHS": {"Florentine": "florentine"},
    "DATASETS": ("diabetes",),
    "SEEDS": (0, 1, 2),
    "TUNE_SEEDS": (100,),
    "LAST": 20,
    "EXTEND_ROUNDS": 1,
}

_CACHE: dict = {}  # per process: graphs, data, factors
_JOB_CPU: list[float] = []  # CPU seconds of every finished job (main process)


# ---------------------------------------------------------------- setup (any process)
def graph_and_w(spec: str):
    key = ("graph", spec)
    if key not in _CACHE:
        g = edgedp_topologies.parse(spec)
        _CACHE[key] = (g, topology.metropolis_hastings(g))
    return _CACHE[key]


def federated(dataset: str, nodes: int, split_seed: int, *, on_test: bool):
    """Local sets of ``nodes`` nodes; evaluated on the test set or on the validation split."""
    key = ("data", dataset, nodes, split_seed, on_test)
    if key in _CACHE:
        return _CACHE[key]
    data = datasets.load(dataset, seed=DATA_SEED)
    order = np.random.default_rng(10_000 + split_seed).permutation(len(data.y_train))
    n_val = int(round(VAL_FRACTION * len(order)))
    val, train = order[:n_val], order[n_val:]
    carved = datasets.Dataset(
        data.name,
        data.x_train[train],
        data.y_train[train],
        data.x_train[val],
        data.y_train[val],
        data.task,
    )
    fed = datasets.partition(carved, nodes, scheme="iid", seed=split_seed)
    if on_test:
        fed = datasets.FederatedData(fed.x, fed.y, data.x_test, data.y_test, data.task)
    _CACHE[key] = fed
    return fed


def schedule(dataset: str, nodes: int, steps: int):
    """(m, B, Participation) for ``dataset`` on ``nodes`` nodes."""
    m = federated(dataset, nodes, SEEDS[0], on_test=False).local_size
    B = max(1, round(m / EPOCH_BATCHES))
    b = m // B
    return m, B, Participation(math.ceil(steps / b), b)


def temporal_factor(mechanism: str, spec: str, dataset: str, steps: int):
    """The factor of ``mechanism`` (None for the fixed ones) and its planning record."""
    key = ("factor", mechanism, spec, dataset, steps)
    if key in _CACHE:
        return _CACHE[key]
    g, W = graph_and_w(spec)
    _, _, part = schedule(dataset, g.n, steps)
    if mechanism in factorization.PLANNED:
        pf = factorization.plan_factor(mechanism, W, steps=steps, participation=part)
        out = (pf.factor, {"gap": pf.gap, "iterations": pf.iterations, "seconds": pf.seconds})
    else:
        out = (None, None)
    _CACHE[key] = out
    return out


def build_plan(job: dict, steps: int):
    g, _ = graph_and_w(job["spec"])
    m, B, part = schedule(job["dataset"], g.n, steps)
    features = federated(job["dataset"], g.n, SEEDS[0], on_test=False).features
    factor, _ = temporal_factor(job["mechanism"], job["spec"], job["dataset"], steps)
    noisy = job["mechanism"] != "dsgd"
    task = TaskSpec(
        model=f"mlp:{features}-64-1:relu",
        dataset=job["dataset"],
        batch_size=B,
        loss="mse",
    )
    return make_plan(
        job["mechanism"],
        g,
        steps=steps,
        participation=part,
        clip_norm=CLIP_NORM,
        learning_rate=job["lr"],
        target_epsilon=job["eps"] if noisy else None,
        delta=DELTA if noisy else None,
        factor=factor,
        task=task,
        seed=job["plan_seed"],
        topology_name=job["spec"],
    )


def run_job(job: dict, steps: int) -> dict:
    """One batch-engine run: ``job['trials']`` noise draws of one plan."""
    t0, c0 = time.perf_counter(), time.process_time()
    g, _ = graph_and_w(job["spec"])
    plan = build_plan(job, steps)
    fed = federated(job["dataset"], g.n, job["split"], on_test=job["on_test"])
    out = {"job": job, "mu": plan.mu, "sigma": plan.noise_multiplier}
    try:
        res = batch.run(plan, fed, trials=job["trials"], eval_every=job["eval_every"])
    except FloatingPointError:
        out.update(
            diverged=True,
            seconds=time.perf_counter() - t0,
            cpu_seconds=time.process_time() - c0,
        )
        return out
    out.update(
        diverged=False,
        steps=[int(s) for s in res.eval_steps],
        loss=np.stack(res.test_loss, axis=1).tolist(),  # (trials, evals)
        clipped_fraction=res.clipped_fraction,
        seconds=time.perf_counter() - t0,
        cpu_seconds=time.process_time() - c0,
    )
    return out


def interval(values) -> tuple[float, float]:
    """Mean and the half-width of its t-interval at ``CONFIDENCE`` (0 for one value)."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return float(x.mean()), 0.0
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half)


def last_mean(steps: list[int], loss: np.ndarray, horizon: int, last: int) -> np.ndarray:
    """Mean over the evaluations in the last ``last`` steps (step > horizon − last), per trial."""
    sel = np.asarray(steps) > horizon - last
    return loss[:, sel].mean(axis=1)


# ---------------------------------------------------------------- driver
def execute(jobs: list[dict], steps: int, label: str, t_start: float) -> list[dict]:
    results = []
    with ProcessPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(run_job, j, steps) for j in jobs]
        for i, fut in enumerate(as_completed(futures), 1):
            r = fut.result()
            _JOB_CPU.append(r["cpu_seconds"])
            j = r["job"]
            if r["diverged"]:
                score = "diverged"
            else:
                loss = np.asarray(r["loss"])
                score = f"last-{LAST} loss {last_mean(r['steps'], loss, steps, LAST).mean():.4g}"
            print(
                f"[{label} {i}/{len(jobs)}] {j['graph']:<11} {j['dataset'][:12]:<12} "
                f"{j['mechanism']:<8} eps={str(j['eps']):<5} lr={j['lr']:<5g} split={j['split']} "
                f"-> {score} ({r['seconds']:.1f} s; elapsed {time.perf_counter() - t_start:.0f} s)",
                flush=True,
            )
            results.append(r)
    return results


def settings() -> list[tuple[str, str, str, str, float | None]]:
    """(graph name, spec, dataset, mechanism, ε) for every reported combination."""
    out = []
    for gname, spec in GRAPHS.items():
        for ds in DATASETS:
            for mech in MECHANISMS:
                for eps in [None] if mech == "dsgd" else EPSILONS:
                    out.append((gname, spec, ds, mech, eps))
    return out


def factor_report(steps: int) -> dict:
    """Per (graph, dataset): m, B, (k, b), and per mechanism sensitivity, σ(ε), loss ratio."""
    rep = {}
    for gname, spec in GRAPHS.items():
        g, W = graph_and_w(spec)
        for ds in DATASETS:
            m, B, part = schedule(ds, g.n, steps)
            entry = {
                "nodes": g.n,
                "edges": len(g.edges),
                "spectral_gap": float(topology.spectral_gap(W)),
                "local_size": m,
                "batch_size": B,
                "participation": [part.k, part.b],
                "mechanisms": {},
            }
            for mech in MECHANISMS[1:]:
                factor, info = temporal_factor(mech, spec, ds, steps)
                C = {"dp-dsgd": factors.Identity(), "antipgd": factors.AntiPGD()}.get(mech, factor)
                strategy = C.strategy(steps)
                sigmas = {}
                for eps in EPSILONS:
                    job = {"spec": spec, "dataset": ds, "mechanism": mech, "eps": eps, "lr": 0.1}
                    p = build_plan(job | {"plan_seed": 0}, steps)
                    sigmas[str(eps)] = {"sigma": p.noise_multiplier, "mu": p.mu}
                entry["mechanisms"][mech] = {
                    "sensitivity": p.sensitivity,
                    "sensitivity_exact": p.sensitivity_exact,
                    "relative_loss": factorization.relative_loss(strategy, W, participation=part),
                    "calibration": sigmas,
                    "planning": info,
                }
            rep[f"{gname}|{ds}"] = entry
            ratios = {k: f"{v['relative_loss']:.3f}" for k, v in entry["mechanisms"].items()}
            print(f"{gname:<11} {ds:<28} m={m} B={B} (k,b)=({part.k},{part.b}) loss ratio {ratios}")
    return rep


def summarize(final: list[dict], tuned: dict, steps: int) -> dict:
    """Group the reported runs by setting; stats over seeds; MAFALDA vs DP-D-SGD."""
    groups: dict = {}
    for r in final:
        j = r["job"]
        key = (j["graph"], j["dataset"], j["mechanism"], j["eps"])
        groups.setdefault(key, []).append(r)
    rows = {}
    for key, runs in groups.items():
        runs.sort(key=lambda r: r["job"]["split"])  # seed order: paired across mechanisms
        if any(r["diverged"] for r in runs):
            rows[key] = {"diverged": True, "lr": runs[0]["job"]["lr"]}
            continue
        eval_steps = runs[0]["steps"]
        loss = np.concatenate([np.asarray(r["loss"]) for r in runs])  # (seeds, evals)
        last = last_mean(eval_steps, loss, steps, LAST)
        final_mean, final_ci = interval(loss[:, -1])
        last_avg, last_ci = interval(last)
        rows[key] = {
            "diverged": False,
            "lr": runs[0]["job"]["lr"],
            "mu": runs[0]["mu"],
            "sigma": runs[0]["sigma"],
            "seeds": int(loss.shape[0]),
            "initial_loss": float(loss[:, 0].mean()),
            "final_mean": final_mean,
            "final_ci": final_ci,
            "last_mean": last_avg,
            "last_ci": last_ci,
            "last_std": float(last.std(ddof=1)) if len(last) > 1 else 0.0,
            "last_per_seed": last.tolist(),
            "eval_steps": eval_steps,
            "curve_mean": loss.mean(axis=0).tolist(),
            "curve_std": loss.std(axis=0, ddof=1).tolist()
            if len(loss) > 1
            else [0.0] * len(eval_steps),
            "clipped_fraction": float(np.mean([r["clipped_fraction"] for r in runs])),
        }
    improvements = {}
    for (g, ds, mech, eps), row in rows.items():
        if mech != "mafalda":
            continue
        out = {}
        for base in ("dp-dsgd", "dmf", "antipgd"):
            other = rows.get((g, ds, base, eps))
            if other is None:
                continue
            if row["diverged"] or other["diverged"]:
                out[base] = {"diverged": True}
                continue
            lm, lb = np.asarray(row["last_per_seed"]), np.asarray(other["last_per_seed"])
            imp = 100.0 * (1.0 - lm / lb)
            mean, half = interval(imp)
            out[base] = {
                "mean": mean,
                "ci": half,
                "per_seed": imp.tolist(),
                "std": float(imp.std(ddof=1)) if len(imp) > 1 else 0.0,
                "min": float(imp.min()),
                "max": float(imp.max()),
                "wins": int(np.sum(imp > 0)),
                "seeds": int(len(imp)),
                "of_means": float(100.0 * (1.0 - lm.mean() / lb.mean())),
            }
        improvements[f"{g}|{ds}|{eps}"] = out
    table = {f"{g}|{ds}|{mech}|{eps}": v for (g, ds, mech, eps), v in rows.items()}
    return {
        "rows": table,
        "improvement": improvements,
        "overall": overall(improvements),
        "tuning": tuned,
    }


def overall(improvements: dict) -> dict:
    """Per baseline: the mean improvement over the settings, with its t-interval over seeds
    (each seed's average over the settings); None where a setting diverged."""
    out = {}
    for base in ("dp-dsgd", "dmf", "antipgd"):
        cells = [v[base] for v in improvements.values() if base in v]
        if not cells or any(c.get("diverged") for c in cells):
            out[base] = None
            continue
        per_seed = np.mean([c["per_seed"] for c in cells], axis=0)
        mean, half = interval(per_seed)
        out[base] = {"mean": mean, "ci": half, "settings": len(cells), "seeds": len(per_seed)}
    return out


def _tune_job(gname, spec, ds, mech, eps, lr, seed) -> dict:
    return {
        "graph": gname,
        "spec": spec,
        "dataset": ds,
        "mechanism": mech,
        "eps": eps,
        "lr": lr,
        "split": seed,
        "plan_seed": seed,
        "trials": 1,
        "eval_every": TUNE_EVAL_EVERY,
        "on_test": False,
    }


def _neighbour_lr(lr: float, direction: int) -> float | None:
    """The next value of ``LR_LADDER`` below (−1) or above (+1) ``lr``, None past the end."""
    i = min(range(len(LR_LADDER)), key=lambda j: abs(math.log(LR_LADDER[j] / lr)))
    j = i + direction
    return LR_LADDER[j] if 0 <= j < len(LR_LADDER) else None


def tune(steps: int, t_start: float) -> tuple[dict, dict]:
    """Grid search on the validation splits of ``TUNE_SEEDS`` (score: the mean over them, ∞ if
    any diverged); a best value at a grid edge extends the grid."""
    setting_of = {(g, ds, mech, eps): spec for g, spec, ds, mech, eps in settings()}
    jobs = [
        _tune_job(g, spec, ds, mech, eps, lr, seed)
        for (g, ds, mech, eps), spec in setting_of.items()
        for lr in LR_GRID[mech]
        for seed in TUNE_SEEDS
    ]
    per_seed: dict = {}
    scores: dict = {}
    for rnd in range(1 + EXTEND_ROUNDS):
        if not jobs:
            break
        for r in execute(jobs, steps, "tune" if rnd == 0 else f"tune+{rnd}", t_start):
            j = r["job"]
            key = (j["graph"], j["dataset"], j["mechanism"], j["eps"])
            if r["diverged"]:
                s = math.inf
            else:
                s = float(last_mean(r["steps"], np.asarray(r["loss"]), steps, LAST).mean())
            per_seed.setdefault((key, j["lr"]), {})[j["split"]] = s
        for (key, lr), by_seed in per_seed.items():
            scores.setdefault(key, {})[lr] = float(np.mean([by_seed[t] for t in sorted(by_seed)]))
        jobs = []
        for key, by_lr in scores.items():
            lr = min(by_lr, key=lambda v: (by_lr[v], v))
            for direction, edge in ((-1, min(by_lr)), (1, max(by_lr))):
                nxt = _neighbour_lr(lr, direction) if lr == edge else None
                if nxt is not None and nxt not in by_lr:
                    jobs += [
                        _tune_job(key[0], setting_of[key], *key[1:], nxt, seed)
                        for seed in TUNE_SEEDS
                    ]
    best, record = {}, {}
    for key, by_lr in scores.items():
        lr = min(by_lr, key=lambda v: (by_lr[v], v))
        best[key] = lr
        record["|".join(str(k) for k in key)] = {
            "val_loss_by_lr": {str(v): by_lr[v] for v in sorted(by_lr)},
            "chosen": lr,
            "at_grid_edge": lr in (min(by_lr), max(by_lr)),
        }
    return best, record


def plot(summary: dict, steps: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {tuple(k.split("|")): v for k, v in summary["rows"].items()}
    eps_mid = EPSILONS[len(EPSILONS) // 2]
    colors = {
        "dsgd": "black",
        "dp-dsgd": "tab:blue",
        "antipgd": "tab:red",
        "dmf": "tab:orange",
        "mafalda": "tab:green",
    }
    labels = {
        "dsgd": "D-SGD (non-private)",
        "dp-dsgd": "DP-D-SGD",
        "antipgd": "AntiPGD",
        "dmf": "D-MF",
        "mafalda": "MAFALDA-SGD",
    }
    nd, ng = len(DATASETS), len(GRAPHS)
    fig, axes = plt.subplots(2 * nd, ng, figsize=(4.6 * ng, 3.4 * 2 * nd), squeeze=False)
    for di, ds in enumerate(DATASETS):
        for gi, gname in enumerate(GRAPHS):
            ax = axes[di, gi]
            for mech in MECHANISMS:
                eps = "None" if mech == "dsgd" else str(eps_mid)
                row = rows.get((gname, ds, mech, eps))
                if row is None or row["diverged"]:
                    continue
                x = np.asarray(row["eval_steps"])
                mu, sd = np.asarray(row["curve_mean"]), np.asarray(row["curve_std"])
                ax.plot(x, mu, color=colors[mech], label=labels[mech], lw=1.3)
                ax.fill_between(
                    x, np.maximum(mu - sd, 1e-3), mu + sd, color=colors[mech], alpha=0.2, lw=0
                )
            ax.set_yscale("log")
            ax.set_title(f"{gname}, {ds.split(':')[0]}, ε={eps_mid:g}", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("test loss (½ MSE)")
            ax.axvspan(steps - LAST, steps, color="grey", alpha=0.08)
            ax2 = axes[nd + di, gi]
            for mech in MECHANISMS[1:]:
                xs, ys, es = [], [], []
                for eps in EPSILONS:
                    row = rows.get((gname, ds, mech, str(eps)))
                    if row is None or row["diverged"]:
                        continue
                    xs.append(eps)
                    ys.append(row["last_mean"])
                    es.append(row["last_ci"])
                if xs:
                    ax2.errorbar(
                        xs,
                        ys,
                        yerr=es,
                        color=colors[mech],
                        label=labels[mech],
                        marker="o",
                        ms=4,
                        capsize=3,
                        lw=1.3,
                    )
            base = rows.get((gname, ds, "dsgd", "None"))
            if base is not None and not base["diverged"]:
                ax2.axhline(base["last_mean"], color="black", ls="--", lw=1, label=labels["dsgd"])
            ax2.set_xscale("log")
            ax2.set_xticks(list(EPSILONS), [f"{e:g}" for e in EPSILONS])
            ax2.minorticks_off()
            ax2.set_yscale("log")
            ax2.set_title(f"{gname}, {ds.split(':')[0]}: last-{LAST}-step loss vs ε", fontsize=9)
            ax2.set_xlabel(f"ε (δ = {DELTA:g})")
            ax2.set_ylabel(f"test loss (½ MSE), {CONFIDENCE:.0%} CI")
    axes[0, 0].legend(fontsize=7)
    axes[nd, 0].legend(fontsize=7)
    fig.suptitle(
        f"LDP, same ε per mechanism; MLP 64 ReLU; T={steps}; curves: mean ± std over "
        f"{len(SEEDS)} seeds",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(summary: dict, steps: int) -> None:
    print(
        f"\n{'graph':<11} {'dataset':<12} {'eps':>5} {'mechanism':<8} {'lr':>5} "
        f"{'final test loss':>17} {'last-' + str(LAST) + ' mean':>17}"
    )
    for key, row in summary["rows"].items():
        g, ds, mech, eps = key.split("|")
        if row["diverged"]:
            print(f"{g:<11} {ds[:12]:<12} {eps:>5} {mech:<8} {row['lr']:>5g} diverged")
            continue
        print(
            f"{g:<11} {ds[:12]:<12} {eps:>5} {mech:<8} {row['lr']:>5g} "
            f"{row['final_mean']:>9.4f}±{row['final_ci']:<7.4f} "
            f"{row['last_mean']:>9.4f}±{row['last_ci']:<7.4f}"
        )
    inits = {
        tuple(k.split("|")[:2]): v["initial_loss"]
        for k, v in summary["rows"].items()
        if not v["diverged"]
    }
    print(
        "untrained model's test loss: "
        + ", ".join(f"{g}/{d}: {v:.4f}" for (g, d), v in inits.items())
    )
    print(
        f"\nMAFALDA % improvement in last-{LAST}-step test loss, 100(1 - L_maf/L_base) per seed, "
        f"mean ± {CONFIDENCE:.0%} CI (min, max, wins):"
    )
    for key, imp in summary["improvement"].items():
        parts = []
        for base in ("dp-dsgd", "dmf"):
            d = imp.get(base)
            if d is None:
                continue
            if d.get("diverged"):
                parts.append(f"vs {base}: diverged")
                continue
            parts.append(
                f"vs {base}: {d['mean']:6.1f}% ± {d['ci']:4.1f} ({d['min']:5.1f}, "
                f"{d['max']:5.1f}, {d['wins']}/{d['seeds']})"
            )
        print(f"  {key:<42} " + "   ".join(parts))


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument(
        "--replicate", type=int, default=0, help="shift every seed by 1000·R (default 0)"
    )
    args = ap.parse_args()
    if args.quick:
        globals().update(QUICK)
    shift = 1000 * args.replicate
    globals().update(
        SEEDS=tuple(s + shift for s in SEEDS), TUNE_SEEDS=tuple(s + shift for s in TUNE_SEEDS)
    )
    t_start = time.perf_counter()
    steps = STEPS
    print(
        f"T={steps} eps={EPSILONS} delta={DELTA} lr grid={LR_GRID} graphs={list(GRAPHS)} "
        f"datasets={list(DATASETS)} seeds={list(SEEDS)} tuning seeds={list(TUNE_SEEDS)} "
        f"workers={WORKERS}",
        flush=True,
    )
    factors_rep = factor_report(steps)
    best, tuning = tune(steps, t_start)
    jobs = []
    for gname, spec, ds, mech, eps in settings():
        for seed in SEEDS:
            jobs.append(
                {
                    "graph": gname,
                    "spec": spec,
                    "dataset": ds,
                    "mechanism": mech,
                    "eps": eps,
                    "lr": best[(gname, ds, mech, eps)],
                    "split": seed,
                    "plan_seed": seed,
                    "trials": 1,
                    "eval_every": EVAL_EVERY,
                    "on_test": True,
                }
            )
    final = execute(jobs, steps, "run", t_start)
    summary = summarize(final, tuning, steps)
    print_table(summary, steps)
    overall_dp = summary["overall"]["dp-dsgd"]
    seconds = time.perf_counter() - t_start
    cpu = float(sum(_JOB_CPU)) + time.process_time()
    out = {
        "config": {
            "quick": args.quick,
            "steps": steps,
            "epsilons": list(EPSILONS),
            "delta": DELTA,
            "clip_norm": CLIP_NORM,
            "lr_grid": {k: list(v) for k, v in LR_GRID.items()},
            "lr_tuned_on": "validation splits (20% of the training set) of the tuning seeds, "
            "mean of their last-50-step losses",
            "graphs": GRAPHS,
            "datasets": list(DATASETS),
            "data_seed": DATA_SEED,
            "seeds": list(SEEDS),
            "tuning_seeds": list(TUNE_SEEDS),
            "replicate": args.replicate,
            "confidence": CONFIDENCE,
            "eval_every": EVAL_EVERY,
            "last_steps": LAST,
            "epoch_batches_target": EPOCH_BATCHES,
            "model": "mlp:F-64-1:relu, loss mse (1/2 squared error)",
            "weighting": "metropolis-hastings",
            "accounting": "LDP, paper 000 Thm 7",
            "test_loss": "mean over nodes of each node's test loss",
        },
        "factors": factors_rep,
        **summary,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "cpu_seconds_per_worker": cpu / WORKERS,
    }
    folder = common.out_dir(args)
    provenance.write_json(folder / "mafalda_comparison.json", out)
    plot(summary, steps, folder / "mafalda_comparison.png")
    if overall_dp:
        print(
            f"\nmean MAFALDA improvement over DP-D-SGD across settings: {overall_dp['mean']:.1f}% "
            f"± {overall_dp['ci']:.1f} ({CONFIDENCE:.0%} CI over seeds)"
        )
    print(
        f"wrote {folder / 'mafalda_comparison'}.json/.png in {seconds:.0f} s wall; "
        f"CPU {cpu:.0f} s in all "
        f"({cpu / WORKERS:.0f} s per worker: the wall time on {WORKERS} otherwise idle cores)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
