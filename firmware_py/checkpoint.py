"""Durable, checksummed checkpoints, the replaced one kept as ``NAME.prev``.

The file format and its sha256 are :mod:`firmware_py.checkpoint_format`. A checksum mismatch
is an error, never a silent restart (restarting from scratch after messages were sent would
reuse noise). :class:`Pending` writes a checkpoint in a background thread (one per process,
kept between saves) while the agent computes its next round; the caller waits for it before
anything is sent. Every file is written 0600 (only the device's user reads it) and
:func:`private_folder` makes the state folder 0700. Files are opened through
:func:`firmware_py.resources.open_fd` (a full descriptor table falls back on the reserve); a
failed write raises ``OSError`` for the caller to retry. ``NAME.prev`` lets a damaged latest
checkpoint be rolled back (:mod:`firmware_py.recovery`).

Where the names can be swapped atomically (Linux ``renameat2(RENAME_EXCHANGE)``) the two
files are two slots written in turn: :func:`save` overwrites ``NAME.prev`` (the older state,
a regular file of ours that no other name links to) in place, ``fdatasync``s it and swaps
the two names. Nothing is created, renamed over or freed, so the file system commits no
metadata for it, and neither the swap nor the folder is forced to disk: once the folder was
fsync'd after the last other change of its names (:func:`sync_folder` at start; a save
fsyncs it first otherwise), the two files are the two newest states, the new one durable
when the ``fdatasync`` returns. A process killed at any point leaves ``NAME`` complete (a
kill inside the write damages only ``NAME.prev``, whose checksum then fails; one between the
``fdatasync`` and the swap leaves ``NAME.prev`` newer). A power cut that undoes swaps not
yet on disk may exchange the two names, so either may then carry the newer state or a torn
one: :func:`firmware_py.recovery.resume` takes the newer usable state of the two. The first
saves, or any without the exchange, write a new file instead (:func:`atomic_write`: a
temporary, fsync'd, renamed over ``NAME`` after the old one was linked as ``NAME.prev``,
the folder fsync'd); a process killed there leaves a ``.NAME.tmp.PID`` (or
``.NAME.prev.tmp.PID``) file, removed by :func:`remove_temporaries` at the next start and
never read.
"""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from firmware_py import resources
from firmware_py.checkpoint_format import MAGIC, copy_arrays, decode, encode

__all__ = [
    "MAGIC",
    "CheckpointError",
    "Pending",
    "atomic_write",
    "copy_arrays",
    "decode",
    "encode",
    "load",
    "previous",
    "private_folder",
    "remove_temporaries",
    "save",
    "swap",
    "sync_folder",
]


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be trusted."""


def private_folder(path: Path) -> None:
    """Create ``path`` if needed and make it 0700 (owner only); folders created on the way
    are 0700 too (existing ancestors are left as they are)."""
    path = Path(path)
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
    os.chmod(path, 0o700)


#: Folders whose names were made durable (fsync'd) after this process last changed them
#: other than by a swap; an in-place save needs its folder here (:func:`sync_folder`).
_SYNCED: set[Path] = set()


def sync_folder(folder: Path) -> None:
    """fsync ``folder``: every earlier change of its names (renames, links, new files) is
    durable. The daemon calls it at start, before it records anything as sent: a process
    killed between a rename and its folder fsync leaves that rename to the next one."""
    folder = Path(folder)
    _SYNCED.discard(folder)
    fd = resources.open_fd(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _SYNCED.add(folder)


def atomic_write(
    path: Path, data: bytes | Sequence, *, mode: int = 0o600, reuse: Path | None = None
) -> None:
    """Replace ``path`` with ``data`` (bytes, or a sequence of buffers written one after
    another) atomically and durably (file mode ``mode``).

    ``reuse``: a file of this device's own that no other name links to (the checkpoint
    :func:`save` just moved out of ``NAME.prev``); it becomes the temporary file and is
    overwritten and cut to length instead of a new file being made, which spares the file
    system a new file's blocks and pages and the old one's release. Everything else is as
    for a new temporary: written, fsync'd, then renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _SYNCED.discard(path.parent)  # its names change below, durable at the folder fsync
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        if reuse is not None:
            os.replace(reuse, tmp)  # fails onto a directory, as opening a new file would
            fd = resources.open_fd(tmp, os.O_WRONLY)
        else:
            fd = resources.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # an existing leftover temporary keeps no wider mode
            for chunk in [data] if isinstance(data, (bytes, bytearray)) else data:
                fh.write(chunk)
            fh.flush()
            if reuse is not None:  # a reused file may be longer than the new content
                os.ftruncate(fh.fileno(), fh.tell())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if reuse is not None:
            reuse.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)  # a full disk must not keep a half-written temporary
        raise
    sync_folder(path.parent)


def previous(path: Path) -> Path:
    """Where :func:`save` keeps the checkpoint it replaced."""
    path = Path(path)
    return path.with_name(path.name + ".prev")


#: ``renameat2`` of the C library (None: not there, or a file system refused the exchange).
_RENAME_EXCHANGE = 2
_renameat2: Any = False  # not looked up yet


def _exchange_available() -> bool:
    """Whether :func:`_exchange` may work here (False once it was refused)."""
    if _renameat2 is False:
        _lookup_renameat2()
    return _renameat2 is not None


def _lookup_renameat2() -> None:
    global _renameat2
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        fn.argtypes += [ctypes.c_uint]
        fn.restype = ctypes.c_int
        _renameat2 = fn
    except (AttributeError, OSError):
        _renameat2 = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` (same folder) in one atomic step (Linux
    ``renameat2(RENAME_EXCHANGE)``); False, changing nothing, where that is not available."""
    global _renameat2
    if not _exchange_available():
        return False
    at_cwd = -100  # AT_FDCWD
    if _renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        _renameat2 = None  # this kernel or file system cannot: plain renames from now on
        return False
    raise OSError(err, os.strerror(err), str(a))


def _spare(prev: Path) -> bool:
    """Whether ``prev`` is a regular file that no other name links to and that this process
    may write (may be reused; a read-only one is replaced by a new file instead)."""
    try:
        st = os.lstat(prev)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and os.access(prev, os.W_OK)


#: Buffers per ``pwritev`` call (the system's IOV_MAX; a snapshot may hold more arrays).
_IOV_MAX = max(16, os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024)


def _overwrite(path: Path, data: Sequence, *, mode: int = 0o600) -> None:
    """Write ``data`` (buffers, one after another) over the existing file ``path`` in place,
    cut it to that length and ``fdatasync`` it; a crash meanwhile leaves it damaged (its
    checksum fails), never a file that passes as another state."""
    fd = resources.open_fd(path, os.O_WRONLY)
    try:
        os.fchmod(fd, mode)  # a file someone widened is narrowed again before it holds state
        offset = 0
        for lo in range(0, len(data), _IOV_MAX):
            group = data[lo : lo + _IOV_MAX]
            size = sum(len(buf) for buf in group)
            done = os.pwritev(fd, group, offset)
            if done < size:  # a short write (a signal, a full disk's last blocks): the rest
                rest = memoryview(b"".join(group))[done:]
                while rest:
                    n = os.pwrite(fd, rest, offset + done)
                    done, rest = done + n, rest[n:]
            offset += size
        os.ftruncate(fd, offset)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def save(path: Path, body: dict[str, Any]) -> None:
    """Write ``body`` durably to ``path``; the state it replaces becomes ``path.prev``.

    Where names can be swapped atomically (Linux), the file ``path.prev`` held (the state
    two saves old) is overwritten in place, ``fdatasync``'d, and the two names are swapped
    (the module docstring says why neither the swap nor the folder needs forcing to disk;
    the folder is fsync'd first if this process has not made its names durable yet).
    Otherwise (the first saves, another link to ``.prev``, a ``.prev`` this process cannot
    write, no exchange) the new state goes to a new file as :func:`atomic_write` writes it,
    the old one kept as ``path.prev``. A process killed at any point leaves ``path``
    complete."""
    path = Path(path)
    data = encode(body)
    prev = previous(path)
    if path.exists() and _spare(prev) and _exchange_available():
        if path.parent not in _SYNCED:
            sync_folder(path.parent)
        _overwrite(prev, data)
        if _exchange(path, prev):
            return
        # the file system refused the exchange (now remembered): prev holds the new state,
        # path the one before; write path anew below (both end up complete)
    _SYNCED.discard(path.parent)  # names change below; durable at atomic_write's fsync
    reuse = None
    if path.exists():
        link = path.with_name(f".{path.name}.prev.tmp.{os.getpid()}")
        if link.exists():
            link.unlink()
        os.link(path, link)  # same inode: the old content survives the rename below
        if _spare(prev) and _exchange(link, prev):
            reuse = link  # now the name of the old .prev's file, linked nowhere else
        else:
            os.replace(link, prev)
            link.unlink(missing_ok=True)  # left when prev already was path's file
    atomic_write(path, data, reuse=reuse)  # its folder fsync makes the renames durable


def swap(path: Path) -> bool:
    """Exchange the names ``path`` and ``path.prev`` atomically and make that durable (the
    folder fsync'd); False, changing nothing, where names cannot be exchanged. Used at
    start when ``.prev`` holds the newer state (a power cut undid the last swap, or a kill
    came between a save's ``fdatasync`` and its swap)."""
    path = Path(path)
    if not _exchange(path, previous(path)):
        return False
    sync_folder(path.parent)
    return True


def remove_temporaries(folder: Path) -> list[Path]:
    """Delete ``.NAME.tmp.PID`` files a killed writer left in ``folder``; returns them."""
    gone = []
    for tmp in Path(folder).glob(".*.tmp.*"):
        if tmp.is_file():
            tmp.unlink()
            gone.append(tmp)
    return gone


def load(path: Path) -> dict[str, Any] | None:
    """The checkpoint body, None if there is none; CheckpointError if it is corrupt."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path, "rb") as fh:
        data = bytearray(os.fstat(fh.fileno()).st_size)
        del data[fh.readinto(data) :]  # arrays are views into this writable buffer
    try:
        return decode(data)
    except (ValueError, KeyError, TypeError) as exc:
        if str(exc) == "checksum mismatch":
            raise CheckpointError(f"{path}: checksum mismatch") from None
        raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from None


class _Writer:
    """The process's one checkpoint-writing thread, started at the first save and kept for
    the next (a thread per save cost a thread's start and stack every round). A forked
    child starts with a new, empty writer: it never runs the saves its parent queued."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Pending] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: Pending) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="checkpoint", daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            self._jobs.get()._run()


_WRITER = _Writer()


def _new_writer_in_child() -> None:
    global _WRITER
    _WRITER = _Writer()
    _SYNCED.clear()  # the child proves its own folder fsyncs


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_writer_in_child)


class Pending:
    """:func:`save` of ``body`` running in the background checkpoint thread (queued at once;
    one save at a time, in order).

    :meth:`wait` blocks until it ended and returns the ``OSError`` it failed with (None once
    the file is durable); the caller retries in the foreground. Any other exception is
    raised by :meth:`wait` (a failed save is never reported as durable). ``body`` must not
    change meanwhile (pass :func:`copy_arrays` of a snapshot).
    """

    def __init__(self, path: Path, body: dict[str, Any]) -> None:
        self.path, self.body = Path(path), body
        self.error: OSError | None = None
        self._failure: BaseException | None = None
        self._done = threading.Event()
        _WRITER.submit(self)

    def _run(self) -> None:
        try:
            save(self.path, self.body)
        except OSError as exc:
            self.error = exc
        except BaseException as exc:  # noqa: BLE001  (handed to the waiting caller)
            self._failure = exc
        finally:
            self._done.set()

    def wait(self) -> OSError | None:
        """Block until the write ended; its error, or None if the checkpoint is durable."""
        self._done.wait()
        if self._failure is not None:
            raise self._failure
        return self.error
