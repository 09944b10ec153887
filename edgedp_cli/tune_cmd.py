"""Laplace mechanisms of paper 004 on the command line: ``edgedp tune sr-gt`` and the plan options.

``edgedp tune sr-gt`` runs Remark 5.20's parameter search on the accuracy bound (Eq. 25,
:mod:`edgedp.planning.sr_gt_tuning`). ``edgedp plan laplace`` (main.build_plan) hands
over to :func:`build_plan_laplace`, which builds the Laplace schedule (Eq. 5 with the
noise of each message paired with the state it releases: :mod:`edgedp.accounting.laplace`)
and reports ``epsilon_spent`` by the messages of the horizon, ``epsilon_with_final_release``
(the noised final model a device publishes), ``epsilon`` (infinite horizon), the same under
replace-one adjacency, and (ε, δ) from a privacy-loss distribution.
"""

from __future__ import annotations

from edgedp_cli._common import (
    UsageError,
    emit,
    key_value_lines,
    parse_graph,
    task_from_args,
    task_model,
)

__all__ = ["add_plan_arguments", "build_plan_laplace", "laplace_report", "register"]


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


def build_plan_laplace(args):
    """``edgedp plan laplace``: ``(plan, report, text)`` (report with its ε)."""
    from edgedp import plan as plan_mod
    from edgedp.accounting import laplace

    m = args.mechanism
    if args.noise_multiplier is not None:
        raise UsageError(f"--mechanism {m} is pure eps-DP (Laplace): drop --noise-multiplier")
    if args.delta is not None and not 0 < args.delta < 1:
        raise UsageError(f"--delta must be in (0, 1), got {args.delta!r}")
    if args.participation is not None:
        raise UsageError(f"--mechanism {m} counts every round: drop --participation")
    if args.target_eps is None:
        raise UsageError(f"--mechanism {m} needs --target-eps E")
    missing = [f"--{k}" for k in ("gamma", "q1", "q2") if getattr(args, k) is None]
    if m == "sr-gt" and args.beta is None:
        missing.append("--beta")
    if missing:
        raise UsageError(f"--mechanism {m} needs {' '.join(missing)} (paper 004 Eq. 5)")
    if m == "dpop" and args.beta not in (None, 0.0):
        raise UsageError("--mechanism dpop has no tracking variable: drop --beta")
    g = parse_graph(args.topology)
    task = task_from_args(args)
    clip = args.clip_norm
    delta_grad = args.delta_grad
    example = args.adjacency != "problem"
    if not 0 < args.target_eps < float("inf"):
        raise UsageError(f"--target-eps must be > 0 and finite, got {args.target_eps!r}")
    if example:
        need = _example_delta(task, g.n, clip, args.adjacency)
        delta_grad = need[0] if delta_grad is None else delta_grad
    elif delta_grad is None:
        raise UsageError("--adjacency problem needs --delta-grad D (your L1 gradient-gap bound)")
    else:
        task_model(task)
    try:
        sched = laplace.LaplaceSchedule(
            gamma=args.gamma,
            beta=args.beta or 0.0,
            q1=args.q1,
            q2=args.q2,
            delta_grad=delta_grad,
            epsilon=args.target_eps,
            adjacency=args.adjacency,
        )
        if example:
            laplace.check_task(sched, clip_norm=clip, dim=need[1], batch_size=need[2])
        p = plan_mod.make_plan(
            m,
            g,
            steps=args.steps,
            clip_norm=clip,
            learning_rate=args.learning_rate,
            laplace=sched,
            weighting=args.weighting,
            task=task,
            seed=args.seed,
            topology_name=args.topology,
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    payload = laplace_report(p, delta=args.delta if args.delta is not None else 1e-6)
    return p, payload, key_value_lines


def _example_delta(task, nodes: int, clip: float, adjacency: str) -> tuple[float, int, int]:
    """(δ, d, B) for the task's model and local batch: Δ√d/B, or 2Δ√d/B for replace-one."""
    from edgedp.accounting import laplace

    model, data = task_model(task)
    local = len(data.y_train) // nodes
    if local < 1:
        raise UsageError(f"{task.dataset} has too few examples for {nodes} nodes")
    batch = task.batch_size or local
    try:
        value = laplace.example_delta(
            clip_norm=clip, dim=model.dim, batch_size=batch, adjacency=adjacency
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return value, model.dim, batch


def laplace_report(p, steps_done: int | None = None, *, delta: float = 1e-6) -> dict:
    """What ``plan`` and ``account`` print for a Laplace plan."""
    from edgedp import algorithms
    from edgedp.accounting import laplace

    s = p.laplace
    done = p.steps if steps_done is None else steps_done
    spent = laplace.epsilon_spent(s, done)
    final = laplace.epsilon_spent(s, done, final_release=True)
    return {
        "mechanism": p.mechanism,
        "topology": p.topology,
        "n": p.n,
        "steps": p.steps,
        "gamma": s.gamma,
        "beta": s.beta,
        "q1": s.q1,
        "q2": s.q2,
        "delta_grad": s.delta_grad,
        "adjacency": s.adjacency,
        "clip_norm": p.clip_norm,
        "first_noise_scale": s.noise_scale(0),
        "last_noise_scale": s.noise_scale(p.steps - 1),
        "last_stepsize": s.stepsize(p.steps - 1),
        "epsilon_spent": spent,
        "epsilon_with_final_release": final,
        "epsilon": laplace.epsilon(s),
        "epsilon_replace_one": laplace.replace_one_epsilon(s, laplace.epsilon(s)),
        "delta": 0.0,
        **_pld_fields(s, done, delta),
        "final_model": (
            "the state x(K) carries one un-noised gradient step and is not covered; "
            "edgedp-agent publishes the noised release x(K) + Lap(nu_{K+1}) "
            "(epsilon_with_final_release)"
        ),
        "trust_model": algorithms.for_mechanism(p.mechanism).TRUST_MODEL,
        "plan_hash": p.plan_hash,
    }


def _pld_fields(schedule, rounds: int, delta: float) -> dict:
    """(ε, δ) of the messages and final release from a privacy-loss distribution."""
    try:
        from edgedp.planning import laplace_pld
    except ImportError:  # a device-only install has no dp-accounting
        return {
            "pld_epsilon": None,
            "pld_note": "pip install 'edgedp[plan]' for (epsilon, delta)",
        }
    try:
        eps = laplace_pld.epsilon_at(schedule, rounds, delta=delta, final_release=True)
    except ImportError:
        return {
            "pld_epsilon": None,
            "pld_note": "pip install 'edgedp[plan]' for (epsilon, delta)",
        }
    return {
        "pld_epsilon": eps,
        "pld_delta": delta,
        "pld_note": "messages and final release; randomized-response dominating pairs "
        "composed by dp-accounting's PLD (valid for any dimension, not tight)",
    }


def cmd_tune(args) -> None:
    """``edgedp tune sr-gt``: Remark 5.20's search on the bound of Eq. (25)."""
    from edgedp.planning import sr_gt_tuning

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
    p = add("tune", cmd_tune, "parameter search for sr-gt on its accuracy bound (paper 004)")
    p.add_argument("algorithm", choices=["sr-gt"], help="the algorithm to tune (sr-gt)")
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
