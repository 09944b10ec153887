"""Leakage table: every implemented algorithm x attacker, next to its formal guarantee.

One small setting for all: a 6-node ring (victim node 0; its neighbours are 1 and 5),
T = 20 rounds, N = 2,000 Monte Carlo trials of the batch engine. Gaussian mechanisms run
synthetic-linear (batch 8, clip 1, η = 0.3) with σ = 1 (so their formal ε differs by
sensitivity and trust model); sr-gt and DPOP run sensor fusion (Eq. 42, m = 3, p = 2) at
ε = 1 with the §6.1 schedule of paper 004. Attackers:

* ``hbc:1,5`` — both of the victim's neighbours collude (they know their own noise, their
  pairwise secrets with the victim, and Whisper's shared seed);
* ``eavesdropper:0-1`` — one tapped link;
* ``eavesdropper:all`` — every link (the LDP attacker).

Per cell: M-NMI of the victim's gradient (first coordinate, KSG k = 3) given what the
attacker computes — as NPEET computes it and on z-scored samples (MI is scale-invariant,
KSG is not: an information set whose parts differ in scale by 10³ hides the dependence
from it) — with :func:`edgedp_sim.leak.estimates` (the algorithm's own attack, or the generic
GLS estimator, or the messages as seen); MSE and cosine of its point estimate, and the
formal guarantee that covers that attacker (ε at δ = 1e-6; pure ε for Laplace plans; for
Whisper/DECOR the trust report's insider / neighbourhood ε against colluders).

Reading it: the private value is the victim's gradient on a *fixed* problem, so for sr-gt
and DPOP it is an affine function of the whole released z (∇f at z) — whoever sees z and
knows f learns it, without contradicting ε-DP, which protects the cost function f, not
the gradient at a public point; the table's MI uses one coordinate of z (V's coordinate
mixes both) and KSG's scale-dependence, so those cells stay low. For the Gaussian
mechanisms V varies with the minibatch and the model.

Writes experiments/out/leakage_table.json, .png and .md (the markdown table is printed).
Run: python experiments/leakage_table.py [--trials N] [--steps T] [--quick] [--out-dir DIR]
(``--quick``: N = 200, T = 6)
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.families.cross import planning as cross_planner
from edgedp.families.dome.sketch import SketchSpec
from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp.families.mf import factorization
from edgedp.plan import TaskSpec, make_plan
from edgedp.topology import metropolis_hastings
from edgedp_sim import adversary, datasets, leak, provenance, scenarios

import common

GRAPH = "ring:6"
VICTIM = 0
ATTACKERS = ("hbc:1,5", "eavesdropper:0-1", "eavesdropper:all")
BATCH = 8
SIGMA = 1.0
LR = 0.3
SEED = 3
MECHANISMS = (
    "dsgd",
    "dp-dsgd",
    "antipgd",
    "mafalda",
    "muffliato",
    "whisper",
    "decor",
    "zipdl",
    "dome",
    "sr-gt",
    "dpop",
)


def log(line: str) -> None:
    sys.stderr.write(f"[leakage_table {time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def plan_for(mechanism: str, steps: int):
    graph = edgedp_topologies.parse(GRAPH)
    if mechanism in ("sr-gt", "dpop"):
        sched = LaplaceSchedule(
            gamma=0.001,
            beta=1000.0 if mechanism == "sr-gt" else 0.0,
            q1=0.97,
            q2=0.99,
            delta_grad=1.0,
            epsilon=1.0,
            adjacency="problem",
        )
        task = TaskSpec(
            model="least-squares", dataset="sensor-fusion:6:3:2:0", partition="per-node"
        )
        return make_plan(
            mechanism, graph, steps=steps, clip_norm=math.inf, laplace=sched, task=task, seed=SEED
        )
    task = TaskSpec(model="linear", dataset="synthetic-linear", batch_size=BATCH)
    local = datasets.partition(
        datasets.load(task.dataset, seed=SEED), graph.n, seed=SEED
    ).local_size
    per_epoch = local // BATCH
    part = Participation(math.ceil(steps / per_epoch), per_epoch)
    shared = dict(
        steps=steps,
        participation=part,
        clip_norm=1.0,
        learning_rate=LR,
        seed=SEED,
        task=task,
    )
    if mechanism in ("whisper", "decor", "zipdl", "muffliato"):
        extra = {
            "zipdl": {"message_variance": 1.0},
            "muffliato": {"gossip_rounds": 2},
            "whisper": {"form": "lowrank", "rank": 2},  # "local" on a ring is DECOR's R
        }
        return cross_planner.plan_cross_agent(
            mechanism, graph, noise_multiplier=SIGMA, **shared, **extra.get(mechanism, {})
        ).plan
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": SIGMA}
    if mechanism == "mafalda":
        planned = factorization.plan_factor(
            "mafalda", metropolis_hastings(graph), steps=steps, participation=part
        )
        noise["factor"] = planned.factor
    if mechanism == "dome":
        noise["sketch"] = SketchSpec(dim=2, seed=1)
    return make_plan(mechanism, graph, **shared, **noise)


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--trials", type=int, default=None, help="default 2000 (quick: 200)")
    ap.add_argument("--steps", type=int, default=None, help="default 20 (quick: 6)")
    args = common.defaults(ap.parse_args(), trials=(2000, 200), steps=(20, 6))
    attackers = [adversary.parse_attacker(a) for a in ATTACKERS]
    started = time.perf_counter()
    rows = []
    for mech in MECHANISMS:
        t0 = time.perf_counter()
        try:
            plan = plan_for(mech, args.steps)
        except (ValueError, NotImplementedError) as exc:
            log(f"{mech}: cannot plan ({exc}); skipped")
            rows.append({"mechanism": mech, "error": str(exc)})
            continue
        sc = scenarios.Scenario(f"leakage-table-{mech}", 0, plan)
        rep = leak.run(
            sc, attackers, trials=args.trials, victim=VICTIM, coordinate=0, standardized=True
        )
        for e in rep["attackers"]:
            rows.append(
                {
                    "mechanism": mech,
                    "attacker": e["attacker"],
                    "m_nmi": e["m_nmi"],
                    "m_nmi_standardized": e["m_nmi_standardized"],
                    "argmax_iteration": e["argmax_iteration"],
                    "mse": e["mse"],
                    "cosine": e["cosine"],
                    "estimator": e["estimator"],
                    "epsilon": e["epsilon"],
                    "delta": e["delta"],
                    "guarantee": e["guarantee"],
                    "trust_model": e["trust_model"],
                    "low_variance_iterations": e["low_variance_iterations"],
                }
            )
        log(
            f"{mech}: "
            + ", ".join(f"{e['attacker']} {_f(e['m_nmi'])}" for e in rep["attackers"])
            + f" ({time.perf_counter() - t0:.0f} s)"
        )
    result = {
        "setting": {
            "graph": GRAPH,
            "victim": VICTIM,
            "steps": args.steps,
            "n_trials": args.trials,
            "k_neighbors": 3,
            "coordinate": 0,
            "sigma": SIGMA,
            "attackers": list(ATTACKERS),
            "quick": args.quick,
        },
        "rows": rows,
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    out = common.out_dir(args) / "leakage_table.json"
    provenance.write_json(out, result)
    md = markdown(result)
    out.with_suffix(".md").write_text(md + "\n")
    plot(result, out.with_suffix(".png"))
    print(md)
    print(f"wrote {out}, {out.with_suffix('.md')}, {out.with_suffix('.png')}")


def _f(x, spec=".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    if isinstance(x, str):
        return x
    return format(x, spec)


def markdown(result: dict) -> str:
    s = result["setting"]
    lines = [
        f"Leakage of node {s['victim']}'s gradient (coordinate {s['coordinate']}) on {s['graph']}"
        f", T = {s['steps']}, N = {s['n_trials']} trials, KSG k = {s['k_neighbors']}; "
        f"Gaussian mechanisms at sigma = {s['sigma']}, Laplace ones at eps = 1.",
        "",
        "| mechanism | attacker | M-NMI | M-NMI (z-scored) | MSE | cosine | formal eps (delta) "
        "| estimator |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['mechanism']} | – | – | – | – | – | – | not run: {r['error']} |")
            continue
        eps = _f(r["epsilon"], ".3g")
        delta = "0" if r["delta"] == 0 else _f(r["delta"], ".0e")
        lines.append(
            f"| {r['mechanism']} | {r['attacker']} | {_f(r['m_nmi'])} | "
            f"{_f(r['m_nmi_standardized'])} | {_f(r['mse'], '.3g')} | "
            f"{_f(r['cosine'])} | {eps} ({delta}) | {r['estimator']} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "error" not in r]
    mechs = list(dict.fromkeys(r["mechanism"] for r in rows))
    atts = list(result["setting"]["attackers"])
    width = 0.8 / len(atts)
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(mechs)), 4))
    for j, a in enumerate(atts):
        ys = []
        for m in mechs:
            hit = [r for r in rows if r["mechanism"] == m and r["attacker"] == a]
            ys.append(np.nan if not hit or hit[0]["m_nmi"] is None else hit[0]["m_nmi"])
        ax.bar(np.arange(len(mechs)) + (j - (len(atts) - 1) / 2) * width, ys, width, label=a)
    ax.set_xticks(range(len(mechs)), mechs, rotation=30, ha="right")
    ax.set_ylabel("M-NMI")
    ax.set_title(
        f"{result['setting']['graph']}, N = {result['setting']['n_trials']}, "
        f"T = {result['setting']['steps']}"
    )
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
