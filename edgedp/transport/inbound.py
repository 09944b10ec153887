"""The receiving half of a node's ZeroMQ links: one PULL socket, and where it runs.

:class:`Listener` binds the PULL socket: a CURVE server with the node's keypair whose ZAP
handler admits exactly the neighbours' public keys and reports each admitted key's node id
as the ``User-Id``; every inbound frame is capped at the largest frame the plan can produce
(``ZMQ_MAXMSGSIZE``), each link queues at most ``queue`` complete messages, unfinished
handshakes are closed after ``handshake_ms``, and a message with more parts than the plan's
is read part by part and discarded (``refused["TooManyParts"]``).

What libzmq cannot bound: it hands a multipart message over only once its last part
arrived, and counts only complete messages against the queue, so an authenticated
neighbour can make it hold any number of parts — one message of 150,000 × 4 KB parts took
an agent from 53 to 1,231 MiB. Devices therefore run the listener in a process of its own
(:class:`Isolated`, ``python -m edgedp.transport.inbound``) whose address space is capped
(``RLIMIT_AS``: its size once listening plus ``memory`` bytes): such a message makes
libzmq's allocation fail there, the listener process ends, and the node starts a new one
(counted as ``refused["MemoryLimit"]``); the node's own memory never holds the parts. The
listener forwards each message it accepts (at most ``max_parts`` frames) to the node over
a ZeroMQ pair socket on a private ``ipc://`` path (a folder only this user can enter), with
the authenticated sender; a copy of each message through the kernel is its cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import zmq
import zmq.auth.thread

__all__ = ["CURVE_FRAME_OVERHEAD", "Isolated", "Listener", "no_core_dumps"]

#: Bytes a CURVE MESSAGE command adds to a frame on the wire (ZMTP-CURVE, RFC 26: command
#: name 8, short nonce 8, MAC 16, flags 1); ``ZMQ_MAXMSGSIZE`` applies to the wire frame.
CURVE_FRAME_OVERHEAD = 33
#: Smallest ``ZMQ_MAXMSGSIZE`` that lets the CURVE handshake through (INITIATE and READY
#: carry the vouch box and metadata).
HANDSHAKE_FRAME = 4096
#: Seconds a new listener process has to bind and report (a slow board imports zmq first).
_START_S = 30.0
_PR_SET_DUMPABLE = 4


def no_core_dumps() -> None:
    """Make this process leave no core dump: its memory holds secrets (the noise secret,
    the CURVE key, shared seeds). The soft ``RLIMIT_CORE`` 0 (no core file; the systemd unit
    sets the hard one) and, on Linux, ``PR_SET_DUMPABLE`` 0, which also keeps core-dump
    helpers fed through a pipe (systemd-coredump, apport) and ptrace by other processes of
    the same user away. A program it starts gets neither (execve)."""
    import ctypes

    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return  # not Linux: the limit alone
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(err)}")


def keepalive(sock: zmq.Socket) -> None:
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


class Listener:
    """The node's PULL socket in this process (module docstring)."""

    def __init__(
        self,
        context: zmq.Context,
        *,
        bind: str,
        public_key: bytes,
        secret_key: bytes,
        ids_by_key: Mapping[bytes, int],
        max_frame_bytes: int,
        max_parts: int,
        queue: int = 16,
        handshake_ms: int = 3000,
        backlog: int = 16,
    ) -> None:
        if max_parts < 1 or max_frame_bytes < 1:
            raise ValueError(
                f"Expected max_parts={max_parts} >= 1 and max_frame_bytes={max_frame_bytes} >= 1."
            )
        self.max_parts = max_parts
        self.refused: Counter = Counter()  # messages discarded here, by reason
        self._keys = _NeighbourKeys(ids_by_key)
        self.auth = _Authenticator(context, self._keys)
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self._keys)
        self.pull = context.socket(zmq.PULL)
        self.pull.curve_server = True
        self.pull.curve_publickey = public_key
        self.pull.curve_secretkey = secret_key
        frame_cap = max(max_frame_bytes, HANDSHAKE_FRAME) + CURVE_FRAME_OVERHEAD
        self.pull.setsockopt(zmq.MAXMSGSIZE, frame_cap)
        self.pull.setsockopt(zmq.RCVHWM, queue)
        self.pull.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
        self.pull.setsockopt(zmq.BACKLOG, backlog)
        keepalive(self.pull)
        self.pull.linger = 0
        try:
            self.pull.bind(bind)
        except BaseException:
            self.pull.close()
            self.auth.stop()
            raise
        self.poller = zmq.Poller()
        self.poller.register(self.pull, zmq.POLLIN)

    @property
    def refused_handshakes(self) -> int:
        return self._keys.refused

    @property
    def unknown_keys(self) -> tuple[bytes, ...]:
        return tuple(self._keys.unknown)

    def frames(self, timeout_ms: int) -> tuple[list[zmq.Frame], int | None] | None:
        """Wait up to ``timeout_ms`` for a message: ``(frames, authenticated_sender)``, or
        None if none came or the one that came had too many parts (counted)."""
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
        return parts, sender

    def recv(self, timeout_ms: int) -> tuple[list[memoryview], int | None] | None:
        got = self.frames(timeout_ms)
        return None if got is None else ([f.buffer for f in got[0]], got[1])

    def stats(self) -> dict:
        return {
            "refused": dict(self.refused),
            "handshakes": self.refused_handshakes,
            "unknown": [k.decode() for k in self.unknown_keys],
        }

    def close(self) -> None:
        self.pull.close(linger=0)
        self.auth.stop()


class Isolated:
    """The node's listener in a process of its own with a memory cap (module docstring).

    ``settings``: :class:`Listener`'s arguments (keys z85 text, ``ids_by_key`` as pairs);
    ``memory``: the bytes the listener process may take beyond its size once listening.
    Raises ``zmq.ZMQError`` (or OSError) if it cannot bind or start."""

    def __init__(self, context: zmq.Context, settings: dict, *, memory: int) -> None:
        self.settings = dict(settings, memory=int(memory))
        self.refused: Counter = Counter()
        self.restarts = 0
        self._cpu_done = 0.0  # CPU seconds of ended listener processes
        self._done: Counter = Counter()  # what ended listener processes counted
        self._handshakes_done = 0
        self._stats: dict[str, Any] = {"refused": {}, "handshakes": 0, "unknown": []}
        self._folder = tempfile.mkdtemp(prefix="edgedp-inbox-")  # 0700
        self.pair = context.socket(zmq.PAIR)
        self.pair.linger = 0
        self.pair.bind(f"ipc://{self._folder}/inbox")
        self.settings["inbox"] = f"ipc://{self._folder}/inbox"
        self.proc: subprocess.Popen | None = None
        self._stat: int | None = None  # the listener process's /proc stat file, kept open
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        # one malloc arena: glibc's per-thread arenas reserve 64 MiB of address space up
        # front, within which libzmq's thread could grow unseen by the address-space cap
        env = {**os.environ, "MALLOC_ARENA_MAX": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgedp.transport.inbound"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._close_stat()  # a restarted listener's
        with contextlib.suppress(OSError):  # read each round by cpu_seconds, never reopened
            self._stat = os.open(f"/proc/{self.proc.pid}/stat", os.O_RDONLY)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(self.settings) + "\n").encode())
        self.proc.stdin.flush()  # kept open: its end tells the listener to stop
        deadline = time.monotonic() + _START_S
        while True:
            if self.pair.poll(250):
                reply = self.pair.recv_multipart()
                if reply[0] == b"ready":
                    return
                if reply[0] == b"error":
                    self.proc.wait()
                    raise zmq.ZMQError(msg=f"the listener could not start: {reply[1].decode()}")
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise OSError(f"the listener process did not start (exit {self.proc.returncode})")

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) of the listener processes so far (Linux; 0 elsewhere)."""
        return self._cpu_done + _cpu_of(self._stat)

    def _restart(self) -> None:
        """The listener process ended (its memory cap): count it and start another."""
        self._done.update(self._stats["refused"])
        self._handshakes_done += self._stats["handshakes"]
        self._stats = {"refused": {}, "handshakes": 0, "unknown": self._stats["unknown"]}
        self.restarts += 1
        self._cpu_done += _cpu_of(self._stat)
        self._done["MemoryLimit"] += 1
        self.refused = self._done.copy()
        self._start()

    @property
    def refused_handshakes(self) -> int:
        return self._handshakes_done + self._stats["handshakes"]

    @property
    def unknown_keys(self) -> tuple[bytes, ...]:
        return tuple(k.encode() for k in self._stats["unknown"])

    def recv(self, timeout_ms: int) -> tuple[list[memoryview], int | None] | None:
        """A message the listener forwarded (frames, authenticated sender), or None."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                self._restart()
            wait = max(0.0, deadline - time.monotonic())
            if not self.pair.poll(int(min(wait, 0.25) * 1000)):
                if time.monotonic() >= deadline:
                    return None
                continue
            parts = self.pair.recv_multipart(copy=False)
            kind = parts[0].bytes
            if kind == b"m":
                sender = int.from_bytes(parts[1].bytes, "little", signed=True)
                return [p.buffer for p in parts[2:]], (None if sender < 0 else sender)
            if kind == b"s":
                self._stats = json.loads(parts[1].bytes)
                self.refused = self._done.copy()
                self.refused.update(self._stats["refused"])

    def _close_stat(self) -> None:
        if self._stat is not None:
            os.close(self._stat)
            self._stat = None

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_stat()
        self.pair.close(linger=0)
        shutil.rmtree(self._folder, ignore_errors=True)


def _cpu_of(stat: int | None) -> float:
    """CPU seconds of the process of the /proc stat file ``stat`` (0 if reaped or unknown)."""
    try:
        fields = os.pread(stat, 4096, 0).rsplit(b")", 1)[1].split()  # type: ignore[arg-type]
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0


def _cap_memory(extra: int) -> None:
    """Cap this process's address space at its size now plus ``extra`` bytes (Linux)."""
    try:
        with open("/proc/self/status") as fh:
            size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, size + extra))


def main() -> int:
    """The listener process: its settings on stdin (one JSON line), messages out on the
    node's pair socket; it ends when stdin ends (the node closed it or is gone)."""
    no_core_dumps()
    settings = json.loads(sys.stdin.readline())
    context = zmq.Context()
    out = context.socket(zmq.PAIR)
    out.setsockopt(zmq.SNDHWM, int(settings["forward_queue"]))
    out.connect(settings["inbox"])
    try:
        listener = Listener(
            context,
            bind=settings["bind"],
            public_key=settings["public_key"].encode(),
            secret_key=settings["secret_key"].encode(),
            ids_by_key={key.encode(): node for node, key in settings["peers"]},
            max_frame_bytes=settings["max_frame_bytes"],
            max_parts=settings["max_parts"],
            queue=settings["queue"],
            handshake_ms=settings["handshake_ms"],
            backlog=settings["backlog"],
        )
    except zmq.ZMQError as exc:
        out.send_multipart([b"error", str(exc).encode()])
        out.close(linger=1000)
        return 1
    _cap_memory(int(settings["memory"]))
    out.send_multipart([b"ready"])
    poller = zmq.Poller()
    poller.register(listener.pull, zmq.POLLIN)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    reported = listener.stats()
    while True:
        events = dict(poller.poll(1000))
        if sys.stdin.fileno() in events and not os.read(sys.stdin.fileno(), 1 << 12):
            break  # the node closed our stdin, or ended
        got = listener.frames(0)
        if got is not None:
            frames, sender = got
            head = [b"m", (-1 if sender is None else sender).to_bytes(4, "little", signed=True)]
            out.send_multipart([*head, *frames], copy=False)
        stats = listener.stats()
        if stats != reported:
            out.send_multipart([b"s", json.dumps(stats).encode()])
            reported = stats
    listener.close()
    out.close(linger=0)
    context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
