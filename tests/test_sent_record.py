"""The sent-round record written in place (firmware_py.sentrecord), under failure injection.

A crash or power cut while a round is recorded can leave the slot being written torn at any
byte (or not written at all: a crash between ``pwrite`` and ``fdatasync``), or filled with
garbage. Whatever is left, the reader must find the round being recorded or the round before
it — never an older one (a sent round lost) and never anything else — and a round sent again
must be the message sent the first time.
"""

import hashlib
import json
import os
import signal
import time

import pytest
from hostile import harness

from firmware_py import config, deploy, sentrecord

RUN = "0123456789abcdef0123456789abcdef"


def _digest(r: int) -> bytes:
    return hashlib.sha256(f"message of round {r}".encode()).digest()


def _key(sent):
    return None if sent is None else (sent.run, sent.round, sent.message)


def _record(path, rounds):
    rec = sentrecord.SentRecord(path)
    for r in rounds:
        rec.write(RUN, r, _digest(r))
    return rec


def _torn(before: bytes, after: bytes, cut: int, garbage: bytes = b"") -> bytes:
    """``after`` written up to byte ``cut`` of the slot that changed, ``before`` beyond it
    (optionally ``garbage`` from ``cut`` on: a sector holding neither)."""
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    start = changed[0] - changed[0] % sentrecord.SLOT if changed else 0
    out = bytearray(before)
    out[start : start + cut] = after[start : start + cut]
    out[start + cut : start + cut + len(garbage)] = garbage
    return bytes(out)


def test_rounds_are_recorded_in_alternating_slots_of_a_fixed_file(tmp_path):
    path = tmp_path / "sent"
    assert sentrecord.read(path) is None
    rec = _record(path, [0])
    assert path.stat().st_size == sentrecord.SIZE and path.stat().st_mode & 0o777 == 0o600
    inode = path.stat().st_ino
    for r in range(1, 6):
        rec.write(RUN, r, _digest(r))
        assert _key(sentrecord.read(path)) == (RUN, r, _digest(r))
    assert path.stat().st_ino == inode and path.stat().st_size == sentrecord.SIZE  # in place
    assert not list(tmp_path.glob(".sent.tmp.*"))
    with pytest.raises(ValueError, match="behind"):
        rec.write(RUN, 4, _digest(4))


@pytest.mark.parametrize("rounds", [[0, 1, 2, 3], [0, 1, 7], [0, 4, 6], [2, 2, 3]])
def test_a_write_torn_anywhere_leaves_the_round_before_or_the_new_one(tmp_path, rounds):
    # [0, 4, 6]: rounds skipped by a rejoin or a rollback land on the same parity; [2, 2]:
    # a round re-sent after a restart
    path = tmp_path / "sent"
    rec = _record(path, rounds[:-1])
    before = path.read_bytes()
    new = rounds[-1]
    rec.write(RUN, new, _digest(new))
    after = path.read_bytes()
    length = len(sentrecord.encode_slot(sentrecord.Sent(RUN, new, _digest(new))))
    found = set()
    for cut in range(length + 1):  # 0: the write never reached the disk; length: it did
        for garbage in (b"", b"\xff" * 7, os.urandom(64)):
            path.write_bytes(_torn(before, after, cut, garbage))
            got = sentrecord.read(path)
            assert _key(got) in (
                (RUN, rounds[-2], _digest(rounds[-2])),
                (RUN, new, _digest(new)),
            ), (cut, garbage)
            found.add(got.round)
            if cut not in (0, length // 2, length) or garbage:
                continue
            # the device goes on from what it found: the next round is recorded and read
            again = sentrecord.SentRecord(path)
            again.write(RUN, new + 1, _digest(new + 1))
            assert sentrecord.read(path).round == new + 1
    assert new in found


def test_every_single_bit_flip_of_a_slot_is_detected(tmp_path):
    path = tmp_path / "sent"
    _record(path, [3, 4])
    good = path.read_bytes()
    length = len(sentrecord.encode_slot(sentrecord.Sent(RUN, 4, _digest(4))))
    for slot, survivor in ((0, 4), (1, 3)):
        for byte in range(length):
            data = bytearray(good)
            data[slot * sentrecord.SLOT + byte] ^= 1 << (byte % 8)
            path.write_bytes(bytes(data))
            assert sentrecord.read(path).round == survivor


def test_a_record_with_no_valid_slot_is_refused_not_taken_for_none(tmp_path):
    path = tmp_path / "sent"
    _record(path, [0, 1])
    path.write_bytes(bytes(sentrecord.SIZE))
    with pytest.raises(sentrecord.SentRecordError, match="no slot passes its checksum"):
        sentrecord.read(path)
    path.write_bytes(b"\x01garbage")
    with pytest.raises(sentrecord.SentRecordError, match="unreadable"):
        sentrecord.read(path)


def test_the_earlier_json_record_is_read_and_replaced_on_the_next_write(tmp_path):
    path = tmp_path / "sent"
    path.write_text(json.dumps({"run": RUN, "round": 5}))
    rec = sentrecord.SentRecord(path)
    assert rec.last == sentrecord.Sent(RUN, 5) and rec.check_resend(5, _digest(5)) is None
    rec.write(RUN, 6, _digest(6))
    assert path.stat().st_size == sentrecord.SIZE
    assert _key(sentrecord.read(path)) == (RUN, 6, _digest(6))


def test_a_failed_in_place_write_is_retried_as_a_whole_new_file(tmp_path):
    path = tmp_path / "sent"
    rec = _record(path, [0, 1])
    os.rename(path, tmp_path / "away")
    path.mkdir()  # the in-place open and the rewrite both fail (EISDIR)
    for _ in range(2):
        with pytest.raises(OSError):
            rec.write(RUN, 2, _digest(2))
    assert sentrecord.read(tmp_path / "away").round == 1  # untouched: nothing recorded
    path.rmdir()
    os.rename(tmp_path / "away", path)
    inode = path.stat().st_ino
    rec.write(RUN, 2, _digest(2))
    assert path.stat().st_ino != inode and sentrecord.read(path).round == 2
    rec.write(RUN, 3, _digest(3))  # in place again
    assert sentrecord.read(path).round == 3 and not list(tmp_path.glob(".sent.tmp.*"))


def test_a_round_sent_again_must_be_the_same_message(tmp_path):
    rec = _record(tmp_path / "sent", [0, 1, 2])
    again = sentrecord.SentRecord(tmp_path / "sent")
    assert again.check_resend(2, _digest(2)) is None
    assert again.check_resend(3, _digest(99)) is None  # a new round: anything goes
    why = again.check_resend(2, _digest(99))
    assert why is not None and "round 2 was already sent" in why
    assert rec.last.round == 2


def test_an_agent_refuses_to_send_a_recorded_round_with_another_message(tmp_path):
    harness.write_plan(tmp_path / "run.plan", topology="ring:3", steps=4)
    lr = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", start=[0])
    cfg = config.load(lr.configs[0])
    path = cfg.checkpoint_dir / "sent"
    while not path.exists():  # node 0 alone: round 0 is recorded and sent, then it waits
        assert lr.processes[0].poll() is None, "node 0 stopped before sending round 0"
        time.sleep(0.02)
    lr.processes[0].send_signal(signal.SIGTERM)
    assert lr.processes[0].wait(timeout=60) == 128 + signal.SIGTERM
    good = sentrecord.read(path)
    assert good.round == 0 and len(good.message) == 32
    # the record names another message for round 0 (as if the state had been altered):
    # the restarted agent computes round 0 again, sees the difference and sends nothing
    sentrecord.SentRecord(path).write(cfg.run_id, 0, _digest(0))
    lr.start(0)
    assert lr.processes[0].wait(timeout=60) == 4
    assert "round 0 was already sent as message" in (lr.directory / "node-0.log").read_text()
    lines = [json.loads(x) for x in cfg.metrics.read_text().splitlines()]
    assert [m["round"] for m in lines if m["event"] == "sent"] == [0]
    # with the true digest recorded, it re-sends round 0 bit for bit and the run completes
    sentrecord.SentRecord(path).write(cfg.run_id, 0, good.message)
    for u in range(3):
        lr.start(u)
    assert lr.wait(timeout=120) == [0, 0, 0]
    lines = [json.loads(x) for x in cfg.metrics.read_text().splitlines()]
    sent = [(m["round"], m["message"]) for m in lines if m["event"] == "sent"]
    assert sent[:2] == [(0, good.message.hex()[:16])] * 2 and [r for r, _ in sent] == [
        0,
        0,
        1,
        2,
        3,
    ]
