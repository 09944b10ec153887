"""The stream ledger: every (plan, run) a device's noise secret has drawn noise for.

Stream keys are bound to (secret, plan hash, run id) (:mod:`edgedp.streams`), so a new plan
or a new run never reuses noise. What remains is starting the *same* run afresh — after the
state folder was lost, or by mistake — which would draw the same noise for different
models. The ledger lives beside the noise secret (not in the state folder: it must survive
the state folder), one JSON line per stream ``{"plan_hash", "run", "node", "fingerprint",
"time"}``, written with fsync before the stream's first message is sent. The daemon refuses a
fresh start (no checkpoint and no sent-round record for that run) on a stream the ledger
lists. The file is created 0600; it holds no secret (the fingerprint is one-way). A failed
append is cut off again (no torn line) and raises ``OSError`` for the caller to retry.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

from firmware_py import resources

__all__ = ["LedgerError", "StreamLedger"]


class LedgerError(RuntimeError):
    """The ledger exists but cannot be read; refusing is the only safe answer."""


class StreamLedger:
    """Append-only record of the streams one noise secret has used."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def entries(self) -> list[dict]:
        """Every recorded stream (empty if the file does not exist)."""
        if not self.path.exists():
            return []
        out = []
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise LedgerError(f"{self.path}: unreadable stream ledger ({exc})") from None
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                if i == len(lines) - 1:  # a torn last line (crash while appending): ignore
                    continue
                raise LedgerError(f"{self.path}:{i + 1}: corrupt stream ledger ({exc})") from None
            out.append(entry)
        return out

    def used(self, plan_hash: str, run: str, node: int) -> dict | None:
        """The entry of this stream, or None if the secret never drew noise for it."""
        for entry in self.entries():
            if (entry.get("plan_hash"), entry.get("run"), entry.get("node")) == (
                plan_hash,
                run,
                node,
            ):
                return entry
        return None

    def record(self, plan_hash: str, run: str, node: int, fingerprint: str) -> None:
        """Append this stream durably (idempotent: nothing is written if it is listed)."""
        if self.used(plan_hash, run, node) is not None:
            return
        line = json.dumps(
            {
                "plan_hash": plan_hash,
                "run": run,
                "node": node,
                "fingerprint": fingerprint,
                "time": time.time(),
            },
            sort_keys=True,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (line + "\n").encode()
        fd = resources.open_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "short write to the stream ledger")
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)  # no torn line: the next append stays parseable
                raise
        finally:
            os.close(fd)
        fd = resources.open_fd(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
