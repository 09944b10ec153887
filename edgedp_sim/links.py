"""Simulated links: latency distributions, bandwidth, loss — drawn from keyed streams.

Every random quantity of a message is a pure function of (scenario seed, link, round): the
draws for directed link u→v come from ``derive_key(secret, "link", u, v)``, one value per
round, so a scenario gives the same result on every run whatever the order of events.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgedp import _validate, rng

__all__ = ["Latency", "LinkDraws", "Network"]

_KINDS = {
    "constant": ("ms",),
    "uniform": ("low_ms", "high_ms"),
    "lognormal": ("median_ms", "sigma"),
    "table": ("file",),
}


@dataclass(frozen=True, slots=True)
class Latency:
    """One-way latency: constant, uniform, lognormal (median, sigma) or a per-link table."""

    kind: str = "constant"
    params: dict[str, Any] = field(default_factory=lambda: {"ms": 0.0})
    table: dict[tuple[int, int], float] = field(default_factory=dict)

    @classmethod
    def from_dict(
        cls, d: dict[str, Any], *, where: str = "network.latency", base: Path | None = None
    ):
        if not isinstance(d, dict) or d.get("kind") not in _KINDS:
            raise ValueError(f"{where}.kind must be one of {sorted(_KINDS)}, got {d!r}")
        kind = d["kind"]
        want = set(_KINDS[kind]) | ({"default_ms"} if kind == "table" else set())
        _validate.known_keys(d, ("kind", *sorted(want)), where=where)
        extra = set(d) - want - {"kind"}
        missing = set(_KINDS[kind]) - set(d)
        if extra or missing:
            raise ValueError(
                f"{where}: kind {kind!r} takes {sorted(_KINDS[kind])}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        params = {k: d[k] for k in want if k in d}
        for k, v in params.items():
            if k != "file" and (not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v)):
                raise ValueError(f"{where}.{k} = {v!r} must be a finite number >= 0")
        if kind == "uniform" and params["low_ms"] > params["high_ms"]:
            raise ValueError(f"{where}: low_ms must be <= high_ms")
        table = {}
        if kind == "table":
            path = Path(params["file"])
            path = path if path.is_absolute() or base is None else base / path
            try:
                with open(path, newline="") as fh:
                    for i, row in enumerate(csv.reader(fh), start=1):
                        if not row or row[0].startswith("#"):
                            continue
                        try:
                            u, v, ms = int(row[0]), int(row[1]), float(row[2])
                        except (ValueError, IndexError):
                            raise ValueError(
                                f"{path}:{i}: expected 'u,v,ms', got {row!r}"
                            ) from None
                        table[(u, v)] = table[(v, u)] = ms
            except OSError as exc:
                raise ValueError(f"{where}.file {path}: {exc.strerror}") from None
        return cls(kind, params, table)

    def sample(self, gen: np.random.Generator, size: int, link: tuple[int, int]) -> np.ndarray:
        """``size`` one-way latencies in seconds for one directed link."""
        p = self.params
        if self.kind == "constant":
            ms = np.full(size, float(p["ms"]))
        elif self.kind == "uniform":
            ms = gen.uniform(p["low_ms"], p["high_ms"], size)
        elif self.kind == "lognormal":
            ms = float(p["median_ms"]) * np.exp(float(p["sigma"]) * gen.standard_normal(size))
        else:
            if link not in self.table and "default_ms" not in p:
                raise ValueError(f"latency table has no entry for link {link} and no default_ms")
            ms = np.full(size, float(self.table.get(link, p.get("default_ms", 0.0))))
        return ms / 1000.0


@dataclass(frozen=True, slots=True)
class Network:
    """Link model of a scenario."""

    latency: Latency = field(default_factory=Latency)
    bandwidth_mbps: float = math.inf
    loss: float = 0.0
    round_timeout_s: float = 1.0
    startup_timeout_s: float = 5.0
    compute_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.bandwidth_mbps > 0:
            raise ValueError(f"network.bandwidth_mbps = {self.bandwidth_mbps} must be > 0")
        if not 0 <= self.loss < 1:
            raise ValueError(f"network.loss = {self.loss} must be in [0, 1)")
        for name in ("round_timeout_s", "startup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"network.{name} = {getattr(self, name)} must be > 0")
        if not self.compute_s >= 0:
            raise ValueError(f"network.compute_s = {self.compute_s} must be >= 0")

    def serialization_s(self, size_bytes: int) -> float:
        return (
            0.0 if math.isinf(self.bandwidth_mbps) else size_bytes * 8 / (self.bandwidth_mbps * 1e6)
        )


class LinkDraws:
    """Per directed link and round: latency (s) and whether the message is lost."""

    def __init__(self, network: Network, links: list[tuple[int, int]], rounds: int, secret: bytes):
        self.latency: dict[tuple[int, int], np.ndarray] = {}
        self.lost: dict[tuple[int, int], np.ndarray] = {}
        # derive_key(secret, "link", u, v) for every link with the prefix hashed once; one
        # generator re-keyed per link (rng.stacked: the bits of rng.generator(key, 0))
        keys = rng.derive_keys(secret, ("link",), links)
        for link, key in zip(links, keys, strict=True):

            def draws(gen: np.random.Generator, link=link) -> np.ndarray:
                return np.concatenate(
                    (network.latency.sample(gen, rounds, link), gen.random(rounds))
                )

            both = rng.stacked(np.array(key, dtype=object), 0, (2 * rounds,), draws)
            self.latency[link] = both[:rounds]
            self.lost[link] = both[rounds:] < network.loss
