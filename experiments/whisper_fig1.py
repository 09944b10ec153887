"""Paper 001 Fig. 1: σ²_mix, σ²_pair, σ²_ldp, σ²_cdp versus ε and versus connectivity p.

Setting of 001 §VI-A: n = 20 agents on Erdős–Rényi graphs, p ∈ {0.2, …, 1.0},
Metropolis–Hastings weights, C = 0.1, T = 5,000, δ = 1e-5, ε ∈ {3, …, 40}. For each graph
we solve Eq. (10) once (:func:`edgedp.families.cross.covariance.optimal_covariance`, unit bound;
R scales as 1/b) and calibrate LDP, CDP and DECOR (§V-C). σ²_mix := λ_min(R⋆) (the largest
independent variance every agent adds; the paper does not define how R⋆ is split). The
paper draws one graph per p; we average over GRAPH_SEEDS graphs and check the ordering
σ²_cdp <= σ²_mix <= σ²_pair <= σ²_ldp on every one. Also reported: the post-mixing variance
Tr(W R Wᵀ)/n of each design (what Thm 1 says drives utility) and the utility ratio of the
compact forms (local, low rank 4) to the dense optimum.

Writes experiments/out/whisper_fig1.json and .png. Run: python experiments/whisper_fig1.py
[--quick] [--out-dir DIR] (``--quick``: one graph per p ∈ {0.2, 0.5, 1}, three ε)
"""

# Paper letter W (gossip matrix); see docs/NOTATION.md.
# ruff: noqa: N806

from __future__ import annotations

import json
import sys
import time

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp import topology
from edgedp.families.cross import compact_covariance
from edgedp.families.cross import covariance as whisper
from edgedp_sim import provenance

import common

# ---------------------------------------------------------------- constants
GRAPH_SEEDS = range(5)  # ER graph seeds (edgedp_topologies.erdos_renyi resamples until connected)
N = 20
PS = (0.2, 0.4, 0.5, 0.6, 0.8, 1.0)  # the paper's grid plus its panel-(a) p = 0.5
EPSILONS = (3, 5, 7, 10, 15, 20, 25, 30, 40)
CLIP = 0.1  # C
STEPS = 5000  # T
DELTA = 1e-5
P_FIXED, EPS_FIXED = 0.5, 10  # panels (a) and (b), as in the paper
RIDGE = whisper.DEFAULT_RIDGE
RTOL = 1e-7  # ordering tolerance: at p = 1 Whisper and DECOR coincide up to solver accuracy
QUICK = {"GRAPH_SEEDS": range(1), "PS": (0.2, 0.5, 1.0), "EPSILONS": (3, 10, 40)}


def ordered(*values: float, rtol: float = RTOL) -> bool:
    """values[0] <= values[1] <= … up to a relative tolerance (solver accuracy)."""
    return all(a <= b * (1 + rtol) for a, b in zip(values, values[1:], strict=False))


def one_graph(p: float, seed: int) -> dict:
    g = edgedp_topologies.parse(f"er:{N}:{p}:{seed}")
    W = topology.metropolis_hastings(g)
    sol = whisper.optimal_covariance(W, ridge=RIDGE)
    rows = []
    for eps in EPSILONS:
        cal = whisper.calibrate(
            W, g.edges, epsilon=eps, delta=DELTA, clip_norm=CLIP, steps=STEPS, solution=sol
        )
        rows.append(
            {
                "epsilon": eps,
                "ldp": cal.ldp,
                "cdp": cal.cdp,
                "pair": cal.pair,
                "cor": cal.correlated,
                "mix": cal.mix,
                "post_ldp": cal.objective_ldp / N,
                "post_pair": cal.objective_pair / N,
                "post_mix": cal.objective_mix / N,
                "ordered": ordered(cal.cdp, cal.mix, cal.pair, cal.ldp),
            }
        )
    ratios = {}
    if p < 1.0:  # complete graph: W = 11ᵀ/n, the optimum is the ridge's
        ratios["local"] = compact_covariance.fit(W, g.edges, sol.covariance, form="local").ratio
    ratios["lowrank4"] = compact_covariance.fit(
        W, g.edges, sol.covariance, form="lowrank", rank=4
    ).ratio
    return {
        "p": p,
        "seed": seed,
        "edges": len(g.edges),
        "gap": sol.gap,
        "seconds": sol.seconds,
        "rows": rows,
        "ratios": ratios,
    }


def main() -> None:
    args = common.parser(__doc__).parse_args()
    if args.quick:
        globals().update(QUICK)
    out = common.out_dir(args)
    t0 = time.perf_counter()
    results = []
    for p in PS:
        for seed in GRAPH_SEEDS:
            results.append(one_graph(p, seed))
            r = results[-1]
            print(
                f"p={p} seed={seed} edges={r['edges']} gap={r['gap']:.1e} "
                f"ordered={all(x['ordered'] for x in r['rows'])} ({time.perf_counter() - t0:.1f}s)",
                flush=True,
            )
    table = []
    for p in PS:
        for i, eps in enumerate(EPSILONS):
            sel = [r["rows"][i] for r in results if r["p"] == p]
            table.append(
                {
                    "p": p,
                    "epsilon": eps,
                    **{
                        k: float(np.mean([s[k] for s in sel]))
                        for k in (
                            "ldp",
                            "cdp",
                            "pair",
                            "cor",
                            "mix",
                            "post_ldp",
                            "post_pair",
                            "post_mix",
                        )
                    },
                    "ordered_all_seeds": all(s["ordered"] for s in sel),
                }
            )
    summary = {
        "ordering_holds_everywhere": all(t["ordered_all_seeds"] for t in table),
        "compact_ratio_mean": {
            str(p): {
                k: float(
                    np.mean([r["ratios"][k] for r in results if r["p"] == p and k in r["ratios"]])
                )
                for k in ("local", "lowrank4")
                if any(k in r["ratios"] for r in results if r["p"] == p)
            }
            for p in PS
        },
    }
    print(
        f"\n{'p':>4} {'eps':>4} {'s2_cdp':>9} {'s2_mix':>9} {'s2_pair':>9} {'s2_ldp':>9}"
        f" {'post_mix':>9} {'post_pair':>9} {'post_ldp':>9}"
    )
    for t in table:
        print(
            f"{t['p']:>4} {t['epsilon']:>4} {t['cdp']:>9.3f} {t['mix']:>9.3f} {t['pair']:>9.3f} "
            f"{t['ldp']:>9.3f} {t['post_mix']:>9.3f} {t['post_pair']:>9.3f} {t['post_ldp']:>9.3f}"
        )
    print(
        "ordering σ²_cdp <= σ²_mix <= σ²_pair <= σ²_ldp everywhere:",
        summary["ordering_holds_everywhere"],
    )
    print("compact/dense Tr(WRWᵀ) ratio:", json.dumps(summary["compact_ratio_mean"]))
    config = {
        "n": N,
        "ps": PS,
        "epsilons": EPSILONS,
        "clip_norm": CLIP,
        "steps": STEPS,
        "delta": DELTA,
        "graph_seeds": list(GRAPH_SEEDS),
        "ridge": RIDGE,
        "sigma_mix": "lambda_min(R*)",
        "quick": args.quick,
    }
    provenance.write_json(
        out / "whisper_fig1.json",
        {"config": config, "table": table, "summary": summary, "graphs": results},
    )
    plot(table, out / "whisper_fig1.png")
    print(f"wrote {out / 'whisper_fig1.json'} and .png ({time.perf_counter() - t0:.1f}s)")


def plot(table: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {
        "ldp": ("LDP σ²_ldp", "tab:red", "s"),
        "pair": ("DECOR σ²_pair", "tab:orange", "^"),
        "mix": ("Whisper σ²_mix", "tab:blue", "o"),
        "cdp": ("CDP σ²_cdp", "k", "x"),
    }
    a = [t for t in table if t["p"] == P_FIXED]
    b = [t for t in table if t["epsilon"] == EPS_FIXED]
    for key, (label, color, marker) in styles.items():
        axes[0].plot(
            [t["epsilon"] for t in a], [t[key] for t in a], marker=marker, color=color, label=label
        )
        axes[1].plot(
            [t["p"] for t in b], [t[key] for t in b], marker=marker, color=color, label=label
        )
    axes[0].set(
        xlabel="privacy budget ε",
        ylabel="variance",
        yscale="log",
        title=f"(a) p = {P_FIXED}, n = {N}, T = {STEPS}, C = {CLIP}",
    )
    axes[1].set(
        xlabel="connectivity p",
        ylabel="variance",
        yscale="log",
        title=f"(b) ε = {EPS_FIXED}, mean of {len(GRAPH_SEEDS)} ER graphs",
    )
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
