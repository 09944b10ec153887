"""The release ledger file (firmware_py.ledger) under failure injection and tampering.

A crash or power cut while a round is recorded can leave the slot being written torn at any
byte (or not written at all: a crash between ``pwrite`` and ``fdatasync``), or filled with
garbage. Whatever is left, the reader must find the round being recorded or the round before
it — never an older one (a sent round lost) and never anything else. What a crash cannot
do — cut or extend the file, damage the header, damage both slots, swap in another secret's
ledger, take it away — is refused, and so is a second process.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hostile import harness

from edgedp import rng
from firmware_py import config, deploy, ledger

SECRET = b"a device noise secret, 32 bytes."
A = ledger.stream_id("ab" * 32, "run-a", 0)
B = ledger.stream_id("ab" * 32, "run-b", 0)


def _digest(r: int) -> bytes:
    return hashlib.sha256(f"message of round {r}".encode()).digest()


def _book(path, rounds=(), stream=A, slot=4096):
    if not path.exists():
        ledger.create(path, SECRET, slot=slot)
    book = ledger.ReleaseLedger(path, SECRET)
    book.claim(stream)
    for r in rounds:
        book.advance(stream, r, _digest(r))
    return book


def _read(path, stream=A):
    book = ledger.ReleaseLedger(path, SECRET)
    try:
        return book.mark(stream)
    finally:
        book.close()


def test_rounds_are_recorded_in_alternating_slots_of_a_fixed_file(tmp_path):
    path = tmp_path / "node.noise.ledger"
    book = _book(path, [0])
    size, inode = path.stat().st_size, path.stat().st_ino
    assert size == ledger.HEADER + 2 * 4096 and path.stat().st_mode & 0o777 == 0o600
    for r in range(1, 6):
        book.advance(A, r, _digest(r))
    book.claim(B)  # a second run of the same secret: one more entry of the table
    book.close()
    assert _read(path) == ledger.Mark(5, _digest(5)) and _read(path, B) == ledger.Mark(-1)
    assert path.stat().st_ino == inode and path.stat().st_size == size  # in place
    assert not list(tmp_path.glob(".*"))
    again = ledger.ReleaseLedger(path, SECRET)
    with pytest.raises(ValueError, match="behind"):
        again.advance(A, 4, _digest(4))
    with pytest.raises(ValueError, match="already sent"):
        again.advance(A, 5, _digest(99))
    again.advance(A, 5, _digest(5))  # the same message again: nothing to write
    assert ledger.capacity(4096) >= 50 and ledger.capacity() >= 900


def _torn(before: bytes, after: bytes, cut: int, garbage: bytes = b"") -> bytes:
    """``after`` written up to byte ``cut`` of the slot that changed, ``before`` beyond it
    (optionally ``garbage`` from ``cut`` on: a sector holding neither)."""
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    start = changed[0] if changed else ledger.HEADER
    start -= (start - ledger.HEADER) % 4096
    out = bytearray(before)
    out[start : start + cut] = after[start : start + cut]
    out[start + cut : start + cut + len(garbage)] = garbage
    return bytes(out)


@pytest.mark.parametrize("rounds", [[0, 1, 2, 3], [0, 1, 7], [0, 4, 6], [2, 2, 3]])
def test_a_write_torn_anywhere_leaves_the_round_before_or_the_new_one(tmp_path, rounds):
    # [0, 4, 6]: rounds skipped by a rejoin or a rollback; [2, 2]: a round re-sent
    path = tmp_path / "ledger"
    book = _book(path, rounds[:-1])
    before = path.read_bytes()
    new = rounds[-1]
    book.advance(A, new, _digest(new))
    book.close()
    after = path.read_bytes()
    length = 200  # the slot's used bytes: 20 of header, 72 per stream, a 32-byte checksum
    found = set()
    for cut in range(0, length + 1, 3):  # 0: the write never reached the disk
        for garbage in (b"", b"\xff" * 7, os.urandom(64)):
            path.write_bytes(_torn(before, after, cut, garbage))
            got = _read(path)
            assert got in (
                ledger.Mark(rounds[-2], _digest(rounds[-2])),
                ledger.Mark(new, _digest(new)),
            ), (cut, garbage)
            found.add(got.round)
    path.write_bytes(after)
    assert _read(path).round == new and new in found


def test_every_bit_flip_of_the_newest_slot_leaves_the_older_one(tmp_path):
    path = tmp_path / "ledger"
    book = _book(path, [3])
    before = path.read_bytes()
    book.advance(A, 4, _digest(4))
    book.close()
    good = path.read_bytes()
    first = min(i for i in range(len(good)) if good[i] != before[i])
    newest = first - (first - ledger.HEADER) % 4096  # the slot the last write went to
    for byte in range(0, 124, 3):  # its used bytes (one stream)
        data = bytearray(good)
        data[newest + byte] ^= 1 << (byte % 8)
        path.write_bytes(bytes(data))
        assert _read(path) == ledger.Mark(3, _digest(3)), byte


@pytest.mark.parametrize(
    "damage, match",
    [
        ("both slots", "no slot passes its checksum"),
        ("header", "damaged release ledger"),
        ("cut", "cut or extended"),
        ("extended", "cut or extended"),
        ("missing", "missing"),
        ("earlier format", "damaged release ledger"),
    ],
)
def test_what_a_crash_cannot_leave_is_refused(tmp_path, damage, match):
    path = tmp_path / "ledger"
    _book(path, [0, 1]).close()
    data = bytearray(path.read_bytes())
    if damage == "both slots":
        data[ledger.HEADER :] = bytes(len(data) - ledger.HEADER)
    elif damage == "header":
        data[20] ^= 1
    elif damage == "cut":
        data = data[:-1]
    elif damage == "extended":
        data += b"\0"
    elif damage == "earlier format":
        data = bytearray(json.dumps({"plan_hash": "ab", "run": "r", "node": 0}).encode() + b"\n")
    path.write_bytes(bytes(data))
    if damage == "missing":
        path.unlink()
    with pytest.raises(ledger.LedgerError, match=match):
        _read(path)


def test_another_secrets_ledger_and_a_second_process_are_refused(tmp_path):
    path = tmp_path / "ledger"
    _book(path, [0]).close()
    with pytest.raises(ledger.LedgerError, match="another noise secret"):
        ledger.ReleaseLedger(path, b"another secret of thirty-two byte")
    holder = ledger.ReleaseLedger(path, SECRET)
    code = (
        "import sys; from firmware_py import ledger\n"
        f"ledger.ReleaseLedger({str(path)!r}, {SECRET!r})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "another edgedp-agent uses this noise secret" in out.stderr
    holder.close()
    with pytest.raises(FileExistsError):
        ledger.create(path, SECRET)  # never over an existing ledger


def test_a_failed_write_is_retried_into_the_same_slot(tmp_path, monkeypatch):
    # after a failed fdatasync a page may read back clean without being on disk: the newest
    # durable table must not be overwritten until a newer one is durable
    path = tmp_path / "ledger"
    book = _book(path, [0])
    before = path.read_bytes()
    book.advance(A, 1, _digest(1))
    clean = path.read_bytes()  # round 1 durable, in the slot the last write changed
    calls = []

    def failing(fd):
        calls.append(fd)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    for _ in range(2):
        with pytest.raises(OSError):
            book.advance(A, 2, _digest(2))
    assert book.mark(A) == ledger.Mark(1, _digest(1)) and len(calls) == 2
    monkeypatch.undo()
    failed = path.read_bytes()
    book.advance(A, 2, _digest(2))
    book.close()
    assert _read(path) == ledger.Mark(2, _digest(2))
    done = path.read_bytes()

    def slots(a, b):
        return {(i - ledger.HEADER) // 4096 for i in range(len(a)) if a[i] != b[i]}

    (newest,) = slots(before, clean)  # where round 1 is
    assert slots(clean, failed) == slots(clean, done) == {1 - newest}  # never round 1's slot


def test_keys_gen_makes_the_ledger_and_noise_retires_a_secret(tmp_path):
    info = deploy.generate_keys(tmp_path / "keys", "node-0")
    book = ledger.ReleaseLedger(info["ledger_file"], open(info["noise_secret_file"], "rb").read())
    book.claim(A)
    book.close()
    with pytest.raises(FileExistsError):
        deploy.generate_keys(tmp_path / "keys", "node-0", noise_only=True)
    public = info["public_key"]
    new = deploy.generate_keys(tmp_path / "keys", "node-0", noise_only=True, force=True)
    assert new["public_key"] == public  # the neighbours need nothing new
    secret = open(new["noise_secret_file"], "rb").read()
    fresh = ledger.ReleaseLedger(new["ledger_file"], secret)
    assert fresh.streams() == {}  # the old secret's runs are not this secret's


def test_an_agent_refuses_to_send_a_recorded_round_with_another_message(tmp_path):
    p = harness.write_plan(tmp_path / "run.plan", topology="ring:3", steps=4)
    lr = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", start=[0])
    cfg = config.load(lr.configs[0])
    stream = ledger.stream_id(p.plan_hash, cfg.run_id, 0)
    secret = rng.seed_secret(p.seed)  # plan-seed runs keep their ledger in the state folder
    deadline = time.monotonic() + 60
    while not any(m["event"] == "sent" for m in harness.lines(cfg.metrics)):  # node 0 alone: round
        assert lr.processes[0].poll() is None, "node 0 stopped before sending round 0"
        assert time.monotonic() < deadline
        time.sleep(0.02)  # 0 is recorded and sent, then it waits for its neighbours
    lr.processes[0].send_signal(signal.SIGTERM)
    assert lr.processes[0].wait(timeout=60) == 128 + signal.SIGTERM
    releases = cfg.checkpoint_dir / "releases"
    book = ledger.ReleaseLedger(releases, secret)
    good = book.mark(stream)
    assert good.round == 0 and len(good.message) == 32
    book.close()
    kept = {f: f.read_bytes() for f in cfg.checkpoint_dir.iterdir() if f.is_file()}
    # the ledger names another message for round 0 (as if the state had been altered): the
    # restarted agent computes round 0 again, sees the difference and sends nothing
    _rewrite(releases, secret, stream, _digest(0))
    lr.start(0)
    assert lr.processes[0].wait(timeout=60) == 4
    assert "round 0 was already sent as message" in (lr.directory / "node-0.log").read_text()
    assert [m["round"] for m in harness.lines(cfg.metrics) if m["event"] == "sent"] == [0]
    # the folder as it was (the true digest recorded): round 0 re-sent bit for bit, the run
    # completes
    for f, data in kept.items():
        f.write_bytes(data)
    for u in range(3):
        lr.start(u)
    assert lr.wait(timeout=120) == [0, 0, 0]
    sent = [(m["round"], m["message"]) for m in harness.lines(cfg.metrics) if m["event"] == "sent"]
    assert sent[:2] == [(0, good.message.hex()[:16])] * 2
    assert [r for r, _ in sent] == [0, 0, 1, 2, 3]


def _rewrite(path, secret, stream, message):
    """A new ledger at ``path`` recording round 0 of ``stream`` as ``message``."""
    path.unlink()
    ledger.create(path, secret, slot=4096)
    book = ledger.ReleaseLedger(path, secret)
    book.claim(stream)
    book.advance(stream, 0, message)
    book.close()


def test_a_full_ledger_refuses_a_new_run_and_keeps_the_old_ones(tmp_path):
    path = tmp_path / "ledger"
    ledger.create(path, SECRET, slot=512)  # room for capacity(512) streams
    book = ledger.ReleaseLedger(path, SECRET)
    streams = [ledger.stream_id("ab" * 32, f"run-{i}", 0) for i in range(ledger.capacity(512))]
    for s in streams:
        book.claim(s)
    with pytest.raises(ledger.LedgerError, match="full"):
        book.claim(ledger.stream_id("ab" * 32, "one-more", 0))
    book.advance(streams[0], 0, _digest(0))  # the streams it holds still advance
    book.close()
    assert _read(path, streams[0]) == ledger.Mark(0, _digest(0))
