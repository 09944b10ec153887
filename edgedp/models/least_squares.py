"""Least squares without a bias: per-example loss (xᵀθ − y)², the model of sensor fusion.

Task model name ``least-squares``. θ has exactly ``features`` entries (no bias, unlike
:class:`~edgedp.models.linear.LinearModel`), init θ₀ = 0, and the per-example gradient is
2(xᵀθ − y)x. Rows [Mᵢ; √ωᵢ I] with targets [vᵢ; 0] therefore give Σ_rows ∇ = ∇fᵢ of paper
004's sensor-fusion cost fᵢ(θ) = ‖vᵢ − Mᵢθ‖² + ωᵢ‖θ‖² (Eq. 42); ``edgedp_sim.sensor_fusion``
scales the rows so the engines' batch *mean* is that gradient. Inner products are
elementwise products reduced over the last axis (not BLAS), so one node's numbers have the
same bits alone or in a batch.

>>> model = LeastSquaresModel(features=2)
>>> theta = np.array([1.0, 2.0])
>>> model.per_example_gradients(theta, np.array([[1.0, 0.0]]), np.array([3.0])).tolist()
[[-4.0, -0.0]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LeastSquaresModel"]


@dataclass(frozen=True, slots=True)
class LeastSquaresModel:
    """Σ-of-squares regression through the origin (module docstring)."""

    features: int

    def __post_init__(self) -> None:
        if self.features < 1:
            raise ValueError(f"Expected features={self.features} >= 1.")

    @property
    def dim(self) -> int:
        return self.features

    @property
    def classifier(self) -> bool:
        return False

    def init_params(self) -> np.ndarray:
        return np.zeros(self.dim)

    def _residual(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.sum(x * theta[..., None, :], axis=-1) - y

    def per_example_losses(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self._residual(theta, x, y) ** 2

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mean of (xᵀθ − y)² over the batch axis."""
        return np.mean(self.per_example_losses(theta, x, y), axis=-1)

    def per_example_gradients(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """2 (xᵀθ − y) x for every example, shape ``(..., batch, d)``."""
        r = self._residual(theta, x, y)
        return x * (2.0 * r)[..., None]
