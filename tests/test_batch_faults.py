"""Faults in the batch engine: keyed masks drawn as the event engine draws them, and the
batch engine under faults equal, bit for bit, to real Agents driven round by round."""

import copy
import math

import numpy as np
import pytest

import topologies
from edgedp import algorithms, factors, models, streams, topology
from edgedp.accounting import laplace
from edgedp.accounting.laplace import LaplaceSchedule
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.plan import TaskSpec, make_plan
from edgedp.planning import cross_agent, factorization
from edgedp.sketch import SketchSpec
from sim import batch, datasets, engine, round_faults
from sim.churn import Crash, Faults, crash_round, crash_rounds
from sim.links import LinkDraws, Network

GRAPH = topologies.parse("er:8:0.5:1")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=2), 8, seed=2)
TASK = TaskSpec(dataset="synthetic-logistic")
STEPS = 10
PART = Participation(STEPS, 1)
COMMON = dict(steps=STEPS, participation=PART, clip_norm=1.0, learning_rate=0.3, seed=3, task=TASK)


def _plan(mechanism):
    """A small plan of ``mechanism`` (every entry of the planner's mechanism list)."""
    if mechanism == "dense":  # a dense lower-triangular C⁻¹ (prefix sums)
        factor = factors.Dense(np.tril(np.ones((STEPS, STEPS))))
        return make_plan("dense", GRAPH, noise_multiplier=1.0, factor=factor, **COMMON)
    if mechanism in ("banded", "blt", "dmf", "mafalda"):
        opts = {"banded": {"bandwidth": 3}, "blt": {"buffers": 2}}.get(mechanism, {})
        W = topology.metropolis_hastings(GRAPH)  # noqa: N806 (docs/NOTATION.md)
        planned = factorization.plan_factor(mechanism, W, steps=STEPS, participation=PART, **opts)
        return make_plan(mechanism, GRAPH, noise_multiplier=1.0, factor=planned.factor, **COMMON)
    if mechanism in ("whisper", "decor", "zipdl", "muffliato"):
        return cross_agent.make_plan(mechanism, GRAPH, noise_multiplier=1.0, **COMMON).plan
    if mechanism == "dome":
        return make_plan("dome", GRAPH, noise_multiplier=1.0, sketch=SketchSpec(dim=4), **COMMON)
    if mechanism in ("sr-gt", "dpop"):
        d = models.for_task(TASK, DATA.features).dim
        need = laplace.example_delta(clip_norm=1.0, dim=d, batch_size=DATA.local_size)
        sched = LaplaceSchedule(
            q1=0.9, q2=0.95, delta_grad=need, epsilon=5.0, gamma=0.3,
            beta=3.0 if mechanism == "sr-gt" else 0.0,
        )  # fmt: skip
        return make_plan(mechanism, GRAPH, steps=STEPS, clip_norm=1.0, laplace=sched, task=TASK)
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": 1.0}
    return make_plan(mechanism, GRAPH, **noise, **COMMON)


def _agents_round_by_round(plan, data, faults, network, seed):
    """Real Agents, one round at a time: a message is delivered (as wire frames) iff the
    masks say so; a node sitting out calls ``skip_round``; a crash snapshots the node at the
    start of its crash round, and the restart builds a new Agent, restores the snapshot and
    skips the rounds it missed. Returns the final models (n, d)."""
    rf = round_faults.RoundFaults(plan, faults, network, seed)
    keys = streams.RunKeys.simulation(plan)
    model = models.for_task(plan.task, data.features)

    def new(u):
        return Agent(
            plan.share(u), model=model, x=data.x[u], y=data.y[u],
            dropout_rule=faults.dropout_rule, memoize_noise=plan.factor.kind == "dense",
            **keys.agent(u, plan.share(u).neighbours),
        )  # fmt: skip

    agents = [new(u) for u in range(plan.n)]
    crash = rf.crash
    starts = {} if crash is None else {(u, k): back for u, k, back in crash.restarts}
    down_from = {}
    if crash is not None:
        for u in range(plan.n):
            rounds = np.flatnonzero(crash.down[u])
            for k in rounds[np.r_[True, np.diff(rounds) > 1]] if rounds.size else ():
                down_from[(u, int(k))] = True
    snaps, restart_at = {}, {}
    slot = {(int(u), int(rf.index[u, j])): j for u in range(plan.n) for j in range(rf.shape[1])}
    for r in range(plan.steps):
        for u in range(plan.n):
            if (u, r) in down_from:  # the crash: the checkpoint of round r survives
                snaps[u] = copy.deepcopy(agents[u].snapshot())
                if (u, r) in starts:
                    restart_at[starts[(u, r)]] = [*restart_at.get(starts[(u, r)], []), (u, r)]
            for v, k in restart_at.get(r, []) if u == 0 else ():
                agents[v] = new(v)
                agents[v].restore(snaps[v])
                for _ in range(k, r):
                    agents[v].skip_round()
        act, lost = rf.active(r), rf.lost(r)
        outs = {u: agents[u].begin_round() for u in range(plan.n) if act[u]}
        for u in range(plan.n):
            if not act[u] and not rf.crash_down(u, r):
                agents[u].skip_round()
        for u, out in outs.items():
            for v in out.recipients:
                if act[v] and not lost[v, slot[(v, u)]]:
                    frames = [bytes(f) for f in out.frames_for(v)]
                    assert agents[v].receive(frames, authenticated_sender=u)
        for u in outs:
            agents[u].end_round()
    for u in range(plan.n):  # a node that left for good: its model at the departure
        if rf.crash_down(u, plan.steps - 1) and (u, plan.steps) not in restart_at:
            for _ in range(agents[u].round, plan.steps):
                agents[u].skip_round()
    return np.stack([a.theta for a in agents])


FAULTS = Faults(dropout=0.15, crashes=(Crash(2, 0.3, 0.5), Crash(5, 0.55)))
NET = Network(loss=0.1, compute_s=0.125)


@pytest.mark.parametrize("mechanism", sorted(algorithms.BY_MECHANISM))
@pytest.mark.parametrize("rule", ["renormalize", "reuse-last", "self"])
def test_batch_under_faults_equals_agents_round_by_round(mechanism, rule):
    p = _plan(mechanism)
    f = Faults(dropout=FAULTS.dropout, dropout_rule=rule, crashes=FAULTS.crashes)
    if rule == "reuse-last" and p.sketch is not None and p.sketch.refresh:
        with pytest.raises(ValueError, match="another sketch basis"):
            batch.run(p, DATA, faults=f, network=NET, seed=7)
        return
    b = batch.run(p, DATA, faults=f, network=NET, seed=7)
    want = _agents_round_by_round(p, DATA, f, NET, seed=7)
    assert b.digests[0] == models.model_digest(want)
    assert b.lost_messages > 0 and b.missing > 0 and b.crashes == 2
    assert b.digests[0] != batch.run(p, DATA).digests[0]  # the faults changed the run


def test_masks_are_the_event_engines_draws():
    p = _plan("dp-dsgd")
    net = Network(loss=0.2, compute_s=0.125)
    rf = round_faults.RoundFaults(p, Faults(dropout=0.3), net, seed=4)
    sim = engine._Sim(p, DATA, net, Faults(dropout=0.3), 4, 5, None)
    np.testing.assert_array_equal(rf.inactive, sim.dropped)
    links = [(u, v) for u in range(p.n) for v in sim.agents[u].neighbours]
    draws = LinkDraws(net, links, p.steps, round_faults.network_secret(4))
    for (u, v), lost in draws.lost.items():
        j = int(np.flatnonzero(rf.index[v] == u)[0])
        assert [bool(rf.lost(r)[v, j]) for r in range(p.steps)] == list(lost)
    assert any(draws.lost.values().__iter__().__next__()) or sum(map(sum, draws.lost.values()))


def test_crash_round_and_restart_rule():
    # zero-latency clock: round r computes over (r·c, (r+1)·c]
    assert [crash_round(t, 0.25) for t in (0.0, 0.25, 0.26, 0.5, 2.0)] == [0, 0, 1, 1, 7]
    cr = crash_rounds([Crash(1, 0.3, 0.5), Crash(0, 0.6)], 0.25, n=3, rounds=6)
    assert cr.down[1].tolist() == [False, True, True, False, False, False]  # rounds 1, 2
    assert cr.down[0].tolist() == [False, False, True, True, True, True]  # leaves in round 2
    assert cr.restarts == ((1, 1, 3),) and cr.count == 2
    with pytest.raises(ValueError, match="compute_s > 0"):
        crash_round(1.0, 0.0)


def test_nodes_sitting_out_keep_state_and_noise_alignment():
    p = _plan("antipgd")
    b = batch.run(p, DATA, faults=Faults(dropout=0.5), seed=1, trials=2)
    assert b.skipped_rounds > 0 and np.all(np.isfinite(b.models))
    assert b.digests[0] != b.digests[1]  # trials keep their own noise under the same masks


def test_adaptive_dome_refuses_faults():
    p = make_plan(
        "dome",
        GRAPH,
        noise_multiplier=1.0,
        sketch=SketchSpec(dim=4, basis="adaptive", lag=6),
        **COMMON,
    )
    with pytest.raises(ValueError, match="adaptive dome basis"):
        batch.run(p, DATA, faults=Faults(dropout=0.1))


def test_ideal_run_unchanged_by_the_fault_path():
    p = _plan("dp-dsgd")
    assert (
        batch.run(p, DATA, faults=Faults(), network=Network()).digests == batch.run(p, DATA).digests
    )
    assert math.isfinite(batch.run(p, DATA, faults=Faults(dropout=0.2)).models.sum())
