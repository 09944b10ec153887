"""What a node concludes about a neighbour rests on evidence a rejected frame cannot supply.

* A frame past the receive window is rejected; before, its round still counted as where
  that neighbour stood: a node stopped waiting for the neighbour's genuine message, and one
  frame from a star hub's key made a leaf skip most of its rounds. Now such rounds count
  for a rejoin only after the node waited a round out to its deadline without the
  neighbour's message, and any accepted message of the neighbour clears them.
* Two different messages of one sender for one round (a device put back on an older copy
  of its state releases a round twice) are detected by the receiver: the first is kept,
  the second counted and logged as ``equivocation`` with both fingerprints.
* A neighbour that stays down no longer makes every later round wait the full deadline,
  and a healthy restart no longer reports its neighbours as silent.
"""

import signal
import time

import msgpack
import numpy as np
from hostile import harness

from edgedp import wire
from edgedp_sim import datasets
from firmware_py import deploy

DATA3 = datasets.partition(datasets.load("synthetic-logistic", seed=2), 3, seed=2)


def _frame(plan, r: int, sender: int, x: np.ndarray) -> list[bytes]:
    header = {
        "v": 1,
        "plan": bytes.fromhex(plan.plan_hash),
        "round": r,
        "sender": sender,
        "kind": "model",
        "arrays": [["<f8", [len(x)]]],
    }
    return [msgpack.packb(header, use_bin_type=True), np.asarray(x, "<f8").tobytes()]


def test_a_second_different_message_of_a_round_is_an_equivocation(tmp_path, make_agents):
    plan = harness.write_plan(tmp_path / "run.plan", mechanism="dp-dsgd", topology="ring:3")
    a, b, c = make_agents(plan, DATA3)
    out_b, out_c = b.begin_round(), c.begin_round()
    a.begin_round()
    honest = [bytes(f) for f in out_b.frames_for(0)]
    assert a.receive(honest, authenticated_sender=1)
    assert not a.receive(honest, authenticated_sender=1)  # the same again: a replay
    kept = np.array(a.inbox[0][1])
    other = _frame(plan, 0, 1, kept + 1e-9)
    assert not a.receive(other, authenticated_sender=1)
    assert a.metrics.rejected == {"Replayed": 1, "Equivocation": 1}
    assert np.array_equal(a.inbox[0][1], kept)  # the first one stays
    ((v, r, first, second),) = a.take_equivocations()
    assert (v, r) == (1, 0) and first == wire.fingerprint(wire.decode(honest))
    assert second == wire.fingerprint(wire.decode(other)) and a.take_equivocations() == []
    assert a.receive([bytes(f) for f in out_c.frames_for(0)], authenticated_sender=2)
    a.end_round()
    # the round was mixed; the sender, put back on an older state, sends round 0 again
    assert a.round == 1 and not a.receive(_frame(plan, 0, 1, kept + 2e-9), authenticated_sender=1)
    assert a.metrics.rejected["Equivocation"] == 2 and len(a.take_equivocations()) == 1
    # the same message again late is only out of the window; an unauthenticated one too
    assert not a.receive(honest, authenticated_sender=1)
    assert not a.receive(_frame(plan, 0, 1, kept + 3e-9))
    assert a.metrics.rejected["Equivocation"] == 2 and a.take_equivocations() == []


def test_one_far_frame_from_a_hub_key_moves_no_leaf(tmp_path):
    # before: the leaf took the frame's round as the hub's and skipped to it (162 of 200
    # rounds in the review's run), dropping the hub's genuine messages
    plan = harness.write_plan(
        tmp_path / "run.plan", mechanism="dp-dsgd", topology="star:4", steps=30
    )
    net = harness.Network(tmp_path / "run", tmp_path / "run.plan", peer=0, target=1)
    oracle = harness.Oracle(net.config(1))
    dim = net.honest.agent.message_dim

    def before(r):
        if r in (0, 5):  # valid in every way but its round: far past the leaf's window
            net.honest.attack(_frame(plan, plan.steps - 2, 0, np.zeros(dim)))
            net.honest.attack(_frame(plan, r + oracle.agent.round_window + 3, 0, np.zeros(dim)))

    try:
        net.honest.play(before=before)
        codes = net.wait()
    finally:
        net.close()
    assert codes == [None, 0, 0, 0]
    done = net.last_metrics(1)
    assert done["skipped"] == 0 and done["missing"] == 0
    assert done["rejected"] == {"RoundOutOfWindow": 4}
    assert net.final_digest() == harness.clean_digest(plan)


def test_a_neighbour_that_equivocates_is_logged_and_its_first_message_kept(tmp_path):
    plan = harness.write_plan(tmp_path / "run.plan", steps=6)
    net = harness.Network(tmp_path / "run", tmp_path / "run.plan", peer=1, target=0)
    dim = net.honest.agent.message_dim

    def after(r):
        if r == 2:  # right after the honest frame: the same round, another vector
            x = np.frombuffer(net.honest.frames[2][1], "<f8") * 0.5
            net.honest.attack(_frame(plan, 2, 1, x))
        if r == 4:  # round 1 again, long mixed: a restored device's re-send
            net.honest.attack(_frame(plan, 1, 1, np.zeros(dim)))

    try:
        net.honest.play(after=after)
        codes = net.wait()
    finally:
        net.close()
    assert codes == [0, None, 0, 0]
    assert net.last_metrics(0)["rejected"] == {"Equivocation": 2}
    assert net.final_digest() == harness.clean_digest(plan)
    log = (net.run.directory / "node-0.log").read_text()
    lines = [line for line in log.splitlines() if "[equivocation]" in line]
    assert len(lines) == 2 and "round 2" in lines[0] and "round 1" in lines[1]
    assert all(line.count("fingerprints") == 1 for line in lines)


def test_a_dead_neighbour_stops_costing_a_deadline_every_round(tmp_path):
    # ring of 4, node 2 never starts: nodes 1 and 3 waited its full deadline in every round;
    # node 0, whose neighbours wait for node 2 but are alive, keeps waiting for them
    harness.write_plan(tmp_path / "run.plan", mechanism="dp-dsgd", topology="ring:4", steps=40)
    run = deploy.local_run(
        tmp_path / "run.plan",
        tmp_path / "run",
        round_timeout=0.5,
        startup_timeout=2.0,
        start=[0, 1, 3],
    )
    codes = run.wait(timeout=120)
    assert codes[:2] == [0, 7] and codes[3] == 7  # 1 and 3 never heard node 2: degraded
    assert not any(m["absent"] for m in run.metrics(0) if m["event"] == "round")
    for u in (1, 3):
        rounds = [m for m in run.metrics(u) if m["event"] == "round"]
        # absent once its first deadline passed with the link to it down: not waited for
        assert [m["absent"] for m in rounds] == [[2]] * 40
        assert all(2 in m["missing"] for m in rounds)
    log = (run.directory / "node-1.log").read_text()
    assert log.count("[neighbour-silent]") == 1 and "neighbour 2" in log


def test_a_healthy_restart_reports_no_silent_neighbour(tmp_path):
    # before: the first round after a restart ended without the neighbours' messages (sent
    # before the restart, or ahead of the window) and every neighbour was reported silent
    harness.write_plan(tmp_path / "run.plan", mechanism="dp-dsgd", topology="ring:3", steps=60)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=0.5)
    deadline = time.monotonic() + 60
    while not any(m["event"] == "round" and m["round"] >= 5 for m in _metrics(run, 0)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # stopped, then killed while its neighbours wait for it: the messages they sent it for
    # its round are gone with it, so its first round after the restart ends without them
    run.processes[0].send_signal(signal.SIGSTOP)
    time.sleep(0.2)
    run.processes[0].kill()
    run.processes[0].wait()
    run.start(0)
    assert set(run.wait(timeout=120)) <= {0, 7}
    log = (run.directory / "node-0.log").read_text()
    after = log.split("[start]")[-1]
    assert "[resumed]" in after and "[neighbour-silent]" not in after


def _metrics(run, u):
    try:
        return run.metrics(u)
    except FileNotFoundError:
        return []
