"""Shared gossip primitives: the local noisy step and fixed-order neighbour mixing.

Mixing sums neighbours in increasing node id (self included at its sorted position), one
multiply-add at a time, never through a BLAS product whose summation order varies. The
batch engine runs the same elementwise operations over ``(trials, nodes, d)`` arrays with a
padded table from :func:`edgedp.topology.mixing_table`, so every engine produces the same
bits (DESIGN §2).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["local_step", "mix", "mix_node"]


def local_step(
    theta: np.ndarray,
    gradient_sum: np.ndarray,
    noise: np.ndarray | None,
    *,
    learning_rate: float,
    batch_size: int,
) -> np.ndarray:
    """θ_{t+½} = θ_t − η (Σ_b clip(g_b) + noise) / B   (paper 000, Alg. 1 line 4).

    The noise is added to the *sum* of clipped per-example gradients, whose sensitivity to
    adding or removing one example is the clip norm Δ; dividing by the public batch size B
    afterwards is post-processing.
    """
    total = gradient_sum if noise is None else gradient_sum + noise
    return theta - learning_rate * (total / batch_size)


def mix(index: np.ndarray, weight: np.ndarray, values: np.ndarray) -> np.ndarray:
    """θ_{t+1}[u] = Σ_j weight[u, j] · values[..., index[u, j], :] for every node u at once.

    Args:
      index, weight: the padded ``(n, m)`` mixing table (padding has weight 0).
      values: half-step models, shape ``(..., n, d)``.
    """
    out = np.zeros(values.shape)
    for j in range(index.shape[1]):
        out = out + weight[:, j, None] * values[..., index[:, j], :]
    return out


def mix_node(weights: Sequence[float], vectors: Sequence[np.ndarray]) -> np.ndarray:
    """One node's mixing: Σ_j weights[j] · vectors[j], accumulated in the given order.

    The caller passes its padded row of the mixing table and, for each entry, the matching
    neighbour's (or its own) half-step model — the same sequence :func:`mix` uses.
    """
    if len(weights) != len(vectors) or not vectors:
        raise ValueError(
            f"Expected as many vectors as weights, got {len(vectors)} and {len(weights)}."
        )
    out = np.zeros(np.shape(vectors[0]))
    for w, v in zip(weights, vectors, strict=True):
        out = out + w * v
    return out
