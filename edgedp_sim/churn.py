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

__all__ = ["Crash", "CrashRounds", "Faults", "crash_round", "crash_rounds"]


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
        # rng.generator(derive_key(secret, "dropout", u), 0).random(rounds) for every node
        # (keys derived and a generator re-keyed in bulk: the same bits)
        keys = np.empty(n, dtype=object)
        keys[:] = rng.derive_keys(secret, ("dropout",), [(u,) for u in range(n)])
        return rng.stacked(keys, 0, (rounds,), lambda gen: gen.random(rounds)) < self.dropout

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


@dataclass(frozen=True, slots=True)
class CrashRounds:
    """Crashes in round terms (:func:`crash_rounds`)."""

    down: np.ndarray  # (n, rounds) bool: the node is down (neither sends nor receives)
    deaf: np.ndarray  # (n, rounds) bool: the node redoes the round, its inbox lost
    restarts: tuple[tuple[int, int, int], ...]  # (node, crash round, round it runs again)
    count: int  # crashes that hit a running node


def crash_round(at_s: float, compute_s: float) -> int:
    """The round a crash at ``at_s`` hits on the zero-latency clock.

    With zero latency and infinite bandwidth a node that never waits spends ``compute_s``
    on each round and sends at its end, so round r's computation occupies
    (r·compute_s, (r+1)·compute_s]; a crash at t hits round ⌈t/compute_s⌉ − 1 (round 0 for
    t ≤ compute_s: a crash at the instant a round's computation ends comes before its send,
    as the event engine runs the crash's timer, made first, before the node's).

    >>> [crash_round(t, 0.5) for t in (0.0, 0.5, 0.75, 1.0, 1.01)]
    [0, 0, 1, 1, 2]
    """
    if not compute_s > 0:
        raise ValueError(
            "crashes in round terms need network.compute_s > 0: with zero latency and zero "
            "compute time the event engine's clock does not advance between rounds"
        )
    return max(0, math.ceil(at_s / compute_s) - 1)


def crash_rounds(
    crashes: list[Crash],
    compute_s: float,
    *,
    n: int,
    rounds: int,
    round_timeout_s: float = 1.0,
    startup_timeout_s: float = 5.0,
) -> CrashRounds:
    """Map ``crashes`` (from :meth:`Faults.crash_schedule`) to rounds on the zero-latency
    clock (:func:`crash_round`; c = ``compute_s``). A node that crashes in round k restarts
    from its checkpoint, made at the start of round k, at t = ``at_s + down_s``:

    * t ≤ (k+1)·c (before round k's messages are sent): it redoes round k and gets all its
      messages — nothing changes but the time;
    * its redone message (sent at t + c) still meets its neighbours' deadline of round k,
      (k+1)·c + the round's timeout (``startup_timeout_s`` for round 0): it redoes round k
      and its neighbours mix its message, but it mixes none of theirs, which reached its
      previous incarnation (``deaf``);
    * later (and for a departure, ``down_s = inf``): it is down from round k to the round
      k' = ``crash_round(t)`` (none, for a departure) and runs again from round k' with its
      checkpoint, the rounds k … k' − 1 skipped (noise drawn and discarded).

    A crash of a node that is down or done changes nothing.
    """
    down = np.zeros((n, rounds), dtype=bool)
    deaf = np.zeros((n, rounds), dtype=bool)
    restarts, count = [], 0
    for c in crashes:
        k = crash_round(c.at_s, compute_s)
        if k >= rounds or down[c.node, k]:
            continue
        count += 1
        at = c.at_s + c.down_s
        limit = startup_timeout_s if k == 0 else round_timeout_s
        if at <= (k + 1) * compute_s:
            end = k
        elif at + compute_s <= (k + 1) * compute_s + limit:
            deaf[c.node, k] = True
            end = k
        else:
            end = min(rounds, rounds if math.isinf(c.down_s) else crash_round(at, compute_s))
            down[c.node, k:end] = True
        if end < rounds:
            restarts.append((c.node, k, end))
    return CrashRounds(down, deaf, tuple(restarts), count)
