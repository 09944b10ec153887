"""Dropouts and noise that should cancel: Whisper and DECOR with 5% and 20% per-round dropout.

Cancellation assumes every node adds its share. Each round every node is offline
independently with probability q (the event engine's per-round dropout: it sends nothing
and its neighbours mix the rest with the ``renormalize`` rule). We measure the residual
per-step noise after mixing on the online set A, E‖W' v_A‖²/|A| = Tr(W' R_A W'ᵀ)/|A|, in the
plan's units (unit privacy bound, max_i [R⁻¹]_ii = 1; LDP is R = I), over ROUNDS random
online sets per q:

* planned noise, no mitigation — the online nodes add their planned noise (R_A = R[A, A]),
  neighbours renormalize their weights over the online ones;
* mitigation: re-plan on the online graph (:func:`edgedp.families.cross.planning.replan_alive`)
  — Metropolis–Hastings on the induced subgraph and Eq. (10) (Whisper) or σ²_pair I + σ²_cor L
  (DECOR) solved for it with the same unit bound — which needs the online set before the
  noise is drawn (a liveness beacon at the start of each round; not wired into the engines).

Privacy (checked, printed): without mitigation the online nodes' releases are a subset of
the planned ones, so max_i [R[A,A]⁻¹]_ii <= max_i [R⁻¹]_ii (Schur complement); the re-plan
satisfies the unit bound by construction. Neither is ever worse than planned.

Writes experiments/out/cross_agent_dropout.json and .png.
Run: python experiments/cross_agent_dropout.py [--quick] [--out-dir DIR] (``--quick``: the
first graph, 20 online sets per rate)
"""

# Paper letters W, R: see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import sys
import time

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp import topology
from edgedp.families.cross import accounting as acc
from edgedp.families.cross import covariance as whisper
from edgedp.families.cross import planning as planner
from edgedp_sim import provenance

import common

# ---------------------------------------------------------------- constants
SEED = 0  # dropout draws and ER graph
GRAPHS = ("er:20:0.6:0", "er:50:0.2:0")  # dense enough that DECOR is not LDP (σ²_cor > 0)
DROPOUT = (0.0, 0.05, 0.2)
ROUNDS = 200  # random online sets per dropout rate
QUICK = {"GRAPHS": GRAPHS[:1], "ROUNDS": 20}


def renormalized(W: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """The Agent's ``renormalize`` rule on the online nodes: drop the missing, rescale rows."""
    Wa = W[np.ix_(alive, alive)]
    return Wa / Wa.sum(axis=1, keepdims=True)


def residual(Wm: np.ndarray, R: np.ndarray) -> float:
    return float(np.trace(Wm @ R @ Wm.T)) / Wm.shape[0]


def one_graph(spec: str, gen: np.random.Generator, t0: float) -> dict:
    g = edgedp_topologies.parse(spec)
    W = topology.metropolis_hastings(g)
    plans = {
        "whisper": whisper.optimal_covariance(W).covariance,
        "decor": whisper.pair_covariance(W, whisper.laplacian(g.n, g.edges)).covariance,
        "ldp": np.eye(g.n),
    }
    out = {"graph": spec, "rows": []}
    for q in DROPOUT:
        acc_rows = {
            m: {"planned": [], "replanned": [], "prec_planned": [], "prec_replanned": []}
            for m in plans
        }
        for _ in range(ROUNDS if q > 0 else 1):
            alive = np.flatnonzero(gen.random(g.n) >= q)
            if alive.size < 2:
                continue
            Wm = renormalized(W, alive)
            for m, R in plans.items():
                RA = R[np.ix_(alive, alive)]
                acc_rows[m]["planned"].append(residual(Wm, RA))
                acc_rows[m]["prec_planned"].append(float(np.max(acc.precision_diagonal(RA))))
                if m == "ldp":
                    continue
                WA, RA2 = planner.replan_alive(g, alive, mechanism=m)
                acc_rows[m]["replanned"].append(residual(WA, RA2))
                acc_rows[m]["prec_replanned"].append(float(np.max(acc.precision_diagonal(RA2))))
        for m, r in acc_rows.items():
            row = {
                "mechanism": m,
                "dropout": q,
                "planned": float(np.mean(r["planned"])),
                "max_precision_planned": float(np.max(r["prec_planned"])),
            }
            if r["replanned"]:
                row["replanned"] = float(np.mean(r["replanned"]))
                row["max_precision_replanned"] = float(np.max(r["prec_replanned"]))
            out["rows"].append(row)
        print(f"{spec} q={q} done ({time.perf_counter() - t0:.1f}s)", flush=True)
    base = {r["mechanism"]: r["planned"] for r in out["rows"] if r["dropout"] == 0.0}
    for r in out["rows"]:
        r["planned_vs_no_dropout"] = r["planned"] / base[r["mechanism"]]
        if "replanned" in r:
            r["replanned_vs_no_dropout"] = r["replanned"] / base[r["mechanism"]]
        r["planned_vs_ldp_same_dropout"] = r["planned"] / next(
            x["planned"]
            for x in out["rows"]
            if x["mechanism"] == "ldp" and x["dropout"] == r["dropout"]
        )
    return out


def main() -> None:
    args = common.parser(__doc__).parse_args()
    if args.quick:
        globals().update(QUICK)
    out = common.out_dir(args)
    t0 = time.perf_counter()
    gen = np.random.default_rng(SEED)
    results = [one_graph(spec, gen, t0) for spec in GRAPHS]
    print(
        f"\n{'graph':>12} {'mech':>8} {'q':>5} {'planned':>9} {'xLDP':>6} {'replan':>9}"
        f" {'max[R^-1]ii plan/replan (<= 1)':>32}"
    )
    for res in results:
        for r in res["rows"]:
            rep = f"{r['replanned']:>9.4f}" if "replanned" in r else f"{'-':>9}"
            prec = f"{r['max_precision_planned']:.6f}"
            if "max_precision_replanned" in r:
                prec += f" / {r['max_precision_replanned']:.6f}"
            print(
                f"{res['graph']:>12} {r['mechanism']:>8} {r['dropout']:>5} {r['planned']:>9.4f} "
                f"{r['planned_vs_ldp_same_dropout']:>6.3f} {rep} {prec:>32}"
            )
    never_worse = all(
        r["max_precision_planned"] <= 1 + 1e-9 and r.get("max_precision_replanned", 0) <= 1 + 1e-9
        for res in results
        for r in res["rows"]
    )
    print("privacy never worse than planned:", never_worse)
    config = {
        "graphs": GRAPHS,
        "dropout": DROPOUT,
        "rounds": ROUNDS,
        "seed": SEED,
        "units": "unit bound",
        "quick": args.quick,
    }
    provenance.write_json(
        out / "cross_agent_dropout.json",
        {"config": config, "results": results, "never_worse": never_worse},
    )
    plot(results, out / "cross_agent_dropout.png")
    print(f"wrote {out / 'cross_agent_dropout.json'} and .png ({time.perf_counter() - t0:.1f}s)")


def plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2))
    for ax, res in zip(np.atleast_1d(axes), results, strict=True):
        labels, values, colors = [], [], []
        for r in res["rows"]:
            labels.append(f"{r['mechanism']}\nq={r['dropout']}")
            values.append(r["planned"])
            colors.append("tab:red" if r["mechanism"] == "ldp" else "tab:gray")
            if "replanned" in r and r["dropout"] > 0:
                labels.append(f"{r['mechanism']}\nq={r['dropout']}\nre-plan")
                values.append(r["replanned"])
                colors.append("tab:green")
        ax.bar(range(len(values)), values, color=colors)
        ax.set_xticks(range(len(values)), labels, fontsize=6)
        ax.set(ylabel="residual noise Tr(W' R W'^T)/|A| (unit bound)", title=res["graph"])
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
