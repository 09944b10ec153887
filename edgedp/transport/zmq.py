"""ZeroMQ transport: CURVE-authenticated, encrypted PUSH/PULL links; frames only, no schema.

Each node binds one PULL socket (a CURVE server with the node's keypair) and connects one
PUSH socket per neighbour (a CURVE client that knows the neighbour's public key). A ZAP
handler admits exactly the public keys of the node's neighbours and reports each admitted
key's node id as the ZeroMQ ``User-Id``, so every received message carries the id its
sender authenticated as; an unknown key is refused during the handshake and never reaches
the application. Sends never block: a full queue counts a dropped message. Receives wait in
``zmq.Poller`` (no busy loop). ``close()`` flushes pending messages for at most ``linger_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.auth.thread

__all__ = ["Peer", "ZmqTransport"]


@dataclass(frozen=True, slots=True)
class Peer:
    """A neighbour: its node id, endpoint (e.g. ``tcp://127.0.0.1:5601``) and z85 public key."""

    node: int
    endpoint: str
    public_key: bytes


class _NeighbourKeys:
    """ZAP credentials provider: admit the neighbours' keys only."""

    def __init__(self, ids_by_key: Mapping[bytes, int]) -> None:
        self.ids_by_key = dict(ids_by_key)
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:
        ok = key in self.ids_by_key
        self.refused += not ok
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
      max_message_bytes: ZeroMQ drops (and disconnects) larger inbound messages.
      queue: per-link high-water mark in messages.
    """

    def __init__(
        self,
        *,
        node: int,
        bind: str,
        public_key: bytes,
        secret_key: bytes,
        peers: list[Peer],
        max_message_bytes: int = 1 << 26,
        queue: int = 64,
        linger_ms: int = 2000,
    ) -> None:
        if not zmq.has("curve"):
            raise RuntimeError("libzmq was built without CURVE; encrypted links are impossible.")
        self.node = node
        self.linger_ms = linger_ms
        self.dropped = 0
        self.context = zmq.Context()
        self._keys = _NeighbourKeys({p.public_key: p.node for p in peers})
        self.auth = _Authenticator(self.context, self._keys)
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self._keys)
        self.pull = self.context.socket(zmq.PULL)
        self.pull.curve_server = True
        self.pull.curve_publickey = public_key
        self.pull.curve_secretkey = secret_key
        self.pull.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self.pull.setsockopt(zmq.RCVHWM, queue * max(1, len(peers)))
        self.pull.linger = 0
        self.pull.bind(bind)
        self.push: dict[int, zmq.Socket] = {}
        for p in peers:
            s = self.context.socket(zmq.PUSH)
            s.curve_serverkey = p.public_key
            s.curve_publickey = public_key
            s.curve_secretkey = secret_key
            s.setsockopt(zmq.SNDHWM, queue)
            s.setsockopt(zmq.RECONNECT_IVL, 100)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
            s.linger = linger_ms
            s.connect(p.endpoint)
            self.push[p.node] = s
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)

    @property
    def refused_handshakes(self) -> int:
        """CURVE handshakes refused because the client key is not a neighbour's."""
        return self._keys.refused

    def send(self, recipients, frames) -> int:
        """Queue ``frames`` to each recipient without blocking; returns how many were queued."""
        queued = 0
        for v in recipients:
            try:
                self.push[v].send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                queued += 1
            except zmq.Again:
                self.dropped += 1
        return queued

    def recv(self, timeout_ms: int) -> tuple[list[memoryview], int | None] | None:
        """Wait up to ``timeout_ms`` for a message: ``(frames, authenticated_sender)`` or None."""
        if not self.poller.poll(max(0, int(timeout_ms))):
            return None
        parts = self.pull.recv_multipart(copy=False)
        try:
            sender = int(parts[0].get("User-Id"))
        except (ValueError, TypeError, zmq.ZMQError):
            sender = None
        return [p.buffer for p in parts], sender

    def close(self) -> None:
        for s in self.push.values():
            s.close(linger=self.linger_ms)
        self.pull.close(linger=0)
        self.auth.stop()
        self.context.term()
