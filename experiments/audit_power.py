"""Power and level of the audit's verdict, over repeated audits at δ = 1e-6.

Question: is a plan that adds half the noise it certifies (certified μ = 1 at δ = 1e-6, the
engines' noise giving μ = 2) flagged, and how often is a sound plan flagged? Three attackers
per audit (every link tapped, one link, the victim's two neighbours colluding): the verdict
tests μ and ε for each, Bonferroni over the six tests at family-wise 95%
(:mod:`edgedp_sim.audit_verdict`). Beside it, the criterion the audit had before — ε_lb > ε
for some attacker, each at 95% — on the same audits.

Two measurements:

1. **Whole audits** (``edgedp_sim.audit.run``: batch engine, canary, probes, linear views,
   statistics): DP-D-SGD on ring:4, T = 4, d = 2, full batches, σ = 1 and sensitivity 2
   (k = 4 participations: certified μ = 1); the halved plan has the stored sensitivity
   halved, so the engines add half the noise while the accountant still certifies μ = 1/σ.
   Also certified μ = 2 (σ = 0.5), halved and sound. Each audit runs its own block of
   trials [r·N, (r+1)·N) of the plan's keyed streams: independent audits.
2. **The statistic alone**: each attacker's likelihood-ratio statistic drawn from its exact
   law, N(∓μ²/2, μ²) (a linear Gaussian view of GDP parameter μ; the whole audits and
   tests/test_audit.py show the engines give it), through the same verdict code — cheap
   enough for 10⁵ trials and 1,000 audits per cell. The three attackers' statistics are
   drawn independently (the Bonferroni bound holds under any dependence).

Writes experiments/out/audit_power.json and .png; prints the tables. ``--quick`` runs fewer
audits and trials (seconds).

Run: python experiments/audit_power.py [--audits 200] [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import edgedp  # noqa: F401  (first: the numpy dispatch every edgedp process uses)

# isort: split
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from edgedp.accounting import gdp
from edgedp_sim import adversary, audit, audit_plans, audit_verdict, provenance, scenarios

import common

DELTA = 1e-6
ATTACKERS = ("eavesdropper:all", "eavesdropper:0-1", "hbc:1,3")
SETTING = audit_plans.Setting(topology="ring:4", steps=4, dataset="synthetic-logistic:1:40")
#: (name, certified μ, μ the engines' noise gives)
CASES = (
    ("halved, certified mu 1", 1.0, 2.0),
    ("sound, mu 1", 1.0, 1.0),
    ("halved, certified mu 2", 2.0, 4.0),
    ("sound, mu 2", 2.0, 2.0),
)


def log(line: str) -> None:
    sys.stderr.write(f"[audit_power {time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def plan_for(certified: float, true: float):
    """DP-D-SGD with σ = 1/certified; the stored sensitivity scaled so the noise gives ``true``."""
    base = audit_plans.build("dp-dsgd", SETTING)
    sound = dataclasses.replace(
        base, noise_multiplier=1.0 / certified, sensitivity=2.0, target_epsilon=None, delta=DELTA
    )
    assert sound.guarantee().mu == certified and sound.guarantee().sensitivity == 2.0
    return dataclasses.replace(sound, sensitivity=2.0 * certified / true)


def whole_audits(certified: float, true: float, *, trials: int, audits: int) -> dict:
    sc = scenarios.from_plan(plan_for(certified, true))
    atts = [adversary.parse_attacker(a) for a in ATTACKERS]
    flagged = old = 0
    mu_lb, mu_view = [], None
    started = time.perf_counter()
    for r in range(audits):
        rep = audit.run(
            sc, atts, trials=trials, delta=DELTA, first_trial=r * trials, keep_scores=True
        )
        flagged += rep["verdict"]["violation"]
        old += _old_criterion(rep)
        mu_lb.append(max(e["mu_lb"] for e in rep["attackers"]))
        mu_view = [e["mu_view"] for e in rep["attackers"]]
    return _cell(flagged, old, audits, trials, mu_lb, time.perf_counter() - started, mu_view)


def _old_criterion(rep: dict) -> bool:
    """ε_lb > ε for some attacker, each at 95% (the audit's former verdict)."""
    present, pick = audit_verdict.layout(range(*rep["trial_ids"]))
    return any(
        audit_verdict.run_test(
            "epsilon", e["scores"], present, pick, certified=e["epsilon"], delta=DELTA, level=0.05
        ).rejected
        for e in rep["attackers"]
    )


def statistic_audits(certified: float, true: float, *, trials: int, audits: int, seed: int):
    present, pick = audit_verdict.layout(range(trials))
    cert = audit_verdict.Certificate(mu=certified, epsilon=gdp.epsilon(certified, delta=DELTA))
    g = np.random.default_rng(seed)
    flagged = old = 0
    mu_lb = []
    started = time.perf_counter()
    for _ in range(audits):
        scores = [audit_verdict.gaussian_statistic(true, present, g) for _ in ATTACKERS]
        dec = audit_verdict.decide(
            scores, present, pick, certificates=[cert] * len(ATTACKERS), alpha=0.05, delta=DELTA
        )
        flagged += dec.violation
        old += any(
            audit_verdict.run_test(
                "epsilon", s, present, pick, certified=cert.epsilon, delta=DELTA, level=0.05
            ).rejected
            for s in scores
        )
        mu_lb.append(max(t["mu"].bound for t in dec.tests))
    return _cell(flagged, old, audits, trials, mu_lb, time.perf_counter() - started)


def _cell(flagged, old, audits, trials, mu_lb, seconds, mu_view=None) -> dict:
    out = {
        "trials": trials,
        "audits": audits,
        "flagged": int(flagged),
        "rate": flagged / audits,
        "rate_interval": list(_binomial_interval(flagged, audits)),
        "old_criterion_flagged": int(old),
        "old_criterion_rate": old / audits,
        "max_mu_lb_median": float(np.median(mu_lb)),
        "seconds": round(seconds, 1),
    }
    if mu_view is not None:
        out["mu_view"] = mu_view
    return out


def _binomial_interval(k: int, n: int) -> tuple[float, float]:
    """Two-sided 95% Clopper–Pearson interval of a rate."""
    from scipy import stats

    lo = 0.0 if k == 0 else float(stats.beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.isf(0.025, k + 1, n - k))
    return lo, hi


def table(title: str, rows: dict) -> str:
    head = f"{'case':<24}{'N':>8}{'audits':>8}{'flagged':>9}{'rate [95%]':>22}{'old eps_lb':>12}"
    lines = [title, head, "-" * len(head)]
    for name, cells in rows.items():
        for c in cells:
            lo, hi = c["rate_interval"]
            rate = f"{c['rate']:.3f} [{lo:.3f}, {hi:.3f}]"
            lines.append(
                f"{name:<24}{c['trials']:>8}{c['audits']:>8}{c['flagged']:>9}{rate:>22}"
                f"{c['old_criterion_rate']:>12.3f}"
            )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key, title in (
        (axes[0], "statistic", "the statistic's exact law"),
        (axes[1], "whole", "whole audits (engines)"),
    ):
        for name, cells in result[key].items():
            n = [c["trials"] for c in cells]
            line = ax.plot(n, [c["rate"] for c in cells], marker="o", label=f"{name}: verdict")
            ax.plot(
                n,
                [c["old_criterion_rate"] for c in cells],
                ls=":",
                marker="x",
                color=line[0].get_color(),
                label=f"{name}: eps_lb > eps alone",
            )
        ax.axhline(0.95, color="grey", lw=0.8, ls="--")
        ax.axhline(0.05, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("trials per audit")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("fraction of audits flagged")
    axes[1].legend(fontsize=6)
    fig.suptitle(
        "Audit verdict at delta = 1e-6, 3 attackers (Bonferroni over 6 tests, family-wise 95%); "
        "dashed: 95% detection and the 5% level"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--audits", type=int, default=200, help="whole audits per cell")
    ap.add_argument("--statistic-audits", type=int, default=1000, help="per cell (the law)")
    args = ap.parse_args()
    audits, stat_audits = (20, 40) if args.quick else (args.audits, args.statistic_audits)
    whole_n = (200, 1000) if args.quick else (200, 1000, 10000)
    stat_n = (200, 1000) if args.quick else (200, 1000, 10000, 100000)
    started = time.perf_counter()
    result: dict = {"delta": DELTA, "attackers": ATTACKERS, "setting": dataclasses.asdict(SETTING)}
    result["statistic"] = {}
    for i, (name, cert, true) in enumerate(CASES):
        cells = []
        for n in stat_n:
            count = stat_audits if n < 100000 else max(200, stat_audits // 5)
            cells.append(statistic_audits(cert, true, trials=n, audits=count, seed=100 * i + n))
            log(f"statistic, {name}, N = {n}: flagged {cells[-1]['flagged']}/{count}")
        result["statistic"][name] = cells
    result["whole"] = {}
    for name, cert, true in CASES:
        cells = []
        for n in whole_n:
            if n > 1000 and cert != 1.0:  # 10⁴ trials: the certified μ = 1 pair only
                continue
            cells.append(whole_audits(cert, true, trials=n, audits=audits))
            log(f"whole audits, {name}, N = {n}: flagged {cells[-1]['flagged']}/{audits}")
        result["whole"][name] = cells
    result["seconds"] = round(time.perf_counter() - started, 1)
    out = common.out_dir(args) / "audit_power.json"
    provenance.write_json(out, result)
    plot(result, out.with_suffix(".png"))
    print(table("Whole audits (engines, views, statistics), delta = 1e-6:", result["whole"]))
    print()
    print(table("The statistic's exact law through the same verdict:", result["statistic"]))
    print(
        "flagged: the verdict (mu and eps tests of 3 attackers, Bonferroni, family-wise 95%); "
        "old eps_lb: the fraction with eps_lb > eps for some attacker at 95% each"
    )
    print(f"{result['seconds']:.0f} s; wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
