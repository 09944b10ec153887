"""What peers must not be able to take from a device (descriptors, durable writes), and the
freed memory the agent keeps for its next round.

*Descriptors.* libzmq accepts every TCP connection to the agent's port, each one a file
descriptor, before any key is checked, and it has no cap on connections. So at start the
agent raises its soft ``RLIMIT_NOFILE`` to at least :data:`DESCRIPTOR_FLOOR` (when the
hard limit allows) and then keeps :data:`RESERVE` descriptors between the soft and the hard
limit: connections can fill the table only up to the soft limit. Not up to the hard limit
itself (systemd's default is 524,288): each accepted idle connection costs libzmq about
4 KiB, so a flood could then take gigabytes instead of descriptors. When one of the agent's
own files cannot be opened because the table is full (EMFILE), :func:`open_fd` lifts the
soft limit one descriptor at a time for that single ``open`` and puts it back. libzmq,
accepting in its own thread, can win a lifted slot only in that microsecond window; the
slots it wins stay taken until its handshake interval closes those connections (3 s), and
a write that finds the reserve used up is retried (:func:`retry`).

*Durable writes.* :func:`retry` repeats a write that failed with any ``OSError`` (EMFILE,
ENOSPC, EIO, EFBIG, ...) with exponential backoff, logging the failure and the recovery,
until it succeeds or the agent is asked to stop. Nothing that noise safety depends on is
skipped: the caller does not go on (e.g. send a round) until the write is done.
:class:`MetricsLog` writes metrics lines without ever raising; lines that could not be
written wait in memory and go out with the next successful write.

*Freed memory.* A round allocates and frees blocks of the model's size (libzmq's buffer of
each received message, gradients, noise, copies: megabytes at d = 10⁵). With glibc's
default, adaptive thresholds such blocks are mapped and unmapped, or the heap top is given
back to the kernel and taken again, every round, and each page taken again is a page fault
that zeroes it: at d = 10⁵ that was a fifth to a quarter of an agent's CPU per round.
:func:`keep_freed_memory` pins ``M_MMAP_THRESHOLD`` at the largest value glibc's own
adaptation reaches (32 MiB on 64-bit: blocks larger than that are still mapped and
unmapped on their own) and ``M_TRIM_THRESHOLD`` at twice that (the rule glibc applies when
it raises the threshold): up to 64 MiB of freed memory stays in the heap for the next round:
the resident size stays at about the peak a round reaches instead of dropping between rounds.
An allocator setting in the environment (e.g. ``GLIBC_TUNABLES=glibc.malloc.
mmap_threshold=131072``: every large block mapped and handed back when freed, so that the
resident size follows what the agent holds, at that CPU cost) is the operator's choice and
is left alone; on another C library (no ``mallopt``, or one that ignores it) nothing
changes either.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from edgedp import strict_json
from edgedp.transport.inbound import no_core_dumps  # the agent's, and its listener's

__all__ = [
    "DESCRIPTOR_FLOOR",
    "MMAP_THRESHOLD",
    "RESERVE",
    "MetricsLog",
    "StoppedError",
    "allocator_configured",
    "keep_freed_memory",
    "no_core_dumps",
    "open_fd",
    "reserve_descriptors",
    "retry",
]

#: Soft descriptor limit the agent asks for at start when the hard limit allows it.
DESCRIPTOR_FLOOR = 4096
#: Descriptors kept between the soft and the hard limit for the agent's own files.
RESERVE = 64


#: glibc ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: glibc's ceiling for its adaptive mmap threshold (``DEFAULT_MMAP_THRESHOLD_MAX``): 32 MiB
#: with 8-byte longs, 512 KiB with 4-byte ones.
MMAP_THRESHOLD = (32 << 20) if ctypes.sizeof(ctypes.c_long) == 8 else (512 << 10)


#: Environment variables through which an operator sets glibc's allocator.
_ALLOCATOR_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)


def allocator_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment sets glibc's allocator (``GLIBC_TUNABLES`` with a
    ``glibc.malloc.`` tunable, or a ``MALLOC_*_`` variable): the operator's choice."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    return "glibc.malloc." in tunables or any(v in environ for v in _ALLOCATOR_VARIABLES)


def keep_freed_memory(environ: Mapping[str, str] = os.environ) -> int:
    """Keep freed memory in the heap instead of returning it every round (module
    docstring); returns the bytes that may stay. 0: nothing changed, because the
    environment configures the allocator (:func:`allocator_configured`: the operator's
    setting is kept), or this C library has no ``mallopt`` or refused the setting."""
    if allocator_configured(environ):
        return 0
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return 0
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        return 0
    if not mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD):
        return 0
    return 2 * MMAP_THRESHOLD


class StoppedError(Exception):
    """The agent was asked to stop while it waited to retry a write."""


def _ceiling(hard: int) -> int:
    """The highest soft limit that can be set: the hard limit, or the kernel's nr_open."""
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        with open("/proc/sys/fs/nr_open") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 1 << 20


def reserve_descriptors(
    *, floor: int = DESCRIPTOR_FLOOR, reserve: int = RESERVE
) -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to ``floor`` if the hard limit allows (never lower an
    operator's higher setting) and keep ``reserve`` descriptors (at most a quarter of the
    limit) above it; returns the new ``(soft, hard)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = _ceiling(hard)
    limit = max(soft, min(ceiling, floor))
    keep = min(reserve, limit // 4)
    new_soft = min(limit, ceiling - keep)
    resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
    return new_soft, hard


def open_fd(path, flags: int, mode: int = 0o600) -> int:
    """``os.open``, taking a reserved descriptor if the table is full (module docstring).

    The soft limit is lifted one descriptor at a time, so that libzmq, accepting in another
    thread, can take at most the slot it wins a race for, not the whole reserve."""
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        for limit in range(soft + 1, _ceiling(hard) + 1):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            try:
                return os.open(path, flags, mode)
            except OSError as exc:
                if exc.errno != errno.EMFILE:
                    raise
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    raise OSError(errno.EMFILE, "Too many open files (reserve used up)", str(path))


def hold_lock(path, *, create: bool = True) -> int | None:
    """Take the exclusive lock of ``path`` (created 0600 if ``create``; else an existing
    file, opened read-only) for the life of this process and return its descriptor (kept
    open; the kernel releases the lock when the process ends, also after kill -9); None if
    another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, "") if exc.errno else ""
    return f"{name + ': ' if name else ''}{exc.strerror or exc}"


def retry(
    what: str,
    write: Callable[[], Any],
    *,
    log: TextIO,
    stop: Callable[[], bool] = lambda: False,
    first: float = 0.05,
    cap: float = 5.0,
    attempts: int | None = None,
    remind: float = 60.0,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Any:
    """Call ``write()`` until it does not raise ``OSError``; returns its result.

    Waits ``first``, ``2·first``, ... up to ``cap`` seconds between attempts (in slices of
    at most 0.1 s, checking ``stop()``), logs the first failure of each kind, a reminder
    every ``remind`` seconds while it keeps failing, and the recovery; raises
    :class:`StoppedError` if ``stop()`` becomes true before it succeeds, and the last
    ``OSError`` after ``attempts`` failed attempts (None: no limit).
    """
    attempt, delay, last = 0, first, None
    began = reminded = clock()
    while True:
        try:
            result = write()
        except OSError as exc:
            attempt += 1
            reason = _describe(exc)
            if attempts is not None and attempt >= attempts:
                raise
            if reason != last:
                log.write(f"{what} failed ({reason}); retrying with backoff up to {cap:g} s\n")
                log.flush()
                last = reason
            elif clock() - reminded >= remind:
                reminded = clock()
                log.write(
                    f"{what} still failing ({reason}) after {attempt} attempts over "
                    f"{reminded - began:.0f} s; nothing is sent until it works\n"
                )
                log.flush()
            waited = 0.0
            while waited < delay:
                if stop():
                    raise StoppedError(f"{what} not done: {reason}") from None
                step = min(0.1, delay - waited)
                sleep(step)
                waited += step
            delay = min(cap, delay * 2)
            continue
        if attempt:
            log.write(f"{what} done after {attempt + 1} attempts\n")
            log.flush()
        return result


class MetricsLog:
    """JSON-lines metrics that never raise: a failed write keeps its lines (at most
    ``max_pending``, the oldest are dropped and counted) for the next write."""

    def __init__(self, path, *, log: TextIO, max_pending: int = 10_000) -> None:
        self.path, self.log, self.max_pending = path, log, max_pending
        self.fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.pending = bytearray()
        self.lines = 0  # lines waiting in ``pending``
        size = os.fstat(self.fd).st_size
        if size:  # end a line torn by a kill, so the next line starts clean
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    self.pending += b"\n"
        self.lost = 0
        self._failing = False

    def write(self, record: dict) -> bool:
        """Queue one line and try to write everything queued; False if some is still queued."""
        if self.lines >= self.max_pending:
            cut = self.pending.index(b"\n") + 1
            del self.pending[:cut]
            self.lines -= 1
            self.lost += 1
        self.pending += (strict_json.dumps(record) + "\n").encode()
        self.lines += 1
        try:
            self.flush()
        except OSError as exc:
            if not self._failing:
                self.log.write(f"metrics write failed ({_describe(exc)}); keeping lines\n")
                self.log.flush()
                self._failing = True
            return False
        return True

    def flush(self) -> None:
        """Write every queued byte (a partial write keeps the rest); raises OSError."""
        while self.pending:
            n = os.write(self.fd, self.pending)
            done = self.pending[:n].count(b"\n")
            del self.pending[:n]
            self.lines -= done
        if self._failing:
            self.log.write("metrics writes work again\n")
            self.log.flush()
            self._failing = False

    def close(self) -> None:
        os.close(self.fd)
