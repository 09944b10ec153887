"""Paper 000 §7.2 as the paper ran it: MAFALDA-SGD against DP-D-SGD under LDP on a 148-node
ego graph, Housing-shaped regression, T = 380, (k, b) = (20, 19), its μ grid, 20 runs.

The paper's two claims (§7.2, Fig. 3, App. C Fig. 4): at a fixed privacy budget MAFALDA-SGD's
test loss over the last 50 training steps is 31% lower on average than DP-D-SGD's, and at a
fixed test loss of 0.75 it needs a 2× smaller ε. This script runs the paper's protocol with
edgedp's batch engine and planner, and computes both claims under two step-size protocols.

Setting (paper 000 §7.2 and its authors' public experiment scripts, which fix what the paper
leaves out: the μ grid, the step size, the weights, the batches):

* graph: the largest connected component of the Facebook ego network of user 414 (148
  nodes, 1,692 edges). No package registry ships it and its source states no licence, so a
  **generated stand-in** is used (:func:`ego_standin`): a three-block random graph with the
  real component's block sizes (72, 51, 25), edges inside each block (951, 433, 260) and
  between blocks (46 between the two large ones, 2 to the small one) — the same node and
  edge count, degree range of the same order, and a second eigenvalue as close to 1 (the
  real graph's two parts hang on 2 edges: spectral gap 0.0039). Both graphs' statistics are
  recorded in the output. Gossip weights W[u, v] = 1 / (deg u + 1) on N(u) ∪ {u}
  (``uniform-neighbour``), as the authors' code averages.
* data: California Housing (OpenML 823: 20,640 rows, 8 features, target the median house
  value in $100,000s). No package registry ships it, so a **generated stand-in of the same
  shape** is used (:func:`housing_standin`): 20,640 rows of 8 correlated features (two
  heavy-tailed), a target that is linear in them plus a non-linear part plus noise, rescaled
  to Housing's target mean 2.07 and standard deviation 1.15 and capped to [0.15, 5.0] as
  Housing's is, so the paper's loss scale (MSE in ($100k)², 0.75 threshold) means the same
  fraction of the target's variance. Features standardised; the target is not (as the
  authors'). Split: 20% test (4,128 rows), from the rest a fixed validation set (what the
  step sizes are tuned on) and a training pool of 148 × 95 rows.
* rows per node and participation: the paper's 16,512 training rows give ~111.6 per node in
  batches of 6, 19 batches per epoch (the last one short). edgedp's engines use equal
  batches, so every node holds 95 rows in 19 batches of B = 5: every row takes part every
  19 steps, 20 times in T = 380 steps — the paper's (k, b) = (20, 19) exactly, at 85% of its
  rows per node. Each run (seed) draws its own partition of the pool over the nodes, its
  own noise and its own batch order.
* model and loss: MLP 8-64-1 with ReLU, MSE; every node starts from the same initial model.
  edgedp's ``mse`` loss is ½ squared error, so the engine runs with clip norm ½ and step 2η:
  the same update, bit for bit in exact arithmetic, as the paper's MSE with clip norm 1 and
  step η (clip(2g, 1) = 2·clip(g, ½); the noise std scales with the clip norm). Step sizes and
  losses are reported in the paper's units (η, MSE).
* privacy: LDP (the attacker sees every message), each mechanism's noise multiplier σ = 1/μ
  times its own sensitivity under (20, 19)-participation (paper 000 Thm 7), so both are
  μ-GDP for each μ of the authors' grid (0.1, 0.2, 0.5, 1, 2, 5, 10) with respect to one
  training row (zero-out adjacency, edgedp's); ε at δ = 1e-6 from μ (the GDP profile), as
  App. C's Fig. 4 reports. DP-D-SGD: C = I; MAFALDA-SGD: the optimal factor of Lemma 10's
  workload for this W and (k, b) (edgedp's planner, its duality gap recorded).
* step sizes, two protocols. *Tuned*: each (mechanism, μ) at its best η of ``LR_GRID``,
  scored by the mean validation MSE over the last 50 steps of ``TUNE_SEEDS`` (runs of their
  own, never reported); a best η at an edge of the grid adds the next value beyond it (at
  most ``EXTEND_ROUNDS`` times). *Shared*: every mechanism and μ at η = 0.1, the value the
  authors' scripts use for all of them (the paper does not state it).
* metric: the test MSE of every node, averaged over nodes, after every ``LAST_EVERY``-th
  step of the last 50 (and, for the curves the plot shows — the middle μ and the non-private
  reference — every ``CURVE_EVERY``-th before them); the
  last-50-step loss is the mean of the evaluations after steps 335, 340, …, 380.
* claim 1: per μ and seed, 100·(1 − L_MAFALDA / L_DP-D-SGD) (paired: same partition), then
  its mean over the μ grid per seed; mean and 95% t-interval over the ``SEEDS``.
* claim 2: ε at test loss 0.75 for each mechanism: the mean last-50 loss at each μ of the
  grid, linearly interpolated in (log ε, log loss) between the two grid points around 0.75
  (the loss falls with ε); the ratio ε_DP-D-SGD / ε_MAFALDA; 95% interval from a paired
  bootstrap over seeds (``BOOTSTRAP`` resamples, percentile).
* verdicts: a claim is *reproduced* when its 95% interval lies inside the paper's value
  ±25% (``BAND``), *differs* when it lies outside that band, and is *not established* when
  it overlaps an edge of the band.

Writes experiments/out/mafalda_protocol.json and .png. Runs jobs on ``WORKERS`` processes.

    python experiments/mafalda_protocol.py [--quick] [--out-dir DIR]
"""

# Paper letters W (gossip matrix), T (steps), B (batch): see docs/NOTATION.md.
# ruff: noqa: N806

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from threadpoolctl import threadpool_limits

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

from edgedp import models, topology
from edgedp.accounting import gdp
from edgedp.accounting.participation import Participation
from edgedp.families.mf import factorization
from edgedp.plan import TaskSpec, make_plan
from edgedp.topology import Graph
from edgedp_sim import batch, datasets, provenance

import common

# ---------------------------------------------------------------- constants
DATA_SEED = 0  # the stand-in data set, its test/validation split
GRAPH_SEED = 0  # the stand-in graph
SEEDS = tuple(range(20))  # evaluation runs: partition, noise, batch order
TUNE_SEEDS = (100, 101)  # step-size tuning runs (never reported)
CONFIDENCE = 0.95
STEPS = 380  # T
PARTICIPATION = (20, 19)  # (k, b)
BATCH = 5  # rows per batch: 19 batches of 5 = 95 rows per node
MUS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)  # the authors' grid
DELTA = 1e-6
CLIP_NORM = 1.0  # paper units (MSE); the engine runs ½-MSE at CLIP_NORM / 2 and step 2η
SHARED_LR = 0.1  # the authors' step size for every mechanism
LR_GRID = (0.01, 0.03, 0.1, 0.3)  # paper units
LR_LADDER = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
EXTEND_ROUNDS = 1
LAST = 50
LAST_EVERY = 5  # evaluations in the last LAST steps: every 5 steps (10 of them)
CURVE_EVERY = 20  # before them (test runs only; the curves of the plot)
LOSS_TARGET = 0.75  # claim 2: the test loss at which ε is compared
PAPER_IMPROVEMENT = 31.0  # % (000 §7.2)
PAPER_EPS_RATIO = 2.0  # (000 §7.2)
BAND = 0.25  # verdict band: the paper's value ± 25%
BOOTSTRAP = 2000
MECHANISMS = ("dp-dsgd", "mafalda")
WORKERS = min(2, os.cpu_count() or 1)
# the data set: California Housing's shape and target statistics (OpenML 823)
ROWS, FEATURES = 20640, 8
TARGET_MEAN, TARGET_STD, TARGET_RANGE = 2.0686, 1.1540, (0.14999, 5.00001)
TEST_FRACTION = 0.2
# the graph: the largest component of the Facebook ego network 414 (statistics, not edges)
EGO_414 = {
    "nodes": 148,
    "edges": 1692,
    "blocks": (72, 51, 25),
    "inside": (951, 433, 260),
    "between": {(0, 1): 46, (0, 2): 1, (1, 2): 1},
    "spectral_gap_uniform_neighbour": 0.0039,
    "clustering": 0.646,
    "degree_range": (1, 57),
}

QUICK = {
    "EGO_414": {
        "nodes": 30,
        "edges": 120,
        "blocks": (15, 10, 5),
        "inside": (60, 35, 8),
        "between": {(0, 1): 15, (0, 2): 1, (1, 2): 1},
        "spectral_gap_uniform_neighbour": None,
        "clustering": None,
        "degree_range": None,
    },
    "STEPS": 38,
    "PARTICIPATION": (2, 19),
    "MUS": (1.0, 10.0),
    "SEEDS": (0, 1, 2),
    "TUNE_SEEDS": (100,),
    "LR_GRID": (0.03, 0.1),
    "EXTEND_ROUNDS": 0,
    "LAST": 10,
    "LAST_EVERY": 2,
    "CURVE_EVERY": 5,
    "BOOTSTRAP": 200,
    "ROWS": 4000,
}

_CACHE: dict = {}


# ---------------------------------------------------------------- instance
def ego_standin(seed: int = GRAPH_SEED) -> Graph:
    """A random graph with the blocks, and the edges inside and between them, of
    :data:`EGO_414` (each block's edges uniform among its pairs; resampled until connected)."""
    spec = EGO_414
    sizes = spec["blocks"]
    start = np.cumsum((0, *sizes))
    rng = np.random.default_rng(seed)
    for _ in range(100):
        edges: set[tuple[int, int]] = set()
        for b, m in enumerate(spec["inside"]):
            u, v = np.triu_indices(sizes[b], 1)
            pick = rng.choice(len(u), m, replace=False)
            rows, cols = (u[pick] + start[b]).tolist(), (v[pick] + start[b]).tolist()
            edges.update(zip(rows, cols, strict=True))
        for (a, b), m in spec["between"].items():
            pick = rng.choice(sizes[a] * sizes[b], m, replace=False)
            rows, cols = (
                (pick // sizes[b] + start[a]).tolist(),
                (pick % sizes[b] + start[b]).tolist(),
            )
            edges.update(zip(rows, cols, strict=True))
        g = Graph(int(start[-1]), sorted(edges), name="ego-414 stand-in")
        if topology.is_connected(g):
            return g
    raise RuntimeError("no connected stand-in graph in 100 draws")


def graph_stats(g: Graph) -> dict:
    W = topology.uniform_neighbour(g)
    second = np.sort(np.abs(np.linalg.eigvals(W)))[-2]
    A = np.zeros((g.n, g.n))
    e = np.asarray(g.edges)
    A[e[:, 0], e[:, 1]] = A[e[:, 1], e[:, 0]] = 1.0
    deg = A.sum(axis=1)
    triangles = np.trace(A @ A @ A) / 6
    triples = float(np.sum(deg * (deg - 1) / 2))
    return {
        "nodes": g.n,
        "edges": len(g.edges),
        "spectral_gap_uniform_neighbour": float(1.0 - second),
        "clustering": float(3 * triangles / triples),
        "degree_range": [int(deg.min()), int(deg.max())],
    }


def housing_standin(seed: int = DATA_SEED) -> datasets.Dataset:
    """ROWS × 8 rows shaped like California Housing (module docstring): standardised features
    (split-independent), the target in Housing's units; test set = the first 20% of a
    permutation. The validation/pool split of the training rows is :func:`split`'s."""
    rng = np.random.default_rng(seed)
    # correlated latent features; two made heavy-tailed (like rooms and occupancy)
    mix = rng.standard_normal((FEATURES, FEATURES)) / math.sqrt(FEATURES)
    z = rng.standard_normal((ROWS, FEATURES)) @ (np.eye(FEATURES) + 0.6 * mix)
    x = z.copy()
    x[:, 2] = np.exp(0.6 * z[:, 2])
    x[:, 5] = np.exp(0.5 * z[:, 5])
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    w, v, u = rng.standard_normal((3, FEATURES)) / math.sqrt(FEATURES)
    linear = x @ w
    nonlinear = np.sin(1.5 * (x @ v)) + 0.5 * (x @ u) * (x @ v)
    signal = linear / linear.std() * math.sqrt(0.6) + nonlinear / nonlinear.std() * math.sqrt(0.2)
    s = signal + math.sqrt(0.2) * rng.standard_normal(ROWS)
    s = (s - s.mean()) / s.std()
    mean, scale = TARGET_MEAN, TARGET_STD
    for _ in range(50):  # capped like Housing's, with Housing's mean and std after the cap
        y = np.clip(mean + scale * s, *TARGET_RANGE)
        mean += TARGET_MEAN - y.mean()
        scale *= TARGET_STD / y.std()
    order = rng.permutation(ROWS)
    n_test = int(round(TEST_FRACTION * ROWS))
    test, train = order[:n_test], order[n_test:]
    return datasets.Dataset("housing-standin", x[train], y[train], x[test], y[test], "linear")


def instance():
    """(graph, W, stand-in data, validation x/y, training pool x/y), cached per process."""
    if "instance" not in _CACHE:
        g = ego_standin()
        data = housing_standin()
        pool_size = g.n * PARTICIPATION[1] * BATCH
        if pool_size > len(data.y_train):
            raise ValueError(f"{pool_size} pool rows exceed the {len(data.y_train)} training rows")
        pool = slice(0, pool_size)
        val = slice(pool_size, len(data.y_train))
        _CACHE["instance"] = (
            g,
            topology.uniform_neighbour(g),
            data,
            (data.x_train[val], data.y_train[val]),
            (data.x_train[pool], data.y_train[pool]),
        )
    return _CACHE["instance"]


def local_data(seeds, *, on_test: bool) -> datasets.PerTrialData:
    """Every seed's partition of the pool over the nodes (one trial each); evaluated on the
    test set or on the validation set."""
    g, _, data, (xv, yv), (xp, yp) = instance()
    m = PARTICIPATION[1] * BATCH
    orders = [np.random.default_rng(10_000 + s).permutation(len(yp)) for s in seeds]
    x = np.stack([xp[o].reshape(g.n, m, -1) for o in orders])
    y = np.stack([yp[o].reshape(g.n, m) for o in orders])
    xt, yt = (data.x_test, data.y_test) if on_test else (xv, yv)
    return datasets.PerTrialData(x, y, xt, yt, "linear")


def factor(mechanism: str):
    """The temporal factor (None for DP-D-SGD's identity) and the planner's record."""
    key = ("factor", mechanism)
    if key not in _CACHE:
        if mechanism == "mafalda":
            _, W, *_ = instance()
            pf = factorization.plan_factor(
                "mafalda", W, steps=STEPS, participation=Participation(*PARTICIPATION)
            )
            _CACHE[key] = (
                pf.factor,
                {"gap": pf.gap, "iterations": pf.iterations, "converged": pf.converged},
            )
        else:
            _CACHE[key] = (None, None)
    return _CACHE[key]


def plan_for(mechanism: str, mu: float | None, lr: float, seed: int):
    g, *_ = instance()
    noisy = mechanism != "dsgd"
    return make_plan(
        mechanism,
        g,
        steps=STEPS,
        participation=Participation(*PARTICIPATION),
        clip_norm=CLIP_NORM / 2,  # ½-MSE at Δ/2 and 2η = MSE at Δ and η
        learning_rate=2 * lr,
        weighting="uniform-neighbour",
        noise_multiplier=1.0 / mu if noisy else None,
        factor=factor(mechanism)[0],
        task=TaskSpec(
            model=f"mlp:{FEATURES}-64-1:relu",
            dataset="housing-standin",
            batch_size=BATCH,
            loss="mse",
        ),
        seed=seed,
        topology_name="ego-414 stand-in",
    )


# ---------------------------------------------------------------- runs
def eval_steps(*, curve: bool) -> list[int]:
    """Steps after which the models are evaluated: every ``LAST_EVERY`` in the last ``LAST``
    steps, and (``curve``) every ``CURVE_EVERY`` before them."""
    last = list(range(STEPS - LAST + LAST_EVERY, STEPS + 1, LAST_EVERY))
    return (list(range(CURVE_EVERY, STEPS - LAST + 1, CURVE_EVERY)) if curve else []) + last


class Losses:
    """A batch-engine observer: the mean-over-nodes loss of every trial's models on (x, y)
    after the steps ``at`` (the state at the start of round t is the model after t steps).

    The engine's own evaluation costs ~7 ms per model on the 4,128 test rows here; this one
    runs the model's layers as batched matrix products (the layout is the model spec's), and
    :func:`run_job` checks it against the engine's own losses at steps 0 and T."""

    def __init__(self, model, x: np.ndarray, y: np.ndarray, at: list[int]) -> None:
        self.spec, self.x, self.y, self.at = model.spec, x, y, set(at)
        self.losses: dict[int, np.ndarray] = {}

    def observe(self, view) -> None:
        if view.round in self.at:
            self.losses[view.round] = self(view.state["theta"])

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        """(trials,) mean over nodes of each model's mean ½-MSE."""
        lead = theta.shape[:-1]
        flat = theta.reshape(-1, theta.shape[-1])
        out = np.empty(len(flat))
        for start in range(0, len(flat), 32):
            w0, b0, w1, b1 = self.spec.unflatten(flat[start : start + 32])
            h = np.maximum(np.matmul(self.x, np.swapaxes(w0, 1, 2)) + b0[:, None, :], 0.0)
            z = np.matmul(h, np.swapaxes(w1, 1, 2))[..., 0] + b1
            out[start : start + 32] = np.mean(0.5 * (z - self.y) ** 2, axis=-1)
        return out.reshape(lead).mean(axis=-1)


def run_job(job: dict) -> dict:
    """One batch-engine run: every seed of ``job['seeds']`` is a trial (its own partition)."""
    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_for(job["mechanism"], job["mu"], job["lr"], job["plan_seed"])
    data = local_data(job["seeds"], on_test=job["on_test"])
    at = eval_steps(curve=job["curve"])
    losses = Losses(models.for_task(plan.task, FEATURES), data.x_test, data.y_test, at)
    out = {"job": job, "sensitivity": plan.sensitivity}
    try:
        # one BLAS thread per worker: WORKERS processes share the cores (a second thread
        # per process only spins)
        with threadpool_limits(1):
            res = batch.run(
                plan, data, trials=len(job["seeds"]), eval_every=STEPS, observers=[losses]
            )
    except FloatingPointError:
        out.update(diverged=True)
    else:
        final = losses(res.models)
        if res.eval_steps[-1] != STEPS or not np.allclose(final, res.test_loss[-1], rtol=1e-9):
            raise AssertionError("the observer's test loss differs from the engine's at step T")
        losses.losses[STEPS] = final
        out.update(
            diverged=False,
            steps=at,
            # (seeds, evaluations); ×2: the engine's ½-MSE is the paper's MSE / 2
            loss=(2.0 * np.stack([losses.losses[t] for t in at], axis=1)).tolist(),
            clipped_fraction=res.clipped_fraction,
        )
    out.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0)
    return out


def last_mean(steps, loss) -> np.ndarray:
    """Per seed: the mean of the evaluations in the last ``LAST`` steps."""
    sel = np.asarray(steps) > STEPS - LAST
    return np.asarray(loss)[:, sel].mean(axis=1)


def execute(jobs: list[dict], label: str, t_start: float, cpu: list[float]) -> list[dict]:
    results = []
    with ProcessPoolExecutor(max_workers=WORKERS) as pool:
        for i, r in enumerate(pool.map(run_job, jobs), 1):
            cpu.append(r["cpu_seconds"])
            j = r["job"]
            score = (
                "diverged" if r["diverged"] else f"{last_mean(r['steps'], r['loss']).mean():.4g}"
            )
            print(
                f"[{label} {i}/{len(jobs)}] {j['mechanism']:<8} mu={j['mu']!s:<5} "
                f"lr={j['lr']:<6g} seeds={len(j['seeds'])} -> last-{LAST} MSE {score} "
                f"({r['seconds']:.0f} s; elapsed {time.perf_counter() - t_start:.0f} s)",
                flush=True,
            )
            results.append(r)
    return results


def _job(mech, mu, lr, seeds, *, on_test: bool) -> dict:
    return {
        "mechanism": mech,
        "mu": mu,
        "lr": lr,
        "seeds": list(seeds),
        "plan_seed": 1 if on_test else 2,
        "on_test": on_test,
        # the learning curve (every CURVE_EVERY steps) only where the plot shows it
        "curve": on_test and mu in (None, MUS[len(MUS) // 2]),
    }


def _neighbour(lr: float, direction: int) -> float | None:
    i = min(range(len(LR_LADDER)), key=lambda j: abs(math.log(LR_LADDER[j] / lr)))
    j = i + direction
    return LR_LADDER[j] if 0 <= j < len(LR_LADDER) else None


def tune(t_start: float, cpu: list[float]) -> tuple[dict, dict]:
    """Best η per (mechanism, μ) on the validation set of ``TUNE_SEEDS`` (∞ if diverged)."""
    scores: dict = {}
    jobs = [
        _job(m, mu, lr, TUNE_SEEDS, on_test=False)
        for m in MECHANISMS
        for mu in MUS
        for lr in LR_GRID
    ]
    for rnd in range(1 + EXTEND_ROUNDS):
        for r in execute(jobs, "tune" if rnd == 0 else f"tune+{rnd}", t_start, cpu):
            j = r["job"]
            s = math.inf if r["diverged"] else float(last_mean(r["steps"], r["loss"]).mean())
            scores.setdefault((j["mechanism"], j["mu"]), {})[j["lr"]] = s
        jobs = []
        for (m, mu), by_lr in scores.items():
            best = min(by_lr, key=lambda v: (by_lr[v], v))
            for direction, edge in ((-1, min(by_lr)), (1, max(by_lr))):
                nxt = _neighbour(best, direction) if best == edge else None
                if nxt is not None and nxt not in by_lr:
                    jobs.append(_job(m, mu, nxt, TUNE_SEEDS, on_test=False))
        if not jobs:
            break
    best, record = {}, {}
    for (m, mu), by_lr in scores.items():
        lr = min(by_lr, key=lambda v: (by_lr[v], v))
        best[(m, mu)] = lr
        record[f"{m}|{mu}"] = {
            "validation_mse_by_lr": {str(v): by_lr[v] for v in sorted(by_lr)},
            "chosen": lr,
            "at_grid_edge": lr in (min(by_lr), max(by_lr)),
        }
    return best, record


# ---------------------------------------------------------------- statistics
def interval(values) -> tuple[float, float, float]:
    """Mean and its ``CONFIDENCE`` t-interval (lo, hi)."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if x.size < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return mean, float(mean - half), float(mean + half)


def epsilon_at(eps: np.ndarray, loss: np.ndarray, target: float) -> float | None:
    """ε where the loss curve (one value per ε, ascending ε) first falls to ``target``:
    linear interpolation in (log ε, log loss) between the two grid points around it; None
    if the curve never reaches it (or starts below it)."""
    if not np.all(np.isfinite(loss)) or loss[0] <= target:
        return None
    for i in range(1, len(eps)):
        if loss[i] <= target:
            a, b = math.log(loss[i - 1]), math.log(loss[i])
            f = (math.log(target) - a) / (b - a)
            return float(math.exp(math.log(eps[i - 1]) + f * math.log(eps[i] / eps[i - 1])))
    return None


def band_verdict(lo: float, hi: float, paper: float) -> str:
    a, b = paper * (1 - BAND), paper * (1 + BAND)
    if a <= lo and hi <= b:
        return f"reproduced (95% interval inside the paper's value ±{BAND:.0%})"
    if hi < a or lo > b:
        side = "smaller" if hi < a else "larger"
        return f"differs ({side}: 95% interval outside the paper's value ±{BAND:.0%})"
    return f"not established (95% interval overlaps an edge of the paper's value ±{BAND:.0%})"


def summarize(runs: dict, lrs: dict, eps: list[float]) -> dict:
    """Per protocol: per-(mechanism, μ) losses, MAFALDA's improvement, the ε ratio."""
    rows, improvement = {}, {}
    per_seed_imp = []
    for mu in MUS:
        cells = {}
        for m in MECHANISMS:
            r = runs[(m, mu, lrs[(m, mu)])]
            if r["diverged"]:
                cells[m] = None
                rows[f"{m}|{mu}"] = {"lr": lrs[(m, mu)], "diverged": True}
                continue
            last = last_mean(r["steps"], r["loss"])
            mean, lo, hi = interval(last)
            curve = np.asarray(r["loss"])
            cells[m] = last
            rows[f"{m}|{mu}"] = {
                "lr": lrs[(m, mu)],
                "diverged": False,
                "sensitivity": r["sensitivity"],
                "last_mean": mean,
                "last_ci": [lo, hi],
                "last_per_seed": last.tolist(),
                "eval_steps": r["steps"],
                "curve_mean": curve.mean(axis=0).tolist(),
                "clipped_fraction": r["clipped_fraction"],
            }
        if cells["dp-dsgd"] is None or cells["mafalda"] is None:
            improvement[str(mu)] = {"diverged": [m for m, c in cells.items() if c is None]}
            continue
        imp = 100.0 * (1.0 - cells["mafalda"] / cells["dp-dsgd"])
        per_seed_imp.append(imp)
        mean, lo, hi = interval(imp)
        improvement[str(mu)] = {
            "mean": mean,
            "ci": [lo, hi],
            "wins": int(np.sum(imp > 0)),
            "seeds": int(imp.size),
            "of_means": float(100.0 * (1.0 - cells["mafalda"].mean() / cells["dp-dsgd"].mean())),
        }
    mean_imp = None
    if per_seed_imp:
        avg = np.mean(per_seed_imp, axis=0)
        mean, lo, hi = interval(avg)
        mean_imp = {"mean": mean, "ci": [lo, hi], "mus": len(per_seed_imp), "seeds": len(avg)}
    return {
        "rows": rows,
        "improvement": improvement,
        "mean_improvement": mean_imp,
        "eps_at_target": eps_ratio(rows, eps),
    }


def eps_ratio(rows: dict, eps: list[float]) -> dict:
    """ε at ``LOSS_TARGET`` per mechanism and their ratio, with a paired bootstrap."""
    per_seed = {}
    for m in MECHANISMS:
        if any(rows[f"{m}|{mu}"]["diverged"] for mu in MUS):
            return {"available": False, "why": f"{m} diverged at some μ"}
        per_seed[m] = np.array([rows[f"{m}|{mu}"]["last_per_seed"] for mu in MUS])  # (μ, seeds)
    e = np.asarray(eps)
    point = {m: epsilon_at(e, v.mean(axis=1), LOSS_TARGET) for m, v in per_seed.items()}
    out: dict = {"available": True, "target": LOSS_TARGET, "eps": point}
    if any(v is None for v in point.values()):
        out.update(available=False, why="a curve does not cross the target loss on the μ grid")
        return out
    ratio = point["dp-dsgd"] / point["mafalda"]
    rng = np.random.default_rng(12345)
    seeds = per_seed["mafalda"].shape[1]
    samples, missing = [], 0
    for _ in range(BOOTSTRAP):
        idx = rng.integers(0, seeds, seeds)
        a = epsilon_at(e, per_seed["dp-dsgd"][:, idx].mean(axis=1), LOSS_TARGET)
        b = epsilon_at(e, per_seed["mafalda"][:, idx].mean(axis=1), LOSS_TARGET)
        if a is None or b is None:
            missing += 1
            continue
        samples.append(a / b)
    lo, hi = (
        np.quantile(samples, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
        if samples
        else (math.nan, math.nan)
    )
    out.update(ratio=ratio, ci=[float(lo), float(hi)], bootstrap=BOOTSTRAP, missing=missing)
    return out


def table(protocols: dict) -> list[dict]:
    """The rows {claim, paper, edgedp, verdict} of both claims under both protocols."""
    out = []
    for name, s in protocols.items():
        m = s["mean_improvement"]
        if m is None:
            ours, verdict = "a run diverged", "not established (a run diverged)"
        else:
            lo, hi = m["ci"]
            ours = f"{m['mean']:.1f}% (95% CI {lo:.1f}–{hi:.1f}; {m['mus']} μ, {m['seeds']} seeds)"
            verdict = band_verdict(lo, hi, PAPER_IMPROVEMENT)
        out.append(
            {
                "claim": f"MAFALDA's last-{LAST}-step test loss below DP-D-SGD's, mean over the "
                f"μ grid ({name} step sizes)",
                "paper": f"{PAPER_IMPROVEMENT:g}% lower",
                "edgedp": ours,
                "verdict": verdict,
            }
        )
        r = s["eps_at_target"]
        if not r["available"]:
            ours, verdict = f"– ({r['why']})", "not established"
        else:
            lo, hi = r["ci"]
            ours = (
                f"{r['ratio']:.2f}× (95% CI {lo:.2f}–{hi:.2f}; ε {r['eps']['dp-dsgd']:.3g} vs "
                f"{r['eps']['mafalda']:.3g})"
            )
            verdict = band_verdict(lo, hi, PAPER_EPS_RATIO)
        out.append(
            {
                "claim": f"ε of DP-D-SGD over MAFALDA's at test loss {LOSS_TARGET} "
                f"(δ = {DELTA:g}; {name} step sizes)",
                "paper": f"{PAPER_EPS_RATIO:g}×",
                "edgedp": ours,
                "verdict": verdict,
            }
        )
        wins = [v for v in s["improvement"].values() if "mean" in v]
        lows = [v["ci"][0] for v in wins]
        every = len(wins) == len(MUS) and all(lo > 0 for lo in lows)
        some_worse = any(v["ci"][1] < 0 for v in wins)
        verdict = "reproduced" if every else "differs" if some_worse else "not established"
        out.append(
            {
                "claim": f"MAFALDA below DP-D-SGD at every μ ({name} step sizes)",
                "paper": "at every privacy level (Fig. 3, Fig. 4)",
                "edgedp": f"95% CI above 0 at {sum(lo > 0 for lo in lows)} of {len(MUS)} μ",
                "verdict": verdict,
            }
        )
    return out


# ---------------------------------------------------------------- plot
def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"dp-dsgd": "tab:blue", "mafalda": "tab:green", "dsgd": "black"}
    labels = {"dp-dsgd": "DP-D-SGD", "mafalda": "MAFALDA-SGD", "dsgd": "D-SGD (non-private)"}
    styles = {"tuned": "-", "shared": "--"}
    eps = out["epsilons"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    mid = MUS[len(MUS) // 2]
    ax = axes[0, 0]
    for proto, s in out["protocols"].items():
        for m in MECHANISMS:
            row = s["rows"][f"{m}|{mid}"]
            if not row["diverged"]:
                ax.plot(
                    row["eval_steps"],
                    row["curve_mean"],
                    styles[proto],
                    color=colors[m],
                    label=f"{labels[m]}, {proto} η={row['lr']:g}",
                )
    ref = out["non_private"]
    if not ref["diverged"]:
        ax.plot(
            ref["eval_steps"],
            ref["curve_mean"],
            ":",
            color="black",
            label=f"{labels['dsgd']}, η={SHARED_LR:g}",
        )
    ax.axvspan(STEPS - LAST, STEPS, color="grey", alpha=0.1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("test MSE (mean over nodes and seeds)")
    ax.set_title(f"μ = {mid:g} (ε = {eps[MUS.index(mid)]:.3g} at δ = {DELTA:g})", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for proto, s in out["protocols"].items():
        for m in MECHANISMS:
            xs, ys, lo, hi = [], [], [], []
            for mu, e in zip(MUS, eps, strict=True):
                row = s["rows"][f"{m}|{mu}"]
                if row["diverged"]:
                    continue
                xs.append(e)
                ys.append(row["last_mean"])
                lo.append(row["last_mean"] - row["last_ci"][0])
                hi.append(row["last_ci"][1] - row["last_mean"])
            ax.errorbar(
                xs,
                ys,
                yerr=[lo, hi],
                fmt="o" + styles[proto],
                color=colors[m],
                ms=3,
                capsize=2,
                label=f"{labels[m]} ({proto})",
            )
            at = s["eps_at_target"].get("eps", {}).get(m)
            if at is not None:
                ax.plot([at], [LOSS_TARGET], "x", color=colors[m], ms=8)
    ax.axhline(LOSS_TARGET, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"ε (δ = {DELTA:g}, LDP)")
    ax.set_ylabel(f"last-{LAST}-step test MSE, 95% CI")
    ax.legend(fontsize=7)
    ax = axes[1, 0]
    for k, (proto, s) in enumerate(out["protocols"].items()):
        xs, ys, lo, hi = [], [], [], []
        for mu, e in zip(MUS, eps, strict=True):
            v = s["improvement"][str(mu)]
            if "mean" not in v:
                continue
            xs.append(e * (1.06 if k else 1 / 1.06))
            ys.append(v["mean"])
            lo.append(v["mean"] - v["ci"][0])
            hi.append(v["ci"][1] - v["mean"])
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=f"{proto} step sizes")
    ax.axhline(PAPER_IMPROVEMENT, color="red", lw=0.8, label=f"paper: {PAPER_IMPROVEMENT:g}%")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel(f"ε (δ = {DELTA:g})")
    ax.set_ylabel(f"MAFALDA's % lower last-{LAST} loss, 95% CI")
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    for m in MECHANISMS:
        ax.plot(
            eps,
            [out["lr"]["tuned"][f"{m}|{mu}"] for mu in MUS],
            "o-",
            color=colors[m],
            label=f"{labels[m]} tuned",
        )
    ax.axhline(SHARED_LR, color="grey", ls="--", label="shared")
    ax.set_xscale("log")
    ax.set_yscale("log")
    used = [*out["lr"]["tuned"].values(), SHARED_LR]
    ax.set_ylim(min(used) / 2, max(used) * 2)
    ax.set_xlabel(f"ε (δ = {DELTA:g})")
    ax.set_ylabel("step size η (MSE units)")
    ax.legend(fontsize=7)
    fig.suptitle(
        f"Paper 000 §7.2 protocol: {out['config']['graph']['nodes']}-node ego stand-in, "
        f"Housing-shaped stand-in, T={STEPS}, (k,b)={PARTICIPATION}, {len(SEEDS)} seeds",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- main
def main() -> None:
    args = common.parser(__doc__).parse_args()
    if args.quick:
        globals().update(QUICK)
    t_start = time.perf_counter()
    cpu: list[float] = []
    g, W, data, (xv, _), _ = instance()
    eps = [gdp.epsilon(mu, delta=DELTA) for mu in MUS]
    print(
        f"T={STEPS} (k,b)={PARTICIPATION} B={BATCH} nodes={g.n} mus={MUS} seeds={len(SEEDS)} "
        f"tuning seeds={len(TUNE_SEEDS)} lr grid={LR_GRID} workers={WORKERS}",
        flush=True,
    )
    fac = factor("mafalda")[1]
    print(f"MAFALDA factor: {fac}", flush=True)
    best, tuning = tune(t_start, cpu)
    lrs = {"tuned": best, "shared": {(m, mu): SHARED_LR for m in MECHANISMS for mu in MUS}}
    wanted = {(m, mu, lr[(m, mu)]) for lr in lrs.values() for m in MECHANISMS for mu in MUS}
    jobs = [_job(m, mu, lr, SEEDS, on_test=True) for m, mu, lr in sorted(wanted)]
    jobs.append(_job("dsgd", None, SHARED_LR, SEEDS, on_test=True))
    done = execute(jobs, "run", t_start, cpu)
    runs = {(r["job"]["mechanism"], r["job"]["mu"], r["job"]["lr"]): r for r in done}
    protocols = {name: summarize(runs, lr, eps) for name, lr in lrs.items()}
    ref = runs[("dsgd", None, SHARED_LR)]
    non_private = {"diverged": ref["diverged"], "lr": SHARED_LR}
    if not ref["diverged"]:
        non_private.update(
            eval_steps=ref["steps"],
            curve_mean=np.asarray(ref["loss"]).mean(axis=0).tolist(),
            last_mean=float(last_mean(ref["steps"], ref["loss"]).mean()),
        )
    seconds = time.perf_counter() - t_start
    cpu_total = float(sum(cpu)) + time.process_time()
    out = {
        "config": {
            "quick": args.quick,
            "steps": STEPS,
            "participation": list(PARTICIPATION),
            "batch_size": BATCH,
            "rows_per_node": PARTICIPATION[1] * BATCH,
            "mus": list(MUS),
            "delta": DELTA,
            "clip_norm": CLIP_NORM,
            "engine": "loss ½-MSE at clip norm Δ/2 and step 2η: the paper's MSE at Δ, η",
            "shared_lr": SHARED_LR,
            "lr_grid": list(LR_GRID),
            "extend_rounds": EXTEND_ROUNDS,
            "seeds": list(SEEDS),
            "tuning_seeds": list(TUNE_SEEDS),
            "eval_steps": eval_steps(curve=True),
            "last_steps": LAST,
            "confidence": CONFIDENCE,
            "band": BAND,
            "loss_target": LOSS_TARGET,
            "weighting": "uniform-neighbour",
            "model": f"mlp:{FEATURES}-64-1:relu, MSE",
            "accounting": "LDP, paper 000 Thm 7; μ-GDP per training row (zero-out adjacency)",
            "graph": {
                "stand_in": "generated: three-block random graph with the blocks and block "
                "edge counts of the largest component of the Facebook ego network 414 "
                "(not shipped in any package registry; its source states no licence)",
                "target": {
                    k: (
                        v if not isinstance(v, dict) else {f"{a}-{b}": c for (a, b), c in v.items()}
                    )
                    for k, v in EGO_414.items()
                },
                **graph_stats(g),
            },
            "data": {
                "stand_in": "generated: California Housing's shape (rows, 8 features) and "
                "target mean, standard deviation and range; linear + non-linear target with "
                "noise (not shipped in any package registry)",
                "rows": ROWS,
                "test_rows": len(data.y_test),
                "validation_rows": len(xv),
                "pool_rows": g.n * PARTICIPATION[1] * BATCH,
                "test_target_variance": float(np.var(data.y_test)),
            },
        },
        "paper": {
            "improvement_percent": PAPER_IMPROVEMENT,
            "eps_ratio": PAPER_EPS_RATIO,
            "loss_target": LOSS_TARGET,
        },
        "mafalda_factor": fac,
        "epsilons": eps,
        "lr": {name: {f"{m}|{mu}": v for (m, mu), v in lr.items()} for name, lr in lrs.items()},
        "tuning": tuning,
        "protocols": protocols,
        "non_private": non_private,
        "table": table(protocols),
        "seconds": seconds,
        "cpu_seconds": cpu_total,
    }
    folder = common.out_dir(args)
    provenance.write_json(folder / "mafalda_protocol.json", out)
    plot(out, folder / "mafalda_protocol.png")
    for row in out["table"]:
        print(f"{row['claim']}: paper {row['paper']}; edgedp {row['edgedp']}; {row['verdict']}")
    print(
        f"wrote {folder / 'mafalda_protocol'}.json/.png in {seconds:.0f} s wall, "
        f"CPU {cpu_total:.0f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
