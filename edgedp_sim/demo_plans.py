"""The demo's setting: its configuration, its plans at one common guarantee, its attackers.

:mod:`edgedp_sim.demo` runs them; :mod:`edgedp_sim.demo_jobs` (worker processes) and
:mod:`edgedp_sim.demo_report` read them from here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from edgedp import _validate, step_size
from edgedp import plan as plan_mod
from edgedp_sim import datasets

__all__ = [
    "ATTACKER_CLASSES",
    "MECHANISMS",
    "QUICK",
    "VICTIM",
    "DemoConfig",
    "attackers",
    "describe",
    "make_plans",
]


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """The embedded default of ``make demo`` (seeded: the run is reproducible)."""

    # --- the training run ---
    topology: str = "smallworld:100:6:0.1:7"  # Watts–Strogatz, 100 nodes, degree 6
    dataset: str = "digits-parity"
    batch_size: int = 3  # 14 examples per node: 4 batches per epoch
    steps: int = 60
    trials: int = 3  # noise seeds per mechanism
    target_epsilon: float = 4.0
    delta: float = 1e-6
    clip_norm: float = 1.0
    #: None: each private plan at its own step size from the planner's noise-budget rule
    #: (edgedp.planning.step_rule; D-SGD the noiseless default); a number: one shared step size
    learning_rate: float | None = None
    sketch_dim: int = 16  # DOME: floats per message (the model has 65)
    seed: int = 2026  # plans, data split; noise draw i is the plan's trial i
    eval_every: int = 5
    # --- the simulated network (event engine) ---
    latency_median_ms: float = 20.0
    latency_sigma: float = 0.5
    bandwidth_mbps: float = 50.0
    loss: float = 0.01
    dropout: float = 0.05
    round_timeout_s: float = 0.5
    network_seed: int = 11
    # --- adversary probes: the same mechanisms at the same guarantee on a smaller graph ---
    leak_topology: str = "smallworld:16:4:0.1:7"
    leak_steps: int = 20
    leak_batch_size: int = 22  # 89 examples per node: 4 batches per epoch
    leak_trials: int = 200
    audit_trials: int = 200  # 0: no audit
    # --- real agent processes ---
    agents_topology: str = "ring:6"
    agents_steps: int = 20
    agents_mechanism: str = "mafalda"
    workers: int = 2

    def __post_init__(self) -> None:
        _validate.integer(
            minimum=1,
            steps=self.steps,
            trials=self.trials,
            leak_steps=self.leak_steps,
            agents_steps=self.agents_steps,
            workers=self.workers,
            eval_every=self.eval_every,
        )
        if self.leak_trials < 8:
            raise ValueError(f"Expected leak_trials={self.leak_trials} >= 8.")
        if self.audit_trials and self.audit_trials < 8:
            raise ValueError(f"Expected audit_trials={self.audit_trials} = 0 or >= 8.")
        _validate.positive(target_epsilon=self.target_epsilon, delta=self.delta)


#: A small setting for tests (seconds, not minutes); ``edgedp demo --quick``.
QUICK = DemoConfig(
    topology="smallworld:20:4:0.1:7",
    steps=8,
    trials=2,
    eval_every=2,
    leak_topology="ring:6",
    leak_steps=6,
    leak_batch_size=60,  # 239 examples per node: 4 batches per epoch
    leak_trials=24,
    audit_trials=16,
    agents_topology="ring:4",
    agents_steps=6,
)

#: (label, mechanism) in table order; the first is the reference without noise.
MECHANISMS = (
    ("D-SGD (no noise)", "dsgd"),
    ("DP-D-SGD", "dp-dsgd"),
    ("MAFALDA", "mafalda"),
    ("Whisper", "whisper"),
    ("DOME", "dome"),
)
#: Who every results row states an ε against: (trust_report key, column, in words).
ATTACKER_CLASSES = (
    ("eavesdropper", "tap", "an eavesdropper on every link"),
    ("insider", "1 nbr", "one curious neighbour with its pairwise secrets and any shared seed"),
    ("neighbourhood", "nbhd", "the victim's whole neighbourhood colluding"),
)
#: Attackers of the leakage table: a curious neighbour pair of the victim (filled in per
#: graph), every link tapped, every link tapped but CURVE-encrypted.
VICTIM = 0


def _task(config: DemoConfig, batch_size: int) -> plan_mod.TaskSpec:
    return plan_mod.TaskSpec(
        model="logistic", dataset=config.dataset, partition="iid", batch_size=batch_size
    )


def make_plans(
    config: DemoConfig,
    *,
    topology: str | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    mechanisms: tuple[str, ...] = tuple(m for _, m in MECHANISMS),
    dropout: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Plan ``mechanisms`` at ``config.target_epsilon`` with the planners ``edgedp plan`` uses;
    without ``config.learning_rate``, each private plan takes the noise-budget rule's step
    size for nodes sitting out rounds with probability ``dropout``.

    Returns ``{mechanism: {"plan": NoisePlan, "predicted": ratio or None, "predicted_kind":
    str, "planner_seconds": float}}``.
    """
    import edgedp_topologies
    from edgedp import topology as topo_mod
    from edgedp.families.cross import planning as cross_agent
    from edgedp.families.dome import accounting as dome_acc
    from edgedp.families.dome.sketch import SketchSpec
    from edgedp.families.mf import factorization
    from edgedp.planning import step_rule

    spec = topology or config.topology
    steps = steps or config.steps
    graph = edgedp_topologies.parse(spec)
    task = _task(config, config.batch_size if batch_size is None else batch_size)
    part = datasets.task_participation(task, nodes=graph.n, steps=steps)
    shared = config.learning_rate
    common = dict(
        steps=steps,
        participation=part,
        clip_norm=config.clip_norm,
        learning_rate=step_rule.MAX_STEP if shared is None else shared,
        task=task,
        seed=config.seed,
        topology_name=spec,
    )
    private = dict(target_epsilon=config.target_epsilon, delta=config.delta)
    W = topo_mod.WEIGHTINGS["metropolis-hastings"](graph)  # noqa: N806
    dim = 1 + datasets.load(config.dataset, seed=0).x_train.shape[1]  # logistic: f + bias
    out: dict[str, dict[str, Any]] = {}
    for mech in mechanisms:
        started = time.perf_counter()
        predicted, kind = None, ""
        if mech == "dsgd":
            p = plan_mod.make_plan("dsgd", graph, **common)
        elif mech == "dp-dsgd":
            p = plan_mod.make_plan("dp-dsgd", graph, **common, **private)
            predicted, kind = 1.0, "reference"
        elif mech == "mafalda":
            planned = factorization.plan_factor("mafalda", W, steps=steps, participation=part)
            p = plan_mod.make_plan("mafalda", graph, factor=planned.factor, **common, **private)
            predicted = factorization.relative_loss(
                p.factor.strategy(steps), p.mixing_matrix(), participation=part
            )
            kind = "noise in the gossip average (factorization loss)"
        elif mech == "whisper":
            p = cross_agent.plan_cross_agent("whisper", graph, **common, **private).plan
            rep = cross_agent.report(p, delta=config.delta)
            predicted = rep["post_mixing_variance"] / rep["ldp_post_mixing_variance"]
            kind = "post-mixing noise variance"
        elif mech == "dome":
            sketch = SketchSpec(dim=config.sketch_dim)
            p = plan_mod.make_plan("dome", graph, sketch=sketch, **common, **private)
            predicted = dome_acc.noise_energy(p, model_dim=dim)["ratio"]
            kind = "noise energy per step (k of d floats)"
        else:
            raise ValueError(f"The demo has no mechanism {mech!r}.")
        if shared is None:  # the planner's default (edgedp.planning.build)
            local = datasets.local_size(config.dataset, graph.n)
            p = step_rule.apply(p, dim=dim, local_size=local, dropout=dropout)
        out[mech] = {
            "plan": p,
            "predicted": predicted,
            "predicted_kind": kind,
            "planner_seconds": time.perf_counter() - started,
        }
    return out


def describe(p: plan_mod.NoisePlan, delta: float | None = None) -> dict[str, Any]:
    """Certified guarantee and trust model of a plan (its accountant's numbers only): ε at
    ``delta`` (default the plan's) against the plan's own attacker (``attacker``) and
    against each of :data:`ATTACKER_CLASSES` (``epsilon_by_attacker``)."""
    from edgedp import mechanisms

    delta = p.delta if delta is None else delta
    mech = mechanisms.get(p.mechanism)
    out: dict[str, Any] = {
        "mechanism": p.mechanism,
        "plan_hash": p.plan_hash,
        "trust_model": mech.trust_model,
        "attacker": mech.attacker,
        "adjacency": p.adjacency,
        "participation": [p.participation.k, p.participation.b],
        "noise_multiplier": p.noise_multiplier,
        "noise_std": p.noise_std,
        "delta": delta,
        "learning_rate": p.learning_rate,
        "step_size": step_size.line(p.learning_rate, p.step_size, private=p.private),
    }
    classes = [c for c, _, _ in ATTACKER_CLASSES]
    if not p.private:
        out.update(mu=math.inf, epsilon=math.inf)
        out["epsilon_by_attacker"] = dict.fromkeys(classes, math.inf)
        return out
    g = p.guarantee()
    eps = g.epsilon(delta)
    out.update(mu=g.mu, epsilon=eps, sensitivity_exact=bool(g.exact))
    by = dict.fromkeys(classes, eps)  # node-private noise: every attacker (LDP)
    if p.cross_agent is not None and mechanisms.get(p.cross_agent.kind).has("correlated"):
        from edgedp.families.cross import accounting as cross_acc

        by = cross_acc.trust_report(p, delta=delta)
    out["epsilon_by_attacker"] = {c: by[c] for c in classes}
    return out


# ------------------------------------------------------------------ the whole demo
def attackers(topology: str) -> list[str]:
    import edgedp_topologies

    pair = sorted(edgedp_topologies.parse(topology).neighbours(VICTIM))[:2]
    return [f"hbc:{pair[0]},{pair[1]}", "eavesdropper:all", "eavesdropper:all:encrypted"]
