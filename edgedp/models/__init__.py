"""Model backends (numpy; ONNX later) and the model digest every engine reports."""

import hashlib

import numpy as np

__all__ = ["model_digest"]


def model_digest(models: np.ndarray) -> str:
    """sha256 of the final models stacked in node order as float64 little-endian.

    >>> model_digest(np.zeros((2, 3)))[:12]
    '17b0761f87b0'
    """
    return hashlib.sha256(np.ascontiguousarray(models, dtype="<f8").tobytes()).hexdigest()
