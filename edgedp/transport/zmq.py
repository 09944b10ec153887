"""ZeroMQ transport: CURVE-authenticated, encrypted PUSH/PULL links; frames only, no schema.

Each node binds one PULL socket (a CURVE server with the node's keypair:
:class:`edgedp.transport.inbound.Listener`) and connects one PUSH socket per neighbour (a
CURVE client that knows the neighbour's public key). A ZAP handler admits exactly the public
keys of the node's neighbours and reports each admitted key's node id as the ZeroMQ
``User-Id``, so every received message carries the id its sender authenticated as; an
unknown key is refused during the handshake and never reaches the application. Sends never
block: a full queue counts a dropped message. Receives wait in ``zmq.Poller`` (no busy
loop). ``close()`` flushes pending messages for at most ``linger_ms``.

Limits, so that peers cannot take the device's memory or descriptors:

* every inbound frame is capped at the largest frame the plan can produce
  (``ZMQ_MAXMSGSIZE``; a larger frame disconnects its sender before libzmq buffers it);
* a message with more parts than the plan's messages have is read part by part and
  discarded (``refused["TooManyParts"]``) — never gathered into a list;
* libzmq gathers every part of a multipart message before it hands any over, without a
  bound: with ``isolated`` the PULL socket runs in a process of its own with a memory cap
  (:class:`edgedp.transport.inbound.Isolated`), which such a message ends instead of the
  node's memory (``refused["MemoryLimit"]``; a new listener starts);
* each inbound link queues at most ``queue`` complete messages (``ZMQ_RCVHWM``);
* a connection that has not finished its CURVE handshake within ``handshake_ms`` is closed
  (``ZMQ_HANDSHAKE_IVL``): idle and slow-loris connections hold a descriptor for seconds,
  not for libzmq's default 30 s; the accept backlog is short (``ZMQ_BACKLOG``) and TCP
  keepalives close connections of peers that vanished;
* the outbound (PUSH) sockets accept no application data from the peer they connect to.

:meth:`ZmqTransport.links_up` tells which neighbours the node's outbound links are connected
to with a completed CURVE handshake (libzmq's socket monitor): a neighbour whose link is
down is not running (or not reachable), one whose link is up is alive even if slow.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import zmq
from zmq.utils import monitor

from edgedp.transport import inbound
from edgedp.transport.inbound import CURVE_FRAME_OVERHEAD

__all__ = ["CURVE_FRAME_OVERHEAD", "INBOX_MEMORY", "Peer", "ZmqTransport"]

#: Bytes the listener process of an isolated transport may take beyond its size once
#: listening (an attacker's unfinished multipart message ends it there, not in the node).
INBOX_MEMORY = 48 << 20
#: Socket-monitor events that bring an outbound link up or down.
_UP = zmq.EVENT_HANDSHAKE_SUCCEEDED
_DOWN = zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


@dataclass(frozen=True, slots=True)
class Peer:
    """A neighbour: its node id, endpoint (e.g. ``tcp://127.0.0.1:5601``) and z85 public key."""

    node: int
    endpoint: str
    public_key: bytes


class ZmqTransport:
    """Links of one node to its neighbours.

    Args:
      node: this node's id.
      bind: the endpoint to bind, e.g. ``tcp://127.0.0.1:5600``.
      public_key, secret_key: this node's CURVE keypair (z85 bytes).
      peers: the neighbours.
      max_frame_bytes: the largest frame a legitimate message has (header or array); a
        peer sending a larger frame is disconnected by libzmq.
      max_parts: the most frames a legitimate message has; longer messages are discarded.
      queue: per-link high-water mark in messages.
      handshake_ms: connections that have not completed the CURVE handshake by then are
        closed.
      backlog: pending (not yet accepted) connections the kernel holds.
      isolated: receive in a listener process with a memory cap (devices); else in this one.
      inbox_memory: the bytes that listener may take beyond its size once listening (at
        least what ``queue`` messages per link need).
    """

    #: The frames :meth:`recv` returns belong to the caller alone: each is the buffer of a
    #: ZeroMQ message just taken off the socket (received without a copy), which nothing
    #: else references or writes. A receiver may keep them instead of copying them
    #: (:meth:`edgedp.agent.Agent.receive` with ``owned=True``).
    OWNS_FRAMES = True

    def __init__(
        self,
        *,
        node: int,
        bind: str,
        public_key: bytes,
        secret_key: bytes,
        peers: list[Peer],
        max_frame_bytes: int,
        max_parts: int,
        queue: int = 16,
        linger_ms: int = 2000,
        handshake_ms: int = 3000,
        backlog: int = 16,
        isolated: bool = False,
        inbox_memory: int = INBOX_MEMORY,
    ) -> None:
        if not zmq.has("curve"):
            raise RuntimeError("libzmq was built without CURVE; encrypted links are impossible.")
        if max_parts < 1 or max_frame_bytes < 1:
            raise ValueError(
                f"Expected max_parts={max_parts} >= 1 and max_frame_bytes={max_frame_bytes} >= 1."
            )
        self.node = node
        self.linger_ms = linger_ms
        self.dropped = 0
        self.context = zmq.Context()
        listen: dict[str, Any] = {
            "bind": bind,
            "max_frame_bytes": max_frame_bytes,
            "max_parts": max_parts,
            "queue": queue,
            "handshake_ms": handshake_ms,
            "backlog": backlog,
        }
        try:
            if isolated:
                # the listener holds at most a few of each link's messages while it forwards
                largest = max_parts * (max(max_frame_bytes, inbound.HANDSHAKE_FRAME) + 4096)
                legit = (queue * len(peers) + 2 * queue) * largest
                self._inbox: inbound.Listener | inbound.Isolated = inbound.Isolated(
                    self.context,
                    {
                        **listen,
                        "public_key": public_key.decode(),
                        "secret_key": secret_key.decode(),
                        "peers": [[p.node, p.public_key.decode()] for p in peers],
                        "forward_queue": 2 * queue,
                    },
                    memory=max(inbox_memory, legit + (16 << 20)),
                )
            else:
                self._inbox = inbound.Listener(
                    self.context,
                    public_key=public_key,
                    secret_key=secret_key,
                    ids_by_key={p.public_key: p.node for p in peers},
                    **listen,
                )
        except BaseException:
            self.context.term()
            raise
        self.push: dict[int, zmq.Socket] = {}
        self._monitors: dict[int, zmq.Socket] = {}
        self._up: set[int] = set()
        for p in peers:
            s = self.context.socket(zmq.PUSH)
            s.curve_serverkey = p.public_key
            s.curve_publickey = public_key
            s.curve_secretkey = secret_key
            s.setsockopt(zmq.SNDHWM, queue)
            # a PUSH socket never reads: the server it connects to gets no inbound queue
            s.setsockopt(zmq.MAXMSGSIZE, inbound.HANDSHAKE_FRAME + CURVE_FRAME_OVERHEAD)
            s.setsockopt(zmq.RCVHWM, 1)
            s.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
            inbound.keepalive(s)
            s.setsockopt(zmq.RECONNECT_IVL, 100)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
            s.linger = linger_ms
            self._monitors[p.node] = s.get_monitor_socket(_UP | _DOWN)
            s.connect(p.endpoint)
            self.push[p.node] = s

    @property
    def refused(self) -> Counter:
        """Messages discarded before the application saw them, by reason."""
        return self._inbox.refused

    @property
    def refused_handshakes(self) -> int:
        """CURVE handshakes refused because the client key is not a neighbour's."""
        return self._inbox.refused_handshakes

    @property
    def unknown_keys(self) -> tuple[bytes, ...]:
        """The last (at most 8) public keys, z85, whose handshakes were refused: public
        values, for the operator's log (a neighbour configured with the wrong key)."""
        return self._inbox.unknown_keys

    def links_up(self) -> frozenset[int]:
        """The neighbours whose outbound link is connected, its CURVE handshake done (the
        socket monitor's events so far; no waiting)."""
        for v, mon in self._monitors.items():
            while mon.poll(0):
                event = monitor.recv_monitor_message(mon)["event"]
                if event & _UP:
                    self._up.add(v)
                elif event & _DOWN:
                    self._up.discard(v)
        return frozenset(self._up)

    def send(self, recipients, frames) -> int:
        """Queue ``frames`` to each recipient without blocking; returns how many were queued.

        Each frame becomes one ``zmq.Frame`` shared by every recipient (large ones without a
        copy; libzmq counts the references), so a buffer sent to m neighbours is released
        once, not m times."""
        if len(recipients) > 1:
            frames = [f if isinstance(f, zmq.Frame) else zmq.Frame(f, copy=None) for f in frames]
        queued = 0
        for v in recipients:
            try:
                self.push[v].send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                queued += 1
            except zmq.Again:
                self.dropped += 1
        return queued

    def listener_cpu(self) -> float:
        """CPU seconds of the listener process so far (0 when it runs in this one)."""
        inbox = self._inbox
        return inbox.cpu_seconds() if isinstance(inbox, inbound.Isolated) else 0.0

    def recv(self, timeout_ms: int) -> tuple[list[memoryview], int | None] | None:
        """Wait up to ``timeout_ms`` for a message: ``(frames, authenticated_sender)``, or
        None if none came or the one that came was discarded (then counted in
        ``refused``)."""
        return self._inbox.recv(timeout_ms)

    def close(self) -> None:
        for v, s in self.push.items():
            s.disable_monitor()
            self._monitors[v].close(linger=0)
            s.close(linger=self.linger_ms)
        self._inbox.close()
        self.context.term()
