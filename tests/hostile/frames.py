"""Attack frames by category, forged from what an authenticated neighbour knows.

A :class:`Forge` knows the plan hash, the message shape, its own node id, the target's
other neighbour, the plan's T and the receive window and bound, and the honest frames its
node sent so far: everything a compromised neighbour holds. Each category of
:data:`REJECTED` is a kind of frame the target must reject (and count) without any change
to its model; :data:`WITHIN_BOUND` frames are valid messages the plan's rule accepts (a
malicious neighbour may send them as its own message).

Frames stay within the transport's per-frame cap (``max_frame``): libzmq drops a larger
frame and resets the sender's connection before the agent sees anything (tests of the
transport limits cover that); messages with more parts than ``max_parts`` are part of the
campaign and are refused by the transport (``refused["TooManyParts"]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np

#: Categories sent before the node's honest frame of the round (``after`` ones: after it).
REJECTED = (
    "random-bytes",
    "wrong-types",
    "msgpack-bombs",
    "shape-dtype-buffer",
    "overflowing-shapes",
    "nan-inf",
    "huge-finite",
    "replay-same-round",
    "replay-earlier-round",
    "future-beyond-window",
    "round-T-and-later",
    "extra-parts",
    "missing-parts",
    "wrong-sender",
    "wrong-plan",
)
AFTER_HONEST = frozenset({"replay-same-round"})
WITHIN_BOUND = "within-bound-future"

_ODD_VALUES = (
    None,
    True,
    False,
    -1,
    2**64 - 1,
    -(2**63),
    1.5,
    float("nan"),
    "x",
    "model" * 40,
    b"\x00" * 31,
    b"\x00" * 33,
    [],
    {},
    [1, [2, [3]]],
    {"a": []},
    [["<f8"], [1]],
    [[{"<f8": 1}, [1]]],
)


@dataclass
class Forge:
    plan_hash: bytes
    dim: int
    sender: int  # the neighbour the harness plays (its key authenticates the link)
    other: int  # another neighbour of the target, whose id the harness may claim
    stranger_id: int  # a node that is not the target's neighbour
    steps: int
    window: int
    bound: float
    max_bytes: int
    rng: np.random.Generator
    max_frame: int = 1 << 62  # the transport's largest payload per frame
    max_parts: int = 1 << 30  # the transport's most frames per message

    # ------------------------------------------------------------ helpers
    def header(self, r: int, **fields) -> dict:
        h = {
            "v": 1,
            "plan": self.plan_hash,
            "round": r,
            "sender": self.sender,
            "kind": "model",
            "arrays": [["<f8", [self.dim]]],
        }
        h.update(fields)
        return h

    def packed(self, header: dict, *data: bytes) -> list[bytes]:
        return [msgpack.packb(header, use_bin_type=True), *data]

    def model(self, honest: list[list[bytes]], r: int) -> np.ndarray:
        """The honest message of round r (a bounded, valid-looking vector)."""
        return np.frombuffer(honest[r][1], dtype="<f8").copy()

    def make(self, category: str, r: int, honest: list[list[bytes]]) -> list[bytes]:
        """One frame list of ``category`` for round ``r`` (honest[r] is this round's frame)."""
        return getattr(self, "_" + category.replace("-", "_"))(r, honest)

    # ------------------------------------------------------------ categories
    def _random_bytes(self, r, honest):
        parts = int(self.rng.integers(1, min(self.max_parts, 3) + 3))
        sizes = [0, 1, 7, 64, 300, self.max_bytes + 1, 3 * self.max_bytes, self.max_frame]
        sizes = [s for s in sizes if s <= self.max_frame]
        return [self.rng.bytes(int(self.rng.choice(sizes))) for _ in range(parts)]

    def _wrong_types(self, r, honest):
        h = self.header(r)
        choice = int(self.rng.integers(0, 3))
        if choice == 0:  # a field of another type (no value in the pool is valid anywhere)
            key = str(self.rng.choice(sorted(h)))
            h[key] = _ODD_VALUES[int(self.rng.integers(0, len(_ODD_VALUES)))]
        elif choice == 1:  # a missing field
            del h[str(self.rng.choice(sorted(h)))]
        else:  # an extra field, possibly with a bytes key
            h[b"x" if self.rng.integers(0, 2) else "extra"] = 1
        return self.packed(h, honest[r][1])

    def _msgpack_bombs(self, r, honest):
        k = int(self.rng.integers(0, 7))
        depth = int(self.rng.integers(100, 4090))
        bomb = [
            b"\x91" * depth + b"\xc0",  # nested one-element arrays
            b"\x81\xa1a" * (depth // 3) + b"\xc0",  # nested one-entry maps
            b"\xdd\xff\xff\xff\xff",  # array32 declaring 2**32 - 1 items
            b"\xdf\xff\xff\xff\xff",  # map32 declaring 2**32 - 1 pairs
            b"\xdb\xff\xff\xff\xff" + b"a" * 16,  # str32 declaring 4 GiB
            b"\xc6\xff\xff\xff\xff" + b"\x00" * 16,  # bin32 declaring 4 GiB
            b"\x86" + b"\xa1v\x01" * 5 + b"\xa6arrays\xdc\xff\xff",  # array16 of 65535 specs
        ][k]
        if k == 6 and self.rng.integers(0, 2) and self.max_frame > 4096:
            over = int(self.rng.integers(1, min(4096, self.max_frame - 4096) + 1))
            bomb = b"\x00" * (4096 + over)  # header over the header cap, under the frame cap
        return [bomb, honest[r][1]]

    def _shape_dtype_buffer(self, r, honest):
        d, k = self.dim, int(self.rng.integers(0, 8))
        data = honest[r][1]
        if k == 0:
            return self.packed(self.header(r, arrays=[["<f4", [d]]]), b"\x00" * (4 * d))
        if k == 1:
            return self.packed(self.header(r, arrays=[["<f8", [d + 1]]]), b"\x00" * (8 * d + 8))
        if k == 2:
            cut = int(self.rng.integers(1, 9))
            return self.packed(self.header(r), data[:-cut])
        if k == 3:
            return self.packed(self.header(r), data + b"\x00" * int(self.rng.integers(1, 9)))
        if k == 4:
            return self.packed(self.header(r, arrays=[["<f8", [d, 1]]]), data)
        if k == 5:
            return self.packed(self.header(r, arrays=[["<i8", [d]]]), data)
        if k == 6:
            return self.packed(self.header(r, arrays=[[["<f8"], [d]]]), data)
        return self.packed(self.header(r, arrays=[[{"<f8": 1}, [d]]]), data)

    def _overflowing_shapes(self, r, honest):
        shape = [
            [2**30, 2**30, 16],
            [2**31 - 1] * 4,
            [2**62],
            [2**32, 2**32],
            [0, 2**31 - 1],
            [-1, -self.dim],
            [2**16, 2**16, 2**16, 2**16],
        ][int(self.rng.integers(0, 7))]
        return self.packed(self.header(r, arrays=[["<f8", shape]]), b"")

    def _nan_inf(self, r, honest):
        x = self.model(honest, r)
        where = self.rng.integers(0, self.dim, size=int(self.rng.integers(1, self.dim + 1)))
        x[where] = self.rng.choice([np.nan, np.inf, -np.inf])
        return self.packed(self.header(r), x.tobytes())

    def _huge_finite(self, r, honest):
        x = self.model(honest, r)
        value = float(
            self.rng.choice(
                [
                    1.7976931348623157e308,
                    1e300,
                    self.bound * (1 + 10 ** self.rng.uniform(-3, 1)),
                    self.bound * 1e6,
                ]
            )
        )
        sign = 1.0 if self.rng.integers(0, 2) else -1.0
        if self.rng.integers(0, 2):
            x[:] = sign * value
        else:
            x[int(self.rng.integers(0, self.dim))] = sign * value
        return self.packed(self.header(r), x.tobytes())

    def _replay_same_round(self, r, honest):
        return list(honest[r])

    def _replay_earlier_round(self, r, honest):
        if r == 0:
            return self.packed(self.header(0), honest[0][1])  # as early as it gets
        old = int(self.rng.integers(0, r))
        if self.rng.integers(0, 2):
            return list(honest[old])  # the captured frame itself
        return self.packed(self.header(old), honest[r][1])  # this round's values, old round

    def _future_beyond_window(self, r, honest):
        ahead = r + self.window + 1 + int(self.rng.integers(0, 1000))
        return self.packed(self.header(ahead), honest[r][1])

    def _round_T_and_later(self, r, honest):  # noqa: N802 (T is the plan's horizon)
        t = [self.steps, self.steps + 1, self.steps + self.window, 2**62][
            int(self.rng.integers(0, 4))
        ]
        return self.packed(self.header(t), honest[r][1])

    def _extra_parts(self, r, honest):
        if self.rng.integers(0, 2):
            return [*honest[r], self.rng.bytes(int(self.rng.integers(0, 64)))]
        h = self.header(r, arrays=[["<f8", [self.dim]], ["<f8", [self.dim]]])
        return self.packed(h, honest[r][1], honest[r][1])

    def _missing_parts(self, r, honest):
        k = int(self.rng.integers(0, 3))
        if k == 0:
            return [honest[r][0]]  # header only
        if k == 1:
            return self.packed(self.header(r, arrays=[]))  # no arrays at all
        h = self.header(r, arrays=[["<f8", [self.dim]], ["<f8", [self.dim]]])
        return self.packed(h, honest[r][1])

    def _wrong_sender(self, r, honest):
        claimed = [self.other, self.stranger_id, 2**40][int(self.rng.integers(0, 3))]
        return self.packed(self.header(r, sender=claimed), honest[r][1])

    def _wrong_plan(self, r, honest):
        return self.packed(self.header(r, plan=self.rng.bytes(32)), honest[r][1])

    def within_bound(self, r: int) -> list[bytes]:
        """A valid message for round r whose entries sit at ±bound: the rule accepts it."""
        x = self.bound * np.where(self.rng.integers(0, 2, self.dim) == 1, 1.0, -1.0)
        return self.packed(self.header(r), x.tobytes())
