"""The device log: Python's ``logging``, human lines by default or JSON lines, reason codes.

Every record the agent logs carries a reason code (``code``), the same word the metrics
use, so an operator can grep, alert and count on it:

========================  ===================================================================
code                      when
========================  ===================================================================
``start``                 the agent starts (plan, run, budget and which adversary it binds)
``not-private``           noise derived from the plan's public seed (tests, comparisons)
``limits``                descriptor reserve, the transport's frame / part caps, freed memory kept
``resumed``               a resume: ``rollback`` / ``rolled-back`` and the rounds sat out
``rejected``              frames the agent rejected in a round, per wire reason (``reason``)
``refused``               messages the transport discarded in a round (``reason``)
``handshake-refused``     CURVE handshakes with a key that is no neighbour's (key prefix)
``missing``               neighbours whose message did not come this round (dropout rule)
``neighbour-silent``      a neighbour has sent nothing at all yet (after the first round)
``equivocation``          a neighbour sent two different messages for one round (the first kept)
``rejoin``                the node skipped rounds to rejoin its neighbours
``io-retry``              a write failed and is retried; ``io-recovered`` once it works
``done``                  the plan's rounds are done; ``degraded`` if the run ended degraded
``config``, ``plan-refused``, ``unsafe``, ``diverged``, ``io``: the refusal behind exits 2–6
========================  ===================================================================

Rejections are logged once per round and reason with their count (a flood of frames is one
record per round, not one per frame); the metrics line of the round has the same counts.
Nothing secret is ever logged: keys appear only as public-key prefixes, noise only as
digests. Logging never raises — a log on a full disk loses lines (counted), not the run.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from typing import Any, TextIO

from edgedp import strict_json

__all__ = ["EXIT_CODES", "FORMATS", "RoundWatch", "TextAdapter", "event", "setup"]

LOGGER = "edgedp.agent"
FORMATS = ("text", "json")
#: The reason code of each refusal exit status (the daemon's numbering).
EXIT_CODES = {2: "config", 3: "plan-refused", 4: "unsafe", 5: "diverged", 6: "io", 7: "degraded"}


def _utc(record: logging.LogRecord) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z"
    )


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        code = getattr(record, "code", "-")
        return (
            f"{_utc(record)} node {getattr(record, 'node', '?')} {record.levelname} "
            f"[{code}] {record.getMessage()}"
        )


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": _utc(record),
            "level": record.levelname,
            "node": getattr(record, "node", None),
            "code": getattr(record, "code", None),
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        return strict_json.dumps(out, sort_keys=True, default=str)  # ε = ∞ → "inf"


class _SafeHandler(logging.StreamHandler):
    """A stream handler that never raises (the stream may sit on a full disk)."""

    lost = 0

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging API)
        _SafeHandler.lost += 1


class _NodeFilter(logging.Filter):
    def __init__(self, node: int) -> None:
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node
        return True


def setup(node: int, *, fmt: str = "text", stream: TextIO | None = None) -> logging.Logger:
    """The agent's logger, writing ``fmt`` lines to ``stream`` (default stderr)."""
    if fmt not in FORMATS:
        raise ValueError(f"Expected log format in {FORMATS}, got {fmt!r}.")
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):  # one agent per process; tests call main() again
        logger.removeHandler(handler)
    for f in list(logger.filters):
        logger.removeFilter(f)
    handler = _SafeHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    logger.addHandler(handler)
    logger.addFilter(_NodeFilter(node))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def event(logger: logging.Logger, level: int, code: str, message: str, **fields: Any) -> None:
    """Log ``message`` with a reason code and structured fields (JSON lines show them)."""
    logger.log(level, message, extra={"code": code, "fields": fields})


class TextAdapter:
    """A ``write``/``flush`` text stream that logs each line (for code that writes text:
    the retry and metrics helpers of :mod:`firmware_py.resources`)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def write(self, text: str) -> None:
        line = text.strip()
        if not line:
            return
        code = "io-recovered" if ("done after" in line or "work again" in line) else "io-retry"
        event(self.logger, logging.WARNING, code, line)

    def flush(self) -> None:
        """Records are written as they come."""


class RoundWatch:
    """Turns each round's counters into log events, and judges the run at the end.

    Args:
      logger: the agent's logger.
      neighbours: the node's neighbours (ids).
      endpoints: their endpoints, for the messages.
      plan_hash: for the silent-neighbour advice.
      alive: the neighbours any authenticated frame came from so far (the caller adds to
        it): a neighbour whose messages were all outside this node's window — after a
        restart, when it is ahead — is not silent.
    """

    def __init__(
        self,
        logger: logging.Logger,
        neighbours,
        endpoints,
        plan_hash: str,
        alive: set[int] | None = None,
    ) -> None:
        self.logger = logger
        self.neighbours = tuple(neighbours)
        self.endpoints = dict(endpoints)
        self.plan_hash = plan_hash
        self.alive = set() if alive is None else alive  # sent any authenticated frame
        self.heard: set[int] = set()
        self.warned: set[int] = set()
        self.rejected: Counter = Counter()
        self.refused: Counter = Counter()
        self.handshakes = 0
        self.rounds = 0
        self.missing = 0

    def round_end(self, round_: int, report, agent, transport) -> None:
        """Log what changed in round ``round_``."""
        self.rounds += 1
        self.missing += len(report.missing)
        self.heard |= set(self.neighbours) - set(report.missing)
        self._deltas("rejected", round_, agent.metrics.rejected, self.rejected, "frames rejected")
        self._deltas("refused", round_, transport.refused, self.refused, "messages refused")
        refused = transport.refused_handshakes
        if refused > self.handshakes:
            keys = ", ".join(k[:8].decode(errors="replace") + "…" for k in transport.unknown_keys)
            event(
                self.logger,
                logging.WARNING,
                "handshake-refused",
                f"{refused - self.handshakes} handshake(s) refused with keys that are no "
                f"neighbour's ({keys or 'no key sent'})",
                round=round_,
                count=refused - self.handshakes,
            )
            self.handshakes = refused
        if report.missing:
            event(
                self.logger,
                logging.INFO,
                "missing",
                f"round {round_}: no message from {list(report.missing)} "
                f"(dropout rule {agent.dropout_rule})",
                round=round_,
                neighbours=list(report.missing),
            )
        for v, r, first, second in agent.take_equivocations():
            event(
                self.logger,
                logging.WARNING,
                "equivocation",
                f"neighbour {v} sent two different messages for round {r} (fingerprints "
                f"{first.hex()} and {second.hex()}): it released that round twice, as after "
                "an older copy of its state was put back; the first was kept",
                round=r,
                neighbour=v,
                first=first.hex(),
                second=second.hex(),
            )
        for v in self.neighbours:
            if v not in self.heard and v not in self.alive and v not in self.warned:
                self.warned.add(v)
                event(
                    self.logger,
                    logging.ERROR,
                    "neighbour-silent",
                    f"neighbour {v} ({self.endpoints.get(v, '?')}) has sent nothing valid: "
                    f"check its public_key in node.toml and its endpoint, that it is running, "
                    f"and that it runs plan {self.plan_hash[:16]}…",
                    round=round_,
                    neighbour=v,
                    refused_handshakes=refused,
                )

    def _deltas(self, code, round_, now: Counter, seen: Counter, what: str) -> None:
        for reason, count in sorted(now.items()):
            new = count - seen.get(reason, 0)
            if new > 0:
                event(
                    self.logger,
                    logging.WARNING,
                    code,
                    f"round {round_}: {new} {what}: {reason}",
                    round=round_,
                    reason=reason,
                    count=new,
                )
        seen.clear()
        seen.update(now)

    def degraded(self, max_missing: float) -> str | None:
        """Why the run ended degraded, or None: a neighbour never heard from, or more than
        ``max_missing`` of the expected neighbour messages missing."""
        silent = [v for v in self.neighbours if v not in self.heard]
        expected = self.rounds * len(self.neighbours)
        fraction = self.missing / expected if expected else 0.0
        if silent and self.rounds:
            return f"neighbours {silent} sent nothing valid during the whole run"
        if fraction > max_missing:
            return (
                f"{self.missing} of {expected} neighbour messages missing ({fraction:.0%} > "
                f"run.max_missing = {max_missing:.0%})"
            )
        return None
