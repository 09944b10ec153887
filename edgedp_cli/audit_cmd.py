"""``edgedp audit``: does each attacker's view keep the plan's certificate? Tests with power,
lower bounds on μ and ε per attacker, beside the certified μ and ε.

    edgedp audit PLAN_OR_SCENARIO --attacker eavesdropper:all --attacker hbc:1,7
        [--victim U] [--canary gradient|example] [--background zero|data] [--trials N]
        [--confidence 0.95] [--delta D] [--engine auto|batch|event] [--plot roc.png] [--json]
        [--workers W | --scheduler ADDRESS] [--block-trials K]

Runs N trials, half of them with a canary in the victim's data (the plan's certified
adjacency), lets each attacker run the strongest test its view allows and reports, per
attacker, μ_lb (the Gaussian trade-off its test shows on held-out trials) against the
certified μ and ε_lb at δ against the certified ε — Clopper–Pearson bounds, Bonferroni over
all tests so that a sound plan is flagged with probability at most 1 − confidence — beside
μ̂ with its interval, the exact μ of the view, and the most and the typical ε_lb of these
trials (:mod:`edgedp_sim.audit`). Every ε is printed with its δ, adjacency and attacker.
With ``--workers`` (a local Dask cluster) or ``--scheduler`` the trials run in keyed blocks
and the report is the single process's, plus where each block ran and its memory.
Progress lines go to stderr (none with --json or -q).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from edgedp_cli._common import (
    RunFailedError,
    UsageError,
    add_cluster_flags,
    add_delta_flag,
    chatty,
    cluster,
    delta_of,
    emit,
    load_target,
)

__all__ = ["register"]


def _attackers(texts):
    from edgedp_sim import adversary

    out = []
    for text in texts:
        try:
            out.append(adversary.parse_attacker(str(text)))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return out


def _f(x, spec=".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def _interval(e: dict) -> str:
    if e.get("mu_low") is None:
        return "-"
    return f"{_f(e['mu_hat'])} [{_f(e['mu_low'])}, {_f(e['mu_high'])}]"


def text_table(report: dict) -> str:
    """The report as a person reads it: every ε with its δ, adjacency and attacker."""
    v = report["verdict"]
    ids = report["trial_ids"]
    held = next((e for e in report["attackers"] if "heldout_negatives" in e), None)
    delta = report["delta"]
    pure = delta == 0
    eps_head = "eps(pure)" if pure else f"eps@{delta:g}"
    head = (
        f"{'attacker':<27}{'mu':>7}{'mu_lb':>7}{eps_head:>11}{'eps_lb':>8}{'max':>7}{'typ':>7}"
        f"{'mu_hat [interval]':>24}{'mu_view':>9}  verdict"
    )
    split = ""
    if held:
        counted = held["heldout_negatives"] + held["heldout_positives"]
        split = (
            f"; threshold chosen on {report['n_trials'] - counted}, error rates counted on "
            f"{counted}"
        )
    lines = [
        f"{report['scenario']}: {report['mechanism']} ({report['adjacency']} adjacency) on the "
        f"{report['engine']} engine, victim {report['victim']}, {report['canary']} canary "
        f"({report['background']} background), N = {report['n_trials']} trials "
        f"(trials {ids[0]}..{ids[1] - 1}{split})",
        (
            f"every eps: pure eps-DP (delta = 0) under {report['adjacency']} adjacency against "
            "the row's attacker"
            if pure
            else f"every eps: (eps, delta = {delta:g})-DP under {report['adjacency']} adjacency "
            "against the row's attacker; mu: mu-GDP, the certificate eps comes from"
        ),
        head,
        "-" * len(head),
    ]
    for e in report["attackers"]:
        view = e.get("mu_view", e.get("epsilon_view"))
        verdict = "VIOLATION" if e["violation"] else ("ok" if e["tests"] else "no test")
        lines.append(
            f"{e['attacker']:<27}{_f(e.get('mu')):>7}{_f(e.get('mu_lb')):>7}"
            f"{_f(e['epsilon']):>11}{_f(e['epsilon_lb']):>8}{_f(e['epsilon_lb_max'], '.2f'):>7}"
            f"{_f(e.get('epsilon_lb_typical'), '.2f'):>7}{_interval(e):>24}{_f(view):>9}  "
            f"{verdict}"
        )
        lines.append(f"{'':<4}test: {e['test']}")
        for kind, t in e["tests"].items():
            if t["rejected"]:
                name = "mu" if kind == "mu" else f"eps at delta {e['delta']:g}"
                lines.append(
                    f"{'':<4}VIOLATION: {name} lower bound {t['bound']:.3f} > certified "
                    f"{t['certified']:.3f} (p = {t['p_value']:.2g}, {v['correction']}-adjusted "
                    f"{t['p_adjusted']:.2g})"
                )
    conf = v["confidence"]
    lines += [
        (
            f"verdict: {'VIOLATION' if v['violation'] else 'no certificate refuted'} — "
            f"{v['tests']} tests ({'mu and eps' if not pure else 'eps'} per attacker with a "
            f"statistic), {v['correction']}: each bound at {100 * v['test_confidence']:.4g}% so "
            f"that all hold together at {100 * conf:.4g}% (a sound plan is flagged with "
            f"probability <= {1 - conf:.2g})"
        ),
    ]
    if not pure:
        lines.append(
            "mu_lb: lower bound on the mu of the Gaussian trade-off the attacker's test shows on "
            "held-out trials; above the certified mu, the plan adds less noise than it certifies"
        )
    lines.append(
        f"eps_lb: lower bound on eps at delta {delta:g}; max: the most eps_lb these trials can "
        "show (no held-out error: threshold tests cannot show much more than log N)"
        + (
            "; typ: the median eps_lb of simulated audits of a mechanism exactly at the "
            "certified mu (sound audits exceed it about half the time)"
            if not pure
            else ""
        )
    )
    if not pure:
        lines.append(
            f"mu_hat: Gaussian fit of the statistic over all trials with its {100 * conf:.4g}% "
            "interval (an estimate, not part of the verdict); mu_view: the exact mu of what "
            "the attacker sees with this canary"
        )
    lines += [
        f"method: {report['method']}",
        f"{report['n_trials']} trials in {report['seconds']:.1f} s "
        f"({report['trials_per_second']:.0f} trials/s, {report['chunk']} per engine call)",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> str:
    """ROC of every attacker's test (log-log) with the certified trade-off and the held-out
    bounds; returns the caption printed under it."""
    import numpy as np
    from matplotlib.figure import Figure
    from scipy import stats

    from edgedp_sim import audit_stats

    fig = Figure(figsize=(6.5, 6.2))
    ax = fig.subplots()
    grid = np.logspace(-5, 0, 200)
    drawn = set()
    for e in report["attackers"]:
        if not e["tests"]:  # no statistic (an encrypted tap): nothing to draw
            continue
        fpr, tpr = audit_stats.roc(e["scores"], e["present"])
        line = ax.plot(
            fpr[1:], tpr[1:], label=f"{e['attacker']} (mu_lb {_f(e.get('mu_lb'), '.2f')})"
        )
        color = line[0].get_color()
        if e.get("mu") is not None and math.isfinite(e["mu"]):  # μ-GDP tradeoff curve
            bound = stats.norm.cdf(stats.norm.ppf(grid) + e["mu"])
            label = f"certified mu = {e['mu']:.3g}"
        else:
            eps = e["epsilon"]
            bound = np.minimum(
                1.0, np.minimum(math.exp(eps) * grid, 1 - math.exp(-eps) * (1 - grid))
            )
            label = f"certified eps = {eps:.3g}"
        if label not in drawn:  # one boundary per certificate
            drawn.add(label)
            ax.plot(grid, bound, ls="--", color=color, lw=1, label=label)
        for kind, t in e["tests"].items():  # the held-out point: FPR <= upper, TPR >= lower
            ax.plot(
                [t["fpr_upper"]],
                [1 - t["fnr_upper"]],
                marker="o" if kind == "mu" else "s",
                ms=5,
                color=color,
                mfc=color if t["rejected"] else "none",
            )
    ax.plot(grid, grid, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-4, 1)
    ax.set_ylim(1e-4, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"{report['mechanism']}: {report['canary']} canary, N = {report['n_trials']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    v = report["verdict"]
    caption = (
        "Solid: each attacker's empirical ROC over all N trials (in sample: it scatters by "
        "sampling and may cross the dashed certified trade-off by chance, most at small "
        "false positive rates where few trials fall). Markers: the held-out test points "
        "(circle: mu test, square: eps test) at the upper bound of their false positive rate "
        f"and the lower bound of their true positive rate, simultaneous at "
        f"{100 * v['confidence']:.4g}% ({v['correction']}, {v['tests']} tests); a filled "
        "marker lies above its certified curve: the certificate is refuted. "
        f"Verdict: {'VIOLATION' if v['violation'] else 'no certificate refuted'}."
    )
    fig.text(0.02, 0.01, caption, fontsize=7, wrap=True, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.savefig(path, dpi=110)
    return caption


def cmd_audit(args) -> None:
    from edgedp_sim import audit

    delta = delta_of(args)  # None: the plan's own δ
    sc = load_target(args.target)
    texts = args.attacker or sc.leakage.get("attackers") or ["eavesdropper:all"]
    attackers = _attackers(texts)
    victim = args.victim if args.victim is not None else int(sc.leakage.get("victim", 0))
    if args.trials < 8:
        raise UsageError(f"--trials {args.trials} must be >= 8")

    def progress(line: str) -> None:
        if chatty(args):
            sys.stderr.write(f"edgedp audit: {line}\n")
            sys.stderr.flush()

    from edgedp_sim import shards

    try:
        with cluster(args) as client:
            report = audit.run(
                sc,
                attackers,
                trials=args.trials,
                victim=victim,
                canary=args.canary,
                background=args.background,
                confidence=args.confidence,
                delta=delta,
                engine_name=args.engine,
                chunk=args.chunk,
                progress=progress,
                keep_scores=bool(args.plot),
                client=client,
                block_trials=args.block_trials,
                block_progress=shards.block_lines("edgedp audit") if chatty(args) else None,
            )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except (FloatingPointError, shards.ShardError) as exc:
        raise RunFailedError(str(exc)) from None
    if args.plot:
        report["plot_caption"] = plot(report, Path(args.plot))
        report["plot"] = args.plot
        for e in report["attackers"]:
            e.pop("scores", None)
            e.pop("present", None)
    emit(args, report, text_table(report))


def register(sub, add) -> None:
    p = add("audit", cmd_audit, "empirical lower bound on epsilon per attacker (privacy audit)")
    p.add_argument("target", metavar="PLAN_OR_SCENARIO", help="a .plan file or a scenario .toml")
    p.add_argument(
        "--attacker",
        action="append",
        help="hbc:NODES | eavesdropper:U-V[,U-V...] | eavesdropper:node:N | eavesdropper:all "
        "(repeatable; default: the scenario's [leakage] attackers, or eavesdropper:all)",
    )
    p.add_argument("--victim", type=int, help="node holding the canary (default 0)")
    p.add_argument(
        "--canary",
        default="gradient",
        choices=["gradient", "example"],
        help="gradient: a crafted gradient of norm clip (white-box); example: a crafted input",
    )
    p.add_argument(
        "--background",
        choices=["zero", "data"],
        help="other examples' gradients: zero (worst-case dataset) or the real data "
        "(default: zero for the gradient canary, data for the example canary)",
    )
    p.add_argument("--trials", type=int, default=2000, help="trials N (default 2000)")
    p.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="probability that a sound plan is not flagged, over all attackers together "
        "(default 0.95; Bonferroni over the tests)",
    )
    add_delta_flag(
        p, "every (eps, delta) reported: mu-GDP plans' eps and eps_lb (Laplace: pure eps)"
    )
    p.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "batch", "event"],
        help="auto (default): the scenario's engine key, else batch unless latency or "
        "bandwidth matter",
    )
    p.add_argument(
        "--chunk",
        type=int,
        help="trials per batch-engine call (default: as many as fit a 96 MB working set)",
    )
    add_cluster_flags(p, "trials")
    p.add_argument("--plot", help="write the attackers' ROC curves to this PNG (default: none)")
