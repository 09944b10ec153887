"""The release ledger: for every noise stream of a secret, the last round it released.

A round's message is a pure function of the state the round starts from and of the round's
noise draw, so each draw may go out with one message only (DESIGN §6). Before it sends a
round the daemon records, durably, the round and the sha256 of its frames here; at start it
claims the run's stream here, and a restart resumes only from a state that repeats the last
recorded round bit for bit or is past it (:mod:`firmware_py.recovery`).

The ledger lives beside the noise secret (``<secret>.ledger``), never in the state folder,
so that a state folder wiped, or put back from an older copy — a backup, an SD-card or VM
snapshot, an rsync of the state — is caught by what it does not carry. It is made together
with the secret (``edgedp keys gen``: :func:`create`) and never re-made by the agent: a
secret without its ledger can no longer show which rounds it released.

File layout (0600, fixed size from creation, so nothing but data is ever written after it):

* a header block: :data:`MAGIC`, the slot size, a binding to the secret (keyed BLAKE2b of a
  label, the secret as the key: a ledger of another secret is refused) and a checksum;
* two slots written in turn in place (one ``pwrite`` of the slot's used bytes and one
  ``fdatasync``; never the slot holding the newest table), each the whole table — a write
  count and, per stream, the SHA-256 of (plan hash, run id, node id), the last round
  released (−1: claimed, nothing sent yet) and the sha256 of that round's message — with a
  BLAKE2b checksum.

What each file operation meets:

* **deleted**: a secret without its ledger is refused (:class:`LedgerError`, exit 4);
* **cut or extended**: the size is fixed at creation, so any other size is refused — there
  is no "torn last line" to forgive;
* **a torn slot**: only a crash inside a write tears a slot, and never the newest one; the
  other slot then holds the table before that write, whose round was not sent (the send
  waits for ``fdatasync``). A failed write is retried into the same slot, so the newest
  table is not touched until a newer one is durable;
* **both slots or the header damaged**, **another secret's ledger**: refused;
* **an older copy put back on its own**: every checkpoint records the mark it was saved
  after; a checkpoint past the ledger is refused (:mod:`firmware_py.daemon`);
* **a second process**: the agent holds an exclusive lock on the ledger (and on the secret
  file) for its life; a second agent on the same secret is refused.

What software on the device cannot tell apart from a normal restart — the whole disk,
secret and ledger included, rolled back together, or a copy of the secret and its ledger run
as a second device — is in docs/DEVICE_RUNTIME.md with what the operator does about it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from firmware_py import checkpoint, resources

__all__ = [
    "HEADER",
    "MAGIC",
    "SLOT",
    "LedgerError",
    "Mark",
    "ReleaseLedger",
    "create",
    "ledger_path",
    "read",
    "stream_id",
]

#: First bytes of a release ledger.
MAGIC = b"EDGEDPL2"
#: Bytes of the header block; the slots start at block boundaries after it.
HEADER = 4096
#: Default bytes per slot: room for :func:`capacity` streams (runs) of one secret.
SLOT = 64 * 1024
_HEAD = struct.Struct("<8sII32sd")  # magic, version, slot size, binding, created
_SLOT_HEAD = struct.Struct("<8sQI")  # slot magic, write count, streams
_ENTRY = struct.Struct("<32sq32s")  # stream id, last round released (-1: none), message
_CHECK = 32  # BLAKE2b-256
_SLOT_MAGIC = b"EDGEDPS2"
_VERSION = 1


class LedgerError(RuntimeError):
    """The ledger is missing, damaged, another secret's or held by another agent: the
    device cannot show which rounds it released, so it refuses to send anything."""


@dataclass(frozen=True, slots=True)
class Mark:
    """The last round a stream released (−1: claimed, nothing sent) and the sha256 of that
    round's frames (empty for −1)."""

    round: int
    message: bytes = b""


def ledger_path(secret_file: Path) -> Path:
    """Where the ledger of the noise secret in ``secret_file`` lives: beside it."""
    secret_file = Path(secret_file)
    return secret_file.with_name(secret_file.name + ".ledger")


def stream_id(plan_hash: str, run: str, node: int) -> bytes:
    """The 32-byte name of the stream (plan, run, node) in the ledger."""
    return hashlib.sha256(f"edgedp stream\0{plan_hash}\0{run}\0{node}".encode()).digest()


def capacity(slot: int = SLOT) -> int:
    """How many streams a slot of ``slot`` bytes holds."""
    return (slot - _SLOT_HEAD.size - _CHECK) // _ENTRY.size


def _binding(secret: bytes) -> bytes:
    key = hashlib.blake2b(secret).digest()  # any length of secret -> a 64-byte key
    return hashlib.blake2b(b"edgedp release ledger", key=key, digest_size=32).digest()


def _header(secret: bytes, slot: int) -> bytes:
    head = _HEAD.pack(MAGIC, _VERSION, slot, _binding(secret), time.time())
    head += hashlib.blake2b(head, digest_size=_CHECK).digest()
    return head + bytes(HEADER - len(head))


def _slot_bytes(count: int, table: dict[bytes, Mark]) -> bytes:
    body = _SLOT_HEAD.pack(_SLOT_MAGIC, count, len(table))
    body += b"".join(
        _ENTRY.pack(sid, mark.round, mark.message.ljust(32, b"\0"))
        for sid, mark in sorted(table.items())
    )
    return body + hashlib.blake2b(body, digest_size=_CHECK).digest()


def _read_slot(data: bytes) -> tuple[int, dict[bytes, Mark]] | None:
    """(write count, table) of one slot, None if it is empty, torn or damaged."""
    if len(data) < _SLOT_HEAD.size + _CHECK:
        return None
    magic, count, n = _SLOT_HEAD.unpack_from(data)
    end = _SLOT_HEAD.size + n * _ENTRY.size
    if magic != _SLOT_MAGIC or end + _CHECK > len(data):
        return None
    if hashlib.blake2b(data[:end], digest_size=_CHECK).digest() != data[end : end + _CHECK]:
        return None
    table = {}
    for i in range(n):
        sid, rnd, message = _ENTRY.unpack_from(data, _SLOT_HEAD.size + i * _ENTRY.size)
        if rnd < -1 or sid in table:
            return None
        table[sid] = Mark(rnd, message if rnd >= 0 else b"")
    return count, table


def create(path: Path, secret: bytes, *, slot: int = SLOT) -> None:
    """Write a new, empty ledger for ``secret`` at ``path`` (0600) durably; refuses
    (FileExistsError) to replace an existing one — that would forget what it recorded."""
    path = Path(path)
    if slot < _SLOT_HEAD.size + _CHECK + _ENTRY.size or slot % 512:
        raise ValueError(f"Expected a slot of whole 512-byte sectors with room, got {slot}.")
    image = bytearray(HEADER + 2 * slot)
    image[:HEADER] = _header(secret, slot)
    empty = _slot_bytes(0, {})
    image[HEADER : HEADER + len(empty)] = empty
    tmp = path.with_name(f".{path.name}.new.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(image)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)  # never over an existing ledger (EEXIST)
    finally:
        tmp.unlink(missing_ok=True)
    checkpoint.sync_folder(path.parent)


def _parse(fd: int, path: Path, secret: bytes) -> tuple[int, int, dict[bytes, Mark], int]:
    """(slot size, write count, table, newest slot) of the ledger open at ``fd``."""
    data = os.pread(fd, HEADER, 0)
    head = data[: _HEAD.size]
    check = data[_HEAD.size : _HEAD.size + _CHECK]
    if len(head) < _HEAD.size or hashlib.blake2b(head, digest_size=_CHECK).digest() != check:
        raise LedgerError(f"{path}: damaged release ledger or of an earlier format")
    magic, version, slot, binding, _ = _HEAD.unpack(head)
    if magic != MAGIC or version != _VERSION:
        raise LedgerError(f"{path}: not a release ledger of this version")
    if binding != _binding(secret):
        raise LedgerError(f"{path}: the release ledger of another noise secret")
    size = os.fstat(fd).st_size
    if size != HEADER + 2 * slot:
        raise LedgerError(
            f"{path}: the release ledger was cut or extended ({size:,} bytes, made with "
            f"{HEADER + 2 * slot:,})"
        )
    slots = [_read_slot(os.pread(fd, slot, HEADER + i * slot)) for i in range(2)]
    valid = [(found[0], i, found[1]) for i, found in enumerate(slots) if found is not None]
    if not valid:
        raise LedgerError(f"{path}: damaged release ledger (no slot passes its checksum)")
    count, newest, table = max(valid, key=lambda v: v[0])
    return slot, count, table, newest


def read(path: Path, secret: bytes) -> dict[bytes, Mark]:
    """Every stream of the ledger at ``path`` with its mark, without taking its lock (for
    inspection; raises :class:`LedgerError` as opening it for an agent would)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise LedgerError(f"{path}: the release ledger is missing") from None
    try:
        return _parse(fd, Path(path), secret)[2]
    finally:
        os.close(fd)


class ReleaseLedger:
    """The ledger at ``path``, checked against ``secret`` and locked for this process.

    Raises:
      LedgerError: missing, of another size, damaged, of another secret, or locked by
        another process (the message names the way out).
    """

    def __init__(self, path: Path, secret: bytes) -> None:
        self.path = Path(path)
        try:
            self._fd = resources.open_fd(self.path, os.O_RDWR)
        except FileNotFoundError:
            raise LedgerError(
                f"{self.path}: the release ledger of this noise secret is missing, so the "
                "device cannot show which rounds it released"
            ) from None
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open the release ledger ({exc})") from None
        try:
            self._load(secret)
        except BaseException:
            os.close(self._fd)
            raise

    def _load(self, secret: bytes) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LedgerError(
                f"{self.path}: another edgedp-agent uses this noise secret (it holds the "
                "ledger's lock): two agents with one secret would send one noise draw twice"
            ) from None
        self.slot, self._count, self._table, newest = _parse(self._fd, self.path, secret)
        self._target = 1 - newest  # never the slot holding the newest table

    def close(self) -> None:
        """Release the lock (also done by the kernel when the process ends)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def mark(self, stream: bytes) -> Mark | None:
        """The stream's mark, None if this secret never claimed it."""
        return self._table.get(stream)

    def claim(self, stream: bytes) -> Mark:
        """The stream's mark, claiming it durably first if it is new (raises OSError)."""
        mark = self._table.get(stream)
        if mark is None:
            mark = Mark(-1)
            self._write({**self._table, stream: mark})
        return mark

    def resend_refusal(self, stream: bytes, rnd: int, message: bytes) -> str | None:
        """Why sending ``message`` (sha256 of the frames) as round ``rnd`` would release a
        round's noise with another message (or go back past the mark); None if it is safe."""
        mark = self._table.get(stream, Mark(-1))
        if rnd > mark.round or (rnd == mark.round and message == mark.message):
            return None
        if rnd == mark.round:
            return (
                f"round {rnd} was already sent as message {mark.message.hex()[:16]} but this "
                f"state gives {message.hex()[:16]}: sending it would release that round's "
                "noise with another model"
            )
        return f"round {rnd} is behind round {mark.round}, the last one this stream released"

    def advance(self, stream: bytes, rnd: int, message: bytes) -> None:
        """Record round ``rnd`` (its frames' sha256 ``message``) as released, durably;
        raises ValueError for a round :meth:`resend_refusal` refuses, OSError if the write
        failed (nothing changed: the next attempt writes the same slot)."""
        why = self.resend_refusal(stream, rnd, message)
        if why is not None:
            raise ValueError(why)
        if len(message) != 32:
            raise ValueError(f"Expected a sha256 digest of 32 bytes, got {len(message)}.")
        if self._table.get(stream) != Mark(rnd, message):
            self._write({**self._table, stream: Mark(rnd, message)})

    def _write(self, table: dict[bytes, Mark]) -> None:
        if len(table) > capacity(self.slot):
            raise LedgerError(
                f"{self.path}: the release ledger is full ({capacity(self.slot)} runs of this "
                "noise secret): retire the secret (`edgedp keys gen --noise --force`) and "
                "deploy a new run"
            )
        data = _slot_bytes(self._count + 1, table)
        n = os.pwrite(self._fd, data, HEADER + self._target * self.slot)
        if n != len(data):
            raise OSError(errno.ENOSPC, f"short write to {self.path}")
        os.fdatasync(self._fd)
        self._count, self._table, self._target = self._count + 1, table, 1 - self._target

    def streams(self) -> dict[bytes, Mark]:
        """Every stream this secret claimed, with its mark."""
        return dict(self._table)
