"""``edgedp plan cross --mechanism whisper|decor|zipdl|muffliato``: noise correlated across agents.

Prints the noise each agent adds (its independent part and its total variance), the
post-mixing variance Tr(W R Wᵀ)/n per step next to DP-D-SGD's at the same guarantee, and
ε per trust model (papers 001, 000 App. A.4–A.6; :mod:`edgedp.planning.cross_agent`).
"""

from __future__ import annotations

import numpy as np

from edgedp_cli._common import UsageError

__all__ = ["add_plan_arguments", "build_plan_cross"]


def add_plan_arguments(p) -> None:
    """The ``edgedp plan cross`` options (whisper, decor, zipdl, muffliato)."""
    p.add_argument(
        "--form",
        default="local",
        choices=["local", "lowrank", "dense"],
        help="whisper: compact covariance (default local: per-edge secrets; lowrank: shared "
        "seed; dense)",
    )
    p.add_argument("--rank", type=int, default=8, help="whisper --form lowrank: rank r (default 8)")
    p.add_argument(
        "--ridge",
        type=float,
        default=1e-6,
        help="whisper/decor: rho in Tr(W R W^T) + rho Tr(R) (default 1e-6)",
    )
    p.add_argument(
        "--message-variance",
        type=float,
        default=1.0,
        help="zipdl: message-wise variance relative to the independent part (default 1.0)",
    )
    p.add_argument(
        "--gossip-rounds",
        type=int,
        default=1,
        help="muffliato: gossip rounds K per gradient step (default 1)",
    )


def build_plan_cross(args, g, task, participation, model_dim: int):
    """The rest of ``edgedp plan`` once main.build_plan has checked the shared options:
    ``(plan, report, text)``."""
    from edgedp.planning import cross_agent as planner
    from edgedp_cli import dome_cmd

    sketch = dome_cmd.sketch_from_args(args, model_dim, g)
    try:
        planned = planner.make_plan(
            args.mechanism,
            g,
            steps=args.steps,
            participation=participation,
            clip_norm=args.clip_norm,
            learning_rate=args.learning_rate,
            noise_multiplier=args.noise_multiplier,
            target_epsilon=args.target_eps,
            delta=args.delta,
            weighting=args.weighting,
            task=task,
            seed=args.seed,
            topology_name=args.topology,
            form=args.form,
            rank=args.rank,
            ridge=args.ridge,
            message_variance=args.message_variance,
            gossip_rounds=args.gossip_rounds,
            sketch=sketch,
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    plan = planned.plan
    payload = planner.report(plan, delta=args.delta if args.delta is not None else 1e-6)
    payload["planner_seconds"] = planned.info["planner_seconds"]
    if sketch is not None:
        payload.update(dome_cmd.report(plan, model_dim))
    spec, nu2 = plan.cross_agent, plan.noise_std**2
    total = np.diag(spec.covariance(plan.edges))
    payload["agent_independent_variance"] = (nu2 * spec.diag).tolist()
    payload["agent_noise_variance"] = (nu2 * total).tolist()
    return plan, payload, _text


def _text(r: dict) -> str:
    lines = [
        f"{r['mechanism']} on {r['topology']}: n={r['n']}, T={r['steps']}, participation "
        f"{r['participation']}, sigma={r['noise_multiplier']:.6g}, nu={r['noise_std']:.6g}",
        "noise each agent adds per step (variance per coordinate):",
        f"{'agent':>7} {'independent':>12} {'total':>12}",
    ]
    ind, tot = r["agent_independent_variance"], r["agent_noise_variance"]
    show = range(len(ind)) if len(ind) <= 12 else [*range(6), *range(len(ind) - 6, len(ind))]
    for u in show:
        lines.append(f"{u:>7} {ind[u]:>12.6g} {tot[u]:>12.6g}")
    lines += [
        f"post-mixing variance Tr(W R W^T)/n per step  {r['post_mixing_variance']:.6g}  "
        f"(DP-D-SGD at the same guarantee: {r['ldp_post_mixing_variance']:.6g})",
        f"guarantee ({r['adjacency']} adjacency): mu={r['mu']:.6g}, "
        f"epsilon={r['epsilon']:.6g} at delta={r['delta']:g}; replace-one "
        f"epsilon={r['epsilon_replace_one']:.6g}",
        f"  (RDP conversion of the same mu: epsilon={r['epsilon_rdp']:.6g}; paper 001 Thm 2 "
        "writes it with per-step sensitivity 2C, i.e. replace-one)",
        f"trust model: {r['trust_model']}",
        f"  eavesdropper: epsilon={r['epsilon_eavesdropper']:.6g}; one curious insider: "
        f"epsilon={r['epsilon_insider']:.6g}; a victim's whole neighbourhood colluding: "
        f"epsilon={r['epsilon_neighbourhood']:.6g}",
    ]
    if "utility_ratio" in r:
        lines.append(
            f"compact form {r['form']} (rank {r['rank']}, {r['draws_per_step']} draws/step "
            f"per agent): Tr(WRW^T) {r['utility_ratio']:.4f} x the dense optimum"
        )
    lines.append(f"wrote {r['out']} (plan {r['plan_hash'][:16]})")
    return "\n".join(lines)
