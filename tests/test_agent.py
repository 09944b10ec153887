"""Agents exchanging frames in-process (no sockets) against the batch engine."""

from dataclasses import replace

import numpy as np
import pytest

import edgedp_topologies
from edgedp import mailbox, streams, wire
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.errors import BudgetExhaustedError, PlanError
from edgedp.models.linear import LinearModel
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine

GRAPH = edgedp_topologies.parse("er:8:0.5:2")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 8, seed=3)


def _plan(mechanism="dp-dsgd", steps=12):
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": 1.0}
    return make_plan(
        mechanism,
        GRAPH,
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=9,
        task=TaskSpec(dataset="synthetic-logistic"),
        **noise,
    )


@pytest.mark.parametrize("mechanism", ["dsgd", "dp-dsgd", "antipgd"])
def test_agents_equal_batch_engine_bitwise(mechanism, make_agents, run_rounds):
    p = _plan(mechanism)
    agents = make_agents(p, DATA)
    # deliver in reverse order: arrival order must not matter
    run_rounds(agents, p.steps, reverse=True)
    digest = batch.model_digest(np.stack([a.theta for a in agents]))
    assert digest == batch.run(p, DATA).digests[0]


def test_budget_guard(make_agents, run_rounds):
    p = _plan(steps=2)
    agents = make_agents(p, DATA)
    run_rounds(agents, 2)
    assert all(a.done for a in agents)
    with pytest.raises(BudgetExhaustedError):
        agents[0].begin_round()


def test_snapshot_restore_reproduces_the_run(make_agents, run_rounds):
    p = _plan("antipgd", steps=10)
    full = make_agents(p, DATA)
    run_rounds(full, 10)
    part = make_agents(p, DATA)
    run_rounds(part, 4)
    snaps = [a.snapshot() for a in part]
    fresh = make_agents(p, DATA)
    for a, s in zip(fresh, snaps, strict=True):
        a.restore(s)
    run_rounds(fresh, 6)
    assert [a.theta.tobytes() for a in fresh] == [a.theta.tobytes() for a in full]
    with pytest.raises(PlanError, match="another plan or node"):
        fresh[1].restore(snaps[0])


def test_bad_frames_are_counted_and_change_nothing(make_agents):
    p = _plan()
    a, b = make_agents(p, DATA)[:2]
    sender = next(v for v in a.neighbours)
    out = make_agents(p, DATA)[sender].begin_round()
    good = [bytes(f) for f in out.frames]
    before = a.theta.copy()
    hdr = wire.decode(good)
    nan = wire.encode(
        wire.Message(hdr.plan_hash, 0, sender, "model", (np.full(a.model.dim, np.nan),))
    )
    other_plan = wire.encode(wire.Message(b"x" * 32, 0, sender, "model", (hdr.arrays[0],)))
    stranger = wire.encode(wire.Message(hdr.plan_hash, 0, 99, "model", (hdr.arrays[0],)))
    wrong_shape = wire.encode(wire.Message(hdr.plan_hash, 0, sender, "model", (np.zeros(3),)))
    future = wire.encode(wire.Message(hdr.plan_hash, 50, sender, "model", (hdr.arrays[0],)))
    cases = {
        "Malformed": [b"\xc1garbage"],
        "BadPayload": nan,
        "PlanHashMismatch": other_plan,
        "UnknownSender": stranger,
        "RoundOutOfWindow": future,
    }
    for frames in cases.values():
        assert not a.receive([bytes(f) for f in frames])
    assert not a.receive(wrong_shape)
    assert not a.receive(good, authenticated_sender=(sender + 1) % p.n)  # spoofed sender id
    assert a.receive(good) and not a.receive(good)  # the replay is refused
    assert np.array_equal(a.theta, before)
    for name in cases:
        assert a.metrics.rejected[name] >= 1, name
    assert a.metrics.rejected["Replayed"] == 1 and a.metrics.rejected["UnknownSender"] == 2


@pytest.mark.parametrize("rule", ["renormalize", "reuse-last", "self"])
def test_dropout_rules_keep_weights_stochastic(rule, make_agents, run_rounds):
    p = _plan("dsgd", steps=6)
    agents = make_agents(p, DATA, dropout_rule=rule)
    dropped = lambda r, s, d: s == 0 and r >= 2  # node 0 goes silent from round 2  # noqa: E731
    run_rounds(agents, 6, drop=dropped)
    for a in agents:
        assert np.all(np.isfinite(a.theta))
        if 0 in a.neighbours:
            assert a.metrics.missing == 4
    # every rule mixes with weights summing to 1: all-equal models stay equal
    keys = streams.RunKeys.simulation(p)
    model = LinearModel("linear", DATA.features)  # any model; the learning rate is 0
    same = []
    for u in range(p.n):
        share = p.share(u)
        share = type(share)(
            **{**{f: getattr(share, f) for f in share.__slots__}, "learning_rate": 0.0}
        )
        ag = Agent(
            share,
            model=model,
            x=DATA.x[u],
            y=DATA.y[u],
            dropout_rule=rule,
            **keys.agent(u, share.neighbours),
        )
        ag.theta = np.full(model.dim, 3.0)
        same.append(ag)
    run_rounds(same, 3, drop=dropped)
    for ag in same:
        np.testing.assert_allclose(ag.theta, 3.0, rtol=1e-15)


def test_hopeless_neighbours_are_detected(make_agents):
    p = _plan("dsgd", steps=4)
    agents = make_agents(p, DATA)
    a = agents[0]
    v = a.neighbours[0]
    agents[v].begin_round()
    agents[v].end_round()  # v moves on to round 1 without a
    out = agents[v].begin_round()
    a.begin_round()
    assert a.receive([bytes(f) for f in out.frames])
    assert v in a.hopeless()


def test_owned_frames_are_kept_read_only_and_others_copied(make_agents):
    """A message whose frames the node owns is stored as the received buffer itself, made
    read-only (no copy); frames it does not own are copied, so a later change of the
    sender's buffer changes nothing stored."""
    agents = make_agents(_plan(), DATA)
    outs = [a.begin_round() for a in agents]
    u, w = agents[0].neighbours[:2]
    owned = bytearray(outs[u].frames_for(0)[1])  # u's model bytes, a writable buffer
    assert agents[0].receive([outs[u].frames_for(0)[0], owned], authenticated_sender=u, owned=True)
    kept = agents[0].inbox[0][u]
    assert np.shares_memory(kept, np.frombuffer(owned)) and not kept.flags.writeable
    with pytest.raises(ValueError):
        kept[0] = 0.0
    shared = bytearray(outs[w].frames_for(0)[1])
    assert agents[0].receive([outs[w].frames_for(0)[0], shared], authenticated_sender=w)
    copied = agents[0].inbox[0][w]
    before = copied.copy()
    shared[:8] = np.float64(123.0).tobytes()
    assert not np.shares_memory(copied, np.frombuffer(shared))
    assert copied.tobytes() == before.tobytes()


def test_accept_with_the_content_checked_once_decides_as_every_check(make_agents):
    """What the event engine hands over with a decoded message — its extremes, fingerprint
    and a context its content passed (:func:`edgedp.mailbox.content_checked`) — changes no
    verdict, counter or stored message: good, replayed, equivocating, unknown, impostor,
    early, far, out-of-bound, non-finite and other-plan messages alike."""
    plain, fast = make_agents(_plan(), DATA), make_agents(_plan(), DATA)
    outs = [a.begin_round() for a in plain]
    for a in fast:
        a.begin_round()
    me = 0
    u, w = plain[me].neighbours[:2]
    stranger = next(x for x in range(len(plain)) if x not in plain[me].neighbours and x != me)
    good = wire.decode([bytes(f) for f in outs[u].frames_for(me)])
    other = wire.decode([bytes(f) for f in outs[w].frames_for(me)])
    arr = good.arrays[0]
    cases = [
        (good, u),
        (good, u),  # replayed
        (replace(good, arrays=(arr + 1e-9,)), u),  # equivocation
        (other, u),  # an impostor: authenticated as u, claims w
        (other, None),
        (replace(good, sender=stranger), None),
        (replace(good, round=5), u),  # within the window
        (replace(good, round=11), u),  # past the window
        (replace(good, round=40), u),  # past T
        (replace(other, arrays=(arr * 1e12,)), w),  # beyond the bound
        (replace(other, arrays=(np.full_like(arr, np.nan),)), w),
        (replace(other, plan_hash=b"x" * 32), w),
        (replace(other, arrays=(arr[:-1],)), w),
        (other, w),
    ]
    for msg, sender in cases:
        extremes = engine._extremes(msg)
        assert extremes == wire.extremes(msg) or np.isnan(extremes[0][0])
        checked = mailbox.content_checked(msg, fast[me].context, extremes)
        want = plain[me].accept(msg, authenticated_sender=sender)
        got = fast[me].accept(
            msg,
            authenticated_sender=sender,
            extremes=extremes,
            fingerprint=wire.fingerprint(msg),
            owned=True,
            checked=checked,
        )
        assert got == want, (msg.sender, msg.round, sender)
    a, b = plain[me].mailbox, fast[me].mailbox
    assert plain[me].metrics.to_dict() == fast[me].metrics.to_dict()
    for name in ("ahead", "far", "expired", "history", "equivocations", "announced"):
        assert getattr(a, name) == getattr(b, name), name
    assert {r: {v: x.tobytes() for v, x in m.items()} for r, m in a.inbox.items()} == {
        r: {v: x.tobytes() for v, x in m.items()} for r, m in b.inbox.items()
    }
    assert set(plain[me].metrics.rejected) == {
        "Replayed",
        "Equivocation",
        "UnknownSender",
        "RoundOutOfWindow",
        "BeyondBound",
        "BadPayload",
        "PlanHashMismatch",
    }
