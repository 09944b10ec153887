"""Model backends (numpy; ONNX later) and the model digest every engine reports."""

import hashlib

import numpy as np

__all__ = ["for_task", "model_digest"]


def model_digest(models: np.ndarray) -> str:
    """sha256 of the final models stacked in node order as float64 little-endian.

    >>> model_digest(np.zeros((2, 3)))[:12]
    '17b0761f87b0'
    """
    return hashlib.sha256(np.ascontiguousarray(models, dtype="<f8").tobytes()).hexdigest()


def for_task(task, features: int):
    """The model backend a plan's task names, for ``features`` input features.

    Every engine (batch, event, device) builds its model here, so they all run the same one.
    """
    from edgedp.models.linear import KINDS, LinearModel

    if task.model in KINDS:
        return LinearModel(task.model, features)
    raise ValueError(f"Unknown model {task.model!r}; expected one of {sorted(KINDS)}.")
