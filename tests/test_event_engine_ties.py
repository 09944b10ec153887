"""Simultaneous events: the event engine keeps the process-per-message engine's order.

With zero or constant latency many events share one simulated instant (deliveries, round
deadlines, uplink turns, crashes), and the order in which they are handled changes which
messages a node mixes. The pinned numbers are the results of the process-per-message
engine (a SimPy process per node, per transmission and per delivery, a SimPy Resource per
uplink, a deadline timeout re-armed at every wake-up) on these scenarios; the callback
engine must reproduce every one: model digest, every counter, the simulated end time and
a hash of the per-round times and evaluations. The digests and that hash (which holds the
evaluations) were pinned again from this engine when plan version 3 (δ recorded in the
plan) moved every plan hash and so the noise keys; the counters and times, which do not
depend on the noise, are still the old engine's.
"""

import hashlib
from dataclasses import dataclass

import pytest

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import datasets, engine
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.links import Latency, Network


def _constant(ms):
    return Latency.from_dict({"kind": "constant", "ms": ms})


@dataclass(frozen=True)
class Case:
    mechanism: str
    spec: str
    steps: int
    network: Network
    faults: Faults
    seed: int
    want: tuple  # see _summary


CASES = {
    "zero-latency-loss-dropouts-crash": Case(
        "dp-dsgd",
        "er:10:0.4:1",
        20,
        Network(loss=0.05, round_timeout_s=0.2, startup_timeout_s=0.2),
        Faults(dropout=0.1, crashes=(Crash(3, 0.3, 0.5), Crash(7, 0.0, 0.2))),
        1,
        (
            "b03806456841fb02",
            550,
            138600,
            21,
            64,
            57,
            143,
            18,
            2,
            "0x1.6666666666666p+0",
            "5d5f53c21e39b0e6",
        ),
    ),
    # nodes fall past each other's windows and rejoin: the callback engine's own numbers
    # under the evidence rule of the "rejoin" case below (the process engine: 171 rejected,
    # 266 missing, 22 rounds skipped)
    "zero-latency-bandwidth": Case(
        "antipgd",
        "er:10:0.5:2",
        15,
        Network(bandwidth_mbps=1.0, loss=0.05, round_timeout_s=0.05),
        Faults(dropout=0.1, dropout_rule="reuse-last", crashes=(Crash(4, 0.02, 0.03),)),
        2,
        (
            "d880748a7f9e1a01",
            571,
            143892,
            47,
            32,
            198,
            275,
            10,
            1,
            "0x1.5f61672324c87p+2",
            "4ed802b0a0b4f9ad",
        ),
    ),
    "constant-latency-crash": Case(
        "dp-dsgd",
        "er:10:0.4:1",
        20,
        Network(latency=_constant(20), round_timeout_s=0.2),
        Faults(crashes=(Crash(2, 0.5, 0.7), Crash(6, 0.2))),
        0,
        (
            "3954b20e9b6e1104",
            586,
            147672,
            0,
            32,
            46,
            76,
            0,
            2,
            "0x1.028f5c28f5c29p+1",
            "146cb6ae4cf82133",
        ),
    ),
    # node 2 down for 12 s: it falls past the window and skips ahead. Its neighbours' rounds
    # past its window count for the jump only once its first round's wait reached the
    # deadline (edgedp.mailbox: a rejected frame cannot cut a wait short), so these numbers
    # are the callback engine's own under that rule (the process engine stopped waiting at
    # the first such frame: 40 rejected, 88 missing, end 12.19 s); the order of
    # simultaneous events stays pinned to the process engine's by the other cases.
    "rejoin": Case(
        "dp-dsgd",
        "ring:8",
        60,
        Network(latency=_constant(5), round_timeout_s=0.5, startup_timeout_s=1.0),
        Faults(crashes=(Crash(2, 0.1, 12.0),)),
        0,
        (
            "300a6b25bb9d2d65",
            914,
            230328,
            0,
            50,
            46,
            94,
            24,
            1,
            "0x1.95c28f5c28f63p+3",
            "9b9cd503518ef2e4",
        ),
    ),
    "deadline-equals-delivery": Case(  # latency = deadline: messages land on the deadline
        "dp-dsgd",
        "er:10:0.4:3",
        20,
        Network(latency=_constant(250), round_timeout_s=0.25, startup_timeout_s=0.25),
        Faults(dropout=0.1),
        3,
        (
            "2600dbbf3a621be9",
            594,
            149688,
            0,
            78,
            139,
            217,
            24,
            0,
            "0x1.2000000000000p+2",
            "f7475cb57785f0d1",
        ),
    ),
    "constant-latency-bandwidth-compute": Case(
        "antipgd",
        "er:10:0.5:4",
        20,
        Network(
            latency=_constant(10),
            bandwidth_mbps=1.0,
            loss=0.03,
            round_timeout_s=0.1,
            compute_s=0.01,
        ),
        Faults(dropout=0.1, crashes=(Crash(5, 0.25, 0.3), Crash(1, 0.33))),
        4,
        (
            "498bf7d23bd605f7",
            637,
            160524,
            20,
            111,
            126,
            257,
            22,
            2,
            "0x1.0b851eb851ebap+1",
            "17f663c47c0c8578",
        ),
    ),
}


def _run(case):
    plan = make_plan(
        case.mechanism,
        edgedp_topologies.parse(case.spec),
        steps=case.steps,
        participation=Participation(case.steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=3,
        noise_multiplier=1.0,
        task=TaskSpec(dataset="synthetic-logistic"),
    )
    data = datasets.partition(datasets.load("synthetic-logistic", seed=2), plan.n, seed=2)
    return engine.run(
        plan, data, network=case.network, faults=case.faults, seed=case.seed, eval_every=5
    )


def _summary(r):
    timing = repr((r.round_seconds, r.eval_rounds, r.test_loss, r.consensus_distance))
    return (
        r.model_digest[:16],
        r.messages,
        r.bytes_sent,
        r.lost_messages,
        r.offline_drops,
        r.rejected,
        r.missing,
        r.skipped_rounds,
        r.crashes,
        r.simulated_seconds.hex(),
        hashlib.blake2b(timing.encode(), digest_size=8).hexdigest(),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_simultaneous_events_keep_the_process_engines_order(name):
    assert _summary(_run(CASES[name])) == CASES[name].want


def test_agent_waits_is_not_ready_unless_every_missing_neighbour_moved_on(monkeypatch):
    # Agent.waits (one pass) against its definition, at every wake-up of a faulty run
    calls = []
    original = Agent.waits

    def checked(agent):
        got = original(agent)
        missing = agent.missing()
        assert got == (
            not agent.ready() and not (missing and set(agent.hopeless()) == set(missing))
        )
        calls.append(got)
        return got

    monkeypatch.setattr(Agent, "waits", checked)
    _run(CASES["zero-latency-loss-dropouts-crash"])
    _run(CASES["rejoin"])
    assert True in calls and False in calls
