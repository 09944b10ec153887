"""How a node's messages travel: the :class:`Transport` protocol and its implementations.

A transport links one node to its neighbours: ``send`` queues a message's frames to some
of them without blocking, ``recv`` waits up to a timeout for one message and returns it
with the sender's **authenticated** id (the link, not the message, says who sent it; None
when the link could not tell), ``close`` releases the links. It also counts what it
discarded: ``dropped`` (sends refused by a full queue), ``refused`` (inbound messages by
reason) and ``refused_handshakes`` (connections from keys that are not a neighbour's).
``OWNS_FRAMES`` says that the frames ``recv`` returns belong to the caller alone (nothing
else references or writes them), so a receiver may keep them without a copy.

Implementations: :class:`edgedp.transport.zmq.ZmqTransport` (devices: ZeroMQ PUSH/PULL with
CURVE and neighbour-only keys) and :class:`edgedp.transport.loopback.Loopback` (in-memory
links between the nodes of one process, for tests and embedded simulations). The device
daemon (``firmware_py.daemon``) drives the round loop of :mod:`edgedp.rounds` over one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Transport"]


@runtime_checkable
class Transport(Protocol):
    """One node's links to its neighbours (module docstring)."""

    OWNS_FRAMES: bool
    dropped: int
    refused: Counter

    @property
    def refused_handshakes(self) -> int: ...

    def send(self, recipients: Sequence[int], frames: Sequence[Any]) -> int: ...

    def recv(self, timeout_ms: int) -> tuple[list[Any], int | None] | None: ...

    def close(self) -> None: ...
