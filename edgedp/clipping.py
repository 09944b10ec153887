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

__all__ = ["add_clipped", "clip_l2", "clipped_sum", "l2_norms", "nonfinite"]


def l2_norms(x: np.ndarray) -> np.ndarray:
    """L2 norms along the last axis."""
    x = np.asarray(x, dtype=np.float64)
    return np.sqrt(np.sum(x * x, axis=-1))


def nonfinite(x: np.ndarray) -> np.ndarray:
    """Boolean array over the leading axes: which vectors (last axis) hold a NaN or ±inf."""
    return ~np.all(np.isfinite(np.asarray(x, dtype=np.float64)), axis=-1)


def _clip(x: np.ndarray, clip_norm: float, overwrite: bool = False):
    """(clipped, was_clipped, nonfinite) — the work of :func:`clip_l2` and :func:`clipped_sum`.

    ``overwrite``: clip in x's own buffer (same bits: x·1.0 = x, and zeroed rows are zeros)."""
    if clip_norm != np.inf:
        _validate.positive(clip_norm=clip_norm)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):  # overflowing rows are handled below
        norms = l2_norms(x)
        # a row with a NaN or ±inf entry has a NaN or +inf norm, so only rows whose norm is
        # not finite (non-finite entries, or an overflowing square sum) are checked entry
        # by entry: the same ``finite`` without a pass over every row in the common case
        finite = np.isfinite(norms)
        if not finite.all():
            finite = np.all(np.isfinite(x), axis=-1)
        overflow = finite & np.isinf(norms)
        if np.any(overflow):  # finite entries, squared norm above the float range
            top = np.where(overflow, np.max(np.abs(x), axis=-1), 1.0)
            norms = np.where(overflow, top * l2_norms(x / top[..., None]), norms)
    was_clipped = finite & (norms > clip_norm)
    scale = np.where(was_clipped, clip_norm / np.where(was_clipped, norms, 1.0), 1.0)
    if overwrite and x.flags.writeable:
        with np.errstate(invalid="ignore"):
            np.multiply(x, scale[..., None], out=x)
        x[~finite] = 0.0
        return x, was_clipped, ~finite
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
    per_example = np.asarray(per_example, dtype=np.float64)
    total = np.zeros(per_example.shape[:-2] + per_example.shape[-1:])
    return add_clipped(total, per_example, clip_norm)


def add_clipped(
    total: np.ndarray, per_example: np.ndarray, clip_norm: float, *, overwrite: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`clipped_sum` continued from ``total`` (updated in place and returned).

    Adding a batch in chunks of examples, each chunk's clipped rows added to ``total`` in
    order, gives the same bits as :func:`clipped_sum` of the whole batch: every row is
    clipped on its own and the additions happen in the same order. Devices use it to hold
    one chunk of per-example gradients instead of the whole ``(batch, d)`` array, and clip
    it in its own buffer (``overwrite=True``: ``per_example`` is then clobbered).

    >>> g = np.array([[3.0, 4.0], [0.3, 0.4], [1.0, 0.0]])
    >>> t = np.zeros(2)
    >>> for lo in range(3):
    ...     t, _, _ = add_clipped(t, g[lo : lo + 1], 1.0)
    >>> t.tobytes() == clipped_sum(g, 1.0)[0].tobytes()
    True
    """
    clipped, hit, bad = _clip(per_example, clip_norm, overwrite)
    for b in range(clipped.shape[-2]):
        np.add(total, clipped[..., b, :], out=total)
    return total, np.sum(hit, axis=-1), np.sum(bad, axis=-1)
