"""The ``edgedp`` command line.

Every command prints a human-readable report, or with ``--json`` exactly one strict JSON
object on stdout (snake_case keys; NaN as null, infinities as the strings "inf" and "-inf").
``--json`` and ``-q`` may come before or after the command. Exit status: 0 done, 1 the run
failed, 2 bad usage, 3 refused (a plan failing its checks, or a missing optional extra:
``install it with: pip install 'edgedp[EXTRA]'``); errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import numpy as np

from edgedp.planning.report import plan_report
from edgedp_cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    CommandError,
    UsageError,
    add_delta_flag,
    add_output_flags,
    chatty,
    delta_of,
    emit,
    key_value_lines,
    load_plan,
    out_folder,
    parse_graph,
    progress_lines,
)

__all__ = ["build_parser", "main"]

#: Command groups living in their own modules; each defines ``register(subparsers, add)``.
COMMAND_MODULES: tuple[str, ...] = (
    "edgedp_cli.mf_cmd",
    "edgedp_cli.sim_cmd",
    "edgedp_cli.model_cmd",
    "edgedp_cli.tune_cmd",
    "edgedp_cli.leak_cmd",
    "edgedp_cli.device_cmd",
    "edgedp_cli.audit_cmd",
)


# ---------------------------------------------------------------- commands
def cmd_demo(args) -> None:
    import dataclasses

    from edgedp_sim import demo, demo_plans, demo_report

    config = demo_plans.QUICK if args.quick else demo_plans.DemoConfig()
    changes = {k: getattr(args, k) for k in ("steps", "trials", "workers")}
    for key, value in changes.items():
        if value is not None and value < 1:
            raise UsageError(f"--{key} {value} must be >= 1")
    try:
        config = dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    out_folder(args.out)
    summary = demo.run_demo(args.out, config, progress=progress_lines(args))
    if args.json:
        keys = ("results", "comparison_protocol", "leakage", "agents", "nodes", "files")
        payload = {k: summary[k] for k in keys}
        emit(args, payload, "")
    else:
        report = summary["files"][0]
        sys.stdout.write(
            demo_report.format_table(summary)
            + f"\nfinished in {summary['timings']['total_seconds']:.0f} s; report: {report}\n"
        )


def cmd_topology(args) -> None:
    from edgedp import topology

    g = parse_graph(args.spec)
    W = topology.WEIGHTINGS[args.weighting](g)  # noqa: N806
    gap = spectral_gap(W, quiet=not chatty(args))
    deg = g.degrees
    payload = {
        "name": g.name or args.spec,
        "n": g.n,
        "edges": len(g.edges),
        "weighting": args.weighting,
        "spectral_gap": gap,
        "min_degree": int(deg.min()),
        "max_degree": int(deg.max()),
        "mean_degree": float(deg.mean()),
        "connected": topology.is_connected(g),
    }
    text = "\n".join(f"{k:<14}{v}" for k, v in payload.items())
    emit(args, payload, text)


#: Above this many nodes the spectral gap comes from sparse Lanczos (scipy), not a dense
#: eigendecomposition (O(n³): minutes at 10,000 nodes).
SPARSE_GAP_NODES = 1000


def spectral_gap(W, *, quiet: bool = False) -> float:  # noqa: N803
    """``1 - |λ₂|`` of W: :func:`edgedp.topology.spectral_gap`, or for a large symmetric W
    the three largest-modulus eigenvalues by Lanczos (scipy.sparse.linalg.eigsh)."""
    from edgedp import topology

    n = W.shape[0]
    if n <= SPARSE_GAP_NODES or not np.array_equal(W, W.T):
        return topology.spectral_gap(W)
    from scipy import sparse
    from scipy.sparse.linalg import eigsh

    if not quiet:
        sys.stderr.write(f"  spectral gap of the {n}-node gossip matrix (sparse Lanczos) ...\n")
    values = eigsh(sparse.csr_matrix(W), k=3, which="LM", return_eigenvectors=False)
    return float(1.0 - np.sort(np.abs(values))[-2])


def cmd_account(args) -> None:
    delta_of(args)
    p = load_plan(args.plan)
    if args.trust == "pndp":
        from edgedp_cli import pndp_cmd

        pndp_cmd.cmd_account_pndp(p, args)
        return
    if args.attacker is not None or args.cyffers:
        raise UsageError(
            f"{'--attacker' if args.attacker is not None else '--cyffers'} only applies with "
            "--trust pndp"
        )
    if args.steps_done is not None and not 0 <= args.steps_done <= p.steps:
        raise UsageError(f"--steps-done must be in [0, {p.steps}]")
    payload = plan_report(p, args.delta, args.steps_done)
    payload["steps_done"] = p.steps if args.steps_done is None else args.steps_done
    emit(args, payload, key_value_lines(payload))


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    import edgedp
    from edgedp import topology

    ap = argparse.ArgumentParser(
        prog="edgedp",
        description=__doc__.splitlines()[0],
        epilog="--json and -q may also follow the command. JSON output is strict: NaN is "
        'null, infinities are the strings "inf" and "-inf". Exit status: 0 done, 1 the run '
        "failed, 2 bad usage, 3 refused (a plan failing its checks, or an optional extra "
        "this install lacks: install it with: pip install 'edgedp[EXTRA]').",
    )
    ap.add_argument("--version", action="version", version=f"edgedp {edgedp.__version__}")
    ap.add_argument(
        "--json",
        action="store_true",
        dest="top_json",
        help="as the command's --json: one strict JSON object on stdout",
    )
    ap.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        dest="top_quiet",
        help="as the command's -q: no progress lines on stderr",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name, func, help_):
        p = sub.add_parser(name, help=help_, description=help_)
        add_output_flags(p)
        p.set_defaults(func=func)
        return p

    p = add(
        "demo",
        cmd_demo,
        "DP-D-SGD, MAFALDA, Whisper and DOME at one epsilon: simulate, deploy, probe, report",
    )
    p.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    p.add_argument("--trials", type=int, help="noise seeds per mechanism (default 3)")
    p.add_argument("--steps", type=int, help="gossip rounds of the main run (default 60)")
    p.add_argument("--workers", type=int, help="simulation worker processes (default 2)")
    p.add_argument(
        "--quick", action="store_true", help="a small setting that runs in seconds (tests)"
    )

    p = add("topology", cmd_topology, "describe a topology: n, edges, spectral gap")
    p.add_argument(
        "spec",
        help="er:N:P[:SEED], ring:N, torus:R:C, smallworld:N:K:P[:SEED], "
        "complete:N, star:N, florentine, karate, or an edge-list file",
    )
    p.add_argument(
        "--weighting",
        default="metropolis-hastings",
        choices=sorted(topology.WEIGHTINGS),
        help="gossip matrix W (default metropolis-hastings)",
    )

    importlib.import_module("edgedp_cli.plan_cmd").register(sub, add)

    p = add("account", cmd_account, "re-certify a plan and print its guarantee")
    p.add_argument("plan", metavar="PLAN", help="the plan file")
    add_delta_flag(p)
    p.add_argument("--steps-done", type=int, help="privacy spent after this many steps")
    p.add_argument(
        "--trust", choices=["ldp", "pndp"], default="ldp", help="trust model (default ldp)"
    )
    p.add_argument(
        "--attacker", help="pndp: colluding node ids, e.g. 0,3 (default: each node in turn)"
    )
    p.add_argument(
        "--observer",
        choices=["node", "eavesdropper"],
        default="node",
        help="pndp: curious nodes (default) or a tap on every link into the set, links "
        "between members included",
    )
    p.add_argument(
        "--cyffers",
        action="store_true",
        help="pndp: beside each pair, Cyffers et al. 2022's pairwise bound (Muffliato Thm 11; "
        "DP-D-SGD plans with a symmetric gossip matrix, one curious node per attacker set)",
    )

    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub, add)

    return ap


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command words, parser) of ``parser`` and every subcommand under it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, (*path, name))


def _owners(parser: argparse.ArgumentParser, option: str) -> list[str]:
    """The commands (``edgedp plan dome`` ...) that take ``option``."""
    return [
        " ".join(("edgedp", *path))
        for path, sub in _subcommands(parser)
        if any(option in a.option_strings for a in sub._actions)
    ]


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with the errors argparse words badly said by the command
    meant: an option it does not take (and the commands that do take it), and the old
    ``edgedp plan --topology ...`` (the family now comes first). Bad usage exits 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if a not in ("--json", "-q", "--quiet")]
    if (
        words[:1] == ["plan"]
        and len(words) > 1
        and words[1].startswith("-")
        and words[1]
        not in (
            "-h",
            "--help",
        )
    ):
        from edgedp_cli import plan_cmd

        group = dict(_subcommands(parser))[("plan",)]
        family = "FAMILY"
        if "--mechanism" in words[:-1]:
            try:
                family = plan_cmd.family_of(words[words.index("--mechanism") + 1])
            except ValueError:
                pass
        group.error(
            f"the mechanism family comes first: edgedp plan {family} {' '.join(words[1:])} "
            f"OUT (families: {', '.join(plan_cmd.FAMILIES)}; edgedp plan FAMILY --help)"
        )
    leaves = dict(_subcommands(parser))
    args, extra = parser.parse_known_args(argv)
    if extra:
        path = tuple(w for w in words if not w.startswith("-"))
        while path and path not in leaves:  # the command words, without the values after
            path = path[:-1]
        options = [e.split("=", 1)[0] for e in extra if e.startswith("--")]
        where = [f"{o} is an option of {', '.join(_owners(parser, o))}" for o in options
                 if _owners(parser, o)]  # fmt: skip
        leaves.get(path, parser).error(
            f"unrecognized arguments: {' '.join(extra)}"
            + (f" ({'; '.join(where)})" if where else "")
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``edgedp ARGV``; returns the exit status (0, 1, 2 or 3; module docstring)."""
    parser = build_parser()
    args = parse(parser, argv)  # bad usage: argparse prints it and exits 2
    args.json = bool(getattr(args, "json", False) or args.top_json)
    args.quiet = bool(getattr(args, "quiet", False) or args.top_quiet)
    try:
        args.func(args)
    except CommandError as exc:
        sys.stderr.write(f"edgedp: error: {exc}\n")
        return exc.code
    except ImportError as exc:  # a device-only install running an offline command
        from edgedp.extras import install_extra

        missing = install_extra(exc)
        if missing is None:
            raise
        name, extra = missing
        sys.stderr.write(
            f"edgedp {args.command}: {name} is not installed; install it with: "
            f"pip install 'edgedp[{extra}]'\n"
        )
        return EXIT_REFUSED
    except OSError as exc:  # a file or folder a command could not read or write
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"edgedp {args.command}: error: {where}{exc.strerror or exc}\n")
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
