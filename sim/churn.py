"""Node faults: per-round dropouts, crashes with restart from checkpoint, departures.

All draws come from keyed streams of the scenario seed, so faults are reproducible:
node u's dropout in round r is ``uniform(derive_key(secret, "dropout", u), 0)[r] < p``;
random churn draws crash times from a Poisson process per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgedp import rng

__all__ = ["Crash", "Faults"]


@dataclass(frozen=True, slots=True)
class Crash:
    """Node ``node`` crashes at ``at_s`` and restarts from its checkpoint after ``down_s``
    (``down_s = inf``: it leaves for good)."""

    node: int
    at_s: float
    down_s: float = math.inf


@dataclass(frozen=True, slots=True)
class Faults:
    dropout: float = 0.0
    dropout_rule: str = "renormalize"
    crashes: tuple[Crash, ...] = ()
    churn_rate_per_s: float = 0.0
    churn_down_s: float = 1.0
    churn_horizon_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.dropout < 1:
            raise ValueError(f"faults.dropout = {self.dropout} must be in [0, 1)")
        if self.churn_rate_per_s < 0 or self.churn_down_s <= 0:
            raise ValueError("faults.churn: rate_per_s must be >= 0 and down_s > 0")

    def dropout_table(self, n: int, rounds: int, secret: bytes) -> np.ndarray:
        """Boolean (n, rounds): node u sits out round r."""
        if self.dropout == 0:
            return np.zeros((n, rounds), dtype=bool)
        return np.stack(
            [
                rng.generator(rng.derive_key(secret, "dropout", u), 0).random(rounds) < self.dropout
                for u in range(n)
            ]
        )

    def crash_schedule(self, n: int, secret: bytes) -> list[Crash]:
        """The listed crashes plus random churn (Poisson per node up to churn_horizon_s)."""
        out = list(self.crashes)
        if self.churn_rate_per_s > 0 and self.churn_horizon_s > 0:
            for u in range(n):
                gen = rng.generator(rng.derive_key(secret, "churn", u), 0)
                t = 0.0
                while True:
                    t += gen.exponential(1.0 / self.churn_rate_per_s)
                    if t >= self.churn_horizon_s:
                        break
                    out.append(Crash(u, t, self.churn_down_s))
                    t += self.churn_down_s
        for c in out:
            if not 0 <= c.node < n:
                raise ValueError(f"faults: crash of node {c.node} but the topology has {n} nodes")
        return sorted(out, key=lambda c: (c.at_s, c.node))
