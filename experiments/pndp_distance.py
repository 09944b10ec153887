"""PNDP vs LDP privacy loss as a function of graph distance (paper 000 §7.1, Fig. 2 style).

DP-D-SGD (C = I) with (T, 1) participation — the user-level worst case §7.1 uses — on
ER(100, 0.2) and the Florentine families graph, Metropolis–Hastings weights. Every node in
turn is the attacker; for every other node we compute the PNDP μ (Thm 7 with App. A.2's
reduced view, :mod:`edgedp.accounting.pndp`) and report Rényi DP at α = 2, RDP = μ² (αμ²/2),
as min / mean / max over the pairs at each hop distance, next to the LDP value 1/σ².

Two observers: "node" (a curious node that also knows its own noise and gradients — the
App. A.2 trust model) and "eavesdropper" (§7.1 Eq. 12, B_a = P_a W_T: a tap on every link
into the attacker set, links between members included, that knows no noise; with the single
attackers used here there are no such links).

Every PNDP number holds under paper 000's model: every node's gradients fixed in advance
(non-adaptive). They are not certified for adaptive training (another node's gradient
depends on its model, which carries victim messages the attacker never sees); the LDP line
is. The outputs say so.

Paper 000 does not state T or σ for Fig. 2; we take T = 100 and σ = 1 (LDP RDP(2) = 1). RDP
scales as 1/σ², so the PNDP/LDP ratios do not depend on σ; they do depend (mildly) on T.
Writes experiments/out/pndp_distance.json and .png. Run: python experiments/pndp_distance.py
[--quick] [--out-dir DIR] (``--quick``: the Florentine graph, T = 20)
"""

# Paper letter W (gossip matrix); see docs/NOTATION.md.
# ruff: noqa: N806

from __future__ import annotations

import sys
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp import topology
from edgedp.accounting import pndp
from edgedp.accounting.participation import Participation
from edgedp_sim import provenance

import common

# ---------------------------------------------------------------- constants
SEED = 0  # ER graph seed (edgedp_topologies.erdos_renyi resamples until connected)
STEPS = 100  # T; not stated in paper 000 §7.1
NOISE_MULTIPLIER = 1.0  # σ; not stated in paper 000 §7.1 (RDP ∝ 1/σ²)
ALPHA = 2.0  # Rényi order, as in Fig. 2
GRAPHS = {"ER(100, 0.2)": f"er:100:0.2:{SEED}", "Florentine families": "florentine"}
OBSERVERS = ("node", "eavesdropper")
QUICK = {"STEPS": 20, "GRAPHS": {"Florentine families": "florentine"}}


def by_distance(res: pndp.PNDPResult) -> list[dict]:
    rdp = res.rdp(ALPHA)
    rows = []
    for d in np.unique(res.distance):
        sel = res.distance == d
        rows.append(
            {
                "distance": int(d),
                "pairs": int(sel.sum()),
                "rdp_min": float(rdp[sel].min()),
                "rdp_mean": float(rdp[sel].mean()),
                "rdp_max": float(rdp[sel].max()),
                "ratio_to_ldp_mean": float(rdp[sel].mean() / (ALPHA * res.ldp_mu**2 / 2)),
                "exact_fraction": float(res.exact[sel].mean()),
                "capped_at_ldp": int(res.capped[sel].sum()),
            }
        )
    return rows


def run() -> dict:
    out = {
        "config": {
            "seed": SEED,
            "steps": STEPS,
            "noise_multiplier": NOISE_MULTIPLIER,
            "participation": [STEPS, 1],
            "alpha": ALPHA,
            "weighting": "metropolis-hastings",
            "mechanism": "dp-dsgd",
            "pndp_model": pndp.MODEL,
            "ldp_model": pndp.LDP_MODEL,
            "assumption": pndp.ASSUMPTION,
        },
        "graphs": {},
    }
    for name, spec in GRAPHS.items():
        g = edgedp_topologies.parse(spec)
        W = topology.metropolis_hastings(g)
        setting = pndp.PNDPSetting(
            W, np.eye(STEPS), Participation(STEPS, 1), NOISE_MULTIPLIER, np.asarray(g.edges)
        )
        entry = {"spec": spec, "n": g.n, "edges": len(g.edges), "observers": {}}
        for observer in OBSERVERS:
            start = time.perf_counter()

            def progress(done, total, name=name, observer=observer, start=start):
                if done % max(1, total // 10) == 0 or done == total:
                    print(
                        f"[{name} / {observer}] {done}/{total} attackers "
                        f"({time.perf_counter() - start:.1f} s)",
                        flush=True,
                    )

            res = pndp.pndp_guarantees(setting, observer=observer, progress=progress)
            entry["ldp_rdp"] = ALPHA * res.ldp_mu**2 / 2
            entry["observers"][observer] = {
                "seconds": time.perf_counter() - start,
                "method": res.method,
                "by_distance": by_distance(res),
            }
        out["graphs"][name] = entry
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = result["graphs"]
    fig, axes = plt.subplots(1, len(graphs), figsize=(5.2 * len(graphs), 4), squeeze=False)
    styles = {"node": ("C0", "-", "o"), "eavesdropper": ("C1", "--", "s")}
    for ax, (name, entry) in zip(axes[0], graphs.items(), strict=True):
        for observer, data in entry["observers"].items():
            rows = data["by_distance"]
            d = np.array([r["distance"] for r in rows], dtype=float)
            mean = np.array([r["rdp_mean"] for r in rows])
            err = [mean - [r["rdp_min"] for r in rows], [r["rdp_max"] for r in rows] - mean]
            color, ls, marker = styles[observer]
            shift = 0.06 if observer == "eavesdropper" else 0.0
            label = {
                "node": "PNDP, curious node (App. A.2), non-adaptive",
                "eavesdropper": "PNDP, link eavesdropper (Eq. 12), non-adaptive",
            }[observer]
            ax.errorbar(
                d + shift, mean, yerr=err, color=color, ls=ls, marker=marker, capsize=3, label=label
            )
        ax.axhline(entry["ldp_rdp"], color="k", ls=":", label="LDP, adaptive")
        ax.set_yscale("log")
        ax.set_xlabel("graph distance attacker → victim (hops)")
        ax.set_ylabel(f"Rényi DP at α = {ALPHA:g}")
        ax.set_title(f"{name} (n = {entry['n']})")
        ax.set_xticks(
            sorted({r["distance"] for o in entry["observers"].values() for r in o["by_distance"]})
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    cfg = result["config"]
    fig.suptitle(
        f"DP-D-SGD, T = {cfg['steps']}, ({cfg['steps']}, 1) participation, "
        f"σ = {cfg['noise_multiplier']:g}: min / mean / max over pairs at each distance\n"
        "PNDP: non-adaptive gradients (paper 000's model); LDP: certified for adaptive training",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main() -> int:
    args = common.parser(__doc__).parse_args()
    if args.quick:
        globals().update(QUICK)
    out = common.out_dir(args)
    result = run()
    result["config"]["quick"] = args.quick
    json_path, png_path = out / "pndp_distance.json", out / "pndp_distance.png"
    provenance.write_json(json_path, result, indent=2, sort_keys=True)
    plot(result, png_path)
    print(f"PNDP rows: {pndp.MODEL} gradients (paper 000's model); LDP: {pndp.LDP_MODEL}")
    for name, entry in result["graphs"].items():
        print(f"{name}: LDP RDP(α={ALPHA:g}) = {entry['ldp_rdp']:.4g} (certified for adaptive)")
        for observer, data in entry["observers"].items():
            for r in data["by_distance"]:
                print(
                    f"  PNDP {observer:<12} d={r['distance']}: {r['pairs']:5d} pairs  RDP min "
                    f"{r['rdp_min']:.4g} mean {r['rdp_mean']:.4g} max {r['rdp_max']:.4g}  "
                    f"(mean/LDP {r['ratio_to_ldp_mean']:.3g}, capped {r['capped_at_ldp']})"
                )
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
