"""Hostile peers against real agent processes on 127.0.0.1 (tests/hostile).

An authenticated neighbour (the harness holds its CURVE keypair) and strangers send every
kind of bad frame at a live agent: it must count every frame by reason, keep running,
finish with the clean run's model and restart normally. ``EDGEDP_HOSTILE_FRAMES`` sets the
number of authenticated frames (default 5,000; benchmarks/hostile_peers.py runs 20,000).
"""

import os
from pathlib import Path

import msgpack
import numpy as np
from hostile import campaign, harness
from hostile import frames as frames_mod

FRAMES = int(os.environ.get("EDGEDP_HOSTILE_FRAMES", "5000"))


def test_the_frames_that_crashed_or_bricked_an_agent_are_counted(tmp_path):
    # before: a dtype given as a list or map, or a shape whose int64 product wraps to 0,
    # killed the agent with a traceback (exit 1); 1.797e308 / 1e300 from a neighbour were
    # mixed in and the whole ring ended at |θ| ≈ 1e307 / 1e299
    plan = harness.write_plan(tmp_path / "run.plan", steps=4)
    net = harness.Network(tmp_path / "run", tmp_path / "run.plan", peer=1, target=0)
    dim = net.honest.agent.message_dim

    def frame(r, spec, data):
        header = {"v": 1, "plan": bytes.fromhex(plan.plan_hash), "round": r, "sender": 1}
        return [msgpack.packb({**header, "kind": "model", "arrays": [spec]}), data]

    def before(r):
        if r == 1:  # ahead of node 1's honest frame: each would stand for it if accepted
            for f in (
                frame(r, [["<f8"], [dim]], bytes(8 * dim)),
                frame(r, [{"<f8": 1}, [dim]], bytes(8 * dim)),
                frame(r, ["<f8", [2**30, 2**30, 16]], b""),
                frame(r, ["<f8", [dim]], np.full(dim, 1.7976931348623157e308).tobytes()),
                frame(r, ["<f8", [dim]], np.full(dim, 1e300).tobytes()),
            ):
                net.honest.attack(f)

    try:
        net.honest.play(before=before)
        codes = net.wait()
    finally:
        net.close()
    assert codes == [0, None, 0, 0]
    assert net.last_metrics(0)["rejected"] == {"Malformed": 2, "Oversized": 1, "BeyondBound": 2}
    assert net.final_digest() == harness.clean_digest(plan)
    assert net.run.start(0).wait(timeout=120) == 0


def test_hostile_frames_are_counted_and_change_nothing(tmp_path):
    result = campaign.run(tmp_path, total=FRAMES)
    print("\n" + campaign.report(result))
    sent = result["frames_by_category"]
    assert set(sent) == set(frames_mod.REJECTED)
    assert result["authenticated_frames"] >= FRAMES
    # no crash, no brick: every process finished, the target restarts and is done at once
    assert result["exit_codes"] == [0, None, 0, 0]
    assert result["restart_exit_code"] == 0 and result["final_model_finite"]
    # every frame counted by the reason the in-process oracle gives
    live, oracle = result["target_rejected"], result["expected_reasons"]
    assert "accepted" not in oracle
    assert sum(live.values()) == result["authenticated_frames"]
    timing = campaign.ROUND_REASONS  # same-round replays land in the round or just after
    assert sum(live.get(k, 0) for k in timing) == sum(oracle.get(k, 0) for k in timing)
    assert {k: v for k, v in live.items() if k not in timing} == {
        k: v for k, v in oracle.items() if k not in timing
    }
    assert result["target_received"] == 2 * result["steps"]  # only the honest messages
    assert result["refused_handshakes"] >= 1
    assert result["digest_equal"]  # the model is the clean run's, bit for bit


def test_forgeries_within_the_bound_are_all_a_neighbour_can_send(tmp_path):
    # a malicious neighbour's own messages at ±bound, a round or more ahead: accepted as its
    # messages (its honest ones then count as replays), the run finishes, nothing overflows
    plan = harness.write_plan(tmp_path / "run.plan", steps=5)
    net = harness.Network(tmp_path / "run", tmp_path / "run.plan", peer=1, target=0)
    oracle = harness.Oracle(net.config(0))
    forge = campaign.forge_for(plan, oracle, 1)

    def before(r):
        if r == 0:
            for ahead in range(1, plan.steps):
                net.honest.attack(forge.within_bound(ahead))

    try:
        net.honest.play(before=before)
        codes = net.wait()
    finally:
        net.close()
    assert codes == [0, None, 0, 0]
    done = net.last_metrics(0)
    # the forgeries came first on the link and stand for node 1 in rounds 1..T-1; having
    # "seen" node 1 ahead, the target may stop waiting for its round-0 message (a dropout);
    # the honest frames came second (replays, or too late once the target moved on)
    assert done["received"] + done["missing"] == 2 * plan.steps and done["missing"] <= 1
    assert set(done["rejected"]) <= set(campaign.ROUND_REASONS)
    for u in (0, 2, 3):
        theta = np.load(Path(net.config(u).final_model))
        assert np.all(np.isfinite(theta)) and np.abs(theta).max() <= oracle.bound
    assert net.run.start(0).wait(timeout=120) == 0
