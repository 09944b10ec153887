"""One device's part of a plan: its own row of the gossip table and the noise parameters.

A device receives a :class:`NodeShare` (:meth:`edgedp.plan.NoisePlan.share`) and nothing
about other nodes: no other node's neighbours, no secrets. Its cross-agent part is the
node's own :class:`~edgedp.cross_agent.NodeCrossAgent`; an adaptive DOME basis adds the
public spanning tree of the aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgedp import _validate
from edgedp import cross_agent as cross_mod
from edgedp import sketch as sketch_mod
from edgedp.accounting import laplace as laplace_acc
from edgedp.accounting.participation import Participation
from edgedp.task import TaskSpec

if TYPE_CHECKING:
    from edgedp.plan import NoisePlan

__all__ = ["NodeShare", "of"]


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
    tree: Any = None  # adaptive DOME: the public spanning tree (edgedp.sketch_adaptive.Tree)
    network: Any = None  # edgedp.bounds.NetworkFacts: n, W's column sums, noise std per round


def of(plan: NoisePlan, node: int) -> NodeShare:
    """What device ``node`` of ``plan`` needs, and nothing about other nodes."""
    _validate.integer(minimum=0, node=node)
    if node >= plan.n:
        raise ValueError(f"Expected node={node} < n={plan.n}.")
    return NodeShare(
        node=node,
        plan_hash=plan.plan_hash,
        version=plan.version,
        mechanism=plan.mechanism,
        steps=plan.steps,
        participation=plan.participation,
        factor=plan.factor,
        noise_std=plan.noise_std,
        clip_norm=plan.clip_norm,
        learning_rate=plan.learning_rate,
        neighbours=tuple(int(v) for v in plan.mixing_index[node]),
        weights=tuple(float(w) for w in plan.mixing_weight[node]),
        task=plan.task,
        laplace=plan.laplace,
        cross_agent=(
            None
            if plan.cross_agent is None
            else plan.cross_agent.node(
                node,
                edges=plan.edges,
                neighbours=plan.mixing_index[node],
                weights=plan.mixing_weight[node],
            )
        ),
        sketch=plan.sketch,
        tree=_aggregate_tree(plan),
        network=plan.network_facts(),
    )


def _aggregate_tree(plan: NoisePlan) -> Any:
    """The public spanning tree of an adaptive DOME basis (None otherwise)."""
    if plan.sketch is None or plan.sketch.basis != sketch_mod.ADAPTIVE:
        return None
    from edgedp import sketch_adaptive, topology

    return sketch_adaptive.spanning_tree(
        topology.neighbour_lists(plan.mixing_index, plan.mixing_weight)
    )
