"""The plan's bound on honest messages: never below an honest run, closed forms, stated bounds.

A receiver rejects a message with an entry beyond the bound (:mod:`edgedp.bounds`), so the
bound must hold for every honest message of every mechanism: each case runs every node
in-process and checks every message against the bound its receivers use.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import edgedp_topologies
from edgedp import bounds, factors, models, wire
from edgedp.accounting.participation import Participation
from edgedp.errors import NonFiniteStateError, PlanError
from edgedp.families.cross import planning as planner
from edgedp.families.dome.sketch import SketchSpec
from edgedp.families.laplace import accounting as laplace
from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_sim import datasets, sensor_fusion

GRAPH = edgedp_topologies.parse("er:6:0.6:1")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 6, seed=3)
TASK = TaskSpec(dataset="synthetic-logistic")
STEPS = 8


def _gaussian(mechanism, **kw):
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": kw.pop("sigma", 1.0)}
    return make_plan(
        mechanism,
        GRAPH,
        steps=STEPS,
        participation=kw.pop("participation", Participation(STEPS, 1)),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=9,
        task=kw.pop("task", TASK),
        **noise,
        **kw,
    )


def _cross(mechanism, **kw):
    return planner.plan_cross_agent(
        mechanism,
        GRAPH,
        steps=STEPS,
        participation=Participation(STEPS, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        seed=9,
        task=TASK,
        **kw,
    ).plan


def _laplace(mechanism):
    d = models.for_task(TASK, DATA.features).dim
    need = laplace.example_delta(clip_norm=1.0, dim=d, batch_size=DATA.local_size)
    beta = 3.0 if mechanism == "sr-gt" else 0.0
    sched = LaplaceSchedule(gamma=0.3, beta=beta, q1=0.9, q2=0.95, delta_grad=need, epsilon=5.0)
    return make_plan(mechanism, GRAPH, steps=STEPS, clip_norm=1.0, laplace=sched, task=TASK)


def _banded():
    C = np.tril(np.ones((STEPS, STEPS))) - np.tril(np.ones((STEPS, STEPS)), k=-3) + np.eye(STEPS)
    return factors.Banded.from_matrix(C, 3)


@dataclass(frozen=True)
class Case:
    name: str
    plan: Callable[[], NoisePlan]


CASES = [
    Case("dsgd", lambda: _gaussian("dsgd")),
    Case("dp-dsgd", lambda: _gaussian("dp-dsgd")),
    Case(
        "dp-dsgd-batch",
        lambda: _gaussian(
            "dp-dsgd",
            task=TaskSpec(dataset=TASK.dataset, batch_size=DATA.local_size // 4),
            participation=Participation(STEPS // 4, 4),
        ),
    ),
    Case("antipgd", lambda: _gaussian("antipgd")),
    Case("banded", lambda: _gaussian("banded", factor=_banded())),
    Case("blt", lambda: _gaussian("blt", factor=factors.BLT((0.9, 0.5), (0.3, 0.2)))),
    Case("dense", lambda: _gaussian("dense", factor=factors.Dense(np.tril(np.ones((8, 8)))))),
    Case("whisper", lambda: _cross("whisper")),
    Case("decor", lambda: _cross("decor")),
    Case("zipdl", lambda: _cross("zipdl", message_variance=2.0)),
    Case("muffliato", lambda: _cross("muffliato", gossip_rounds=2)),
    Case("sr-gt", lambda: _laplace("sr-gt")),
    Case("dpop", lambda: _laplace("dpop")),
    Case("dome-sgd", lambda: _gaussian("dome", sketch=SketchSpec(dim=4))),
    Case("dome-adam", lambda: _gaussian("dome", sketch=SketchSpec(dim=4, optimizer="adam"))),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_honest_messages_stay_within_the_bound(case, make_agents):
    p = case.plan()
    agents = make_agents(p, DATA)
    bound = agents[0].bounds[0]
    assert all(a.bounds == agents[0].bounds for a in agents)  # one bound per plan
    assert 0 < bound < math.inf
    largest = 0.0
    for _ in range(p.steps):
        outs = [a.begin_round() for a in agents]
        for out, a in zip(outs, agents, strict=True):
            for v in out.recipients:
                frames = [bytes(f) for f in out.frames_for(v)]
                largest = max(largest, float(np.abs(wire.decode(frames).arrays[0]).max()))
                assert agents[v].receive(frames, authenticated_sender=a.node)
        for a in agents:
            a.end_round()
    assert largest <= bound
    assert sum(sum(a.metrics.rejected.values()) for a in agents) == 0


def test_closed_forms_of_the_d_sgd_bound():
    # dsgd, θ₀ = 0: no noise, so M_T = η T Δ exactly (times the 1e-9 rounding margin)
    p = _gaussian("dsgd")
    dim = models.for_task(TASK, DATA.features).dim
    theta0 = np.zeros(dim)
    algo = __import__("edgedp.families", fromlist=["dsgd"]).dsgd.RULES
    (b,) = algo.message_bound(p.share(0), dim=dim, theta0=theta0)
    assert b == pytest.approx(0.3 * STEPS * 1.0, rel=2e-9)
    # dp-dsgd, whole local datasets (B ≥ 1): η(TΔ + z T ν), z = √(2 ln(2/p)), p = 1e-12/(n T d)
    p = _gaussian("dp-dsgd")
    (b,) = algo.message_bound(p.share(0), dim=dim, theta0=theta0)
    z = math.sqrt(2 * math.log(2 / (1e-12 / (p.n * STEPS * dim))))
    assert b == pytest.approx(0.3 * (STEPS + z * STEPS * p.noise_std), rel=2e-9)
    # antipgd: ‖C⁻¹[t, :]‖ = √2 after the first step
    p = _gaussian("antipgd")
    (b,) = algo.message_bound(p.share(0), dim=dim, theta0=theta0)
    z = math.sqrt(2 * math.log(2 / (1e-12 / (p.n * STEPS * dim))))
    noise = p.noise_std * (1 + math.sqrt(2) * (STEPS - 1))
    assert b == pytest.approx(0.3 * (STEPS + z * noise), rel=2e-9)


def test_a_stated_bound_is_hashed_only_when_present_and_replaces_the_derived_one(make_agents):
    p = _gaussian("dp-dsgd")
    assert "message_bound" not in p.to_dict()
    stated = _gaussian("dp-dsgd", message_bound=2.5)
    assert stated.plan_hash != p.plan_hash
    back = NoisePlan.from_bytes(stated.to_bytes())
    assert back.message_bound == 2.5 and back.plan_hash == stated.plan_hash
    a = make_agents(back, DATA)[0]
    assert a.bounds == (2.5,)
    with pytest.raises(PlanError, match="message_bound"):
        _gaussian("dp-dsgd", message_bound=math.inf)


def test_unclipped_laplace_plans_derive_no_bound_unless_they_state_one(make_agents):
    sched = LaplaceSchedule(
        gamma=0.001, beta=0.0, q1=0.97, q2=0.99, delta_grad=1.0, epsilon=1.0, adjacency="problem"
    )
    p = make_plan("dpop", GRAPH, steps=4, clip_norm=math.inf, laplace=sched, task=TASK)
    assert make_agents(p, DATA)[0].bounds == (math.inf,)


def test_gaussian_tail_is_a_valid_bound():
    # closed form: P(|Z| > z) = erfc(z/√2); the Chernoff z must leave at most p
    for p in (1e-3, 1e-12, 1e-30):
        z = bounds.gaussian_tail(p)
        assert math.erfc(z / math.sqrt(2)) <= p


def test_a_diverging_mix_is_never_adopted(make_agents):
    # unclipped dpop on least squares with a huge stepsize: the gradient step overflows in
    # round 1. The agent raises before changing anything and never holds a non-finite state.
    sched = LaplaceSchedule(
        gamma=1e300, beta=0.0, q1=0.97, q2=0.99, delta_grad=1e-300, epsilon=1.0, adjacency="problem"
    )
    task = TaskSpec(model="least-squares", dataset="sensor-fusion", partition="per-node")
    p = make_plan("dpop", GRAPH, steps=8, clip_norm=math.inf, laplace=sched, task=task)
    agents = make_agents(p, sensor_fusion.generate(6, seed=4).federated())
    stopped = None
    for r in range(p.steps):
        outs = [a.begin_round() for a in agents]
        for out, a in zip(outs, agents, strict=True):
            for v in out.recipients:
                frames = [bytes(f) for f in out.frames_for(v)]
                agents[v].receive(frames, authenticated_sender=a.node)
        for a in agents:
            before = {k: v.copy() for k, v in a.state.items()}
            try:
                a.end_round()
            except NonFiniteStateError:
                stopped = (a.node, r)
                assert a.round == r and a.message is not None  # still inside the round
                assert all(np.array_equal(a.state[k], before[k]) for k in before)
                assert a.metrics.rejected["NonFiniteStateError"] == 1
        if stopped:
            break
        assert all(np.all(np.isfinite(a.theta)) for a in agents)
    assert stopped is not None


@pytest.mark.parametrize("spec", ["er:60:0.15:1", "smallworld:40:4:0.3:2", "star:12", "ring:9"])
@pytest.mark.parametrize("weighting", ["metropolis-hastings", "uniform-neighbour"])
def test_column_sum_is_the_dense_matrix_s_without_building_it(spec, weighting):
    graph = edgedp_topologies.parse(spec)
    plan = make_plan(
        "dp-dsgd",
        graph,
        steps=3,
        participation=Participation(3, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
        weighting=weighting,
    )
    dense = float(np.max(plan.mixing_matrix().sum(axis=0)))  # W built from the table
    assert bounds.network_facts(plan).column_sum == dense
