"""``edgedp mf optimize``: the optimal factorization of a workload, with its certificate."""

from __future__ import annotations

import sys
import time

import numpy as np

from edgedp_cli._common import (
    UsageError,
    add_output_flags,
    chatty,
    emit,
    parse_graph,
    parse_participation,
)

__all__ = ["add_plan_arguments", "register"]


def cmd_optimize(args) -> None:
    from edgedp import topology
    from edgedp.families.mf import mafalda
    from edgedp.planning import mf_optimal

    part = parse_participation(args.participation)
    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: expected an integer >= 1")
    if args.max_iterations < 1:
        raise UsageError(f"--max-iterations {args.max_iterations}: expected an integer >= 1")
    if args.workload == "prefix":
        H = mf_optimal.prefix_sum_gram(args.steps)  # noqa: N806
    else:
        if not args.topology:
            raise UsageError("--workload mafalda needs --topology (e.g. er:100:0.1:1)")
        W = topology.WEIGHTINGS[args.weighting](parse_graph(args.topology))  # noqa: N806
        H = mafalda.workload_gram(W, steps=args.steps)  # noqa: N806

    started = time.perf_counter()

    def progress(iteration: int, loss: float, bound: float) -> None:
        if chatty(args):
            per = (time.perf_counter() - started) / max(iteration, 1)
            sys.stderr.write(
                f"\r  iteration {iteration:4d}/{args.max_iterations}  loss {loss:.6e}  dual "
                f"bound {bound:.6e}  gap {(loss - bound) / bound:.2e}  ({per:.1f} s/iteration, "
                f"at most {per * (args.max_iterations - iteration) / 60:.0f} min left)   "
            )
            sys.stderr.flush()

    try:
        res = mf_optimal.optimize(
            H,
            participation=part,
            tolerance=args.tolerance,
            max_iterations=args.max_iterations,
            progress=progress,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if chatty(args):
        sys.stderr.write("\n")
    if not res.converged:
        sys.stderr.write(
            f"edgedp mf optimize: warning: stopped unconverged after {res.iterations} "
            f"iterations with a duality gap of {res.gap:.1%} (--tolerance {args.tolerance:g}): "
            "raise --max-iterations\n"
        )
    payload = {
        "workload": args.workload,
        "steps": args.steps,
        "participation": f"{part.k},{part.b}",
        "loss": res.loss,
        "dual_bound": res.dual_bound,
        "gap": res.gap,
        "iterations": res.iterations,
        "seconds": res.seconds,
        "converged": res.converged,
        "identity_loss_ratio": mf_optimal.loss(np.eye(args.steps), H, part) / res.loss,
    }
    emit(args, payload, "\n".join(f"{k:<22}{v}" for k, v in payload.items()))


def add_plan_arguments(p) -> None:
    """The ``edgedp plan mf`` options of the offline planner (dmf, mafalda, banded, blt)."""
    p.add_argument(
        "--bandwidth",
        type=int,
        help="banded: number of diagonals of C (required with --mechanism banded)",
    )
    p.add_argument(
        "--buffers", type=int, help="blt: number of buffers (required with --mechanism blt)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="dmf/mafalda/banded/blt: relative duality gap the planner stops at (default 1e-4)",
    )
    p.add_argument(
        "--max-iterations",
        type=int,
        default=1000,
        help="dmf/mafalda/banded/blt: planner iterations before it stops unconverged "
        "(default 1000; it then says so)",
    )


def register(sub, add) -> None:
    from edgedp import topology

    del add  # nested commands build their own leaves
    mf = sub.add_parser("mf", help="matrix-factorization planning")
    mfsub = mf.add_subparsers(dest="mf_command", required=True)
    p = mfsub.add_parser("optimize", help="optimal factorization of a workload under (k,b)")
    p.add_argument(
        "--workload",
        default="prefix",
        choices=["prefix", "mafalda"],
        help="prefix sums (default) or MAFALDA's workload of a gossip matrix (--topology)",
    )
    p.add_argument("--topology", help="the topology of --workload mafalda (e.g. er:100:0.1:1)")
    p.add_argument(
        "--weighting",
        default="metropolis-hastings",
        choices=sorted(topology.WEIGHTINGS),
        help="gossip matrix W of --topology (default metropolis-hastings)",
    )
    p.add_argument("--steps", type=int, required=True, help="steps T (required)")
    p.add_argument(
        "--participation",
        required=True,
        help="k,b: at most k participations, b steps apart (required)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="relative duality gap to stop at (default 1e-4)",
    )
    p.add_argument(
        "--max-iterations",
        type=int,
        default=1000,
        help="iterations before it stops unconverged (default 1000; it then says so)",
    )
    add_output_flags(p)
    p.set_defaults(func=cmd_optimize)
