"""``edgedp leak``: empirical leakage of a scenario to curious neighbours and eavesdroppers.

    edgedp leak SCENARIO.toml|PLAN --attacker hbc:1,2 --attacker eavesdropper:all
        [--encrypted] [--trials N] [--audit-trials N] [--target-eps E] [--delta D]
        [--victim U] [--json] [--plot PNG]
        [--workers W | --scheduler ADDRESS] [--block-trials K] [--knn-threads K]

Monte Carlo trials (batch engine; the event engine when the scenario has latency, loss or
faults; a plan file runs on an ideal network), the attackers' estimates of the victim's
gradients, M-NMI (paper 004 Eq. 43) with its per-iteration curve, reconstruction
MSE/cosine, the plan's formal guarantee (at the plan's δ unless --delta) and, from a privacy
audit of the same attackers (:mod:`edgedp_sim.audit`, gradient canary), the empirical lower
bound ε_lb — formal ε, empirical ε and M-NMI side by side (:mod:`edgedp_sim.leak`). On lossy
networks each iteration is estimated on the trials in which the attacker observed it; the
report says on how many, and what the run cost (seconds, peak memory). Progress lines go to
stderr (none with --json or -q).

With ``--workers`` (a local Dask cluster) or ``--scheduler`` the trials, and the audit's,
run in keyed blocks on the cluster (docs/CLUSTER.md) and the MI is estimated here on the
merged trials: the same report as one process, plus where each block ran and its worker's
peak memory.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from edgedp import mechanisms, strict_json
from edgedp_cli import _common
from edgedp_cli._common import RunFailedError, UsageError, chatty, emit

__all__ = ["register"]


def load_scenario(path: str, target_eps: float | None):
    """The scenario (``.toml``; re-planned for ``target_eps``, ε of the plan's own
    accountant, if given) or a plan file on an ideal network."""
    from edgedp_sim import scenarios

    if not path.endswith(".toml"):
        if target_eps is not None:
            raise UsageError("--target-eps re-plans a scenario's [privacy]; this is a plan file")
        return _common.load_target(path)
    p = Path(path)
    try:
        raw = scenarios.read_toml(p)
    except scenarios.ScenarioError as exc:
        raise UsageError(str(exc)) from None
    if target_eps is not None:
        if not target_eps > 0:
            raise UsageError(f"--target-eps {target_eps} must be > 0")
        if "plan" in raw:
            raise UsageError("--target-eps re-plans [privacy]; this scenario loads a plan file")
        priv = raw.setdefault("privacy", {})
        if (name := priv.get("mechanism", "dp-dsgd")) in mechanisms.names(noise="none"):
            raise UsageError(f"--target-eps: mechanism {name} has no noise to re-plan")
        priv.pop("noise_multiplier", None)
        priv["target_epsilon"] = float(target_eps)
    try:
        return scenarios.parse(raw, base=p.parent)
    except scenarios.ScenarioError as exc:
        raise UsageError(f"{p.name}: {exc}") from None


def _attackers(args, sc):
    from edgedp_sim import adversary

    texts = list(args.attacker or sc.leakage.get("attackers", []))
    if not texts:
        raise UsageError("give --attacker (or [leakage] attackers in the scenario)")
    out = []
    for text in texts:
        try:
            a = adversary.parse_attacker(str(text))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if args.encrypted and a.kind != "hbc" and not a.encrypted:
            a = adversary.parse_attacker(f"{text}:encrypted")
        out.append(a)
    return out


def _flatten(report: dict) -> dict:
    entries = report["attackers"]
    out = dict(report)
    if len(entries) == 1:
        out.update({k: v for k, v in entries[0].items()})
    else:
        for key in (
            "m_nmi",
            "nmi_curve",
            "low_variance_iterations",
            "mse",
            "cosine",
            "epsilon",
            "delta",
            "epsilon_lb",
            "observed_iterations",
            "n_trials_per_iteration",
            "warnings",
        ):
            out[key] = {e["attacker"]: e.get(key) for e in entries}
    return out


def _fmt(x, spec=".4g") -> str:
    return "-" if x is None else format(x, spec)


def text_table(report: dict) -> str:
    head = (
        f"{'attacker':<30}{'M-NMI':>8}{'round':>6}{'MSE':>11}{'cosine':>8}{'epsilon':>10}"
        f"{'eps_lb':>8}  estimator"
    )
    lines = [
        f"{report['scenario']}: {report['mechanism']} on the {report['engine']} engine, "
        f"victim {report['victim']}, N = {report['n_trials']} trials, k = "
        f"{report['k_neighbors']}, {report['iterations']} iterations",
        head,
        "-" * len(head),
    ]
    for e in report["attackers"]:
        lines.append(
            f"{e['attacker']:<30}{_fmt(e['m_nmi'], '.3f'):>8}"
            f"{_fmt(e['argmax_iteration'], 'd'):>6}{_fmt(e['mse'], '.3g'):>11}"
            f"{_fmt(e['cosine'], '.3f'):>8}{_fmt(e['epsilon'], '.3g'):>10}"
            f"{_fmt(e.get('epsilon_lb'), '.3f'):>8}  {e['estimator']}"
        )
        counts = e["n_trials_per_iteration"]
        full = sum(c == report["n_trials"] for c in counts)
        if full < e["observed_iterations"]:  # some iterations ran on fewer trials
            used = [c for c in counts if 2 * report["k_neighbors"] + 1 < c]
            lines.append(
                f"{'':<4}M-NMI over {e['observed_iterations']} of {len(counts)} iterations: "
                f"{full} on every trial, the others on the {min(used)}-{max(used)} trials "
                "in which the attacker observed them (messages lost or late)"
            )
        elif e["observed_iterations"] < len(counts):
            lines.append(
                f"{'':<4}M-NMI over {e['observed_iterations']} of {len(counts)} iterations"
            )
        for warning in e.get("warnings", []):
            lines.append(f"{'':<4}warning: {warning}")
        low = e["low_variance_iterations"]
        if low:
            lines.append(
                f"{'':<4}V barely varies at iterations {low[:8]}{' ...' if len(low) > 8 else ''}"
            )
    for g in dict.fromkeys(e["guarantee"] for e in report["attackers"]):
        lines.append(f"formal guarantee: {g}")
    lines.append(f"trust model: {report['attackers'][0]['trust_model']}")
    if "audit" in report:
        a = report["audit"]
        lines.append(
            f"eps_lb: privacy audit, {a['canary']} canary ({a['background']} background), "
            f"{a['n_trials']} trials, confidence {a['confidence']:g} (edgedp audit)"
        )
    if "cost" in report:
        c = report["cost"]
        lines.append(
            f"cost: {c['total_seconds']:.1f} s ({c['simulation_seconds']:.1f} s simulation on "
            f"the {report['engine']} engine, {c['seconds_per_trial']:.3g} s per trial; "
            f"{c['mi_seconds']:.1f} s MI; {c['audit_seconds']:.1f} s audit), "
            f"peak memory {c['peak_memory_mb']:.0f} MB"
        )
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    styles = ("-", "--", ":", "-.")
    markers = ("o", "s", "^", "D", "v", "x")
    count = len(report["attackers"])
    for i, e in enumerate(report["attackers"]):
        # equal curves stay visible: wider lines below, other dashes and markers staggered
        ys = [math.nan if v is None else strict_json.number(v) for v in e["nmi_curve"]]
        every = max(1, len(ys) // 12)
        ax.plot(
            range(1, len(ys) + 1),
            ys,
            linestyle=styles[i % len(styles)],
            marker=markers[i % len(markers)],
            markersize=8,
            markerfacecolor="none" if i else None,
            markevery=(i * every // count, every),
            linewidth=max(1.2, 3.2 - 0.8 * i),
            alpha=0.9,
            label=f"{e['attacker']} (M-NMI {_fmt(e['m_nmi'], '.3f')})"
            + (" [see warnings]" if e.get("warnings") else ""),
        )
    ax.set_ylim(bottom=0)
    ax.set_xlabel("iteration k")
    ax.set_ylabel("NMI  I(V; I) / I(V; V)")
    ax.set_title(
        f"{report['scenario']}: {report['mechanism']}, N = {report['n_trials']}, "
        f"k = {report['k_neighbors']}"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cmd_leak(args) -> None:
    from edgedp_sim import leak

    delta = _common.delta_of(args)
    sc = load_scenario(args.scenario, args.target_eps)
    attackers = _attackers(args, sc)
    trials = args.trials or int(sc.leakage.get("trials", 1000))
    victim = args.victim if args.victim is not None else int(sc.leakage.get("victim", 0))

    def progress(line: str) -> None:
        if chatty(args):
            sys.stderr.write(f"edgedp leak: {line}\n")
            sys.stderr.flush()

    audit_trials = trials if args.audit_trials is None else args.audit_trials
    if 0 < audit_trials < 8:
        raise UsageError(f"--audit-trials {audit_trials} must be 0 (no audit) or >= 8")
    if args.knn_threads < 1:
        raise UsageError(f"--knn-threads {args.knn_threads} must be >= 1")
    from edgedp_sim import shards

    try:
        with _common.cluster(args) as client:
            report = leak.run(
                sc,
                attackers,
                trials=trials,
                victim=victim,
                engine_name=args.engine,
                chunk=args.chunk,
                seed=args.seed,
                workers=args.knn_threads,
                progress=progress,
                standardized=args.standardized,
                audit_trials=audit_trials,
                audit_confidence=args.confidence,
                delta=delta,
                client=client,
                block_trials=args.block_trials,
                block_progress=shards.block_lines("edgedp leak") if chatty(args) else None,
            )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except (FloatingPointError, shards.ShardError) as exc:
        raise RunFailedError(str(exc)) from None
    if args.target_eps is not None:
        report["target_epsilon"] = args.target_eps
    if args.plot:
        plot(report, Path(args.plot))
        report["plot"] = args.plot
    emit(args, _flatten(report), text_table(report))


def register(sub, add) -> None:
    p = add("leak", cmd_leak, "empirical leakage (M-NMI, reconstruction) to adversary probes")
    p.add_argument(
        "scenario",
        metavar="SCENARIO_OR_PLAN",
        help="scenario.toml ([leakage] table: victim, trials, attackers), or a plan file "
        "(run on an ideal network)",
    )
    p.add_argument(
        "--attacker",
        action="append",
        help="hbc:NODES | eavesdropper:U-V[,U-V...] | eavesdropper:node:N | eavesdropper:all "
        "(repeatable)",
    )
    p.add_argument(
        "--encrypted",
        action="store_true",
        help="eavesdroppers see CURVE-encrypted links (curious nodes decrypt)",
    )
    p.add_argument("--trials", type=int, help="Monte Carlo trials N (default: scenario, or 1000)")
    p.add_argument(
        "--audit-trials",
        type=int,
        help="trials of the privacy audit reported as eps_lb (default: --trials; 0: none)",
    )
    p.add_argument(
        "--confidence", type=float, default=0.95, help="confidence of eps_lb (default 0.95)"
    )
    p.add_argument(
        "--target-eps",
        type=float,
        help="re-plan the mechanism for this epsilon (default: the scenario's plan)",
    )
    _common.add_delta_flag(p, "each attacker's formal epsilon and eps_lb")
    p.add_argument("--victim", type=int, help="the attacked node (default: scenario, or 0)")
    p.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "batch", "event"],
        help="auto (default): the event engine when the scenario has latency, loss or "
        "faults, else batch",
    )
    p.add_argument(
        "--chunk", type=int, default=500, help="trials per batch-engine call (default 500)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the KSG tie-breaking noise (default 0)"
    )
    p.add_argument(
        "--knn-threads", type=int, default=1, help="threads for k-NN queries (default 1)"
    )
    _common.add_cluster_flags(p, "trials (and the audit's)")
    p.add_argument("--plot", help="write the per-iteration NMI curves to this PNG (default: none)")
    p.add_argument(
        "--standardized",
        action="store_true",
        help="also report M-NMI on z-scored samples (KSG is not scale-invariant)",
    )
