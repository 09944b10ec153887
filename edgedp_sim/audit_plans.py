"""Plans of every mechanism for one small audit setting (tests, benchmarks, the audit table).

:func:`build` makes a certified plan of ``mechanism`` on ``graph`` for a task with full
local batches (every example in every round: participation (T, 1)), calibrated to
``epsilon`` at ``delta`` — Gaussian mechanisms through their own accountant (μ-GDP against
the eavesdropper on every link), the Laplace mechanisms (sr-gt, DPOP) to the pure ε of
their schedule with the zero-out δ = Δ√d/B of the task (paper 004 Eq. 5 without q₂,
:mod:`edgedp.families.laplace.accounting`). Planned temporal factors (dmf, mafalda, banded, blt)
come from :func:`edgedp.families.mf.factorization.plan_factor` for the graph's MH weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgedp import mechanisms, models, topology
from edgedp.accounting import gdp
from edgedp.accounting.participation import Participation
from edgedp.families.laplace import accounting as laplace_acc
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_sim import datasets

__all__ = ["FAMILY_ORDER", "MECHANISMS", "Setting", "build", "noisy_mechanisms"]

#: The audit table's order of the planner families (:func:`edgedp.mechanisms.families`).
FAMILY_ORDER = ("sgd", "mf", "cross", "dome", "laplace")


def noisy_mechanisms() -> tuple[str, ...]:
    """Every command-line mechanism with noise, from the registry, by family then
    registration order."""
    names = mechanisms.names(command_line=True)
    noisy = [m for m in names if mechanisms.get(m).noisy]
    return tuple(
        sorted(noisy, key=lambda m: (FAMILY_ORDER.index(mechanisms.get(m).family), names.index(m)))
    )


#: Every mechanism with noise, in the order of the audit table.
MECHANISMS = noisy_mechanisms()


@dataclass(frozen=True, slots=True)
class Setting:
    """The audit setting: graph, horizon, task and privacy target (see :func:`build`)."""

    topology: str = "ring:8"
    steps: int = 20
    dataset: str = "synthetic-logistic:1:80"
    model: str = "logistic"
    epsilon: float = 4.0
    delta: float = 1e-5
    clip_norm: float = 1.0
    learning_rate: float = 0.2
    sketch_dim: int = 2
    gossip_rounds: int = 2
    bandwidth: int = 4  # banded factors: diagonals
    buffers: int = 2  # BLT factors: buffers
    laplace: tuple[float, float, float, float] = (0.2, 1.0, 0.8, 0.9)  # γ, β, q₁, q₂
    seed: int = 0


def build(mechanism: str, setting: Setting = Setting()) -> NoisePlan:
    """A certified plan of ``mechanism`` in ``setting`` (module docstring)."""
    import edgedp_topologies

    graph = edgedp_topologies.parse(setting.topology)
    task = TaskSpec(model=setting.model, dataset=setting.dataset, batch_size=0)
    T = setting.steps  # noqa: N806
    part = Participation(T, 1)
    common = dict(
        steps=T,
        clip_norm=setting.clip_norm,
        learning_rate=setting.learning_rate,
        task=task,
        seed=setting.seed,
        topology_name=setting.topology,
    )
    mech = mechanisms.get(mechanism)
    if mech.family == "laplace":
        data = datasets.partition(
            datasets.load(setting.dataset, seed=setting.seed), graph.n, seed=setting.seed
        )
        dim = models.for_task(task, data.features).dim
        gamma, beta, q1, q2 = setting.laplace
        sched = laplace_acc.LaplaceSchedule(
            gamma=gamma,
            beta=beta if mech.has("tracking") else 0.0,
            q1=q1,
            q2=q2,
            delta_grad=laplace_acc.example_delta(
                clip_norm=setting.clip_norm, dim=dim, batch_size=data.local_size
            ),
            epsilon=setting.epsilon,
        )
        common.pop("learning_rate")
        return make_plan(mechanism, graph, laplace=sched, **common)
    noise = dict(target_epsilon=setting.epsilon, delta=setting.delta)
    if mech.family == "cross":
        from edgedp.families.cross import planning as cross_agent

        steps = T * setting.gossip_rounds if mech.has("gossip_rounds") else T
        common["steps"] = steps
        extra = {"gossip_rounds": setting.gossip_rounds} if mech.has("gossip_rounds") else {}
        return cross_agent.plan_cross_agent(
            mechanism, graph, participation=Participation(steps, 1), **common, **noise, **extra
        ).plan
    factor = None
    if mech.has("planned"):
        from edgedp.families.mf import factorization

        W = topology.metropolis_hastings(graph)  # noqa: N806
        sizes = {option: getattr(setting, option) for option in mech.traits.factor_options}
        factor = factorization.plan_factor(
            mechanism, W, steps=T, participation=part, **sizes
        ).factor
    sketch = None
    if mech.family == "dome":
        from edgedp.families.dome.sketch import SketchSpec

        sketch = SketchSpec(dim=setting.sketch_dim, refresh=1)
    noise_kw = dict(noise)
    if mech.family == "dome":  # DOME certifies like DP-D-SGD: calibrate σ directly
        noise_kw = {"noise_multiplier": 1.0 / gdp.mu(setting.epsilon, delta=setting.delta)}
    return make_plan(
        mechanism, graph, participation=part, factor=factor, sketch=sketch, **common, **noise_kw
    )
