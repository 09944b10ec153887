"""``edgedp tune`` (``step-size``: :mod:`edgedp_cli.step_tune_cmd`; ``sr-gt``) and the
plan options of paper 004's Laplace mechanisms.

``edgedp tune sr-gt`` runs Remark 5.20's parameter search on the accuracy bound (Eq. 25,
:mod:`edgedp.families.laplace.sr_gt_tuning`). ``edgedp plan laplace`` takes the options below;
:func:`edgedp.planning.build.build` builds the Laplace schedule (Eq. 5 with the noise of
each message paired with the state it releases: :mod:`edgedp.families.laplace.accounting`) and
:func:`edgedp.planning.report.laplace_report` reports ``epsilon_spent`` by the messages of
the horizon, ``epsilon_with_final_release`` (the noised final model a device publishes),
``epsilon`` (infinite horizon), the same under replace-one adjacency, and (ε, δ) from a
privacy-loss distribution.
"""

from __future__ import annotations

from edgedp_cli import step_tune_cmd
from edgedp_cli._common import UsageError, add_output_flags, emit

__all__ = ["add_plan_arguments", "register"]


def add_plan_arguments(p) -> None:
    """The ``edgedp plan laplace`` options (sr-gt, dpop; paper 004 Eq. 5)."""
    p.add_argument("--gamma", type=float, help="first stepsize gamma of Eq. 5 (required; no unit)")
    p.add_argument(
        "--beta",
        type=float,
        help="sr-gt: tracking gain beta with gamma*beta <= 1 (required for sr-gt; dpop has none)",
    )
    p.add_argument("--q1", type=float, help="stepsize decay q1 per round, 0 < q1 < q2 (required)")
    p.add_argument("--q2", type=float, help="noise decay q2 per round, q1 < q2 < 1 (required)")
    p.add_argument(
        "--delta-grad",
        type=float,
        help="L1 bound delta on gradient differences of adjacent inputs "
        "(default: clip*sqrt(d)/B from the task for zero-out, twice that for replace-one; "
        "required with --adjacency problem)",
    )
    p.add_argument(
        "--adjacency",
        choices=["zero-out", "replace-one", "problem"],
        default="zero-out",
        help="one example zeroed (default; the adjacency of every Gaussian plan) or "
        "replaced (delta certified from the clip norm), or Definition 1 of paper 004 "
        "(delta taken as given; --clip-norm inf allowed)",
    )


def cmd_tune(args) -> None:
    """``edgedp tune sr-gt``: Remark 5.20's search on the bound of Eq. (25)."""
    from edgedp.families.laplace import sr_gt_tuning

    L, mu, n, p = args.smoothness, args.strong_convexity, args.nodes, args.dim  # noqa: N806
    if args.problem:
        L, mu, n, p = _problem_constants(args.problem)  # noqa: N806
    if None in (L, mu, n, p):
        raise UsageError("give --smoothness, --strong-convexity, --nodes and --dim, or --problem")
    try:
        r = sr_gt_tuning.tune(
            epsilon=args.target_eps,
            delta_grad=args.delta_grad,
            smoothness=L,
            strong_convexity=mu,
            nodes=n,
            dim=p,
            c1=args.c1,
            c2=args.c2,
            beta=args.beta,
            restarts=args.restarts,
            sweeps=args.sweeps,
            seed=args.seed,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    payload = {
        "algorithm": "sr-gt",
        "gamma": r.gamma,
        "beta": r.beta,
        "q1": r.q1,
        "q2": r.q2,
        "bound": r.bound,
        "bound_terms": list(r.terms),
        "best_random_start_bound": r.start_bound,
        "at_bounds": list(r.at_bounds),
        "smoothness": L,
        "strong_convexity": mu,
        "nodes": n,
        "dim": p,
        "epsilon": args.target_eps,
        "delta_grad": args.delta_grad,
        "plan_args": f"--gamma {r.gamma:.6g} --beta {r.beta:.6g} --q1 {r.q1:.6g} --q2 {r.q2:.6g}",
    }
    emit(args, payload, "\n".join(f"{k:<24}{v}" for k, v in payload.items()))


def _problem_constants(spec: str):
    """``sensor-fusion[:N[:SEED]]`` -> (L, μ, n, p) of a generated problem (Eq. 42)."""
    from edgedp_sim import sensor_fusion

    name, *rest = spec.split(":")
    try:
        if name != "sensor-fusion" or len(rest) > 2:
            raise ValueError
        nodes = int(rest[0]) if rest else 100
        seed = int(rest[1]) if len(rest) > 1 else 0
        sf = sensor_fusion.generate(nodes, seed=seed)
    except ValueError:
        raise UsageError(f"--problem {spec!r}: expected sensor-fusion[:N[:SEED]]") from None
    return sf.smoothness, sf.strong_convexity, sf.nodes, sf.dim


def register(sub, add) -> None:
    del add  # nested commands build their own leaves
    tp = sub.add_parser(
        "tune",
        help="parameter searches: the step size in simulation, or sr-gt on its bound",
        description="parameter searches: the step size of Gaussian mechanisms in simulation "
        "(step-size), or sr-gt's parameters on its accuracy bound (sr-gt, paper 004)",
    )
    tsub = tp.add_subparsers(dest="tune_command", required=True, metavar="WHAT")
    step_tune_cmd.register(tsub)
    p = tsub.add_parser(
        "sr-gt", help="parameter search for sr-gt on its accuracy bound (paper 004)"
    )
    p.add_argument(
        "--target-eps", type=float, required=True, help="the pure epsilon to tune for (required)"
    )
    p.add_argument("--delta-grad", type=float, required=True, help="δ of Definition 1")
    p.add_argument("--smoothness", type=float, help="L of every local cost")
    p.add_argument("--strong-convexity", type=float, help="μ of every local cost")
    p.add_argument("--nodes", type=int, help="n")
    p.add_argument("--dim", type=int, help="p, the model dimension")
    p.add_argument("--problem", help="take L, μ, n, p from sensor-fusion[:N[:SEED]]")
    p.add_argument("--c1", type=float, default=1.0, help="estimate of sup E|x̄(k) - x*|²")
    p.add_argument("--c2", type=float, default=1.0, help="estimate of sup E|x(k) - 1x̄(k)|²")
    p.add_argument("--beta", type=float, help="fix β (default 1/γ)")
    p.add_argument(
        "--restarts", type=int, default=8, help="random starts of the search (default 8)"
    )
    p.add_argument(
        "--sweeps", type=int, default=30, help="coordinate sweeps per start (default 30)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random starts (default 0)")
    add_output_flags(p)
    p.set_defaults(func=cmd_tune, algorithm="sr-gt")
