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
import math
import sys
from collections.abc import Sequence

import numpy as np

from edgedp import mechanisms
from edgedp_cli._common import (
    EXIT_OK,
    EXIT_REFUSED,
    CommandError,
    UsageError,
    add_output_flags,
    chatty,
    check_task_participation,
    emit,
    key_value_lines,
    load_plan,
    parse_graph,
    parse_participation,
    participation_hint,
    task_from_args,
    task_model,
)

__all__ = ["build_parser", "build_plan", "main", "plan_report"]

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
    from pathlib import Path

    from edgedp_sim import demo, demo_report

    config = demo.QUICK if args.quick else demo.DemoConfig()
    changes = {k: getattr(args, k) for k in ("steps", "trials", "workers")}
    for key, value in changes.items():
        if value is not None and value < 1:
            raise UsageError(f"--{key} {value} must be >= 1")
    try:
        config = dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None

    def progress(line: str) -> None:
        if chatty(args):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    summary = demo.run_demo(args.out, config, progress=progress)
    if args.json:
        payload = {k: summary[k] for k in ("results", "leakage", "agents", "nodes", "files")}
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


def build_plan(args):
    """Everything ``edgedp plan FAMILY`` does but writing the file (also
    :func:`edgedp.make_plan`); ``args`` holds every family's options
    (:func:`edgedp_cli.plan_cmd.complete`).

    Returns ``(plan, report, text)``: the NoisePlan, the report ``plan`` prints (a dict) and
    a function turning the report (with ``out`` added) into the human-readable text.
    Raises :class:`UsageError` naming the bad option.
    """
    from edgedp import plan as plan_mod

    if args.mechanism in plan_mod.LAPLACE_MECHANISMS:
        from edgedp_cli import tune_cmd

        return tune_cmd.build_plan_laplace(args)
    if args.participation is None:
        raise UsageError(
            f"--mechanism {args.mechanism} needs --participation k,b{participation_hint(args)}"
        )
    if args.learning_rate is None:
        args.learning_rate = 0.5
    g = parse_graph(args.topology)
    if args.mechanism != "dsgd" and (args.target_eps is None) == (args.noise_multiplier is None):
        raise UsageError(
            "give exactly one of --target-eps E (with --delta) or --noise-multiplier S"
        )
    if args.target_eps is not None and args.delta is None:
        raise UsageError("--target-eps needs --delta D (e.g. --delta 1e-6)")
    task = task_from_args(args)
    participation = parse_participation(args.participation)
    model_dim = task_model(task)[0].dim
    check_task_participation(args, task, g.n, participation)
    if args.mechanism in plan_mod.CROSS_AGENT_MECHANISMS:
        from edgedp_cli import cross_cmd

        return cross_cmd.build_plan_cross(args, g, task, participation, model_dim)
    factor, planned, gram = None, None, None
    if args.mechanism in PLANNED_MECHANISMS:
        factor, planned, gram = _planned_factor(args, g, participation)
    from edgedp_cli import dome_cmd

    sketch = dome_cmd.sketch_from_args(args, model_dim, g)
    factor = factor or dome_cmd.factor_from_args(args)
    try:
        p = plan_mod.make_plan(
            args.mechanism,
            g,
            steps=args.steps,
            participation=participation,
            factor=factor,
            clip_norm=args.clip_norm,
            learning_rate=args.learning_rate,
            weighting=args.weighting,
            noise_multiplier=args.noise_multiplier,
            target_epsilon=args.target_eps,
            delta=args.delta,
            task=task,
            seed=args.seed,
            topology_name=args.topology,
            sketch=sketch,
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    payload = plan_report(p, args.delta if args.delta is not None else 1e-6)
    if p.noise_multiplier > 0:
        payload["loss_ratio_to_dp_dsgd"] = _loss_ratio(p, gram)
    if sketch is not None:
        payload.update(dome_cmd.report(p, model_dim))
    if planned is not None:
        payload.update(
            factorization_loss=planned.loss,
            dual_bound=planned.dual_bound,
            gap=planned.gap,
            converged=planned.converged,
            planner_seconds=planned.seconds,
        )
        if planned.loss_ratio_to_dense is not None:
            payload["loss_ratio_to_dense_optimum"] = planned.loss_ratio_to_dense
            payload["device_state_floats_per_dim"] = p.factor.state_bytes(1) // 8
    return p, payload, key_value_lines


def _loss_ratio(p, gram=None) -> float:
    """The plan's expected loss over DP-D-SGD's at the same guarantee (1 for DP-D-SGD).

    ``gram``: ``(W, H)``, the MAFALDA workload Gram H of W already computed for planning
    (used when W is the plan's mixing matrix)."""
    from edgedp import factors
    from edgedp.planning import factorization

    if isinstance(p.factor, factors.Identity):  # C = I is DP-D-SGD: the ratio is 1 exactly
        return 1.0
    W = p.mixing_matrix()  # noqa: N806
    H = gram[1] if gram is not None and np.array_equal(gram[0], W) else None  # noqa: N806
    return factorization.relative_loss(
        p.factor.strategy(p.steps), W, participation=p.participation, workload_gram=H
    )


#: Mechanisms whose temporal factor the offline planner computes for the topology.
PLANNED_MECHANISMS = mechanisms.names(planned=True)


def _planned_factor(args, graph, participation):
    """(factor, planning result, (W, H) with H the MAFALDA workload Gram or None)."""
    from edgedp import topology
    from edgedp.planning import factorization, mafalda

    W = topology.WEIGHTINGS[args.weighting](graph)  # noqa: N806
    H = None  # noqa: N806
    if args.mechanism != "dmf" and args.steps >= 1:  # mafalda, banded, blt plan on H
        try:
            H = mafalda.workload_gram(W, steps=args.steps)  # noqa: N806
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def progress(iteration, loss, bound):
        if chatty(args):
            sys.stderr.write(
                f"\r  planning {args.mechanism}: iteration {iteration}, "
                f"gap {(loss - bound) / bound:.2e}   "
            )
            sys.stderr.flush()

    try:
        planned = factorization.plan_factor(
            args.mechanism,
            W,
            steps=args.steps,
            participation=participation,
            progress=progress,
            bandwidth=args.bandwidth,
            buffers=args.buffers,
            tolerance=args.tolerance,
            max_iterations=args.max_iterations,
            workload_gram=H,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if chatty(args):
        sys.stderr.write("\n")
    if not planned.converged:  # said even with --json: the factor is further from optimal
        sys.stderr.write(
            f"edgedp plan: warning: the {args.mechanism} planner stopped unconverged after "
            f"{planned.iterations} iterations with a duality gap of {planned.gap:.1%} "
            f"(--tolerance {args.tolerance:g}); the plan and its epsilon are valid, but its "
            f"expected error may be up to {planned.gap:.1%} above the optimum's: raise "
            "--max-iterations\n"
        )
    return planned.factor, planned, None if H is None else (W, H)


def plan_report(p, delta: float, steps_done: int | None = None) -> dict:
    if p.laplace is not None:
        from edgedp_cli import tune_cmd

        return tune_cmd.laplace_report(p, steps_done, delta=delta)
    if p.noise_multiplier > 0:
        from edgedp.accounting import gdp

        g = p.guarantee(steps_done=steps_done)
        mu, eps, exact = g.mu, g.epsilon(delta), g.exact
        eps_replace = gdp.epsilon(p.replace_one_factor * mu, delta=delta)
    else:
        mu, eps, exact, eps_replace = math.inf, math.inf, True, math.inf
    payload = {
        "mechanism": p.mechanism,
        "topology": p.topology,
        "n": p.n,
        "steps": p.steps,
        "participation": f"{p.participation.k},{p.participation.b}",
        "noise_multiplier": p.noise_multiplier,
        "sensitivity": p.sensitivity,
        "sensitivity_exact": exact,
        "noise_std": p.noise_std,
        "clip_norm": p.clip_norm,
        "adjacency": p.adjacency,
        "mu": mu,
        "epsilon": eps,
        "delta": delta,
        "epsilon_replace_one": eps_replace,
        "trust_model": _trust(p),
        "plan_hash": p.plan_hash,
    }
    if p.cross_agent is not None and p.noise_multiplier > 0:
        payload.update(_trust_epsilons(p, delta, steps_done))
    return payload


def _trust_epsilons(p, delta: float, steps_done: int | None) -> dict:
    """ε per trust model of a cross-agent plan (eavesdropper, insider, neighbourhood)."""
    from edgedp.accounting import cross_agent as cross_acc

    report = cross_acc.trust_report(p, delta=delta, steps_done=steps_done)
    return {f"epsilon_{name}": value for name, value in report.items()}


def _trust(p) -> str:
    from edgedp import algorithms

    return algorithms.for_mechanism(p.mechanism).TRUST_MODEL


def cmd_account(args) -> None:
    p = load_plan(args.plan)
    if args.trust == "pndp":
        from edgedp_cli import pndp_cmd

        pndp_cmd.cmd_account_pndp(p, args)
        return
    if args.attacker is not None:
        raise UsageError("--attacker only applies with --trust pndp")
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
    p.add_argument(
        "--delta", type=float, default=1e-6, help="delta of the epsilon printed (default 1e-6)"
    )
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

    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub, add)

    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``edgedp ARGV``; returns the exit status (0, 1, 2 or 3; module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # bad usage: argparse prints it and exits 2
    args.json = bool(getattr(args, "json", False) or args.top_json)
    args.quiet = bool(getattr(args, "quiet", False) or args.top_quiet)
    try:
        args.func(args)
    except CommandError as exc:
        sys.stderr.write(f"edgedp: error: {exc}\n")
        return exc.code
    except ImportError as exc:  # a device-only install running an offline command
        from edgedp.api import install_extra

        missing = install_extra(exc)
        if missing is None:
            raise
        name, extra = missing
        sys.stderr.write(
            f"edgedp {args.command}: {name} is not installed; install it with: "
            f"pip install 'edgedp[{extra}]'\n"
        )
        return EXIT_REFUSED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
