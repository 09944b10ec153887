"""In-memory links between the nodes of one process: a :class:`~edgedp.transport.Transport`.

:class:`LoopbackNetwork` holds one inbox per node; :meth:`LoopbackNetwork.endpoint` gives
node ``u`` a :class:`Loopback` that sends only to its neighbours (others are counted in
``refused["NotANeighbour"]``), delivers copies of the frames in send order, and stamps
each message with ``u`` as its authenticated sender. Nothing waits: ``recv`` returns the
oldest message or None at once (a single-threaded caller has nothing to wait for).

>>> net = LoopbackNetwork({0: (1,), 1: (0,)})
>>> a, b = net.endpoint(0), net.endpoint(1)
>>> a.send((1,), [b"hdr", b"body"]), b.recv(0), b.recv(0)
(1, ([b'hdr', b'body'], 0), None)
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence

__all__ = ["Loopback", "LoopbackNetwork"]


class LoopbackNetwork:
    """The inboxes of ``neighbours`` (node -> its neighbours), and an endpoint per node."""

    def __init__(self, neighbours: Mapping[int, Sequence[int]]) -> None:
        self.neighbours = {int(u): frozenset(int(v) for v in vs) for u, vs in neighbours.items()}
        self.inbox: dict[int, deque] = {u: deque() for u in self.neighbours}

    def endpoint(self, node: int) -> Loopback:
        """Node ``node``'s transport."""
        if node not in self.neighbours:
            raise ValueError(f"Unknown node {node!r}; the network has {sorted(self.neighbours)}.")
        return Loopback(self, node)


class Loopback:
    """Node ``node``'s links in a :class:`LoopbackNetwork`."""

    #: :meth:`recv` returns new ``bytes`` made for this recipient alone (immutable).
    OWNS_FRAMES = True

    def __init__(self, network: LoopbackNetwork, node: int) -> None:
        self.network, self.node = network, node
        self.dropped = 0
        self.refused: Counter = Counter()
        self.closed = False

    @property
    def refused_handshakes(self) -> int:
        """Always 0: in-memory links have no handshake."""
        return 0

    def send(self, recipients: Sequence[int], frames: Sequence) -> int:
        """Queue a copy of ``frames`` in each neighbour's inbox; returns how many."""
        if self.closed:
            raise RuntimeError("send on a closed transport")
        queued = 0
        for v in recipients:
            if v not in self.network.neighbours[self.node]:
                self.refused["NotANeighbour"] += 1
                continue
            self.network.inbox[v].append(([bytes(f) for f in frames], self.node))
            queued += 1
        return queued

    def recv(self, timeout_ms: int) -> tuple[list[bytes], int | None] | None:
        """The oldest message for this node, or None (``timeout_ms`` is not waited)."""
        del timeout_ms
        box = self.network.inbox[self.node]
        return box.popleft() if box else None

    def close(self) -> None:
        self.closed = True
