"""A node that fell more than the receive window behind rejoins by skipping rounds.

The rule (:mod:`edgedp.rejoin`), its resistance to lying neighbours, its privacy
bookkeeping (skipped rounds send nothing; their noise is drawn and discarded, so later
rounds carry exactly the uninterrupted stream's noise), and the same rule in the event
engine and between real agent processes.
"""

import json
import os
import signal
import time
from dataclasses import dataclass

import numpy as np
import pytest
from hostile import harness

import edgedp_topologies
from edgedp import rejoin, streams, wire
from edgedp.accounting.participation import Participation
from edgedp.noise import NoiseSource, noise_digest
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import datasets, engine
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.links import Latency, Network
from firmware_py import deploy

DATA8 = datasets.partition(datasets.load("synthetic-logistic", seed=2), 8, seed=2)


def _plan(mechanism="dp-dsgd", spec="ring:8", steps=40, seed=3):
    return make_plan(
        mechanism,
        edgedp_topologies.parse(spec),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=seed,
        noise_multiplier=1.0,
        topology_name=spec,
        task=TaskSpec(dataset="synthetic-logistic"),
    )


@dataclass(frozen=True, slots=True)
class Case:
    seen: dict
    neighbours: tuple
    expected: int | None
    why: str


CASES = [
    Case({1: 30, 2: 25}, (1, 2), 25, "both past the window: the round both reached"),
    Case({1: 49, 2: 5}, (1, 2), None, "one liar claiming T-1, the other neighbour close"),
    Case({1: 49}, (1, 2), None, "one neighbour silent: no majority"),
    Case({1: 11, 2: 12}, (1, 2), None, "within the window (3 + 8): the window bridges it"),
    Case({1: 49, 2: 40, 3: 20, 4: 4}, (1, 2, 3, 4), 20, "quorum 3 of 4: third largest"),
    Case({1: 49, 2: 49, 3: 49}, (1, 2, 3), 49, "capped at T - 1"),
    Case({9: 40, 1: 40}, (1, 2), None, "a non-neighbour's round is no evidence"),
    Case({1: 30}, (1,), 30, "a leaf follows its only neighbour"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_the_rule_needs_a_majority_and_never_passes_an_honest_round(case):
    got = rejoin.target(3, window=8, steps=50, seen=case.seen, neighbours=case.neighbours)
    assert got == case.expected


def test_fewer_liars_than_a_quorum_cannot_move_a_node_past_an_honest_round():
    # exhaustive over small degrees: liars claim T-1, honest neighbours are at most at h
    steps, h = 100, 30
    for degree in range(1, 7):
        for liars in range(rejoin.quorum(degree)):
            for honest_round in (0, 5, 12, h):
                seen = {v: steps - 1 for v in range(liars)}
                seen.update({v: honest_round for v in range(liars, degree)})
                got = rejoin.target(0, window=8, steps=steps, seen=seen, neighbours=range(degree))
                assert got is None or got <= honest_round


def _frames(out):
    return [bytes(f) for f in out.frames]


def test_far_future_frames_are_rejected_but_noted_only_when_authenticated_and_valid(make_agents):
    p = _plan(steps=40)
    a = make_agents(p, DATA8)[0]
    h = bytes.fromhex(p.plan_hash)
    dim = a.message_dim
    good = wire.encode(wire.Message(h, 20, 1, "model", (np.zeros(dim),)))
    assert not a.receive(good)  # no transport authentication: not evidence
    assert a.mailbox.far == {}
    nan = wire.encode(wire.Message(h, 20, 1, "model", (np.full(dim, np.nan),)))
    assert not a.receive(nan, authenticated_sender=1)  # invalid payload: not evidence
    past_t = wire.encode(wire.Message(h, 40, 1, "model", (np.zeros(dim),)))
    assert not a.receive(past_t, authenticated_sender=1)  # no round T exists
    forged = wire.encode(wire.Message(h, 20, 7, "model", (np.zeros(dim),)))
    assert not a.receive(forged, authenticated_sender=1)  # node 1 speaking for node 7
    assert a.mailbox.far == {} and a.rejoin_target() is None
    assert not a.receive(good, authenticated_sender=1)
    assert a.mailbox.far == {1: 20} and a.metrics.rejected["RoundOutOfWindow"] == 4
    assert a.inbox == {} and a.metrics.received == 0 and a.ahead == {}  # noted, not buffered
    a.begin_round()
    # a rejected frame does not cut the wait short: node 1 is still waited for
    assert a.hopeless() == () and a.waits()


def test_a_rejected_frame_moves_a_node_only_after_a_deadline_it_waited_out(make_agents):
    # a leaf and its hub (one neighbour: its quorum is one): one authenticated far frame
    # from the hub's key moved the leaf to that round and it skipped every round between
    p = _plan(spec="star:5", steps=40)
    agents = make_agents(p, datasets.partition(datasets.load("synthetic-logistic", seed=2), 5))
    leaf, hub = agents[1], agents[0]
    h = bytes.fromhex(p.plan_hash)
    liar = wire.encode(wire.Message(h, 30, 0, "model", (np.zeros(leaf.message_dim),)))
    assert not leaf.receive(liar, authenticated_sender=0)
    assert leaf.mailbox.far == {0: 30} and leaf.rejoin_target() is None
    out = hub.begin_round()  # the hub's genuine round-0 message arrives: it clears the claim
    leaf.begin_round()
    assert leaf.receive([bytes(f) for f in out.frames_for(1)], authenticated_sender=0)
    leaf.end_round()
    assert leaf.mailbox.far == {} and leaf.rejoin_target() is None and leaf.round == 1
    # a hub that really moved on: nothing comes for round 1 but its rounds past the window,
    # and the leaf jumps only once its wait reached the deadline
    assert not leaf.receive(liar, authenticated_sender=0)
    leaf.begin_round()
    assert leaf.waits() and leaf.rejoin_target() is None
    leaf.deadline_passed()
    leaf.end_round()
    assert leaf.rejoin_target() == 30


def test_a_rejoining_node_sends_the_uninterrupted_streams_noise(make_agents):
    p = _plan("antipgd", steps=40)
    agents = make_agents(p, DATA8)
    a = agents[0]
    h = bytes.fromhex(p.plan_hash)
    for v, r in ((1, 25), (7, 23)):
        frames = wire.encode(wire.Message(h, r, v, "model", (np.zeros(a.message_dim),)))
        assert not a.receive(frames, authenticated_sender=v)
    assert a.rejoin_target() is None  # until a wait reaches its deadline without them
    a.begin_round()
    a.deadline_passed()
    a.end_round()
    assert a.rejoin_target() == 23
    assert a.rejoin(23) == 22
    assert a.round == a.noise_state.step == 23 and a.metrics.skipped == 22
    out = a.begin_round()  # the first message after the jump: round 23's own noise
    src = NoiseSource(
        p.factor,
        np.array(streams.RunKeys.simulation(p).noise(0), dtype=object),
        a.message_dim,
        p.noise_std,
    )
    state = src.init()
    for _ in range(23):
        _, state = src.next(state)
    noise, _ = src.next(state)
    assert out.round == 23 and out.noise_digest == noise_digest(noise)
    with pytest.raises(ValueError, match="target"):
        agents[1].rejoin(0)


def test_event_engine_node_restarted_past_the_window_rejoins():
    # ring of 8, node 2 down for 12 s with a 0.5 s deadline: its neighbours get ~24 rounds
    # ahead; after the restart it skips to them and exchanges messages in the next rounds
    p = _plan(steps=60)
    net = Network(
        latency=Latency.from_dict({"kind": "constant", "ms": 5}),
        round_timeout_s=0.5,
        startup_timeout_s=1.0,
    )
    sim = engine._Sim(p, DATA8, net, Faults(crashes=(Crash(2, 0.1, 12.0),)), 0, 10, None)
    res = sim.run()
    late = sim.agents[2]
    assert res.crashes == 1 and late.done and late.metrics.skipped >= 16
    assert late.noise_state.step == p.steps  # every round's noise drawn once, skipped or not
    # node 2 mixed nearly every neighbour message after rejoining (before: it never did)
    assert late.metrics.missing <= 4
    down_rounds = 12.0 / 0.5
    for v in (1, 3):
        assert sim.agents[v].metrics.missing <= down_rounds + 2


def _rounds(run, u):
    return [m for m in run.metrics(u) if m["event"] == "round"]


def _wait(predicate, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (FileNotFoundError, json.JSONDecodeError, IndexError):
            pass  # a metrics file not written yet, caught mid-write, or with no round yet
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.parametrize("how", ["kill-restart", "stop-continue"])
def test_real_agent_past_the_window_rejoins_and_the_run_completes(tmp_path, how):
    # killed: its neighbours' links kept 16 messages for it, the rest is past its window, so
    # it skips rounds; stopped: the TCP buffers kept every message, so it replays them
    p = _plan("antipgd", spec="ring:4", steps=80, seed=21)
    (tmp_path / "run.plan").write_bytes(p.to_bytes())
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=0.25)
    late = 1
    _wait(lambda: len(_rounds(run, late)) >= 3)
    pid = run.processes[late].pid
    os.kill(pid, signal.SIGKILL if how == "kill-restart" else signal.SIGSTOP)
    if how == "kill-restart":
        run.processes[late].wait()
    stopped_at = max(m["round"] for m in _rounds(run, late))
    # wait until both neighbours are past the window (8 rounds) even after the late node
    # has used the messages their links queued for it (16 per link)
    _wait(lambda: all(_rounds(run, v)[-1]["round"] > stopped_at + 28 for v in (0, 2)))
    # the others stop waiting for the late node after three deadlines: hold them while it
    # comes back, so that the plan is not over before it returns
    others = [run.processes[u].pid for u in (0, 2, 3)]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    resumed = time.time()
    if how == "kill-restart":
        run.start(late)
        _wait(lambda: [m for m in run.metrics(late) if m["event"] == "start"][1:])
    else:
        os.kill(pid, signal.SIGCONT)
    time.sleep(0.5)
    for other in others:
        os.kill(other, signal.SIGCONT)
    codes = run.wait(timeout=180)
    # every node finishes; one whose neighbours' messages went missing in the outage for more
    # than run.max_missing of the run ends degraded (7), which its log explains
    assert set(codes) <= {0, 7}, codes
    for u, code in enumerate(codes):
        assert (code == 7) == ("[degraded]" in (run.directory / f"node-{u}.log").read_text())
    if how == "kill-restart":  # from its first round after the restart (a loaded machine
        # can take seconds to start the agent and its listener process)
        started = [m for m in run.metrics(late) if m["event"] == "start"][-1]["time"]
        resumed = min(m["time"] for m in _rounds(run, late) if m["time"] > started)
    # before: from here to the end (~45 rounds) the late node and its neighbours never used
    # each other's messages again. Now they do once the neighbours' links reconnected
    # (backoff up to 2 s, ~8 deadlines) and the late node caught up
    for v in (0, 2):
        later = [m for m in _rounds(run, v) if m["time"] > resumed]
        assert sum(late in m["missing"] for m in later) <= 16
        assert not any(m["missing"] for m in later[-10:])
    assert not any(m["missing"] for m in _rounds(run, late)[-10:])
    jumps = [m for m in run.metrics(late) if m["event"] == "rejoin"]
    skipped = {r for j in jumps for r in range(j["from"], j["round"])}
    if how == "kill-restart":
        assert jumps and stopped_at < jumps[0]["from"] and jumps[0]["round"] > stopped_at + 9
    # nothing reused: every round it sent carries that round's noise of the uninterrupted
    # stream, and the skipped rounds sent nothing
    expected = harness.plan_seed_digests(p, late)
    sent = {}
    for m in _rounds(run, late):
        sent.setdefault(m["round"], set()).add(m["noise"])
    assert not skipped & set(sent) and sorted(skipped | set(sent)) == list(range(p.steps))
    assert all(sent[r] == {expected[r]} for r in sent)
