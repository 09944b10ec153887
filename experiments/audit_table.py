"""Privacy audit of every mechanism: certified ε, empirical ε_lb (95%) and their ratio.

Setting (:mod:`edgedp_sim.audit_plans`): ring:8 with Metropolis–Hastings weights, T = 20 rounds
(Muffliato: 20 gradient rounds of K = 2), logistic regression on synthetic data with one
feature (d = 2), full local batches (every example in every round), clip norm Δ = 1, every
Gaussian mechanism calibrated to ε = 4 at δ = 1e-5 against the eavesdropper on every link,
sr-gt / DPOP to pure ε = 4 (γ = 0.2, β = 1, q₁ = 0.8, q₂ = 0.9, zero-out δ = Δ√d/B). Victim
node 0; attackers: the eavesdropper on every link (the LDP attacker), one tapped link (0–1)
and the victim's two neighbours colluding (hbc:1,7). Gradient canary on the zero background
(the white-box audit: the attacker knows every other example), N = 10,000 trials per
mechanism (``--trials``); then the example canary (a crafted input on the real data, the
black-box audit) with ``--example-trials`` trials.

Per (mechanism, attacker): certified ε (and μ) of the accountant for that attacker, the
verdict's simultaneous lower bounds ε_lb and μ_lb (Clopper–Pearson, Bonferroni over the
mechanism's tests at family-wise 95%), the most and the typical ε_lb of these trials, μ̂ with
its 95% interval, the exact μ of the attacker's view (μ_view) or, for Laplace, ε of the
victim's inverted releases (ε_view). Writes
experiments/out/audit_table.json, .md and .png; progress on stderr.

Run: python experiments/audit_table.py [--trials 10000] [--example-trials 4000] [--quick]
[--out-dir DIR] [--replot] (``--quick``: 200 gradient-canary trials, no example canary;
``--replot``: only redraw the .md and .png from the stored .json)
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from edgedp_sim import adversary, audit, audit_plans, provenance, scenarios

import common

ATTACKERS = ("eavesdropper:all", "eavesdropper:0-1", "hbc:1,7")
SETTING = audit_plans.Setting()


def log(line: str) -> None:
    sys.stderr.write(f"[audit_table {time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def audit_all(trials: int, canary: str) -> dict:
    rows = {}
    for mech in audit_plans.MECHANISMS:
        t0 = time.perf_counter()
        plan = audit_plans.build(mech, SETTING)
        rep = audit.run(
            scenarios.from_plan(plan),
            [adversary.parse_attacker(a) for a in ATTACKERS],
            trials=trials,
            canary=canary,
            delta=SETTING.delta,
            progress=lambda line, m=mech: log(f"{m} ({canary}): {line}"),
        )
        keep = (
            "attacker",
            "epsilon",
            "delta",
            "adjacency",
            "epsilon_lb",
            "epsilon_lb_max",
            "epsilon_lb_typical",
            "ratio",
            "violation",
            "mu",
            "mu_lb",
            "mu_hat",
            "mu_low",
            "mu_high",
            "mu_view",
            "epsilon_view",
            "fpr_upper",
            "fnr_upper",
            "test",
        )
        rows[mech] = {
            "attackers": [{k: e[k] for k in keep if k in e} for e in rep["attackers"]],
            "verdict": rep["verdict"],
            "background": rep["background"],
            "seconds": round(time.perf_counter() - t0, 1),
            "simulation_seconds": rep["simulation_seconds"],
            "trials_per_second": round(rep["trials_per_second"], 1),
        }
        best = max(e["epsilon_lb"] for e in rep["attackers"])
        log(f"{mech}: max eps_lb {best:.3f}, {rows[mech]['seconds']:.0f} s")
    return rows


def _f(x, spec=".3f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-" if x is None or math.isnan(x) else "inf"
    return format(x, spec)


def markdown(result: dict) -> str:
    s = result["setting"]
    lines = [
        f"# Privacy audit ({s['topology']}, T = {s['steps']}, victim 0)",
        "",
        f"Gradient canary on the zero background, N = {result['trials']} trials per "
        f"mechanism; ε at δ = {s['delta']:g} (Laplace: pure ε) under zero-out adjacency "
        "against the row's attacker. Per mechanism the verdict tests μ (Gaussian plans) and ε "
        "of each attacker, Bonferroni over the tests at family-wise 95% (Clopper–Pearson, "
        "held-out threshold): μ_lb and ε_lb are those simultaneous lower bounds. max: the most "
        "ε_lb these trials can show; typ: the median ε_lb of simulated audits of a mechanism "
        "exactly at the certified μ. μ̂ [95%] is the Gaussian fit of the test statistic, μ_view "
        "the exact μ of the attacker's view (ε_view for Laplace).",
        "",
        "| mechanism | attacker | ε | ε_lb | max | typ | μ | μ_lb | μ̂ [95%] | μ_view / ε_view "
        "| flagged |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mech, row in result["gradient"].items():
        for e in row["attackers"]:
            mu = _f(e.get("mu")) if "mu" in e else "-"
            fit = (
                f"{_f(e['mu_hat'])} [{_f(e['mu_low'])}, {_f(e['mu_high'])}]"
                if "mu_hat" in e
                else "-"
            )
            view = _f(e.get("mu_view", e.get("epsilon_view")))
            lines.append(
                f"| {mech} | {e['attacker']} | {_f(e['epsilon'])} | {_f(e['epsilon_lb'])} | "
                f"{_f(e['epsilon_lb_max'], '.2f')} | {_f(e.get('epsilon_lb_typical'), '.2f')} | "
                f"{mu} | {_f(e.get('mu_lb'))} | {fit} | {view} | "
                f"{'yes' if e['violation'] else 'no'} |"
            )
    if result.get("example"):
        lines += [
            "",
            f"Example canary (crafted input, real data), N = {result['example_trials']}:",
            "",
            "| mechanism | ε_lb all / link / hbc | μ̂ all / link / hbc |",
            "|---|---|---|",
        ]
        for mech, row in result["example"].items():
            lbs = " / ".join(_f(e["epsilon_lb"]) for e in row["attackers"])
            mus = " / ".join(_f(e.get("mu_hat")) for e in row["attackers"])
            lines.append(f"| {mech} | {lbs} | {mus} |")
    lines += ["", f"Wall time: {result['total_seconds']:.0f} s on 2 shared cores."]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    mechs = list(result["gradient"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.26
    x = np.arange(len(mechs))
    for j, att in enumerate(ATTACKERS):
        lb = [result["gradient"][m]["attackers"][j]["epsilon_lb"] for m in mechs]
        axes[0].bar(x + (j - 1) * width, lb, width, label=f"eps_lb, {att}")
        cells = [result["gradient"][m]["attackers"][j] for m in mechs]
        mu = [e.get("mu") or math.nan for e in cells]
        ratio = [(e.get("mu_hat") or math.nan) / c for e, c in zip(cells, mu, strict=True)]
        axes[1].bar(x + (j - 1) * width, ratio, width, label=f"mu_hat / mu, {att}")
        lb = [(e.get("mu_lb") or math.nan) / c for e, c in zip(cells, mu, strict=True)]
        axes[1].plot(
            x + (j - 1) * width,
            lb,
            "v",
            color="k",
            ms=4,
            label="mu_lb / mu (the verdict's bound)" if j == 0 else None,
        )
    eps = [result["gradient"][m]["attackers"][0]["epsilon"] for m in mechs]
    axes[0].plot(x, eps, "k_", markersize=18, label="certified eps (eavesdropper)")
    axes[0].set_ylabel("epsilon")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_ylabel("fraction of the certified mu (Gaussian)")
    flagged = [m for m in mechs if result["gradient"][m]["verdict"]["violation"]]
    axes[1].set_title(
        f"flagged when mu_lb / mu > 1: {', '.join(flagged) or 'none'}"
        " (any bound above its certificate)",
        fontsize=9,
    )
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels(mechs, rotation=45, ha="right")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"Privacy audit, {SETTING.topology}, T = {SETTING.steps}, N = {result['trials']}, "
        "gradient canary"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--trials", type=int, default=None, help="default 10000 (quick: 200)")
    ap.add_argument(
        "--example-trials", type=int, default=None, help="0: skip; default 4000 (quick: 0)"
    )
    ap.add_argument("--replot", action="store_true", help="only redraw .md and .png from the .json")
    args = common.defaults(ap.parse_args(), trials=(10000, 200), example_trials=(4000, 0))
    if args.replot:
        out = common.out_dir(args) / "audit_table.json"
        result = json.loads(out.read_text())
        out.with_suffix(".md").write_text(markdown(result))
        plot(result, out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.md')}, {out.with_suffix('.png')}")
        return
    started = time.perf_counter()
    result = {
        "setting": {
            "topology": SETTING.topology,
            "steps": SETTING.steps,
            "dataset": SETTING.dataset,
            "model": SETTING.model,
            "epsilon_target": SETTING.epsilon,
            "delta": SETTING.delta,
            "clip_norm": SETTING.clip_norm,
            "laplace_gamma_beta_q1_q2": SETTING.laplace,
            "gossip_rounds_muffliato": SETTING.gossip_rounds,
            "sketch_dim_dome": SETTING.sketch_dim,
            "attackers": ATTACKERS,
            "victim": 0,
        },
        "trials": args.trials,
        "gradient": audit_all(args.trials, "gradient"),
    }
    result["gradient_seconds"] = round(time.perf_counter() - started, 1)
    if args.example_trials:
        result["example_trials"] = args.example_trials
        result["example"] = audit_all(args.example_trials, "example")
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    out = common.out_dir(args) / "audit_table.json"
    provenance.write_json(out, result)
    out.with_suffix(".md").write_text(markdown(result))
    plot(result, out.with_suffix(".png"))
    print(markdown(result))
    print(f"wrote {out}, {out.with_suffix('.md')}, {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
