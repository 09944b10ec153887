"""The exit statuses of ``edgedp-agent`` and the refusal that carries one
(:mod:`firmware_py.daemon` documents each)."""

from __future__ import annotations

__all__ = [
    "EXIT_CONFIG",
    "EXIT_DEGRADED",
    "EXIT_DIVERGED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_PLAN",
    "EXIT_UNSAFE",
    "START_TRIES",
    "RefusedError",
]

EXIT_OK, EXIT_CONFIG, EXIT_PLAN, EXIT_UNSAFE = 0, 2, 3, 4
EXIT_DIVERGED = 5  # the round's message would be non-finite; nothing was sent
EXIT_IO = 6  # a file or the port could not be opened at start (later failures are retried)
EXIT_DEGRADED = 7  # done, but a neighbour never came or too many messages were missing

#: Attempts of each durable write at start (about 6 s of backoff) before exit 6.
START_TRIES = 8
#: What a refusal to resume names as the ways out (docs/DEVICES.md, "Resume").
NEW_RUN = "or deploy a new run (`edgedp deploy`: a new run id)"


class RefusedError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
