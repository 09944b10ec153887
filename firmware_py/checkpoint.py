"""Atomic, checksummed checkpoints: write to a temporary file, fsync, rename, fsync the folder.

A reader sees the previous complete checkpoint or the new complete one, never a mix. The
file is msgpack ``{"sha256": ..., "body": ...}``; a checksum mismatch is an error, never a
silent restart (restarting from scratch after messages were sent would reuse noise). Every
file is written 0600 (only the device's user reads it) and :func:`private_folder` makes the
state folder 0700. Files are opened through :func:`firmware_py.resources.open_fd` (a full
descriptor table falls back on the reserve); a failed write removes its temporary file and
raises ``OSError`` for the caller to retry. :func:`save` keeps the checkpoint it replaces as
``NAME.prev`` (a hard link, renamed into place before the new file is), so a damaged latest
checkpoint can be rolled back (:mod:`firmware_py.recovery`); a crash at any point leaves
``NAME`` complete. A process killed inside :func:`atomic_write` leaves a ``.NAME.tmp.PID``
file, removed by :func:`remove_temporaries` at the next start.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from edgedp import _codec
from firmware_py import resources

__all__ = [
    "CheckpointError",
    "atomic_write",
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


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably (file mode ``mode``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = resources.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # an existing leftover temporary keeps no wider mode
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
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


def save(path: Path, body: dict[str, Any]) -> None:
    """Write ``body`` atomically to ``path``; the file it replaces becomes ``path.prev``."""
    path = Path(path)
    blob = _codec.encode(body)
    data = _codec.encode({"sha256": hashlib.sha256(blob).hexdigest(), "body": blob})
    if path.exists():
        link = path.with_name(f".{path.name}.prev.tmp.{os.getpid()}")
        if link.exists():
            link.unlink()
        os.link(path, link)  # same inode: the old content survives the rename below
        os.replace(link, previous(path))
    atomic_write(path, data)  # its folder fsync also makes the .prev rename durable


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
    try:
        outer = _codec.decode(path.read_bytes())
        blob = outer["body"]
        if hashlib.sha256(blob).hexdigest() != outer["sha256"]:
            raise CheckpointError(f"{path}: checksum mismatch")
        return _codec.decode(blob)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from None
