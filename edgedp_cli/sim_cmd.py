"""``edgedp sim run`` and ``edgedp sim sweep``."""

from __future__ import annotations

import sys
from pathlib import Path

from edgedp_cli._common import (
    RunFailedError,
    UsageError,
    add_cluster_flags,
    add_delta_flag,
    add_output_flags,
    chatty,
    cluster,
    delta_of,
    emit,
    key_value_lines,
    load_target,
)

__all__ = ["register", "sweep_table"]


def cmd_sim_run(args) -> None:
    from edgedp_sim import engine_choice, runner, scenarios, shards

    delta = delta_of(args)
    try:
        sc = load_target(args.target)
        engine_choice.check_engine(sc, args.engine)
    except (scenarios.ScenarioError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.trials is not None and args.trials < 1:
        raise UsageError(f"--trials {args.trials} must be >= 1")
    try:
        with cluster(args) as client:
            summary = runner.run_scenario(
                sc,
                engine_name=args.engine,
                out=Path(args.out) if args.out else None,
                show_progress=chatty(args),
                trials=args.trials or 1,
                client=client,
                block_trials=args.block_trials,
                delta=delta,
            )
    except (FloatingPointError, shards.ShardError) as exc:
        raise RunFailedError(str(exc)) from None
    except (scenarios.ScenarioError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    for line in summary["warnings"]:  # said even with --json: the run went the wrong way
        sys.stderr.write(f"edgedp sim run: warning: {line}\n")
    text = key_value_lines({k: v for k, v in summary.items() if k not in ("warnings", "blocks")})
    emit(args, summary, text)


def cmd_sim_sweep(args) -> None:
    from edgedp_sim import scenarios, shards, sweep, sweep_summary, training_check

    if args.workers < 1:
        raise UsageError(f"--workers {args.workers} must be >= 1")
    try:
        outcome = sweep.run(
            Path(args.sweep),
            out=Path(args.out),
            scheduler=args.scheduler,
            workers=args.workers,
            resume=args.resume,
            progress=chatty(args),
        )
    except scenarios.ScenarioError as exc:
        raise UsageError(str(exc)) from None
    except shards.ShardError as exc:
        raise RunFailedError(str(exc)) from None
    done = [r for r in outcome.rows if "error" not in r]
    protocol = training_check.comparison_protocol(done)
    for r in done:
        for line in r["warnings"]:
            sys.stderr.write(f"edgedp sim sweep: warning: {r['scenario']}: {line}\n")
    lines = [
        sweep_table(outcome.rows),
        protocol,
        f"wrote {args.out}/sweep.json, {args.out}/sweep.png",
    ]
    if outcome.kept:
        lines.append(f"kept {len(outcome.kept)} finished points, ran {len(outcome.ran)}")
    payload = {
        "runs": outcome.rows,
        "points": sweep_summary.summarize(done),
        "comparison_protocol": protocol,
        "out": args.out,
        "ran": outcome.ran,
        "kept": outcome.kept,
        "failed": outcome.failed,
    }
    emit(args, payload, "\n".join(lines))
    if outcome.failed:
        raise RunFailedError(
            f"{len(outcome.failed)} of {len(outcome.rows)} points failed (their error rows are "
            f"in {args.out}/sweep.json); --resume re-runs them and keeps the finished ones"
        )


def _step_column(point: dict) -> str:
    """A grid point's step size and how it was set (``varies`` when its seeds differ)."""
    steps = point.get("step_sizes") or []
    if len(steps) != 1:
        return "varies" if steps else "-"
    return f"{steps[0]['learning_rate']:g} {steps[0]['method']}"


def sweep_table(rows: list[dict]) -> str:
    """One line per grid point over its seeds: mean final test loss ± the half-width of its
    95% confidence interval (Student t), its full name first (names are never cut); ``step``
    is the step size and how it was set, ``!`` marks a point with a seed that ended worse
    than it started. A failed run (an error row) is left out of its point's statistics and
    listed after the table with its error."""
    from edgedp_sim import sweep_summary

    errors = [r for r in rows if "error" in r]
    points = sweep_summary.summarize([r for r in rows if "error" not in r])
    names = [p["point"] for p in points] + [r["scenario"] for r in errors]
    width = max([len("grid point"), *map(len, names)]) + 2
    head = f"{'grid point':<{width}}{'seeds':>6}{'final test loss (95% CI)':>27}  {'step':<18}"
    head += f"{'dropped':>9}{'sim s':>9}"
    lines = [head, "-" * len(head)]
    for p in points:
        ci = p["final_test_loss_ci"]
        loss = (
            f"{p['final_test_loss_mean']:.4f} ± {ci:.4f}"
            if ci is not None
            else (f"{p['final_test_loss_mean']:.4f} (1 seed)")
        )
        mark = "!" if p["worse_than_start"] else " "
        lines.append(
            f"{p['point']:<{width}}{p['seeds']:>6}{loss:>27}{mark} {_step_column(p):<18}"
            f"{p['dropped_messages_mean']:>9.1f}{(p['simulated_seconds_mean'] or 0):>9.2f}"
        )
    for r in errors:
        lines.append(f"{r['scenario']:<{width}}FAILED  {r['error']}")
    if any(p["worse_than_start"] for p in points):
        lines.append("! a seed ended worse than it started (warnings on stderr and in sweep.json)")
    return "\n".join(lines)


def register(sub, add) -> None:
    del add  # nested commands build their own leaves
    simp = sub.add_parser("sim", help="simulation engines: run a scenario or plan, or a sweep")
    simsub = simp.add_subparsers(dest="sim_command", required=True)
    p = simsub.add_parser("run", help="run a scenario file, or a bare plan on an ideal network")
    p.add_argument(
        "target",
        metavar="SCENARIO_OR_PLAN",
        help="a scenario .toml, or a plan file (run on an ideal network)",
    )
    p.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "event", "batch"],
        help="auto (default): the scenario's engine key, else batch unless latency or "
        "bandwidth matter",
    )
    p.add_argument("--out", help="folder for metrics.json and loss.png (default: none)")
    add_delta_flag(p, "the plan's epsilon in the summary")
    p.add_argument(
        "--trials",
        type=int,
        help="independent noise draws of the plan (default 1); counts are summed, curves "
        "averaged over them",
    )
    add_cluster_flags(p, "trials")
    add_output_flags(p)
    p.set_defaults(func=cmd_sim_run)
    p = simsub.add_parser("sweep", help="run a grid of scenarios and seeds on Dask")
    p.add_argument("sweep", help="sweep.toml: a base scenario and the grid")
    p.add_argument(
        "--out", default="sweep-out", help="folder for sweep.json and sweep.png (default sweep-out)"
    )
    p.add_argument(
        "--scheduler", help="address of a running Dask scheduler (default: a local cluster)"
    )
    p.add_argument(
        "--workers", type=int, default=2, help="local cluster worker processes (default 2)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished points in --out and run the rest (missing or failed)",
    )
    add_output_flags(p)
    p.set_defaults(func=cmd_sim_sweep)
