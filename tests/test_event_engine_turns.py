"""Uplink turns planned ahead (edgedp_sim.clock.Turns) give the results of uplink slot events.

With continuous latencies the event engine plans each uplink's turns when a job arrives and
schedules every message's delivery at once (one heap event per message); the reference is
the same engine with every uplink slot an event (``plan_uplinks=False``, the order pinned
by tests/test_event_engine_ties.py and tests/test_event_engine_lean.py). Both must give
the same models, counters, simulated times and evaluations.
"""

from dataclasses import dataclass

import numpy as np
import pytest
from test_event_engine_ties import _summary

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import datasets, engine
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.clock import Clock, TieError, Turns, Uplink
from edgedp_sim.links import Latency, Network


@dataclass(frozen=True)
class Scenario:
    mechanism: str
    spec: str
    steps: int
    network: Network
    faults: Faults
    seed: int


def _scenario(seed: int) -> Scenario:
    """A small random scenario: continuous latencies, slow uplinks (rounds in flight share
    them), loss, dropouts, crashes or churn, sometimes a compute time."""
    gen = np.random.default_rng(seed)
    n = int(gen.integers(6, 12))
    if seed % 2:
        latency = {"kind": "lognormal", "median_ms": float(gen.uniform(2, 40)), "sigma": 0.8}
    else:
        latency = {"kind": "uniform", "low_ms": 1.0, "high_ms": float(gen.uniform(5, 60))}
    network = Network(
        latency=Latency.from_dict(latency),
        bandwidth_mbps=float(gen.choice([0.3, 1.0, 5.0, 50.0])),
        loss=float(gen.choice([0.0, 0.05])),
        round_timeout_s=float(gen.uniform(0.05, 0.3)),
        startup_timeout_s=0.5,
        compute_s=float(gen.choice([0.0, 0.0, 0.013])),
    )
    crashes = tuple(
        Crash(int(gen.integers(n)), float(gen.uniform(0, 1)), float(gen.choice([0.2, np.inf])))
        for _ in range(int(gen.integers(0, 3)))
    )
    faults = Faults(
        dropout=float(gen.choice([0.0, 0.1, 0.2])),
        dropout_rule=str(gen.choice(["renormalize", "reuse-last", "self"])),
        crashes=crashes,
        churn_rate_per_s=float(gen.choice([0.0, 0.3])),
        churn_down_s=0.4,
        churn_horizon_s=2.0,
    )
    mechanism = str(gen.choice(["dp-dsgd", "antipgd"]))
    return Scenario(mechanism, f"er:{n}:0.5:{seed}", 12, network, faults, seed)


def _run(sc: Scenario, **kw):
    plan = make_plan(
        sc.mechanism,
        edgedp_topologies.parse(sc.spec),
        steps=sc.steps,
        participation=Participation(sc.steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=3,
        noise_multiplier=1.0,
        task=TaskSpec(dataset="synthetic-logistic"),
    )
    data = datasets.partition(datasets.load("synthetic-logistic", seed=2), plan.n, seed=2)
    return engine.run(
        plan, data, network=sc.network, faults=sc.faults, seed=sc.seed, eval_every=4, **kw
    )


@pytest.mark.parametrize("seed", range(12))
def test_planned_turns_equal_uplink_events(seed):
    sc = _scenario(seed)
    planned, events = _run(sc), _run(sc, plan_uplinks=False)
    assert planned.planned_uplinks and not events.planned_uplinks
    assert _summary(planned) == _summary(events)
    assert planned.round_seconds == events.round_seconds
    assert planned.events < events.events
    # one heap event per message; deadlines, compute steps and crashes come on top
    n = edgedp_topologies.parse(sc.spec).n
    assert planned.events <= planned.messages + 3 * n * sc.steps


def test_ties_fall_back_to_uplink_events():
    # constant latency: every node's messages of a round land together -> the event model
    sc = _scenario(1)
    sc = Scenario(
        sc.mechanism,
        sc.spec,
        sc.steps,
        Network(latency=Latency.from_dict({"kind": "constant", "ms": 10}), bandwidth_mbps=1.0),
        sc.faults,
        sc.seed,
    )
    assert not _run(sc).planned_uplinks


def _turns_slots(jobs):
    """Plan ``jobs`` = [(arrival, [durations])] on one Turns; the slots that stay planned."""
    clock, planned = Clock(unique_times=True), {}

    def emit(j, i, end):
        planned[(j, i)] = end
        return (j, i)

    turns = Turns(
        clock,
        length=lambda j: len(jobs[j][1]),
        delay=lambda j, i: jobs[j][1][i],
        emit=emit,
        cancel=lambda key: planned.pop(key),
    )
    for j, (arrival, _) in enumerate(jobs):
        clock.at(arrival, turns.request, j)
    clock.drain()
    return sorted((end, j, i) for (j, i), end in planned.items())


def _uplink_slots(jobs):
    clock, uplink, ends = Clock(), None, []
    uplink = Uplink(clock)

    def ask(j, i):
        if i < len(jobs[j][1]):
            uplink.request(hold, j, i)

    def hold(j, i):
        clock.at(clock.now + jobs[j][1][i], done, j, i)

    def done(j, i):
        ends.append((clock.now, j, i))
        uplink.release()
        ask(j, i + 1)

    for j, (arrival, _) in enumerate(jobs):
        clock.at(arrival, ask, j, 0)
    clock.drain()
    return sorted(ends)


@pytest.mark.parametrize("seed", range(20))
def test_turns_equal_uplink_on_continuous_times(seed):
    # jobs arriving while others send: the planned turns are the Resource's turns
    gen = np.random.default_rng(seed)
    jobs = [
        (float(gen.uniform(0, 3)), [float(x) for x in gen.uniform(0.1, 1.0, gen.integers(1, 5))])
        for _ in range(gen.integers(2, 8))
    ]
    assert _turns_slots(jobs) == _uplink_slots(jobs)


def test_turns_refuse_a_job_arriving_as_a_slot_ends():
    # hand-derived: job 0's slot ends at 1.0, exactly when job 1 arrives
    with pytest.raises(TieError):
        _turns_slots([(0.0, [1.0, 1.0]), (1.0, [0.5])])


def test_unique_times_clash():
    clock = Clock(unique_times=True)
    clock.at(1.0, print)
    clock.at(1.0, print)  # deadlines etc. may share an instant
    clock.at_unique(2.0, print)
    with pytest.raises(TieError):
        clock.at_unique(2.0, print)
    with pytest.raises(TieError):
        clock.at_unique(1.0, print)
    with pytest.raises(TieError):
        clock.mark(2.0)
    clock.unmark(2.0)  # a cancelled delivery frees its time
    clock.at_unique(2.0, print)
