"""The callback event engine reproduces the process-per-message engine it replaced.

Pinned numbers: results of the process-per-message engine (a SimPy process per node, per
transmission and per delivery, a SimPy Resource per uplink) on the same scenarios, recorded
before it was replaced, with continuous latencies (simultaneous events:
tests/test_event_engine_ties.py): model digest, every counter and the simulated end time.
The model digests were pinned again from this engine when plan version 3 (δ recorded in
the plan) moved every plan hash, and with it the noise keys; the counters and end times,
which do not depend on the noise, are still the old engine's. The clock and the uplink are
also checked against SimPy itself.
"""

import numpy as np
import pytest
import simpy
from test_event_engine_ties import Case, _run

import edgedp_topologies
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.clock import Clock, Uplink
from edgedp_sim.links import Latency, Network


def _lognormal(median_ms, sigma):
    return Latency.from_dict({"kind": "lognormal", "median_ms": median_ms, "sigma": sigma})


# digest, messages, lost, offline, rejected, missing, skipped, crashes, simulated s (hex)
CASES = {
    "dropouts-loss-crash": Case(
        "antipgd",
        "er:10:0.4:1",
        20,
        Network(latency=_lognormal(20, 0.5), bandwidth_mbps=10, loss=0.02, round_timeout_s=0.3),
        Faults(dropout=0.1, crashes=(Crash(3, 0.4, 0.5),)),
        1,
        ("567f989fcbf33fd2", 544, 14, 59, 39, 111, 18, 1, "0x1.bacbfe3105156p+0"),
    ),
    "busy-uplinks": Case(  # 0.5 Mbit/s: rounds in flight at once share the uplink
        "dp-dsgd",
        "er:12:0.5:2",
        25,
        Network(latency=_lognormal(5, 1.0), bandwidth_mbps=0.5, loss=0.05, round_timeout_s=0.2),
        Faults(dropout=0.2),
        5,
        ("7c6cca4ad18797d2", 1276, 60, 245, 93, 398, 61, 0, "0x1.75c440108d0aap+1"),
    ),
    "churn": Case(
        "dp-dsgd",
        "er:12:0.4:3",
        30,
        Network(latency=_lognormal(30, 0.5), bandwidth_mbps=20, round_timeout_s=0.25),
        Faults(dropout=0.05, churn_rate_per_s=0.3, churn_down_s=0.6, churn_horizon_s=5),
        7,
        ("2a3fbad989db0124", 1479, 0, 222, 236, 440, 26, 11, "0x1.60e8a6398f6dep+2"),
    ),
    "compute-time": Case(
        "dp-dsgd",
        "ring:8",
        15,
        Network(latency=_lognormal(10, 0.3), round_timeout_s=0.5, compute_s=0.013),
        Faults(dropout=0.15, crashes=(Crash(4, 0.1, 0.3),)),
        2,
        ("bbfa4c21ceac7f26", 212, 0, 31, 9, 39, 15, 1, "0x1.d79fd132847c1p+0"),
    ),
    "reuse-last": Case(
        "dp-dsgd",
        "er:10:0.5:4",
        20,
        Network(latency=_lognormal(3, 1.5), bandwidth_mbps=2, round_timeout_s=0.05),
        Faults(dropout=0.1, dropout_rule="reuse-last"),
        9,
        ("9c9077b4c3eb7d4f", 672, 0, 82, 57, 139, 25, 0, "0x1.193af95625526p-1"),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_results_as_the_process_per_message_engine(name):
    case = CASES[name]
    r = _run(case)
    got = (
        r.model_digest[:16],
        r.messages,
        r.lost_messages,
        r.offline_drops,
        r.rejected,
        r.missing,
        r.skipped_rounds,
        r.crashes,
        r.simulated_seconds.hex(),
    )
    assert got == case.want
    # per message a delivery and an uplink slot; per node and round at most a deadline,
    # a compute step, a skip
    n, steps = edgedp_topologies.parse(case.spec).n, case.steps
    assert r.events <= 2 * r.messages + 3 * n * steps


def _uplink_trace(jobs, links=1):
    """Serve ``jobs`` = [(arrival, [durations])] on Uplinks (job j on link j % links), each
    job asking for its next slot when the previous one ends (a process holding a
    simpy.Resource(1)). Logs every slot's start and end in the order they happen."""
    clock = Clock()
    uplinks = [Uplink(clock) for _ in range(links)]
    log = []

    def ask(j, i):
        if i < len(jobs[j][1]):
            uplinks[j % links].request(hold, j, i)

    def hold(j, i):
        log.append((j, i, "start", clock.now))
        clock.at(clock.now + jobs[j][1][i], done, j, i)

    def done(j, i):
        log.append((j, i, "end", clock.now))
        uplinks[j % links].release()
        ask(j, i + 1)

    for j, (arrival, _) in enumerate(jobs):
        clock.at(arrival, ask, j, 0)
    while clock.peek() != float("inf"):
        clock.step()
    return log


def _slots(log):
    start = {(j, i): t for j, i, what, t in log if what == "start"}
    return [(j, i, start[j, i], t) for j, i, what, t in log if what == "end"]


def test_uplink_takes_turns_between_rounds_in_flight():
    # hand-derived: job 0 holds [0, 1); job 1 arrives at 0.5 and queues; at 1 it goes
    # first and job 0 asks again behind it; job 2 arrives exactly at 2 and queues behind
    # job 0; at 3 job 0 asks for its last slot behind job 2
    got = _slots(_uplink_trace([(0.0, [1.0, 1.0, 1.0]), (0.5, [1.0]), (2.0, [0.5])]))
    assert got == [
        (0, 0, 0.0, 1.0),
        (1, 0, 1.0, 2.0),
        (0, 1, 2.0, 3.0),
        (2, 0, 3.0, 3.5),
        (0, 2, 3.5, 4.5),
    ]
    assert _slots(_uplink_trace([(0.0, [1.0]), (3.0, [2.0])])) == [
        (0, 0, 0.0, 1.0),
        (1, 0, 3.0, 5.0),
    ]


def test_clock_keeps_simpys_order_at_one_instant():
    # SimPy's rule: (time, priority, id); a process start is URGENT, before any NORMAL event
    # of its instant; events scheduled now come after the timeouts that end now
    clock, log = Clock(), []
    clock.at(1.0, log.append, "timeout a")
    clock.at(
        1.0,
        lambda: (
            log.append("timeout b"),
            clock.soon(log.append, "soon"),
            clock.start(log.append, "start"),
        ),
    )
    clock.at(1.0, log.append, "timeout c")
    while clock.peek() != float("inf"):
        clock.step()
    assert log == ["timeout a", "timeout b", "start", "timeout c", "soon"]


def _simpy_uplink_trace(jobs, links=1):
    env, log = simpy.Environment(), []
    uplinks = [simpy.Resource(env, 1) for _ in range(links)]

    def job(j):
        yield env.timeout(jobs[j][0])
        for i, duration in enumerate(jobs[j][1]):
            with uplinks[j % links].request() as req:
                yield req
                log.append((j, i, "start", env.now))
                yield env.timeout(duration)
                log.append((j, i, "end", env.now))

    for j in range(len(jobs)):
        env.process(job(j))
    env.run()
    return log


@pytest.mark.parametrize("seed", range(20))
def test_uplinks_equal_simpy_resources_on_tied_times(seed):
    # integer arrivals and durations: jobs arrive exactly as slots end, on 1-3 uplinks;
    # the log also fixes the order of starts and ends within one instant
    gen = np.random.default_rng(seed)
    jobs = [
        (float(gen.integers(0, 6)), [float(x) for x in gen.integers(1, 3, gen.integers(1, 4))])
        for _ in range(gen.integers(2, 9))
    ]
    links = 1 + seed % 3
    assert _uplink_trace(jobs, links) == _simpy_uplink_trace(jobs, links)
