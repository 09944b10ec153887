"""``edgedp plan cross --mechanism whisper|decor|zipdl|muffliato``: noise correlated across agents.

Prints the noise each agent adds (its independent part and its total variance), the
post-mixing variance Tr(W R Wᵀ)/n per step next to DP-D-SGD's at the same guarantee, and
ε per trust model (papers 001, 000 App. A.4–A.6; :mod:`edgedp.families.cross.planning`).
"""

from __future__ import annotations

__all__ = ["add_plan_arguments", "text"]


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


def text(r: dict) -> str:
    """The human-readable report of a cross-agent plan."""
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
        f"guarantee ({r['adjacency']} adjacency) against {r['attacker']}: "
        f"mu={r['mu']:.6g}, epsilon={r['epsilon']:.6g} at delta={r['delta']:g}; replace-one "
        f"epsilon={r['epsilon_replace_one']:.6g}",
        f"  (RDP conversion of the same mu: epsilon={r['epsilon_rdp']:.6g}; paper 001 Thm 2 "
        "writes it with per-step sensitivity 2C, i.e. replace-one)",
        f"trust model: {r['trust_model']}",
        f"  at delta={r['delta']:g}: eavesdropper: epsilon={r['epsilon_eavesdropper']:.6g}; "
        f"one curious insider: epsilon={r['epsilon_insider']:.6g}; a victim's whole "
        f"neighbourhood colluding: epsilon={r['epsilon_neighbourhood']:.6g}",
    ]
    if "utility_ratio" in r:
        lines.append(
            f"compact form {r['form']} (rank {r['rank']}, {r['draws_per_step']} draws/step "
            f"per agent): Tr(WRW^T) {r['utility_ratio']:.4f} x the dense optimum"
        )
    lines.append(r["step_size"])
    lines.append(f"wrote {r['out']} (plan {r['plan_hash'][:16]})")
    return "\n".join(lines)
