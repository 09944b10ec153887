"""``edgedp tune step-size SCENARIO``: the step size of each mechanism, searched in
simulation on a public proxy task (:mod:`edgedp_sim.step_tune` states the protocol)."""

from __future__ import annotations

import math
from pathlib import Path

from edgedp_cli._common import UsageError, add_output_flags, emit, out_folder, progress_lines

__all__ = ["register", "table"]


def cmd_tune_step_size(args) -> None:
    from edgedp import mechanisms
    from edgedp_sim import provenance, scenarios, step_tune

    compare = None
    if args.mechanisms:
        compare = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
        for m in compare:
            try:
                mechanisms.get(m)
            except ValueError as exc:
                raise UsageError(f"--mechanisms: {exc}") from None
    if args.seeds < 1:
        raise UsageError(f"--seeds {args.seeds} must be >= 1")
    out = out_folder(args.out)
    path = Path(args.scenario)
    try:
        raw = scenarios.read_toml(path)
        report = step_tune.tune(
            raw,
            base=path.parent,
            compare=compare,
            seeds=args.seeds,
            proxy=args.proxy,
            protocol=args.protocol,
            engine=args.engine,
            progress=progress_lines(args),
        )
        files = []
        for row in report["results"]:
            plan = step_tune.tuned_plan(raw, report, row["mechanism"], base=path.parent)
            name = out / f"{row['mechanism']}.plan"
            name.write_bytes(plan.to_bytes())
            row["plan"], row["plan_hash"] = str(name), plan.plan_hash
            files.append(str(name))
    except (scenarios.ScenarioError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    provenance.write_json(out / "tune.json", report)
    _plot(report, out / "tune.png")
    report["files"] = [str(out / "tune.json"), str(out / "tune.png"), *files]
    emit(args, report, table(report))


def table(report: dict) -> str:
    """The tuned step sizes, the loss at each step size tried, and the protocol."""
    lines = [
        f"step-size search on {report['scenario']} ({report['criterion']})",
        f"{'mechanism':<11}{'rule':>8}{'tuned':>8}{'start':>8}{'final loss':>12}  "
        "loss at each step size tried",
    ]
    for r in report["results"]:
        at = dict(zip(r["grid"], r["final_test_loss"], strict=True))
        best = at[r["tuned_step_size"]]
        rule = "-" if r["rule_step_size"] is None else f"{r['rule_step_size']:g}"
        curve = " ".join(f"{g:g}:{'inf' if math.isinf(v) else f'{v:.3f}'}" for g, v in at.items())
        lines.append(
            f"{r['mechanism']:<11}{rule:>8}{r['tuned_step_size']:>8g}{r['start_loss']:>8.4f}"
            f"{best:>12.4f}  {curve}"
        )
    lines += [
        report["comparison_protocol"],
        f"runs: {report['engine']}; grid: {report['grid']}",
        f"privacy: {report['assumption']}",
        "wrote " + ", ".join(report.get("files", [])),
        'use a plan: `edgedp sim run OUT/MECHANISM.plan`, or plan = "..." in a scenario',
    ]
    return "\n".join(lines)


def _plot(report: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for r in report["results"]:
        xs = [g for g, v in zip(r["grid"], r["final_test_loss"], strict=True) if math.isfinite(v)]
        ys = [v for v in r["final_test_loss"] if math.isfinite(v)]
        sd = [
            s
            for s, v in zip(r["final_test_loss_std"], r["final_test_loss"], strict=True)
            if math.isfinite(v)
        ]
        line = ax.errorbar(xs, ys, yerr=sd, marker="o", capsize=2, label=r["mechanism"])
        ax.axvline(r["tuned_step_size"], color=line[0].get_color(), ls=":", lw=1)
        if math.isfinite(r["start_loss"]):
            ax.axhline(r["start_loss"], color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("step size (dotted: tuned)")
    ax.set_ylabel("final test loss (grey: start)")
    ax.set_title(f"{report['scenario']} on {report['proxy']}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def register(tsub) -> None:
    p = tsub.add_parser(
        "step-size",
        help="search the step size of each mechanism in simulation (public proxy by default)",
        description="search the step size of each Gaussian mechanism in simulation on the "
        "scenario's topology, privacy and network, by default on a public synthetic proxy "
        "of the task (no private example read); writes tune.json, tune.png and one plan per "
        "mechanism with its tuned step size and the protocol",
    )
    p.add_argument("scenario", help="a scenario .toml with [topology], [task] and [privacy]")
    p.add_argument(
        "--mechanisms",
        help="comma-separated mechanisms to tune (default: the scenario's own), e.g. "
        "dp-dsgd,mafalda,whisper",
    )
    p.add_argument("--seeds", type=int, default=3, help="noise draws per step size (default 3)")
    p.add_argument(
        "--proxy",
        default="public",
        help="public (default: a synthetic task of the same shape, costs no privacy), task "
        "(the task's own data: the choice is not covered by epsilon), or a dataset name you "
        "declare public",
    )
    p.add_argument(
        "--protocol",
        choices=["own", "shared"],
        default="own",
        help="own (default): each mechanism at its best step size; shared: one step size for all",
    )
    p.add_argument(
        "--engine",
        choices=["auto", "batch", "event"],
        default="auto",
        help="auto (default): the scenario's engine; batch: drop latency and bandwidth "
        "(faster; said in the output); event",
    )
    p.add_argument("--out", default="tune-out", help="output folder (default tune-out)")
    add_output_flags(p)
    p.set_defaults(func=cmd_tune_step_size)
