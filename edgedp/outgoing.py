"""The frames a node sends in a round: one message for every neighbour, or (Zip-DL) one per
padded-row slot, with an adaptive DOME basis' spanning-tree frame beside the model on tree
edges. Pure functions of the round's message; the Agent calls :func:`encode` once its
message passed every check."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edgedp import wire

__all__ = ["Outgoing", "count_non_finite", "encode", "non_finite"]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """Frames for one round, to be sent to each recipient.

    ``per_recipient`` is set when the algorithm sends each neighbour its own message
    (Zip-DL): then use :meth:`frames_for`; ``frames`` holds the first recipient's.
    """

    round: int
    recipients: tuple[int, ...]
    frames: list[Any]
    noise_digest: str
    per_recipient: dict[int, list[Any]] | None = None

    def frames_for(self, recipient: int) -> list[Any]:
        """The frames to send to ``recipient``."""
        if self.per_recipient is None:
            return self.frames
        return self.per_recipient[recipient]


def non_finite(*arrays: np.ndarray) -> int:
    """How many NaN/±inf entries ``arrays`` hold together.

    An array whose sum is finite holds none (a NaN or ±inf entry makes any sum NaN or ±inf),
    so the common case reads each array once without a boolean temporary; only an array whose
    sum is not finite (a non-finite entry, or finite entries overflowing) is counted entry by
    entry."""
    with np.errstate(over="ignore", invalid="ignore"):  # the sum is only a screen
        return count_non_finite(arrays)


def count_non_finite(arrays: Iterable[np.ndarray]) -> int:
    """:func:`non_finite` of ``arrays`` for a caller already inside
    ``np.errstate(over="ignore", invalid="ignore")`` (no errstate of its own)."""
    bad = 0
    for a in arrays:
        if a.size and not math.isfinite(float(np.add.reduce(a, axis=None))):
            bad += int(a.size - np.count_nonzero(np.isfinite(a)))
    return bad


def encode(
    message: np.ndarray,
    *,
    plan_hash: bytes,
    round: int,
    node: int,
    row: tuple[int, ...],
    neighbours: tuple[int, ...],
    noise_digest: str,
    tree: dict[int, np.ndarray] | None = None,
) -> tuple[Outgoing, np.ndarray]:
    """``(frames of the round, the node's own message)``.

    ``message`` is ``(d,)``, or ``(m, d)`` with one message per entry of the padded mixing
    ``row`` (Zip-DL: slot j goes to the j-th entry; the node keeps its own slot); ``tree``
    the spanning-tree frame for each tree neighbour (adaptive DOME; None without a tree).
    """
    if message.ndim == 2:  # one message per padded-row slot (Zip-DL)
        frames = {}
        for j, v in enumerate(row):
            if v != node and v not in frames:
                msg = wire.Message(plan_hash, round, node, "model", (message[j],))
                frames[v] = wire.encode(msg)
        first = frames[neighbours[0]] if neighbours else []
        own = message[row.index(node)]
        return Outgoing(round, neighbours, first, noise_digest, frames), own
    msg = wire.Message(plan_hash, round, node, "model", (message,))
    plain = wire.encode(msg)
    if tree is None:
        return Outgoing(round, neighbours, plain, noise_digest), message
    per = {
        v: wire.encode(replace(msg, arrays=(message, tree[v]))) if v in tree else plain
        for v in neighbours
    }
    first = per[neighbours[0]] if neighbours else []
    return Outgoing(round, neighbours, first, noise_digest, per), message
