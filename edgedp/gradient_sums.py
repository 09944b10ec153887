"""Σ_b clip(g_b): the clipped gradient sum of a round's batch, for one node or a stack.

Two ways to cut the same arithmetic, chosen by what bounds the work (:mod:`edgedp.runtime`):

* :func:`node_sum` — one node (a device): its batch in chunks of ``chunk`` examples, so it
  holds about one model's worth of per-example gradients at a time;
* :func:`stack_sum` — a ``(trials, nodes)`` stack (the batch engine): ``group`` nodes per
  model call, so their per-example gradients stay in cache through clipping.

Each example's gradient is clipped on its own and the rows are added in example order
(:func:`edgedp.clipping.add_clipped` / :func:`edgedp.clipping.clipped_sum`), so both give a
node the same bits as clipping its whole batch at once. Models that clip inside
(``clips_fused``: the `:gemm` products) return the sum directly. Each function returns
``(sum, clipped, nonfinite)``: how many examples were clipped, and how many were left out
because their gradient was not finite.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgedp import clipping

__all__ = ["node_sum", "stack_sum"]


def node_sum(
    model,
    x: np.ndarray,
    y: np.ndarray,
    sel: np.ndarray,
    point: np.ndarray,
    *,
    clip_norm: float,
    chunk: int,
    fused: bool = False,
    project: Callable | None = None,
    transform: Callable | None = None,
    step: int = 0,
) -> tuple[np.ndarray, int, int]:
    """Σ_b clip(project(g_b)) over one node's batch ``sel`` (indices into ``x``, ``y``),
    ``chunk`` examples at a time; ``transform(step, point, sel, rows)`` (simulators) sees
    the whole batch's rows before projection and clipping."""
    if project is None and transform is None and fused:
        gsum, hit, bad = model.clipped_gradient_sum(  # `:gemm`: the whole batch
            point, x[sel], y[sel], clip_norm=clip_norm
        )
        return gsum, int(hit), int(bad)
    if transform is not None:  # simulators: the transform sees the whole batch
        chunks = [sel]
    else:  # clipped per example, so chunks of examples sum to the same bits
        chunks = [sel[lo : lo + chunk] for lo in range(0, len(sel), chunk)]
    gsum = None
    clipped = nonfinite = 0
    for part in chunks:
        # one example: a view of its row instead of a copy
        rows = slice(int(part[0]), int(part[0]) + 1) if len(part) == 1 else part
        grads = model.per_example_gradients(point, x[rows], y[rows])
        if transform is not None:
            grads = transform(step, point, part, grads)
        if project is not None:
            grads = project(grads)
        if gsum is None:
            gsum = np.zeros(grads.shape[:-2] + grads.shape[-1:])
        gsum, hit, bad = clipping.add_clipped(gsum, grads, clip_norm, overwrite=project is None)
        del grads
        clipped += int(hit)
        nonfinite += int(bad)
    assert gsum is not None  # a batch has at least one example
    return gsum, clipped, nonfinite


def stack_sum(
    model,
    xb: np.ndarray,
    yb: np.ndarray,
    sel: np.ndarray,
    point: np.ndarray,
    *,
    clip_norm: float,
    group: int,
    fused: bool = False,
    project: Callable | None = None,
    transform: Callable | None = None,
    step: int = 0,
) -> tuple[np.ndarray, int, int]:
    """Σ_b clip(project(g_b)) for every (trial, node) of a stack: ``xb``, ``yb`` the batch
    rows ``(trials, nodes, B, ...)`` of the batch ``sel`` ``(trials, nodes, B)``, ``point``
    ``(trials, nodes, d)``; ``group`` nodes per model call."""
    counts = [0, 0]

    def clipped(grads: np.ndarray) -> np.ndarray:
        gsum, hit, bad = clipping.clipped_sum(grads, clip_norm)
        counts[0] += int(hit.sum())
        counts[1] += int(bad.sum())
        return gsum

    def per_example(p: np.ndarray) -> np.ndarray:
        out = model.per_example_gradients(p, xb, yb)
        return out if transform is None else transform(step, p, sel, out)

    nodes = point.shape[-2] if point.ndim == 3 else 0
    if project is not None:
        out = clipped(project(per_example(point)))
    elif fused and transform is None:  # every node at once, no per-example rows
        out, hit, bad = model.clipped_gradient_sum(point, xb, yb, clip_norm=clip_norm)
        counts = [int(hit.sum()), int(bad.sum())]
    elif transform is not None or group >= nodes:
        out = clipped(per_example(point))
    else:
        out = np.concatenate(
            [
                clipped(model.per_example_gradients(point[:, s], xb[:, s], yb[:, s]))
                for s in (slice(lo, lo + group) for lo in range(0, nodes, group))
            ],
            axis=1,
        )
    return out, counts[0], counts[1]
