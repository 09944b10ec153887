"""Paper 004's distributed sensor-fusion problem (§6.1, Eq. 42) as per-node data for the engines.

n sensors estimate x ∈ ℝᵖ from

    min_x Σᵢ fᵢ(x),   fᵢ(x) = ‖vᵢ − Mᵢx‖² + ωᵢ‖x‖²,

with vᵢ ∈ ℝᵐ the observations, Mᵢ ∈ ℝ^{m×p} the measurement matrix and ωᵢ ≥ 0 the
regularization of sensor i. The optimum is the regularized least-squares solution
x* = (Σ MᵢᵀMᵢ + (Σ ωᵢ) I)⁻¹ Σ Mᵢᵀvᵢ, and ∇fᵢ(x) = 2Mᵢᵀ(Mᵢx − vᵢ) + 2ωᵢx.

Generator (paper 004 takes its values "from [15]", which it does not print): Mᵢ has
i.i.d. N(0, s²) entries, a common truth x° ~ N(0, I), vᵢ = Mᵢx° + N(0, σ_v² I) and
ωᵢ ~ U(0, ω_max); defaults s = 4, σ_v = 1, ω_max = 50 (the curvature puts the paper's
stepsizes γ ∈ {0.001, 0.002} in their useful range; heterogeneous ωᵢ and noisy vᵢ make
the local minimizers differ, which is what gradient tracking corrects). Draws come from
the keyed stream ``derive_key(seed_secret(seed), "sensor-fusion")``.

:meth:`SensorFusion.federated` turns the problem into engine data for the
``least-squares`` model (per-example loss (aᵀθ − b)²): node i's B = m + p rows are
√B·[Mᵢ; √ωᵢ I] with targets √B·[vᵢ; 0], so the engines' batch mean of per-example
gradients is exactly ∇fᵢ; the test set √p·I with targets √p·x* makes the reported test
loss of a model θ equal ‖θ − x*‖².

>>> sf = generate(5, seed=0)
>>> bool(np.allclose(sf.gradient(np.broadcast_to(sf.optimum, (5, 2))).sum(axis=0), 0))
True
"""

# Paper letters M, v, ω, p, m (docs/NOTATION.md).
# ruff: noqa: N806

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp import rng
from edgedp_sim.datasets import FederatedData, PerTrialData

__all__ = ["SensorFusion", "generate", "per_trial"]


@dataclass(frozen=True, slots=True, eq=False)
class SensorFusion:
    """One instance of Eq. (42): M ``(n, m, p)``, v ``(n, m)``, ω ``(n,)``."""

    measurement: np.ndarray
    observation: np.ndarray
    regularization: np.ndarray

    @property
    def nodes(self) -> int:
        return int(self.measurement.shape[0])

    @property
    def dim(self) -> int:
        return int(self.measurement.shape[2])

    def _local_hessians(self) -> np.ndarray:
        M, w = self.measurement, self.regularization
        return 2 * (np.einsum("imp,imq->ipq", M, M) + w[:, None, None] * np.eye(self.dim))

    @property
    def optimum(self) -> np.ndarray:
        """x* = (Σ MᵢᵀMᵢ + Σωᵢ I)⁻¹ Σ Mᵢᵀvᵢ (normal equations of Eq. 42)."""
        M, v, w = self.measurement, self.observation, self.regularization
        H = np.einsum("imp,imq->pq", M, M) + w.sum() * np.eye(self.dim)
        return np.linalg.solve(H, np.einsum("imp,im->p", M, v))

    @property
    def smoothness(self) -> float:
        """L = maxᵢ λ_max(∇²fᵢ) (Assumption 1)."""
        return float(np.linalg.eigvalsh(self._local_hessians()).max())

    @property
    def strong_convexity(self) -> float:
        """μ = minᵢ λ_min(∇²fᵢ) (Assumption 1)."""
        return float(np.linalg.eigvalsh(self._local_hessians()).min())

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """∇fᵢ(xᵢ) for x shaped ``(..., n, p)``: 2Mᵢᵀ(Mᵢxᵢ − vᵢ) + 2ωᵢxᵢ."""
        M, v, w = self.measurement, self.observation, self.regularization
        r = np.einsum("imp,...ip->...im", M, x) - v
        return 2 * np.einsum("imp,...im->...ip", M, r) + 2 * w[:, None] * x

    def objective(self, x: np.ndarray) -> float:
        """Σᵢ fᵢ(x) at one point x ``(p,)``."""
        M, v, w = self.measurement, self.observation, self.regularization
        return float(np.sum((v - M @ x) ** 2) + w.sum() * np.dot(x, x))

    def residual(self, x: np.ndarray) -> np.ndarray:
        """‖x(k) − 1x*ᵀ‖² = Σᵢ ‖xᵢ − x*‖² for x shaped ``(..., n, p)`` (paper 004 §6.1)."""
        return np.sum((x - self.optimum) ** 2, axis=(-2, -1))

    def federated(self) -> FederatedData:
        """Engine data for the ``least-squares`` model (module docstring)."""
        M, v, w = self.measurement, self.observation, self.regularization
        n, m, p = M.shape
        B = m + p
        rows = np.concatenate([M, np.sqrt(w)[:, None, None] * np.eye(p)[None]], axis=1)
        targets = np.concatenate([v, np.zeros((n, p))], axis=1)
        scale = np.sqrt(B)
        return FederatedData(
            x=scale * rows,
            y=scale * targets,
            x_test=np.sqrt(p) * np.eye(p),
            y_test=np.sqrt(p) * self.optimum,
            task="least-squares",
        )


def parse_spec(text: str) -> tuple[int, int, int, int]:
    """``sensor-fusion:SENSORS:OBSERVATIONS:DIM:SEED`` (a task dataset) -> (n, m, p, seed).

    >>> parse_spec("sensor-fusion:100:3:2:0")
    (100, 3, 2, 0)
    """
    name, *rest = str(text).split(":")
    try:
        if name != "sensor-fusion" or len(rest) != 4:
            raise ValueError
        n, m, p, seed = (int(x) for x in rest)
    except ValueError:
        raise ValueError(
            f"task.dataset = {text!r}: expected sensor-fusion:SENSORS:OBSERVATIONS:DIM:SEED"
        ) from None
    return n, m, p, seed


def generate(
    nodes: int,
    *,
    observations: int = 3,
    dim: int = 2,
    seed: int = 0,
    measurement_scale: float = 4.0,
    observation_noise: float = 1.0,
    max_regularization: float = 50.0,
) -> SensorFusion:
    """A random instance of Eq. (42) (module docstring for the distributions).

    Args:
      nodes: n sensors.
      observations: m observations per sensor (paper: 3).
      dim: p, the dimension of x (paper: 2).
      seed: the instance's seed.
      measurement_scale: s, the std of the entries of Mᵢ.
      observation_noise: σ_v, the std of the observation noise.
      max_regularization: ω_max; ωᵢ ~ U(0, ω_max).
    """
    if nodes < 1 or observations < 1 or dim < 1:
        raise ValueError(f"Expected nodes={nodes}, observations={observations}, dim={dim} >= 1.")
    g = rng.generator(rng.derive_key(rng.seed_secret(seed), "sensor-fusion"), 0)
    M = g.normal(0.0, measurement_scale, (nodes, observations, dim))
    truth = g.normal(0.0, 1.0, dim)
    v = np.einsum("imp,p->im", M, truth) + g.normal(0.0, observation_noise, (nodes, observations))
    w = g.uniform(0.0, max_regularization, nodes)
    return SensorFusion(M, v, w)


def per_trial(instances) -> PerTrialData:
    """One instance per batch-engine trial (:class:`edgedp_sim.datasets.PerTrialData`); the test set
    is the first instance's (its test loss is ‖θ − x*‖² of that instance only)."""
    feds = [sf.federated() for sf in instances]
    if not feds:
        raise ValueError("Expected at least one instance.")
    return PerTrialData(
        x=np.stack([f.x for f in feds]),
        y=np.stack([f.y for f in feds]),
        x_test=feds[0].x_test,
        y_test=feds[0].y_test,
        task=feds[0].task,
    )
