"""L2 clipping of per-example gradients and of whole updates.

Norms are computed as ``sqrt(sum(x * x))`` along the last axis, an elementwise product
and a reduction over a contiguous axis, so one row gives the same bits whether it is
clipped alone or inside a ``(trials, nodes, batch, d)`` array.

A vector with a NaN or infinite entry is replaced by zero: it is never passed on, because a
NaN in a released message would itself reveal that the example took part. A finite vector
whose squared norm overflows is measured on the vector scaled by its largest entry, so it
is clipped along its own direction like any other.
"""

from __future__ import annotations

import numpy as np

from edgedp import _validate

__all__ = ["clip_l2", "clipped_sum", "l2_norms", "nonfinite"]


def l2_norms(x: np.ndarray) -> np.ndarray:
    """L2 norms along the last axis."""
    x = np.asarray(x, dtype=np.float64)
    return np.sqrt(np.sum(x * x, axis=-1))


def nonfinite(x: np.ndarray) -> np.ndarray:
    """Boolean array over the leading axes: which vectors (last axis) hold a NaN or ±inf."""
    return ~np.all(np.isfinite(np.asarray(x, dtype=np.float64)), axis=-1)


def _clip(x: np.ndarray, clip_norm: float):
    """(clipped, was_clipped, nonfinite) — the work of :func:`clip_l2` and :func:`clipped_sum`."""
    if clip_norm != np.inf:
        _validate.positive(clip_norm=clip_norm)
    x = np.asarray(x, dtype=np.float64)
    finite = np.all(np.isfinite(x), axis=-1)
    with np.errstate(over="ignore"):  # overflowing rows are handled below
        norms = l2_norms(x)
        overflow = finite & np.isinf(norms)
        if np.any(overflow):  # finite entries, squared norm above the float range
            top = np.where(overflow, np.max(np.abs(x), axis=-1), 1.0)
            norms = np.where(overflow, top * l2_norms(x / top[..., None]), norms)
    was_clipped = finite & (norms > clip_norm)
    scale = np.where(was_clipped, clip_norm / np.where(was_clipped, norms, 1.0), 1.0)
    with np.errstate(invalid="ignore"):
        clipped = np.where(finite[..., None], x * scale[..., None], 0.0)
    return clipped, was_clipped, ~finite


def clip_l2(x: np.ndarray, clip_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Scale every vector along the last axis to L2 norm at most ``clip_norm``.

    Per-example clipping passes gradients shaped ``(..., batch, d)``; per-update clipping
    passes ``(..., d)``. A vector already inside the ball is returned unchanged; a vector
    with a NaN or ±inf entry is returned as zeros (norm 0 <= Δ; count them with
    :func:`nonfinite`).

    Args:
      x: array whose last axis holds the vectors.
      clip_norm: Δ, the L2 bound (> 0; ``inf`` leaves every finite vector unchanged — used
        by Laplace plans with problem adjacency, whose gradients are analytic).

    Returns:
      ``(clipped, was_clipped)``: the clipped array (float64, always finite) and a boolean
      array over the leading axes telling which finite vectors were scaled down.

    >>> clipped, hit = clip_l2(np.array([[3.0, 4.0], [0.3, 0.4], [np.nan, 1.0]]), 1.0)
    >>> clipped.round(3).tolist(), hit.tolist()
    ([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]], [True, False, False])
    """
    clipped, was_clipped, _ = _clip(x, clip_norm)
    return clipped, was_clipped


def clipped_sum(
    per_example: np.ndarray, clip_norm: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Σ_b clip(g_b, Δ) over the batch axis (−2), added one example at a time in order.

    The sequential sum gives one node the same bits alone or inside a batched array.

    Sensitivity: adding or removing one example changes the sum by that example's clipped
    contribution, whose norm is at most Δ. An example whose gradient has a NaN or ±inf entry
    contributes exactly zero (norm 0 <= Δ), and whether it does depends on that example's
    own gradient only, so the bound Δ (2Δ for replacing one example) still holds and the
    sum is always finite. The sum starts at +0.0 and a zero row adds +0.0, so the result has
    the same bits as the sum without the non-finite examples.

    The counts are local diagnostics (device metrics, simulation results); they are not
    part of any message.

    Returns:
      ``(sum, clipped_count, nonfinite_count)`` with shapes ``(..., d)``, ``(...)`` and
      ``(...)``: the finite examples scaled down, and the non-finite examples left out.

    >>> s, c, bad = clipped_sum(np.array([[3.0, 4.0], [0.3, 0.4], [np.inf, 0.0]]), 1.0)
    >>> s.round(3).tolist(), int(c), int(bad)
    ([0.9, 1.2], 1, 1)
    """
    clipped, hit, bad = _clip(per_example, clip_norm)
    total = np.zeros(clipped.shape[:-2] + clipped.shape[-1:])
    for b in range(clipped.shape[-2]):
        total = total + clipped[..., b, :]
    return total, np.sum(hit, axis=-1), np.sum(bad, axis=-1)
