"""Bounds on honest messages: what a receiver may reject without rejecting an honest sender.

A neighbour's finite but huge message (1.797e308) passes every structural check, and mixing
it makes the receiver's model overflow or swamps it for good. Every plan therefore implies
a bound B on the entries of every honest message, and a receiver rejects (and counts, as
``BeyondBound``) any message with an entry beyond it (:func:`edgedp.wire.check`).

**Guarantee.** With probability at least 1 − :data:`FALSE_REJECTION` = 1 − 10⁻¹² over the
noise of the whole run, no entry of any honest message of any node in any round exceeds B:
the per-coordinate tail budget is p = 10⁻¹² / (n · T · width · slots) (a union bound over
nodes, rounds, coordinates and, for Zip-DL, per-recipient messages), with the Chernoff
bounds P(|N(0, s²)| > s·√(2 ln(2/p))) ≤ p and P(|Lap(b)| > b ln(1/p)) = p. B does not
depend on the data or the model's loss: only on the plan (η, Δ, T, ν, the temporal factor,
the cross-agent covariance, the Laplace schedule, W's column sums), the model dimension and
the common initial model θ₀. Mixing is a convex combination (W ≥ 0, rows sum to 1), so the
largest entry over all nodes never grows in a mixing step; each rules module's
``message_bound`` carries the rest of the recursion (derivations there and in
docs/DEVICE_RUNTIME.md, "Hostile peers"). The per-node batch size B_node only divides, so
the bound uses the plan's batch size, or 1 when the task uses whole local datasets (a
looser bound).

A plan may also *state* a bound (``NoisePlan.message_bound``), which then replaces the
derived one — for plans where none can be derived (unclipped Laplace plans, Δ = ∞) or
where the operator knows a tighter one; a stated bound below the derived one may reject
honest messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "FALSE_REJECTION",
    "NetworkFacts",
    "batch_floor",
    "coordinate_budget",
    "gaussian_tail",
    "laplace_tail",
    "network_facts",
    "rounded",
]

#: Probability that any honest message of a run exceeds the bound (module docstring).
FALSE_REJECTION = 1e-12


@dataclass(frozen=True, slots=True, eq=False)
class NetworkFacts:
    """Public, plan-wide numbers a node needs for the bound (computed once per plan).

    Attributes:
      nodes: n.
      column_sum: the largest column sum of W (1 when W is doubly stochastic).
      noise_std: (T,) the largest standard deviation of one coordinate of any node's
        Gaussian noise at each round (ν · ‖C⁻¹[t, :]‖ · √(R̃_uu + m)); zeros without noise.
      stated: the plan's stated bound, or None to derive it.
    """

    nodes: int
    column_sum: float
    noise_std: np.ndarray
    stated: float | None = None


def network_facts(plan) -> NetworkFacts:
    """The :class:`NetworkFacts` of a :class:`~edgedp.plan.NoisePlan`."""
    # W's column sums from the plan's (n, slots) table, without the n × n matrix (800 MB at
    # 10⁴ nodes): each column's weights added in row order, as numpy sums the dense matrix's
    # rows (a row's padding slots add 0.0)
    index = np.asarray(plan.mixing_index, dtype=np.int64).ravel()
    weight = np.asarray(plan.mixing_weight, dtype=np.float64).ravel()
    columns = np.bincount(index, weights=weight, minlength=plan.n)
    steps = plan.steps
    std = np.zeros(steps)
    if plan.noise_std > 0:
        variance = 1.0
        spec = plan.cross_agent
        if spec is not None:
            per_node = spec.diag + np.sum(spec.factor**2, axis=1)
            if spec.edge_variance.size:
                edges = np.asarray(plan.edges, dtype=np.int64).reshape(-1, 2)
                np.add.at(per_node, edges[:, 0], spec.edge_variance)
                np.add.at(per_node, edges[:, 1], spec.edge_variance)
            # Zip-DL: the message-wise part has variance m (1 − w_j²/Σw²) ≤ m per slot
            variance = float(np.max(per_node)) + spec.message_variance
        std = plan.noise_std * plan.factor.noise_row_norms(steps) * math.sqrt(variance)
    return NetworkFacts(
        nodes=plan.n,
        column_sum=float(np.max(columns)),
        noise_std=std,
        stated=plan.message_bound,
    )


def coordinate_budget(facts: NetworkFacts, *, steps: int, width: int, slots: int = 1) -> float:
    """p: the tail probability allowed to one coordinate of one node's noise in one round."""
    return FALSE_REJECTION / (facts.nodes * steps * max(1, width) * max(1, slots))


def gaussian_tail(p: float) -> float:
    """z with P(|N(0, 1)| > z) ≤ p, from the Chernoff bound 2·exp(−z²/2).

    >>> round(gaussian_tail(1e-12), 3)  # √(2 ln(2·10¹²)); the exact two-sided quantile: 7.131
    7.527
    """
    return math.sqrt(2.0 * math.log(2.0 / p))


def laplace_tail(p: float) -> float:
    """s with P(|Lap(1)| > s) = p exactly: s = ln(1/p).

    >>> round(laplace_tail(1e-12), 3)
    27.631
    """
    return math.log(1.0 / p)


def rounded(bound: float) -> float:
    """``bound`` widened by 10⁻⁹ relative: honest arithmetic rounds, the derivation does not."""
    return bound * (1.0 + 1e-9)


def batch_floor(share) -> int:
    """The smallest batch any node may use: the plan's, or 1 for whole local datasets."""
    return int(share.task.batch_size) or 1
