"""Checkpoint files (raw array buffers, streamed sha256) and the background checkpoint write.

The daemon writes the checkpoint of round r+1 in a thread while it computes round r+1 and
waits for it before recording r+1 as sent. The new crash window — a kill while that write
and ``begin_round`` run together — is exercised with kill -9 on real agents, at the moment
a write starts (the in-place overwrite of ``checkpoint.prev``, or a new file's temporary)
and while a checkpoint that cannot be written is retried (the next round computed meanwhile
must not be recorded as sent): after every kill the last round released is never ahead of the
newest usable checkpoint, restarts never refuse, and every re-sent round repeats its noise
and message digests. A torn in-place write and a swap of the two names undone by a power
cut are made by hand and resumed from.
"""

import hashlib
import os
import signal
import struct
import time

import numpy as np
import pytest
from hostile import harness, kill

from edgedp import _codec
from firmware_py import checkpoint, config, deploy

BODY = {
    "plan_hash": b"h" * 32,
    "round": 7,
    "state": {"theta": np.linspace(-1.0, 1.0, 1001), "m": np.arange(6.0).reshape(2, 3)},
    "last_seen": {"3": np.full(4, 0.5, dtype=np.float32)},
    "metrics": {"rounds": 7, "rejected": {"Malformed": 2}},
}


def _same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_round_trip_keeps_arrays_bit_for_bit_and_the_previous_file(tmp_path):
    path = tmp_path / "checkpoint"
    checkpoint.save(path, BODY)
    checkpoint.save(path, {**BODY, "round": 8})
    assert path.read_bytes().startswith(checkpoint.MAGIC)
    assert _same(checkpoint.load(path), {**BODY, "round": 8})
    assert _same(checkpoint.load(checkpoint.previous(path)), BODY)
    got = checkpoint.load(path)["state"]["theta"]
    got += 1.0  # restored arrays are writable (the agent owns them)


def test_checkpoints_of_the_earlier_format_are_still_read(tmp_path):
    blob = _codec.encode(BODY)
    old = _codec.encode({"sha256": hashlib.sha256(blob).hexdigest(), "body": blob})
    (tmp_path / "old").write_bytes(old)
    assert _same(checkpoint.load(tmp_path / "old"), BODY)


@pytest.mark.parametrize("where", ["skeleton", "array", "digest", "end"])
def test_any_damage_is_refused(tmp_path, where):
    path = tmp_path / "checkpoint"
    checkpoint.save(path, BODY)
    data = bytearray(path.read_bytes())
    if where == "end":
        data = data[:-3]  # truncated
    else:
        at = {"digest": len(checkpoint.MAGIC) + 5, "skeleton": 60, "array": len(data) // 2}
        data[at[where]] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match="checksum mismatch"):
        checkpoint.load(path)


def test_a_forged_skeleton_with_a_valid_digest_is_refused(tmp_path):
    skeleton = _codec.encode({"state": {"__raw__": 0, "dtype": "<f8", "shape": [10**9]}})
    rest = struct.pack("<Q", len(skeleton)) + skeleton + b"\0" * 16
    path = tmp_path / "checkpoint"
    path.write_bytes(checkpoint.MAGIC + hashlib.sha256(rest).digest() + rest)
    with pytest.raises(checkpoint.CheckpointError, match="unreadable checkpoint"):
        checkpoint.load(path)


def test_a_failed_background_write_is_reported_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "checkpoint"
    (tmp_path / f".checkpoint.tmp.{os.getpid()}").mkdir()  # in the writer's way: EISDIR
    pending = checkpoint.Pending(path, checkpoint.copy_arrays(BODY))
    assert isinstance(pending.wait(), OSError) and not path.exists()
    (tmp_path / f".checkpoint.tmp.{os.getpid()}").rmdir()
    assert checkpoint.Pending(path, BODY).wait() is None and _same(checkpoint.load(path), BODY)


def _newest_round(folder) -> int:
    """The round of the newest checkpoint file that loads (0: none, the initial state)."""
    rounds = [0]
    for name in ("checkpoint", "checkpoint.prev"):
        try:
            snap = checkpoint.load(folder / name)
        except checkpoint.CheckpointError:  # e.g. torn by the kill
            continue
        rounds += [] if snap is None else [snap["round"]]
    return max(rounds)


def test_kill_nine_while_the_checkpoint_is_written_beside_the_next_round(tmp_path):
    plan = harness.write_plan(tmp_path / "run.plan", topology="ring:3", steps=60)
    lr = deploy.local_run(
        tmp_path / "run.plan",
        tmp_path / "run",
        private_noise=True,
        round_timeout=5.0,
        startup_timeout=5.0,
    )
    cfg = config.load(lr.configs[0])
    inside, kills = 0, 0
    while inside < 2 and kills < 8:
        kill._wait_for(cfg, lr.processes[0], "round", kills + 1)
        kill._wait_for_write(cfg, lr.processes[0])
        proc = lr.processes[0]
        assert proc.poll() is None, "node 0 stopped before the kill"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        inside += any(
            name.startswith((".checkpoint.", "checkpoint.prev"))
            for name in kill._phase(cfg, proc.pid)[1]
        )
        # what a restart finds: the last round released never ahead of the newest usable
        # checkpoint
        assert kill.released(cfg, plan) <= _newest_round(cfg.checkpoint_dir)
        lr.start(0)
    assert inside >= 1, f"no kill of {kills} landed inside a background checkpoint write"
    # a checkpoint that cannot be written: both files also linked elsewhere (so neither is
    # overwritten in place: a new file is written) and a directory where that new file's
    # temporary goes. The next round is computed but not recorded as sent; kill -9 while
    # it waits, restart
    kill._wait_for(cfg, lr.processes[0], "round", kills + 1)
    proc = lr.processes[0]
    for name in ("checkpoint", "checkpoint.prev"):
        os.link(cfg.checkpoint_dir / name, tmp_path / f"held-{name}")
    blocker = cfg.checkpoint_dir / f".checkpoint.tmp.{proc.pid}"
    while True:
        try:
            blocker.mkdir()
            break
        except FileExistsError:  # a write is in flight: its file is renamed in a moment
            time.sleep(0.001)
    log = tmp_path / "run" / "node-0.log"
    deadline = time.monotonic() + 120
    while "checkpoint failed" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    assert kill.released(cfg, plan) <= _newest_round(cfg.checkpoint_dir)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    blocker.rmdir()
    kills += 1
    lr.start(0)
    assert lr.wait(timeout=300) == [0, 0, 0]
    lines = harness.lines(cfg.metrics)
    expected = kill.expected_noise(cfg, plan)
    by_round = {}
    for m in lines:
        if m["event"] == "sent":
            by_round.setdefault(m["round"], set()).add((m["noise"], m["message"]))
    assert sorted(by_round) == list(range(plan.steps))
    assert all(len(seen) == 1 for seen in by_round.values())  # re-sent bit for bit
    assert all({noise for noise, _ in by_round[r]} == {expected[r]} for r in by_round)
    assert sum(m["event"] == "start" for m in lines) == kills + 1


def test_saves_overwrite_the_older_file_in_place_unless_another_name_links_it(tmp_path):
    """Where names can be swapped atomically, a save overwrites ``.prev`` (two saves old) in
    place and swaps the names: the two files alternate, nothing is created or freed. A
    ``.prev`` another name also links is never written (its content stays); every save
    leaves the newest body and the one before."""
    path, prev = tmp_path / "checkpoint", checkpoint.previous(tmp_path / "checkpoint")
    for r in range(3):
        checkpoint.save(path, {**BODY, "round": r})
    inodes = {os.stat(path).st_ino, os.stat(prev).st_ino}
    for r in (3, 4, 5):
        old_prev = os.stat(prev).st_ino
        checkpoint.save(path, {**BODY, "round": r})
        if checkpoint._renameat2 is not None:  # Linux: the exchange was available
            assert os.stat(path).st_ino == old_prev
            assert {os.stat(path).st_ino, os.stat(prev).st_ino} == inodes
        assert checkpoint.load(path)["round"] == r and checkpoint.load(prev)["round"] == r - 1
        assert os.stat(path).st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".*.tmp.*"))
    os.link(prev, tmp_path / "elsewhere")  # round 4, now linked twice
    checkpoint.save(path, {**BODY, "round": 6})
    assert checkpoint.load(tmp_path / "elsewhere")["round"] == 4
    assert checkpoint.load(path)["round"] == 6 and checkpoint.load(prev)["round"] == 5
    assert not list(tmp_path.glob(".*.tmp.*"))
    small = {**BODY, "round": 7, "state": {"theta": np.zeros(3), "m": np.zeros((2, 3))}}
    checkpoint.save(path, small)  # shorter than the file it overwrites: cut to length
    checkpoint.save(path, {**BODY, "round": 8})
    assert _same(checkpoint.load(prev), small) and checkpoint.load(path)["round"] == 8


def test_a_torn_in_place_write_leaves_the_newer_file_and_is_detected(tmp_path):
    """A crash inside the in-place overwrite of ``.prev``: every prefix of the new bytes over
    the old file (and the old tail beyond it) fails the checksum or is the old body; the
    other file is untouched."""
    path, prev = tmp_path / "checkpoint", checkpoint.previous(tmp_path / "checkpoint")

    def body(r):
        return {**BODY, "round": r, "state": {**BODY["state"], "theta": np.full(1001, r / 7)}}

    checkpoint.save(path, body(1))
    checkpoint.save(path, body(2))
    old = prev.read_bytes()
    new = b"".join(bytes(b) for b in checkpoint.encode(body(3)))
    assert len(new) == len(old)
    differ = [i for i in range(len(new)) if new[i] != old[i]]  # digest, skeleton, theta
    for cut in [*range(0, len(new) + 1, 97), differ[0], differ[0] + 1, differ[-1] + 1]:
        prev.write_bytes(new[:cut] + old[cut:])
        if cut <= differ[0]:
            assert checkpoint.load(prev)["round"] == 1  # nothing of the new body yet
        elif cut > differ[-1]:
            assert _same(checkpoint.load(prev), body(3))  # the rest was already equal
        else:
            with pytest.raises(checkpoint.CheckpointError, match="checksum mismatch"):
                checkpoint.load(prev)
        assert checkpoint.load(path)["round"] == 2


def test_without_the_exchange_save_makes_a_new_file(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "_renameat2", None)
    path = tmp_path / "checkpoint"
    for r in range(4):
        checkpoint.save(path, {**BODY, "round": r})
    assert checkpoint.load(path)["round"] == 3
    assert checkpoint.load(checkpoint.previous(path))["round"] == 2
    assert not list(tmp_path.glob(".*.tmp.*"))


def test_in_place_saves_write_every_buffer_beyond_iov_max(tmp_path, monkeypatch):
    """A snapshot with more arrays than one ``pwritev`` takes (IOV_MAX) is written in
    groups; a short write is finished with ``pwrite``."""
    monkeypatch.setattr(checkpoint, "_IOV_MAX", 16)
    path = tmp_path / "checkpoint"
    body = {**BODY, "many": {str(i): np.full(3, float(i)) for i in range(40)}}
    for r in range(3):
        checkpoint.save(path, {**body, "round": r})
    assert _same(checkpoint.load(path), {**body, "round": 2})
    real = os.pwritev
    monkeypatch.setattr(os, "pwritev", lambda fd, bufs, off: real(fd, bufs[:1], off))
    checkpoint.save(path, {**body, "round": 3})  # every group written short
    assert _same(checkpoint.load(path), {**body, "round": 3})
    assert checkpoint.load(checkpoint.previous(path))["round"] == 2


def test_a_prev_this_process_cannot_write_is_replaced_not_overwritten(tmp_path, monkeypatch):
    path, prev = tmp_path / "checkpoint", checkpoint.previous(tmp_path / "checkpoint")
    for r in range(2):
        checkpoint.save(path, {**BODY, "round": r})
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(prev) else real(p, m))
    with open(prev, "rb") as old:  # the old file, whatever its name becomes
        checkpoint.save(path, {**BODY, "round": 2})  # e.g. a 0400 backup copied back
        assert checkpoint.load(path)["round"] == 2 and checkpoint.load(prev)["round"] == 1
        assert checkpoint.decode(old.read())["round"] == 0  # not written over


def test_names_are_made_durable_before_the_first_in_place_save(tmp_path, monkeypatch):
    """A save that changes names (a new file) is durable only at its folder fsync; until
    one succeeded (a failed fsync, another process's rename) the next in-place save fsyncs
    the folder first, so the two files' names are on disk before a round is recorded."""
    path = tmp_path / "checkpoint"
    checkpoint.save(path, {**BODY, "round": 0})
    checkpoint.save(path, {**BODY, "round": 1})
    synced = []
    real = checkpoint.sync_folder
    monkeypatch.setattr(checkpoint, "sync_folder", lambda f: (synced.append(f), real(f)))
    checkpoint.save(path, {**BODY, "round": 2})  # in place: the folder is already synced
    assert synced == []
    checkpoint._SYNCED.discard(tmp_path)  # as after a failed folder fsync, or a new process
    checkpoint.save(path, {**BODY, "round": 3})
    assert synced == [tmp_path]
    assert (
        checkpoint.load(path)["round"] == 3
        and checkpoint.load(checkpoint.previous(path))["round"] == 2
    )


def test_a_forked_child_has_its_own_writer(tmp_path):
    import multiprocessing

    path = tmp_path / "checkpoint"
    assert checkpoint.Pending(path, BODY).wait() is None  # the parent's writer thread runs
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()

    def child():
        w = checkpoint._WRITER
        q.put((w._thread is None, w._jobs.empty(), len(checkpoint._SYNCED)))

    proc = ctx.Process(target=child)
    proc.start()
    proc.join(30)
    assert q.get(timeout=5) == (True, True, 0) and proc.exitcode == 0


def test_a_second_agent_on_the_same_state_folder_refuses(tmp_path):
    import subprocess
    import sys

    harness.write_plan(tmp_path / "run.plan", topology="ring:3", steps=400)
    lr = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=5.0)
    try:
        cfg = config.load(lr.configs[0])
        kill._wait_for(cfg, lr.processes[0], "round", 1)
        second = subprocess.run(
            [sys.executable, "-m", "firmware_py.daemon", "--config", str(lr.configs[0])],
            cwd=lr.directory,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 4, second.stderr
        assert "another edgedp-agent runs on the state folder" in second.stderr
        assert lr.processes[0].poll() is None  # the first one runs on
    finally:
        for proc in lr.processes:
            proc.kill()
            proc.wait()
