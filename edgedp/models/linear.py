"""Linear and logistic regression in numpy with per-example gradients.

Parameters are one flat vector θ of length d whose last entry is the bias; features ``x``
carry no bias column. Every function broadcasts over leading axes: θ ``(..., d)``, x
``(..., batch, d−1)``, y ``(..., batch)``. Inner products are elementwise products reduced
over the contiguous last axis (not BLAS), so one node's numbers have the same bits alone
or inside a batched array.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

__all__ = ["KINDS", "LinearModel"]


def _margin(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    w = theta[..., None, :-1]
    return np.sum(x * w, axis=-1) + theta[..., None, -1]


def _sigmoid(m: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -m))


@dataclass(frozen=True, slots=True)
class LinearModel:
    """A generalized linear model: ``kind`` is 'logistic' (labels 0/1) or 'linear' (MSE/2).

    >>> model = LinearModel("logistic", features=2)
    >>> theta = np.zeros(model.dim)
    >>> float(model.loss(theta, np.ones((3, 2)), np.array([0.0, 1.0, 1.0])).round(6))
    0.693147
    """

    kind: str
    features: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Unknown model kind={self.kind!r}; expected one of {sorted(KINDS)}.")
        if self.features < 1:
            raise ValueError(f"Expected features={self.features} >= 1.")

    @property
    def dim(self) -> int:
        return self.features + 1

    @property
    def classifier(self) -> bool:
        """True for 'logistic' (engines report accuracy for classifiers)."""
        return self.kind == "logistic"

    def init_params(self) -> np.ndarray:
        return np.zeros(self.dim)

    def per_example_losses(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        m = _margin(theta, x)
        if self.kind == "logistic":
            return np.logaddexp(0.0, m) - y * m
        return 0.5 * (m - y) ** 2

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mean loss over the batch axis."""
        return np.mean(self.per_example_losses(theta, x, y), axis=-1)

    def per_example_gradients(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradients of each example's loss, shape ``(..., batch, d)``.

        One ``(..., batch, d)`` array is allocated: it holds the products x·w whose sums
        are the margins, then the gradients (the same bits as computing both apart).
        """
        w = theta[..., None, :-1]
        shape = np.broadcast_shapes(x.shape, w.shape)
        out = np.empty(shape[:-1] + (shape[-1] + 1,))
        products = np.multiply(x, w, out=out[..., :-1])
        m = np.sum(products, axis=-1) + theta[..., None, -1]
        r = (_sigmoid(m) - y) if self.kind == "logistic" else (m - y)
        np.multiply(x, r[..., None], out=out[..., :-1])
        out[..., -1] = r
        return out

    def accuracy(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Classification accuracy (logistic only)."""
        if self.kind != "logistic":
            raise ValueError("accuracy is defined for kind='logistic' only.")
        return np.mean((_margin(theta, x) > 0) == (y > 0.5), axis=-1)


KINDS: Mapping[str, str] = MappingProxyType(
    {"logistic": "binary logistic regression", "linear": "least-squares regression"}
)
