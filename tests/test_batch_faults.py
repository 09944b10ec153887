"""Faults in the batch engine: keyed masks drawn as the event engine draws them, and the
batch engine under faults equal, bit for bit, to real Agents driven round by round."""

import copy
import math
import subprocess
import sys
import tomllib
from dataclasses import replace

import numpy as np
import pytest

import edgedp_topologies
from edgedp import factors, families, models, streams, topology
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.families.cross import planning as cross_agent
from edgedp.families.dome.sketch import SketchSpec
from edgedp.families.laplace import accounting as laplace
from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp.families.mf import factorization
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine, engine_choice, round_faults, runner, scenarios
from edgedp_sim.churn import Crash, Faults, crash_round, crash_rounds
from edgedp_sim.links import Latency, LinkDraws, Network

GRAPH = edgedp_topologies.parse("er:8:0.5:1")
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
        return cross_agent.plan_cross_agent(mechanism, GRAPH, noise_multiplier=1.0, **COMMON).plan
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
    back = {} if rf.crash is None else {(u, k): end for u, k, end in rf.crash.restarts}
    returns = {}  # round -> [(node, checkpoint, crash round)]
    slot = {(int(u), int(rf.index[u, j])): j for u in range(plan.n) for j in range(rf.shape[1])}
    for r in range(plan.steps):
        for v, snap, k in returns.pop(r, []):  # back from a downtime: restore, skip k … r − 1
            agents[v] = new(v)
            agents[v].restore(snap)
            for _ in range(k, r):
                agents[v].skip_round()
        for u in range(plan.n):
            if rf.crash_down(u, r) and not (r and rf.crash_down(u, r - 1)):  # goes down
                snap = copy.deepcopy(agents[u].snapshot())
                if back.get((u, r), r) > r:
                    returns.setdefault(back[(u, r)], []).append((u, snap, r))
        act, lost, deaf = rf.active(r), rf.lost(r), rf.deaf[:, r]
        for u in np.flatnonzero(deaf):  # restarted inside round r: checkpoint, empty inbox
            snap = copy.deepcopy(agents[u].snapshot())
            agents[u] = new(u)
            agents[u].restore(snap)
        outs = {u: agents[u].begin_round() for u in range(plan.n) if act[u]}
        for u in range(plan.n):
            if not act[u] and not rf.crash_down(u, r):
                agents[u].skip_round()
        for u, out in outs.items():
            for v in out.recipients:
                if act[v] and not deaf[v] and not lost[v, slot[(v, u)]]:
                    frames = [bytes(f) for f in out.frames_for(v)]
                    assert agents[v].receive(frames, authenticated_sender=u)
        for u in outs:
            agents[u].end_round()
    return np.stack([a.theta for a in agents])


# rounds compute for c = 0.125 s; deadline 0.25 s: node 6 restarts in time to redo round 0
# (its inbox lost), node 1 within round 4's computation (no change), node 2 misses rounds
# 2-5 and resumes at 6, node 5 leaves in round 4 (edgedp_sim.churn.crash_rounds)
FAULTS = Faults(
    dropout=0.15,
    crashes=(Crash(2, 0.3, 0.5), Crash(5, 0.55), Crash(6, 0.1, 0.2), Crash(1, 0.6, 0.01)),
)
NET = Network(loss=0.1, compute_s=0.125, round_timeout_s=0.25)


# every mechanism with the default rule; the other rules on one member of each family
CASES = [(m, "renormalize") for m in sorted(families.BY_MECHANISM)] + [
    (m, rule)
    for m in ("dp-dsgd", "mafalda", "zipdl", "dome", "sr-gt")
    for rule in ("reuse-last", "self")
]


@pytest.mark.parametrize("mechanism, rule", CASES)
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
    assert b.lost_messages > 0 and b.missing > 0 and b.crashes == 4
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
    assert sum(int(lost.sum()) for lost in draws.lost.values()) > 0


def test_crash_round_and_restart_rule():
    # zero-latency clock: round r computes over (r·c, (r+1)·c]
    assert [crash_round(t, 0.25) for t in (0.0, 0.25, 0.26, 0.5, 2.0)] == [0, 0, 1, 1, 7]
    crashes = [Crash(1, 0.3, 0.5), Crash(0, 0.6), Crash(2, 0.3, 0.1), Crash(2, 0.8, 0.3)]
    cr = crash_rounds(crashes, 0.25, n=3, rounds=6, round_timeout_s=0.25)
    assert cr.down[1].tolist() == [False, True, True, False, False, False]  # rounds 1, 2
    assert cr.down[0].tolist() == [False, False, True, True, True, True]  # leaves in round 2
    # node 2: back at 0.4 <= 0.5 (round 1 not yet sent): nothing; back at 1.1, its redone
    # round-3 message (sent at 1.35) misses the deadline 1.0 + 0.25: down in round 3
    assert not cr.deaf[2].any() and cr.down[2].tolist() == [False] * 3 + [True] + [False] * 2
    assert cr.count == 4 and (1, 1, 3) in cr.restarts
    deaf = crash_rounds([Crash(2, 0.8, 0.3)], 0.25, n=3, rounds=6, round_timeout_s=0.5)
    assert deaf.deaf[2].tolist() == [False] * 3 + [True] + [False] * 2  # 1.35 <= 1.0 + 0.5
    assert not deaf.down.any()
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


# Zero latency, infinite bandwidth, 0.125 s of computation per round, 1 s deadlines; node 3
# crashes at 0.2 s (computing round 1) and is back at 0.5 s: it redoes round 1 from its
# checkpoint, its neighbours mix its message, its own inbox of round 1 is lost. Seed 11:
# 13 messages lost, 9 rounds sat out, and no deadline cut a message that was still to come
# (the event engine rejected none), which is when the engines agree (edgedp_sim.round_faults).
ZERO_LATENCY = Network(loss=0.05, compute_s=0.125, round_timeout_s=1.0, startup_timeout_s=1.0)
WITH_CRASH = Faults(dropout=0.1, crashes=(Crash(3, 0.2, 0.3),))


@pytest.mark.parametrize("mechanism", sorted(families.BY_MECHANISM))
def test_batch_equals_event_engine_under_faults_at_zero_latency(mechanism):
    p = _plan(mechanism)
    ev = engine.run(p, DATA, network=ZERO_LATENCY, faults=WITH_CRASH, seed=11)
    b = batch.run(p, DATA, faults=WITH_CRASH, network=ZERO_LATENCY, seed=11)
    assert ev.rejected == 0  # the condition (a deadline never cut a message still to come)
    assert ev.lost_messages == b.lost_messages == 13 and ev.crashes == b.crashes == 1
    assert ev.skipped_rounds == b.skipped_rounds and ev.missing == b.missing
    assert ev.model_digest == b.digests[0]


SCENARIO = """
name = "faults"
seed = 11
steps = 6
[topology]
spec = "er:8:0.5:1"
[task]
dataset = "synthetic-logistic"
[privacy]
noise_multiplier = 1.0
[network]
loss = 0.05
compute_s = 0.125
[faults]
dropout = 0.1
crashes = [{ node = 3, at_s = 0.2, down_s = 0.3 }]
"""


def _scenario(extra=""):
    return scenarios.parse(tomllib.loads(SCENARIO + extra))


def test_scenarios_choose_the_engine_and_say_why():
    assert engine_choice.choose_engine(_scenario()) == (
        "batch",
        "zero latency and infinite bandwidth (faults as round masks)",
    )
    lat = Network(latency=Latency.from_dict({"kind": "constant", "ms": 5}))
    assert engine_choice.choose_engine(replace(_scenario(), network=lat))[0] == "event"
    clockless = replace(_scenario(), network=Network(loss=0.05))
    assert engine_choice.choose_engine(clockless) == (
        "event",
        "crashes need a round clock (network.compute_s > 0) in the batch engine",
    )
    summary = runner.run_scenario(_scenario())
    assert summary["engine"] == "batch" and summary["crashes"] == 1
    assert summary["lost_messages"] > 0 and summary["engine_reason"].startswith("zero latency")
    with pytest.raises(scenarios.ScenarioError, match="batch engine cannot run this scenario"):
        runner.run_scenario(clockless, engine_name="batch")


def test_engine_key_wins_and_is_checked(tmp_path):
    raw = tomllib.loads(SCENARIO)
    raw["engine"] = "event"
    sc = scenarios.parse(raw)
    assert engine_choice.choose_engine(sc) == ("event", "engine key of the scenario")
    raw["engine"] = "fast"
    with pytest.raises(scenarios.ScenarioError, match="engine = 'fast'"):
        scenarios.parse(raw)
    path = tmp_path / "bad.toml"
    path.write_text('engine = "fast"\n' + SCENARIO)
    proc = subprocess.run(
        [sys.executable, "-m", "edgedp_cli", "sim", "run", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "engine = 'fast'; choose one of ['auto', 'batch', 'event']" in proc.stderr


def test_observers_under_faults_are_refused():
    with pytest.raises(ValueError, match="observers"):
        batch.run(_plan("dp-dsgd"), DATA, faults=Faults(dropout=0.1), observers=[object()])
