"""One device's part of a plan: its own row of the gossip table and the noise parameters.

A device receives a :class:`NodeShare` (:meth:`edgedp.plan.NoisePlan.share` builds it) and
nothing about other nodes: no other node's neighbours, no secrets. Its cross-agent part is the
node's own :class:`~edgedp.families.cross.noise.NodeCrossAgent`; an adaptive DOME basis adds the
public spanning tree of the aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgedp.accounting.participation import Participation
from edgedp.families.cross import noise as cross_mod
from edgedp.families.dome import sketch as sketch_mod
from edgedp.families.laplace import accounting as laplace_acc
from edgedp.task import TaskSpec

__all__ = ["NodeShare"]


@dataclass(frozen=True, slots=True, eq=False)
class NodeShare:
    """One device's part of a plan: its padded mixing row and its noise parameters."""

    node: int
    plan_hash: str
    version: int
    mechanism: str
    steps: int
    participation: Participation
    factor: Any
    noise_std: float
    clip_norm: float
    learning_rate: float
    neighbours: tuple[int, ...]
    weights: tuple[float, ...]
    task: TaskSpec
    laplace: laplace_acc.LaplaceSchedule | None = None
    cross_agent: cross_mod.NodeCrossAgent | None = None
    sketch: sketch_mod.SketchSpec | None = None
    tree: Any = (
        None  # adaptive DOME: the public spanning tree (edgedp.families.dome.sketch_adaptive.Tree)
    )
    network: Any = None  # edgedp.bounds.NetworkFacts: n, W's column sums, noise std per round
