"""A node's counters (:class:`Metrics`) and the report of one round (:class:`RoundReport`).

Local diagnostics: never sent. A snapshot carries :meth:`Metrics.to_dict`; a restore reads it
back with :meth:`Metrics.from_dict`, which raises on missing or malformed fields.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["Metrics", "RoundReport"]


@dataclass(frozen=True, slots=True)
class RoundReport:
    round: int
    missing: tuple[int, ...]
    clipped: int
    update_norm: float
    nonfinite: int = 0  # examples whose non-finite gradient was left out of the sum


@dataclass(slots=True)
class Metrics:
    rounds: int = 0
    sent: int = 0
    received: int = 0
    missing: int = 0
    clipped: int = 0
    skipped: int = 0
    nonfinite: int = 0  # examples left out of a clipped sum: their gradient was not finite
    rejected: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "sent": self.sent,
            "received": self.received,
            "missing": self.missing,
            "clipped": self.clipped,
            "skipped": self.skipped,
            "nonfinite": self.nonfinite,
            "rejected": dict(self.rejected),
        }

    def assign(self, other: Metrics) -> None:
        """Take every count of ``other`` (a restore: whoever counts into this object keeps
        counting into it)."""
        for f in fields(self):
            setattr(self, f.name, getattr(other, f.name))

    @classmethod
    def from_dict(cls, m: Any) -> Metrics:
        """The counters of :meth:`to_dict` output (KeyError, TypeError, ValueError or
        AttributeError when malformed; ``skipped`` and ``nonfinite`` may be absent)."""
        return cls(
            rounds=int(m["rounds"]),
            sent=int(m["sent"]),
            received=int(m["received"]),
            missing=int(m["missing"]),
            clipped=int(m["clipped"]),
            skipped=int(m.get("skipped", 0)),
            nonfinite=int(m.get("nonfinite", 0)),
            rejected=Counter({str(k): int(v) for k, v in m["rejected"].items()}),
        )
