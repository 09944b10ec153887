"""Atomic, checksummed checkpoints: write to a temporary file, fsync, rename, fsync the folder.

A reader sees the previous complete checkpoint or the new complete one, never a mix. The
file is ``MAGIC``, the sha256 of the rest, the length of a msgpack skeleton, the skeleton
(the body with every array replaced by ``{"__raw__": i, "dtype", "shape"}``) and the arrays'
raw little-endian bytes one after another: saving writes the arrays' own buffers (no copy,
the hash streamed over them), loading reads the file once. Files of the earlier format
(msgpack ``{"sha256": ..., "body": ...}``) are still read. A checksum mismatch is an error,
never a silent restart (restarting from scratch after messages were sent would reuse
noise). :class:`Pending` writes a checkpoint in a background thread while the agent
computes its next round; the caller waits for it before anything is sent. Every
file is written 0600 (only the device's user reads it) and :func:`private_folder` makes the
state folder 0700. Files are opened through :func:`firmware_py.resources.open_fd` (a full
descriptor table falls back on the reserve); a failed write removes its temporary file and
raises ``OSError`` for the caller to retry. :func:`save` keeps the checkpoint it replaces as
``NAME.prev`` (a hard link, renamed into place before the new file is), so a damaged latest
checkpoint can be rolled back (:mod:`firmware_py.recovery`); a crash at any point leaves
``NAME`` complete. Where the names can be swapped atomically (Linux ``renameat2``), the file
``NAME.prev`` held until then is reused as the temporary (overwritten, fsync'd, renamed)
instead of a new file, so a round allocates and frees no file blocks or pages. A process
killed inside :func:`atomic_write` or :func:`save` leaves a ``.NAME.tmp.PID`` (or
``.NAME.prev.tmp.PID``) file, removed by :func:`remove_temporaries` at the next start.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import stat
import struct
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgedp import _codec
from firmware_py import resources

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
    fd = resources.open_fd(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def previous(path: Path) -> Path:
    """Where :func:`save` keeps the checkpoint it replaced."""
    path = Path(path)
    return path.with_name(path.name + ".prev")


#: First bytes of a checkpoint file in the raw-buffer format.
MAGIC = b"EDGEDPC2"
_DTYPES = {"<f8": np.dtype("<f8"), "<f4": np.dtype("<f4"), "<i8": np.dtype("<i8")}
_LENGTH = struct.Struct("<Q")


def _split(obj: Any, buffers: list) -> Any:
    """``obj`` with every array replaced by a ``__raw__`` record; its bytes go to ``buffers``."""
    if isinstance(obj, np.ndarray):
        key = obj.dtype.newbyteorder("<").str if obj.dtype.byteorder == ">" else obj.dtype.str
        if key not in _DTYPES:
            return obj  # the msgpack codec converts (or refuses) other dtypes
        arr = np.ascontiguousarray(obj, dtype=_DTYPES[key])
        buffers.append(memoryview(arr).cast("B"))
        return {"__raw__": len(buffers) - 1, "dtype": key, "shape": list(arr.shape)}
    if isinstance(obj, Mapping):
        return {str(k): _split(obj[k], buffers) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [_split(v, buffers) for v in obj]
    return obj


def _join(obj: Any, data: memoryview, offsets: list[int]) -> Any:
    """Inverse of :func:`_split` over ``data`` (the arrays' bytes); ValueError if malformed."""
    if isinstance(obj, dict):
        if "__raw__" in obj:
            if set(obj) != {"__raw__", "dtype", "shape"} or obj["dtype"] not in _DTYPES:
                raise ValueError("malformed array record")
            index, shape = obj["__raw__"], tuple(obj["shape"])
            if type(index) is not int or index != len(offsets) - 1:
                raise ValueError("array records out of order")
            if not all(type(s) is int and s >= 0 for s in shape):
                raise ValueError(f"malformed array shape {shape}")
            dt = _DTYPES[obj["dtype"]]
            start = offsets[-1]
            end = start + int(np.prod(shape, dtype=object)) * dt.itemsize
            if end > len(data):
                raise ValueError("array data is shorter than its shape")
            offsets.append(end)
            return np.frombuffer(data[start:end], dtype=dt).reshape(shape)
        return {k: _join(v, data, offsets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join(v, data, offsets) for v in obj]
    return obj


def encode(body: dict[str, Any]) -> list:
    """The buffers of ``body``'s checkpoint file (see the module docstring), in order."""
    buffers: list = []
    skeleton = _codec.encode(_split(body, buffers))
    digest = hashlib.sha256(_LENGTH.pack(len(skeleton)))
    digest.update(skeleton)
    for buf in buffers:
        digest.update(buf)
    return [MAGIC + digest.digest() + _LENGTH.pack(len(skeleton)) + skeleton, *buffers]


def decode(data: bytes | bytearray) -> dict[str, Any]:
    """The body of a checkpoint file; ValueError if it is damaged or malformed."""
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC:  # the earlier msgpack format
        outer = _codec.decode(bytes(data))
        blob = outer["body"]
        if hashlib.sha256(blob).hexdigest() != outer["sha256"]:
            raise ValueError("checksum mismatch")
        return _codec.decode(blob)
    head = len(MAGIC) + 32 + _LENGTH.size
    if len(view) < head:
        raise ValueError("truncated file")
    if hashlib.sha256(view[len(MAGIC) + 32 :]).digest() != bytes(view[len(MAGIC) : head - 8]):
        raise ValueError("checksum mismatch")
    (size,) = _LENGTH.unpack(view[head - 8 : head])
    if head + size > len(view):
        raise ValueError("truncated skeleton")
    offsets = [0]
    body = _join(_codec.decode(bytes(view[head : head + size])), view[head + size :], offsets)
    if offsets[-1] != len(view) - head - size:
        raise ValueError("array data does not match the skeleton")
    return body


def copy_arrays(body: Any) -> Any:
    """``body`` with every array copied (a snapshot a background write may hold while the
    agent goes on)."""
    if isinstance(body, np.ndarray):
        return body.copy()
    if isinstance(body, Mapping):
        return {k: copy_arrays(v) for k, v in body.items()}
    if isinstance(body, (list, tuple)):
        return [copy_arrays(v) for v in body]
    return body


#: ``renameat2`` of the C library (None: not there, or a file system refused the exchange).
_RENAME_EXCHANGE = 2
_renameat2: Any = False  # not looked up yet


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` (same folder) in one atomic step (Linux
    ``renameat2(RENAME_EXCHANGE)``); False, changing nothing, where that is not available."""
    global _renameat2
    if _renameat2 is False:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
            fn.argtypes += [ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (AttributeError, OSError):
            _renameat2 = None
    if _renameat2 is None:
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
    """Whether ``prev`` is a regular file that no other name links to (may be reused)."""
    try:
        st = os.lstat(prev)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def save(path: Path, body: dict[str, Any]) -> None:
    """Write ``body`` atomically to ``path``; the file it replaces becomes ``path.prev``.

    The ``.prev`` it replaces in turn (two rounds old) is reused as the new file's
    temporary where the names can be swapped atomically (Linux): the new ``.prev`` link
    and the old one's file trade names in one step, then that file is overwritten under
    the temporary name (:func:`atomic_write` ``reuse``). A crash at any point leaves
    ``path`` complete and ``path.prev`` complete or absent, as with a new file."""
    path = Path(path)
    data = encode(body)
    reuse = None
    if path.exists():
        prev = previous(path)
        link = path.with_name(f".{path.name}.prev.tmp.{os.getpid()}")
        if link.exists():
            link.unlink()
        os.link(path, link)  # same inode: the old content survives the rename below
        if _spare(prev) and _exchange(link, prev):
            reuse = link  # now the name of the old .prev's file, linked nowhere else
        else:
            os.replace(link, prev)
    atomic_write(path, data, reuse=reuse)  # its folder fsync makes the renames durable


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


class Pending:
    """:func:`save` of ``body`` running in a background thread (started at once).

    :meth:`wait` joins it and returns the ``OSError`` it failed with (None once the file is
    durable); the caller retries in the foreground. ``body`` must not change meanwhile
    (pass :func:`copy_arrays` of a snapshot).
    """

    def __init__(self, path: Path, body: dict[str, Any]) -> None:
        self.path, self.body = Path(path), body
        self.error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            save(self.path, self.body)
        except OSError as exc:
            self.error = exc

    def wait(self) -> OSError | None:
        """Block until the write ended; its error, or None if the checkpoint is durable."""
        self._thread.join()
        return self.error
