# Paper letters W, H, A, B, C, T (and λ, β): see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""The MAFALDA workload of a symmetric W without its T × T Gram matrix (long horizons).

For symmetric W with eigenvalues λⱼ, MAFALDA's H (:mod:`edgedp.families.mf.mafalda`) is
H = Σⱼ AⱼᵀAⱼ with Aⱼ the lower-triangular Toeplitz matrix of column (λⱼ, λⱼ², λⱼ³, …):
(AⱼᵀAⱼ)[a, b] = Σ_{t ≥ max(a,b)} λⱼ^{2t−a−b+2}, the sum of DESIGN §4. For a Toeplitz
strategy C (identity, AntiPGD, BLT, banded Toeplitz), B = C⁻¹ is lower-triangular Toeplitz
with column β, AⱼB is lower-triangular Toeplitz with column vⱼ = (aⱼ ⋆ β)[:T], i.e.
vⱼ[t] = λⱼ (vⱼ[t−1] + β[t]), and a lower-triangular Toeplitz matrix of column v has
‖·‖²_F = Σ_t (T − t)·v_t². So

    tr(H (CᵀC)⁻¹) = Σⱼ ‖AⱼB‖²_F = Σⱼ mⱼ Σ_t (T − t)·vⱼ[t]²

(mⱼ: multiplicity of λⱼ), O(T) per distinct eigenvalue and O(T) memory instead of the O(T²)
of H. The prefix-sum workload is the single eigenvalue 1 (v = cumsum(β)). The gradient in β
runs the same filter backwards: ∂/∂β = 2 Σⱼ mⱼ Aⱼᵀ(w ∘ vⱼ), w_t = T − t.

Eigenvalues equal within 1e-12 are merged (a ring's come in pairs that differ in the last
bits). :func:`edgedp.families.mf.mafalda.workload_gram` computes H from the same eigenvalues;
tests check :meth:`SpectralWorkload.dense` against it and the energy against
``mf_optimal.loss``. Planning only; numpy and scipy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp import _validate, topology

__all__ = ["DENSE_MAX_STEPS", "SpectralWorkload"]

#: Longest horizon planned with T × T matrices (H, the dense optimum, the banded refinement:
#: 32 MB each); above it compact factors are planned on :class:`SpectralWorkload`.
DENSE_MAX_STEPS = 2048

_MERGE = 1e-12  # eigenvalues this close (absolute) are one, with multiplicity


@dataclass(frozen=True, slots=True, eq=False)
class SpectralWorkload:
    """H = Σⱼ mⱼ AⱼᵀAⱼ over distinct eigenvalues ``eigenvalues`` with ``multiplicity``."""

    eigenvalues: np.ndarray
    multiplicity: np.ndarray
    steps: int

    @classmethod
    def of_mixing(cls, mixing_matrix, *, steps: int) -> SpectralWorkload:
        """The workload of a symmetric gossip matrix W (ValueError for another W)."""
        _validate.integer(1, steps=steps)
        W = _validate.finite_array("mixing_matrix", mixing_matrix).astype(np.float64)
        if W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(f"Expected a square mixing_matrix, got {W.shape}.")
        if not np.allclose(W, W.T, rtol=0.0, atol=1e-10):
            raise ValueError(
                "Expected a symmetric mixing matrix (metropolis-hastings or max-degree "
                f"weighting): above T = {DENSE_MAX_STEPS} the workload is planned from W's "
                "eigenvalues, which needs W = Wᵀ."
            )
        topology.validate(W)
        lam = np.clip(np.linalg.eigvalsh((W + W.T) / 2.0), -1.0, 1.0)
        return cls.of_eigenvalues(lam, steps=steps)

    @classmethod
    def of_eigenvalues(cls, eigenvalues, *, steps: int) -> SpectralWorkload:
        """Merge equal eigenvalues (within 1e-12) into values with multiplicities."""
        lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))
        cut = np.flatnonzero(np.diff(lam) > _MERGE) + 1
        groups = np.split(lam, cut)
        values = np.array([g.mean() for g in groups])
        counts = np.array([g.size for g in groups], dtype=np.float64)
        return cls(values, counts, int(steps))

    @classmethod
    def prefix_sum(cls, steps: int) -> SpectralWorkload:
        """The prefix-sum workload H[a, b] = T − max(a, b) (one eigenvalue 1)."""
        return cls(np.ones(1), np.ones(1), int(steps))

    def _filters(self):
        for lam, m in zip(self.eigenvalues, self.multiplicity, strict=True):
            if lam != 0.0:
                yield float(lam), float(m)

    def energy(self, beta: np.ndarray) -> tuple[float, np.ndarray]:
        """tr(H (CᵀC)⁻¹) for the Toeplitz C whose inverse has first column β, and its
        gradient in β."""
        import scipy.signal as ssig  # here: importing it costs 0.4 s that DP-D-SGD plans skip

        T = self.steps
        w = np.arange(T, 0, -1, dtype=np.float64)
        total, grad = 0.0, np.zeros(T)
        for lam, m in self._filters():
            v = ssig.lfilter([lam], [1.0, -lam], beta)
            wv = w * v
            total += m * float(wv @ v)
            grad += (2.0 * m) * ssig.lfilter([lam], [1.0, -lam], wv[::-1])[::-1]
        return total, grad

    def trace(self) -> float:
        """tr(H) = Σⱼ mⱼ Σ_{s<T} (T − s) λⱼ^{2s+2} (the loss of C = I up to sens²)."""
        w = np.arange(self.steps, 0, -1, dtype=np.float64)
        total = 0.0
        for lam, m in self._filters():
            with np.errstate(under="ignore"):
                total += m * float(w @ np.power(lam * lam, np.arange(1, self.steps + 1)))
        return total

    def dense(self) -> np.ndarray:
        """H itself (T × T; tests and small T only)."""
        T = self.steps
        idx = np.arange(T)
        H = np.zeros((T, T))
        lag = idx[:, None] - idx[None, :]
        for lam, m in self._filters():
            A = np.where(lag >= 0, np.power(lam, np.maximum(lag, 0) + 1.0), 0.0)
            H += m * (A.T @ A)
        return H


def toeplitz_columns(factor, steps: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(c, β): the first columns of a Toeplitz temporal factor C and of C⁻¹ over ``steps``
    steps, in O(T·state) work; None for a factor that is not Toeplitz (a dense C, or a
    banded C whose rows differ)."""
    T = int(steps)
    kind = factor.kind
    if kind == "identity":
        c = np.zeros(T)
        c[0] = 1.0
        return c, c.copy()
    if kind == "antipgd":  # C = lower-triangular ones, C⁻¹ = I − S (noise z_t − z_{t−1})
        beta = np.zeros(T)
        beta[0] = 1.0
        if T > 1:
            beta[1] = -1.0
        return np.ones(T), beta
    if kind == "blt":
        return factor.coefficients(T), factor.inverse_coefficients(T)
    if kind == "banded":
        B = factor.bands[:T]
        p = B.shape[1]
        row = B[-1]
        if any(not np.array_equal(B[j:, j], np.full(T - j, row[j])) for j in range(min(p, T))):
            return None
        c = np.zeros(T)
        c[: min(p, T)] = row[: min(p, T)]
        import scipy.signal as ssig

        impulse = np.zeros(T)
        impulse[0] = 1.0
        return c, ssig.lfilter([1.0], c[: min(p, T)], impulse)
    return None
