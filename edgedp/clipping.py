"""L2 clipping of per-example gradients and of whole updates.

Norms are computed as ``sqrt(sum(x * x))`` along the last axis, an elementwise product
and a reduction over a contiguous axis, so one row gives the same bits whether it is
clipped alone or inside a ``(trials, nodes, batch, d)`` array.
"""

from __future__ import annotations

import numpy as np

from edgedp import _validate

__all__ = ["clip_l2", "l2_norms"]


def l2_norms(x: np.ndarray) -> np.ndarray:
    """L2 norms along the last axis."""
    x = np.asarray(x, dtype=np.float64)
    return np.sqrt(np.sum(x * x, axis=-1))


def clip_l2(x: np.ndarray, clip_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Scale every vector along the last axis to L2 norm at most ``clip_norm``.

    Per-example clipping passes gradients shaped ``(..., batch, d)``; per-update clipping
    passes ``(..., d)``. A vector already inside the ball is returned unchanged.

    Args:
      x: array whose last axis holds the vectors.
      clip_norm: Δ, the L2 bound (> 0; ``inf`` leaves every vector unchanged — used by
        Laplace plans with problem adjacency, whose gradients are analytic).

    Returns:
      ``(clipped, was_clipped)``: the clipped array (float64) and a boolean array over the
      leading axes telling which vectors were scaled down.

    >>> clipped, hit = clip_l2(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    >>> clipped.round(3).tolist(), hit.tolist()
    ([[0.6, 0.8], [0.3, 0.4]], [True, False])
    """
    if clip_norm != np.inf:
        _validate.positive(clip_norm=clip_norm)
    x = np.asarray(x, dtype=np.float64)
    norms = l2_norms(x)
    was_clipped = norms > clip_norm
    scale = np.where(was_clipped, clip_norm / np.where(was_clipped, norms, 1.0), 1.0)
    return x * scale[..., None], was_clipped


def clipped_sum(per_example: np.ndarray, clip_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Σ_b clip(g_b, Δ) over the batch axis (−2), added one example at a time in order.

    The sequential sum gives one node the same bits alone or inside a batched array. Its
    sensitivity to adding or removing one example is Δ.

    Returns:
      ``(sum, clipped_count)`` with shapes ``(..., d)`` and ``(...)``.

    >>> s, c = clipped_sum(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    >>> s.round(3).tolist(), int(c)
    ([0.9, 1.2], 1)
    """
    clipped, hit = clip_l2(per_example, clip_norm)
    total = np.zeros(clipped.shape[:-2] + clipped.shape[-1:])
    for b in range(clipped.shape[-2]):
        total = total + clipped[..., b, :]
    return total, np.sum(hit, axis=-1)
