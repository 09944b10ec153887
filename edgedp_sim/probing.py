"""What a leakage run and an audit share: the engine that can observe a scenario, and the
plan's formal guarantee against an attacker (beside every measured number).

The batch engine's observers see fault-free rounds only, so a scenario with network
effects (latency, bandwidth, loss, dropouts, crashes, churn; :mod:`edgedp_sim.round_faults`
decides) is observed on the event engine.
"""

from __future__ import annotations

import math
from typing import Any

from edgedp import mechanisms
from edgedp.accounting import gdp
from edgedp.families.laplace import accounting as laplace_acc
from edgedp_sim import round_faults
from edgedp_sim.adversary import Attacker

__all__ = ["engine_for", "formal_guarantee", "has_network_effects"]


def engine_for(sc, engine_name: str) -> str:
    """The engine that observes ``sc``: ``"auto"`` is the event engine iff the scenario has
    network effects; ValueError for the batch engine on such a scenario or an unknown name."""
    if engine_name == "auto":
        engine_name = "event" if has_network_effects(sc) else "batch"
    if engine_name == "batch" and has_network_effects(sc):
        raise ValueError("The scenario has network effects; the batch engine cannot run them.")
    if engine_name not in ("batch", "event"):
        raise ValueError(f"Unknown engine {engine_name!r}; expected auto, batch or event.")
    return engine_name


def has_network_effects(sc) -> bool:
    """Latency, bandwidth, loss, dropouts, crashes or churn: leakage runs them on the event
    engine (the batch engine's observers see fault-free rounds only)."""
    return round_faults.timing(sc.network) is not None or round_faults.faulty(sc.faults, sc.network)


def formal_guarantee(plan, attacker: Attacker, *, delta: float | None = None) -> dict[str, Any]:
    """The plan's certified guarantee, its trust model and whether it covers ``attacker``.

    ``epsilon`` at ``delta`` (default the plan's δ; pure ε for Laplace plans, ``delta`` 0);
    ``mu`` for Gaussian plans — the μ-GDP parameter of the view the ε is for (the insider /
    neighbourhood view of curious nodes against Whisper/DECOR, the plan's μ otherwise)."""
    delta = plan.delta if delta is None else delta
    mech = mechanisms.get(plan.mechanism)
    out: dict[str, Any] = {
        "trust_model": mech.trust_model,
        "accountant": mech.accountant_name,
        "adjacency": plan.adjacency,
    }
    if attacker.encrypted:
        out["covers_attacker"] = True
        out["note"] = "encrypted links: sizes and timing only (no data-dependent content)"
    if plan.laplace is not None:
        out["epsilon"] = laplace_acc.epsilon_spent(plan.laplace, plan.steps)
        out["epsilon_replace_one"] = laplace_acc.replace_one_epsilon(plan.laplace, out["epsilon"])
        out["delta"] = 0.0
        out["guarantee"] = (
            f"{out['epsilon']:.4g}-DP (pure, delta 0, Laplace) against {mech.attacker}, "
            f"{plan.adjacency} adjacency"
        )
        out.setdefault("covers_attacker", True)
        return out
    if plan.noise_std == 0:
        out.update(epsilon=math.inf, delta=delta, guarantee="none (no noise)")
        out.setdefault("covers_attacker", False)
        return out
    g = plan.guarantee()
    out.update(mu=g.mu, epsilon=g.epsilon(delta), delta=delta)
    out["epsilon_replace_one"] = gdp.epsilon(plan.replace_one_factor * g.mu, delta=delta)
    out["guarantee"] = (
        f"{g.mu:.4g}-GDP = ({out['epsilon']:.4g}, {delta:g})-DP against {mech.attacker}, "
        f"{plan.adjacency} adjacency"
    )
    if plan.cross_agent is not None and mechanisms.get(plan.cross_agent.kind).has("correlated"):
        from edgedp.families.cross import accounting as cross_acc

        report = cross_acc.trust_report(plan, delta=delta)
        out["trust_report_epsilon"] = report
        if attacker.kind == "hbc" and not attacker.encrypted:
            out["epsilon"] = (
                report["neighbourhood"] if len(attacker.nodes) > 1 else report["insider"]
            )
            out["mu"] = gdp.mu(out["epsilon"], delta=delta)
            out["guarantee"] += (
                f"; insiders ({'neighbourhood' if len(attacker.nodes) > 1 else 'one insider'})"
                f": eps = {out['epsilon']:.4g} at delta {delta:g}"
            )
        out.setdefault("covers_attacker", True)
        return out
    out.setdefault("covers_attacker", True)
    return out
