"""``edgedp audit``: an empirical lower bound on ε per attacker, beside the certified ε.

    edgedp audit PLAN_OR_SCENARIO --attacker eavesdropper:all --attacker hbc:1,7
        [--victim U] [--canary gradient|example] [--background zero|data] [--trials N]
        [--confidence 0.95] [--delta D] [--engine auto|batch|event] [--plot roc.png] [--json]

Runs N trials, half of them with a canary in the victim's data (the plan's certified
adjacency), lets each attacker run the strongest test its view allows and reports ε_lb
(Clopper–Pearson, threshold chosen on held-out trials), μ̂ with its interval for Gaussian
mechanisms, the exact μ of the view, the certified ε and μ, and ε_lb / ε (:mod:`edgedp_sim.audit`).
Progress lines go to stderr (none with --json or -q).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from edgedp_cli._common import (
    RunFailedError,
    UsageError,
    add_delta_flag,
    chatty,
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


def text_table(report: dict) -> str:
    head = (
        f"{'attacker':<24}{'eps':>8}{'eps_lb':>8}{'ratio':>7}{'ceil':>7}{'mu':>7}{'mu_hat':>8}"
        f"{'interval':>16}{'mu_view':>9}"
    )
    lines = [
        f"{report['scenario']}: {report['mechanism']} ({report['adjacency']}) on the "
        f"{report['engine']} engine, victim {report['victim']}, {report['canary']} canary "
        f"({report['background']} background), N = {report['n_trials']} trials, "
        f"confidence {report['confidence']:g}, delta {report['delta']:g}",
        head,
        "-" * len(head),
    ]
    for e in report["attackers"]:
        interval = (
            f"[{_f(e['mu_low'])}, {_f(e['mu_high'])}]" if e.get("mu_low") is not None else "-"
        )
        view = e.get("mu_view", e.get("epsilon_view"))
        lines.append(
            f"{e['attacker']:<24}{_f(e['epsilon']):>8}{_f(e['epsilon_lb']):>8}"
            f"{_f(e['ratio'], '.2f'):>7}{_f(e.get('epsilon_lb_ceiling')):>7}"
            f"{_f(e.get('mu')):>7}{_f(e.get('mu_hat')):>8}"
            f"{interval:>16}{_f(view):>9}"
        )
        lines.append(f"{'':<4}test: {e['test']}")
        if e["violation"]:
            lines.append(
                f"{'':<4}VIOLATION: eps_lb {e['epsilon_lb']:.3f} > certified "
                f"{e['epsilon']:.3f} at confidence {e['confidence']:g}"
            )
    lines.append(
        "ceil: the eps_lb a perfect test of the certified mu reaches with these trials "
        "(threshold tests at small delta cannot show much more than log N)"
    )
    lines.append(f"method: {report['method']}")
    lines.append(
        f"{report['n_trials']} trials in {report['seconds']:.1f} s "
        f"({report['trials_per_second']:.0f} trials/s)"
    )
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """ROC of every attacker's test (log-log) with the certified boundary."""
    import numpy as np
    from matplotlib.figure import Figure
    from scipy import stats

    from edgedp_sim import audit_stats

    fig = Figure(figsize=(6.5, 5))
    ax = fig.subplots()
    grid = np.logspace(-5, 0, 200)
    drawn = set()
    for e in report["attackers"]:
        fpr, tpr = audit_stats.roc(e["scores"], e["present"])
        line = ax.plot(
            fpr[1:], tpr[1:], label=f"{e['attacker']} (eps_lb {_f(e['epsilon_lb'], '.2f')})"
        )
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
            ax.plot(grid, bound, ls="--", color=line[0].get_color(), lw=1, label=label)
    ax.plot(grid, grid, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-4, 1)
    ax.set_ylim(1e-4, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"{report['mechanism']}: {report['canary']} canary, N = {report['n_trials']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cmd_audit(args) -> None:
    from edgedp_sim import audit

    delta_of(args)
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

    try:
        report = audit.run(
            sc,
            attackers,
            trials=args.trials,
            victim=victim,
            canary=args.canary,
            background=args.background,
            confidence=args.confidence,
            delta=args.delta,
            engine_name=args.engine,
            chunk=args.chunk,
            progress=progress,
            keep_scores=bool(args.plot),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except FloatingPointError as exc:
        raise RunFailedError(str(exc)) from None
    if args.plot:
        plot(report, Path(args.plot))
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
        "--confidence", type=float, default=0.95, help="confidence of eps_lb (default 0.95)"
    )
    add_delta_flag(p, "the certified epsilon and eps_lb (Gaussian)")
    p.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "batch", "event"],
        help="auto (default): the scenario's engine key, else batch unless latency or "
        "bandwidth matter",
    )
    p.add_argument(
        "--chunk", type=int, default=1000, help="trials per batch-engine call (default 1000)"
    )
    p.add_argument("--plot", help="write the attackers' ROC curves to this PNG (default: none)")
