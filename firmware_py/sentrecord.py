"""The sent-round record: the last round whose message may have left the device.

Written before every send and read at start by :mod:`firmware_py.daemon` (which hands the
round to :mod:`firmware_py.recovery`). The file is created once, complete, by
:func:`firmware_py.checkpoint.atomic_write` (temporary file, fsync, rename, fsync the
folder) and then updated in place: it holds two slots of :data:`SLOT` bytes (each its own
file-system block), and a round is written into the slot that does *not* hold the newest
valid record, with one ``pwrite`` and one ``fdatasync`` — no temporary file, no rename, no
folder fsync, and (the file's size and blocks never change) no file-system metadata to
commit. A slot is ``MAGIC``, a write count (which of two slots of the same round is newer),
the round, the run id, the sha256 of the round's message frames, and a BLAKE2b checksum of
all that. A write torn by a crash or a power cut damages at most the slot being written,
which was not the newest: the reader takes the newest slot whose checksum holds, so it
finds either the round being recorded (if the write reached the disk whole) or the round
before it, which was the last one sent (the round being recorded is sent only after
``fdatasync`` returned). A sent round is never lost and an unsent one never appears.

The message digest lets a restarted device check that a round it sends again is the
message it sent the first time (:meth:`SentRecord.check_resend`). Files of the earlier
format (one JSON object ``{"run", "round"}``) are still read; the first write replaces
them by the slot file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from firmware_py import checkpoint, resources

__all__ = ["MAGIC", "SIZE", "SLOT", "Sent", "SentRecord", "SentRecordError", "read"]

#: First bytes of a valid slot.
MAGIC = b"EDGEDPS1"
#: Bytes per slot: each slot sits in its own file-system block, so writing one never
#: rewrites the other's sectors.
SLOT = 4096
#: Size of the record file (two slots).
SIZE = 2 * SLOT
_FIELDS = struct.Struct("<8sQQB64s32s")  # magic, write count, round, run id length, run id, digest
_CHECK = 32  # BLAKE2b-256 of the fields


class SentRecordError(RuntimeError):
    """The record exists but no slot of it can be trusted."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One record: ``round`` of run ``run`` was (perhaps) sent; ``message`` is the sha256 of
    its frames (empty in records of the earlier format)."""

    run: str
    round: int
    message: bytes = b""
    count: int = 0  # how many records the file had held (orders slots of equal rounds)


def encode_slot(sent: Sent) -> bytes:
    """The bytes of one slot holding ``sent``."""
    run = sent.run.encode()
    if len(run) > 64 or len(sent.message) not in (0, 32) or sent.round < 0:
        raise ValueError(f"Expected a run id of <= 64 bytes and a sha256 digest, got {sent!r}.")
    fields = _FIELDS.pack(MAGIC, sent.count, sent.round, len(run), run, sent.message)
    return fields + hashlib.blake2b(fields, digest_size=_CHECK).digest()


def decode_slot(data: bytes) -> Sent | None:
    """The record in one slot, None if the slot is empty, torn or damaged."""
    fields, check = data[: _FIELDS.size], data[_FIELDS.size : _FIELDS.size + _CHECK]
    if len(check) != _CHECK or hashlib.blake2b(fields, digest_size=_CHECK).digest() != check:
        return None
    magic, count, rnd, length, run, message = _FIELDS.unpack(fields)
    if magic != MAGIC or length > 64:
        return None
    try:
        return Sent(run[:length].decode(), rnd, message if any(message) else b"", count)
    except UnicodeDecodeError:
        return None


def _slots(data: bytes) -> list[Sent | None]:
    return [decode_slot(data[i * SLOT : (i + 1) * SLOT]) for i in range(2)]


def read(path: Path) -> Sent | None:
    """The newest record in ``path`` (None if there is no file); SentRecordError if the
    file exists but holds no valid record."""
    return SentRecord(path).last


class SentRecord:
    """The record file of one state folder (read when made; :meth:`write` updates it)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.last: Sent | None = None
        self._newest: int | None = None  # the slot holding ``last``; None: no slot file yet
        self._failed = False  # an in-place write failed: the next one rewrites the file
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SentRecordError(f"{self.path}: unreadable sent-round record ({exc})") from None
        if len(data) != SIZE:  # a record of the earlier format is a short JSON object
            self.last = self._earlier_format(data)
            return
        slots = _slots(data)
        valid = [i for i, s in enumerate(slots) if s is not None]
        if not valid:
            raise SentRecordError(
                f"{self.path}: damaged sent-round record (no slot passes its checksum)"
            )
        self._newest = max(valid, key=lambda i: (slots[i].round, slots[i].count))
        self.last = slots[self._newest]

    def _earlier_format(self, data: bytes) -> Sent:
        try:
            record = json.loads(data)
            return Sent(str(record["run"]), int(record["round"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SentRecordError(f"{self.path}: unreadable sent-round record ({exc})") from None

    def check_resend(self, rnd: int, message: bytes) -> str | None:
        """Why sending ``message`` (sha256 of the frames) as round ``rnd`` would send
        another message for a round already sent; None if it is safe."""
        last = self.last
        if last is None or last.round != rnd or not last.message or last.message == message:
            return None
        return (
            f"round {rnd} was already sent as message {last.message.hex()[:16]} but this "
            f"state gives {message.hex()[:16]}: sending it would release that round's noise "
            "with another model"
        )

    def write(self, run: str, rnd: int, message: bytes) -> None:
        """Record round ``rnd`` durably (returns once it is on disk); raises OSError."""
        if self.last is not None and rnd < self.last.round:
            raise ValueError(f"round {rnd} is behind the recorded round {self.last.round}")
        sent = Sent(run, rnd, message, 0 if self.last is None else self.last.count + 1)
        slot = encode_slot(sent)
        if self._newest is None or self._failed:  # first record, an earlier-format file, or
            # after a failed write (a page whose fdatasync failed may read back clean): the
            # whole file, atomically
            image = bytearray(SIZE)
            image[: len(slot)] = slot
            checkpoint.atomic_write(self.path, bytes(image))
            self._newest, self.last, self._failed = 0, sent, False
            return
        other = 1 - self._newest  # never the slot holding the newest record
        try:
            fd = resources.open_fd(self.path, os.O_WRONLY)
            try:
                if os.pwrite(fd, slot, other * SLOT) != len(slot):
                    raise OSError(errno.ENOSPC, f"short write to {self.path}")
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError:
            self._failed = True
            raise
        self._newest, self.last = other, sent
