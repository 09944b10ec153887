"""The wire format: pure encode/decode of gossip messages; sockets only move frames.

A message is a list of frames: frame 0 is a small msgpack header
``{v, plan, round, sender, kind, arrays: [[dtype, shape], ...]}`` and frames 1.. are the
arrays' raw little-endian bytes (pyzmq's "metadata frame + raw buffer" pattern). Decoding is
zero-copy (read-only ``np.frombuffer`` views) and strict: it checks everything before it
returns, never unpickles, and never chooses a class or function by a name taken from the
message. :func:`decode` checks structure; :func:`check` checks a decoded message against
the receiver's context (plan hash, known senders, round window, expected shapes, finite
values within the plan's bound). Each failure raises a :class:`WireError` subclass whose
class name is the counter a receiver increments.
"""

# ruff: noqa: N818  (the exception class names are the rejection counters agents report)
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import msgpack
import numpy as np

from edgedp.errors import WireError

__all__ = [
    "KINDS",
    "MAX_HEADER_BYTES",
    "WIRE_VERSION",
    "MAX_DIMS",
    "MAX_FRAMES",
    "BadPayload",
    "BeyondBound",
    "Context",
    "Equivocation",
    "Malformed",
    "Message",
    "Oversized",
    "PlanHashMismatch",
    "RoundOutOfWindow",
    "UnknownSender",
    "check",
    "decode",
    "encode",
    "extremes",
    "fingerprint",
]

WIRE_VERSION = 1
MAX_HEADER_BYTES = 4096
#: At most this many frames (header + arrays) and dimensions per array.
MAX_FRAMES = 8
MAX_DIMS = 4
#: Message kinds; a static set, never used to look anything up by name.
KINDS = frozenset({"model"})
_DTYPES: dict[str, np.dtype] = {"<f8": np.dtype("<f8"), "<f4": np.dtype("<f4")}
_HEADER_KEYS = frozenset({"v", "plan", "round", "sender", "kind", "arrays"})


class Malformed(WireError):
    """Frames that are not a well-formed message."""


class Oversized(WireError):
    """A frame or the message exceeds the size cap."""


class BadPayload(WireError):
    """Arrays with the wrong dtype or shape, or NaN/Inf values."""


class UnknownSender(WireError):
    """The sender is not one of the receiver's neighbours (or not who it authenticated as)."""


class PlanHashMismatch(WireError):
    """The sender runs a different plan."""


class RoundOutOfWindow(WireError):
    """A replayed, stale or too-far-future round, or one past the plan's last."""


class BeyondBound(WireError):
    """Finite values larger in magnitude than the plan's bound on honest messages."""


class Equivocation(WireError):
    """A second message from one sender for one round that differs from the first (the
    first is kept): the sender released one round twice with two contents."""


@dataclass(frozen=True, slots=True, eq=False)
class Message:
    """A decoded message. ``arrays`` may be read-only views into the received frames."""

    plan_hash: bytes
    round: int
    sender: int
    kind: str
    arrays: tuple[np.ndarray, ...]
    version: int = WIRE_VERSION


@dataclass(frozen=True, slots=True)
class Context:
    """What a receiver checks a message against.

    ``bounds`` holds, per array, the largest magnitude an honest sender's entries can have
    (:mod:`edgedp.bounds`); an empty tuple or ``inf`` means no bound (finiteness only).
    """

    plan_hash: bytes
    neighbours: frozenset[int]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str = "<f8"
    max_bytes: int = 1 << 28
    bounds: tuple[float, ...] = ()


def encode(msg: Message) -> list[bytes | memoryview]:
    """Frames for ``msg``: the header then each array's raw little-endian bytes.

    >>> frames = encode(Message(b"h" * 32, 3, 1, "model", (np.arange(4.0),)))
    >>> len(frames), decode(frames).round
    (2, 3)
    """
    specs, buffers = [], []
    for a in msg.arrays:
        arr = np.asarray(a)
        key = arr.dtype.newbyteorder("<").str if arr.dtype.byteorder == ">" else arr.dtype.str
        if key not in _DTYPES:
            raise TypeError(f"Cannot send arrays of dtype {arr.dtype}; use float64 or float32.")
        arr = np.ascontiguousarray(arr, dtype=_DTYPES[key])
        specs.append([key, list(arr.shape)])
        buffers.append(arr.data.cast("B"))
    header = {
        "v": msg.version,
        "plan": bytes(msg.plan_hash),
        "round": int(msg.round),
        "sender": int(msg.sender),
        "kind": msg.kind,
        "arrays": specs,
    }
    return [msgpack.packb(header, use_bin_type=True), *buffers]


def _int(header: dict, key: str) -> int:
    value = header[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise Malformed(f"header field {key!r} must be a non-negative integer, got {value!r}")
    return value


def _nbytes(i: int, frame) -> int:
    if isinstance(frame, (bytes, bytearray)):
        return len(frame)
    if isinstance(frame, memoryview):
        return frame.nbytes
    raise Malformed(f"frame {i} is a {type(frame).__name__}, not bytes")


def _spec(i: int, spec, nbytes: int, max_bytes: int) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape of array ``i``, checked against its frame's byte count.

    The element count is a Python integer (no int64 wrap-around: 2³⁰·2³⁰·16 is 2⁶⁴, not 0)
    and is compared with the cap before anything is allocated or reshaped.
    """
    if not isinstance(spec, list) or len(spec) != 2:
        raise Malformed(f"array {i}: spec must be [dtype, shape], got {type(spec).__name__}")
    dtype, shape = spec
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise Malformed(f"array {i}: dtype must be one of {sorted(_DTYPES)}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(s) is int and 0 <= s < 2**31 for s in shape)
    ):
        raise Malformed(f"array {i}: shape must be a list of at most {MAX_DIMS} sizes < 2**31")
    dt = _DTYPES[dtype]
    expected = math.prod(shape) * dt.itemsize  # Python ints: exact
    if expected > max_bytes:
        raise Oversized(f"array {i}: shape {shape} needs {expected} bytes, over {max_bytes}")
    if expected != nbytes:
        raise Malformed(f"array {i}: {nbytes} bytes do not match shape {shape} {dtype}")
    return dt, tuple(shape)


def decode(frames: Sequence[bytes | memoryview], *, max_bytes: int = 1 << 28) -> Message:
    """Decode frames into a :class:`Message`, checking structure only.

    Raises:
      WireError: (a subclass: :class:`Malformed` or :class:`Oversized`) for any input that
        is not a well-formed message — never another exception type (property-tested).
    """
    if not isinstance(frames, (list, tuple)) or len(frames) < 1:
        raise Malformed("expected a non-empty list of frames")
    if len(frames) > MAX_FRAMES:
        raise Malformed(f"{len(frames)} frames; a message has at most {MAX_FRAMES}")
    sizes = [_nbytes(i, f) for i, f in enumerate(frames)]
    total = sum(sizes)
    if total > max_bytes:
        raise Oversized(f"message of {total} bytes exceeds the cap of {max_bytes}")
    if sizes[0] > MAX_HEADER_BYTES:
        raise Oversized(f"header of {sizes[0]} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(
            bytes(frames[0]),
            raw=False,
            strict_map_key=True,
            max_bin_len=MAX_HEADER_BYTES,
            max_str_len=MAX_HEADER_BYTES,
            max_array_len=64,
            max_map_len=16,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises many unrelated exception types
        raise Malformed(f"header is not msgpack: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise Malformed(f"header must be a map, got {type(header).__name__}")
    if set(header) != _HEADER_KEYS:  # keys are str or bytes: never sort them together
        keys = sorted(repr(k) for k in header)
        raise Malformed(f"header must have keys {sorted(_HEADER_KEYS)}, got {keys}")
    version = _int(header, "v")
    if version != WIRE_VERSION:
        raise Malformed(f"wire version {version} is not supported (expected {WIRE_VERSION})")
    plan, kind, specs = header["plan"], header["kind"], header["arrays"]
    if not isinstance(plan, bytes) or len(plan) != 32:
        raise Malformed("header field 'plan' must be 32 bytes")
    if not isinstance(kind, str) or kind not in KINDS:
        raise Malformed(f"unknown message kind {kind!r}")
    if not isinstance(specs, list) or len(specs) != len(frames) - 1:
        raise Malformed(
            f"header lists {len(specs) if isinstance(specs, list) else '?'} arrays "
            f"but {len(frames) - 1} data frames follow"
        )
    round_, sender = _int(header, "round"), _int(header, "sender")
    arrays = []
    for i, spec in enumerate(specs):
        dt, shape = _spec(i, spec, sizes[i + 1], max_bytes)
        arrays.append(np.frombuffer(frames[i + 1], dtype=dt).reshape(shape))
    return Message(plan, round_, sender, kind, tuple(arrays), version)


def fingerprint(msg: Message) -> bytes:
    """16 bytes that tell two messages of one sender and round apart: BLAKE2b of the header
    fields and, per array, its dtype, shape, and the XOR and the wrapping sum of its 64-bit
    words (one pass each, no copy; two different vectors of real numbers agree on both only
    by design, not by chance). Cheap enough to take of every accepted message.

    >>> a = Message(b"h" * 32, 3, 1, "model", (np.arange(4.0),))
    >>> b = Message(b"h" * 32, 3, 1, "model", (np.arange(4.0) + 1e-12,))
    >>> fingerprint(a) == fingerprint(a), fingerprint(a) == fingerprint(b)
    (True, False)
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(b"%d\0%d\0%s\0" % (msg.round, msg.sender, msg.kind.encode()))
    for arr in msg.arrays:
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        flat = arr.reshape(-1)
        words = flat.view(np.uint64) if arr.itemsize == 8 else flat.view(np.uint8)
        if words.size:
            xor = np.bitwise_xor.reduce(words)
            total = np.add.reduce(words, dtype=np.uint64)
            h.update(np.array([xor, total], dtype=np.uint64).tobytes())
    return h.digest()


def _extremes(arr: np.ndarray) -> tuple[float, float]:
    return float(np.max(arr)), float(np.min(arr))


def extremes(msg: Message) -> tuple[tuple[float, float] | None, ...]:
    """``(max, min)`` of each array of ``msg`` (None for an empty one), as :func:`check`
    computes them (NaN if the array holds a NaN)."""
    return tuple(_extremes(a) if a.size else None for a in msg.arrays)


def check(
    msg: Message,
    ctx: Context,
    *,
    round_lo: int,
    round_hi: int,
    authenticated_sender: int | None = None,
    extremes: Sequence[tuple[float, float] | None] | None = None,
) -> None:
    """Check a decoded message against the receiver's context; raises a WireError subclass.

    ``round_lo..round_hi`` (inclusive) is the window of rounds the receiver accepts; when the
    transport authenticated the peer, ``authenticated_sender`` must equal the claimed sender.
    ``extremes`` holds ``(max, min)`` of each array (:func:`extremes`) when the caller
    already has them (a simulator checks one decoded message for many recipients).
    """
    if msg.plan_hash != ctx.plan_hash:
        raise PlanHashMismatch(f"sender {msg.sender} runs plan {msg.plan_hash.hex()[:12]}…")
    if msg.sender not in ctx.neighbours:
        raise UnknownSender(f"sender {msg.sender} is not a neighbour")
    if authenticated_sender is not None and authenticated_sender != msg.sender:
        raise UnknownSender(
            f"peer authenticated as {authenticated_sender} claims to be {msg.sender}"
        )
    if not round_lo <= msg.round <= round_hi:
        raise RoundOutOfWindow(f"round {msg.round} outside [{round_lo}, {round_hi}]")
    if len(msg.arrays) != len(ctx.shapes):
        raise BadPayload(f"expected {len(ctx.shapes)} arrays, got {len(msg.arrays)}")
    for i, (arr, shape) in enumerate(zip(msg.arrays, ctx.shapes, strict=True)):
        if arr.shape != tuple(shape) or arr.dtype.str != ctx.dtype:
            raise BadPayload(
                f"array {i}: expected {ctx.dtype}{tuple(shape)}, got {arr.dtype.str}{arr.shape}"
            )
        if not arr.size:
            continue
        # two reductions, no temporary array: max and min are NaN if any entry is NaN
        given = None if extremes is None else extremes[i]
        hi, lo = _extremes(arr) if given is None else given
        if not (math.isfinite(hi) and math.isfinite(lo)):
            raise BadPayload(f"array {i} has NaN or Inf values")
        bound = ctx.bounds[i] if i < len(ctx.bounds) else math.inf
        if bound < math.inf:
            largest = max(hi, -lo)
            if largest > bound:
                raise BeyondBound(f"array {i}: |value| {largest:.4g} exceeds the bound {bound:.4g}")
