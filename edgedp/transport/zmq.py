"""ZeroMQ transport: CURVE-authenticated, encrypted PUSH/PULL links; frames only, no schema.

Each node binds one PULL socket (a CURVE server with the node's keypair) and connects one
PUSH socket per neighbour (a CURVE client that knows the neighbour's public key). A ZAP
handler admits exactly the public keys of the node's neighbours and reports each admitted
key's node id as the ZeroMQ ``User-Id``, so every received message carries the id its
sender authenticated as; an unknown key is refused during the handshake and never reaches
the application. Sends never block: a full queue counts a dropped message. Receives wait in
``zmq.Poller`` (no busy loop). ``close()`` flushes pending messages for at most ``linger_ms``.

Limits, so that peers cannot take the device's memory or descriptors:

* every inbound frame is capped at the largest frame the plan can produce
  (``ZMQ_MAXMSGSIZE``; a larger frame disconnects its sender before libzmq buffers it);
* a message with more parts than the plan's messages have is read part by part and
  discarded (``refused["TooManyParts"]``) — never gathered into a list;
* each inbound link queues at most ``queue`` complete messages (``ZMQ_RCVHWM``);
* a connection that has not finished its CURVE handshake within ``handshake_ms`` is closed
  (``ZMQ_HANDSHAKE_IVL``): idle and slow-loris connections hold a descriptor for seconds,
  not for libzmq's default 30 s; the accept backlog is short (``ZMQ_BACKLOG``) and TCP
  keepalives close connections of peers that vanished;
* the outbound (PUSH) sockets accept no application data from the peer they connect to.

:meth:`ZmqTransport.links_up` tells which neighbours the node's outbound links are connected
to with a completed CURVE handshake (libzmq's socket monitor): a neighbour whose link is
down is not running (or not reachable), one whose link is up is alive even if slow.

libzmq has no cap on accepted connections and hands a multipart message to the application
only once all its parts arrived, so an authenticated neighbour can still make libzmq
buffer ``parts × frame cap`` bytes before the part cap applies (docs/DEVICE_RUNTIME.md,
"Resources peers cannot take").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.auth.thread
from zmq.utils import monitor

__all__ = ["CURVE_FRAME_OVERHEAD", "Peer", "ZmqTransport"]

#: Bytes a CURVE MESSAGE command adds to a frame on the wire (ZMTP-CURVE, RFC 26: command
#: name 8, short nonce 8, MAC 16, flags 1); ``ZMQ_MAXMSGSIZE`` applies to the wire frame.
CURVE_FRAME_OVERHEAD = 33
#: Smallest ``ZMQ_MAXMSGSIZE`` that lets the CURVE handshake through (INITIATE and READY
#: carry the vouch box and metadata).
_HANDSHAKE_FRAME = 4096
#: Socket-monitor events that bring an outbound link up or down.
_UP = zmq.EVENT_HANDSHAKE_SUCCEEDED
_DOWN = zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


@dataclass(frozen=True, slots=True)
class Peer:
    """A neighbour: its node id, endpoint (e.g. ``tcp://127.0.0.1:5601``) and z85 public key."""

    node: int
    endpoint: str
    public_key: bytes


def _keepalive(sock: zmq.Socket) -> None:
    """TCP keepalives: a connection whose peer vanished is closed within ~2 minutes."""
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 60)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, 10)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, 6)


class _NeighbourKeys:
    """ZAP credentials provider: admit the neighbours' keys only."""

    def __init__(self, ids_by_key: Mapping[bytes, int]) -> None:
        self.ids_by_key = dict(ids_by_key)
        self.refused = 0
        self.unknown: dict[bytes, None] = {}  # the last few refused public keys (for logs)

    def callback(self, domain: str, key: bytes) -> bool:
        ok = key in self.ids_by_key
        if not ok:
            self.refused += 1
            self.unknown.pop(key, None)
            self.unknown[key] = None
            while len(self.unknown) > 8:
                self.unknown.pop(next(iter(self.unknown)))
        return ok


class _Authenticator(zmq.auth.thread.ThreadAuthenticator):
    def __init__(self, context: zmq.Context, keys: _NeighbourKeys) -> None:
        super().__init__(context)
        self._keys = keys

    def curve_user_id(self, client_public_key: bytes) -> str:
        return str(self._keys.ids_by_key[zmq.utils.z85.encode(client_public_key)])


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
    """

    #: The frames :meth:`recv` returns belong to the caller alone: each is the buffer of a
    #: ZeroMQ message just taken off the socket (received without a copy), which nothing
    #: else references or writes. A receiver may keep them instead of copying them
    #: (:meth:`edgedp.mailbox.ReceiveSide.receive` with ``owned=True``).
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
    ) -> None:
        if not zmq.has("curve"):
            raise RuntimeError("libzmq was built without CURVE; encrypted links are impossible.")
        if max_parts < 1 or max_frame_bytes < 1:
            raise ValueError(
                f"Expected max_parts={max_parts} >= 1 and max_frame_bytes={max_frame_bytes} >= 1."
            )
        self.node = node
        self.linger_ms = linger_ms
        self.max_parts = max_parts
        self.dropped = 0
        self.refused: Counter = Counter()  # messages discarded here, by reason
        self.context = zmq.Context()
        self._keys = _NeighbourKeys({p.public_key: p.node for p in peers})
        self.auth = _Authenticator(self.context, self._keys)
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self._keys)
        self.pull = self.context.socket(zmq.PULL)
        self.pull.curve_server = True
        self.pull.curve_publickey = public_key
        self.pull.curve_secretkey = secret_key
        frame_cap = max(max_frame_bytes, _HANDSHAKE_FRAME) + CURVE_FRAME_OVERHEAD
        self.pull.setsockopt(zmq.MAXMSGSIZE, frame_cap)
        self.pull.setsockopt(zmq.RCVHWM, queue)
        self.pull.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
        self.pull.setsockopt(zmq.BACKLOG, backlog)
        _keepalive(self.pull)
        self.pull.linger = 0
        self.pull.bind(bind)
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
            s.setsockopt(zmq.MAXMSGSIZE, _HANDSHAKE_FRAME + CURVE_FRAME_OVERHEAD)
            s.setsockopt(zmq.RCVHWM, 1)
            s.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
            _keepalive(s)
            s.setsockopt(zmq.RECONNECT_IVL, 100)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
            s.linger = linger_ms
            self._monitors[p.node] = s.get_monitor_socket(_UP | _DOWN)
            s.connect(p.endpoint)
            self.push[p.node] = s
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)

    @property
    def refused_handshakes(self) -> int:
        """CURVE handshakes refused because the client key is not a neighbour's."""
        return self._keys.refused

    @property
    def unknown_keys(self) -> tuple[bytes, ...]:
        """The last (at most 8) public keys, z85, whose handshakes were refused: public
        values, for the operator's log (a neighbour configured with the wrong key)."""
        return tuple(self._keys.unknown)

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

    def recv(self, timeout_ms: int) -> tuple[list[memoryview], int | None] | None:
        """Wait up to ``timeout_ms`` for a message: ``(frames, authenticated_sender)``, or
        None if none came or the one that came had too many parts (then counted in
        ``refused``)."""
        try:  # a message already queued is taken without a poll
            frame = self.pull.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            if not self.poller.poll(max(0, int(timeout_ms))):
                return None
            frame = self.pull.recv(copy=False)
        try:
            sender = int(frame.get("User-Id"))
        except (ValueError, TypeError, zmq.ZMQError):
            sender = None
        parts = [frame]
        while frame.more:  # the rest of the message is already queued by libzmq
            frame = self.pull.recv(copy=False)
            if len(parts) <= self.max_parts:
                parts.append(frame)  # one past the cap, to know the message is too long
        if len(parts) > self.max_parts:
            self.refused["TooManyParts"] += 1
            return None
        return [p.buffer for p in parts], sender

    def close(self) -> None:
        for v, s in self.push.items():
            s.disable_monitor()
            self._monitors[v].close(linger=0)
            s.close(linger=self.linger_ms)
        self.pull.close(linger=0)
        self.auth.stop()
        self.context.term()
