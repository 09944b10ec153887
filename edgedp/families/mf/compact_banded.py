# Paper letters H (workload Gram), C, X = CᵀC, T, S, E: see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""Banded factors fitted to a workload (:mod:`edgedp.families.mf.compact` has the objective).

**Banded fit** (Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization: a
unified approach to private training"). With bandwidth p <= b (or k = 1) the columns s
and s + b of C never overlap, so X[s, t] = 0 for co-participating s ≠ t and
sens² = max_π Σ_{s∈π} ‖C[:,s]‖².
Normalizing every column to norm 1 makes sens² = k' = min(k, ⌈T/b⌉) exactly, and the fit is
the smooth program min tr(H (CᵀC)⁻¹) over column-normalized p-banded C. Stage 1 fits a
banded Toeplitz C (p − 1 coefficients, the objective above; signs free); stage 2
(``refine``) optimizes all band entries by L-BFGS from it, with O(T²·p) block solves per
evaluation. For p > b the Toeplitz coefficients are kept >= 0 (then X >= 0 and the
sensitivity is exact; no stage 2); p >= T means no band limit and returns the dense optimum.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import scipy.linalg as sla

from edgedp import factors
from edgedp._validate import integer
from edgedp.accounting.participation import Participation
from edgedp.families.mf.compact import (
    NO_DENSE_OPTIMUM,
    CompactFit,
    _certify,
    _Counter,
    _dense_loss,
    _gram,
    _impulse,
    _lbfgs,
    _participation,
    _steps,
    _Toeplitz,
)
from edgedp.planning import mf_optimal, workload

__all__ = ["fit_banded"]

_BLOCK = 64  # minimum block size of the banded block solves


def _sqrt_coefficients(p: int) -> np.ndarray:
    """Column of the Toeplitz square root of the prefix-sum matrix: Π_{i<=j} (2i−1)/(2i)."""
    j = np.arange(1, p)
    return np.concatenate([[1.0], np.cumprod((2.0 * j - 1.0) / (2.0 * j))])


class _BandedObjective:
    """k'·tr(H (CᵀC)⁻¹) over column-normalized p-banded C (p <= b), O(T²p) per evaluation.

    ``V[s, j] = C̃[s + j, s]`` (valid for s + j < T); C = C̃·diag(1/‖C̃[:, s]‖). With H = FFᵀ,
    Y = C⁻ᵀF and Q = C⁻¹Y: tr(H (CᵀC)⁻¹) = ‖Y‖²_F and ∇_C = −2·YQᵀ (on the band). Solves
    run by blocks of m >= p − 1 steps, so C is block lower-bidiagonal (BLAS-3 products);
    F upper triangular (H = FFᵀ by a reversed Cholesky) keeps Y upper triangular.
    """

    def __init__(self, H: np.ndarray, p: int, count: int):
        T = self.T = H.shape[0]
        self.p, self.count = p, count
        self.F = np.linalg.cholesky(H[::-1, ::-1])[::-1, ::-1]  # upper triangular, H = FFᵀ
        s, j = np.meshgrid(np.arange(T), np.arange(p), indexing="ij")
        self.valid = s + j < T
        self.rows, self.cols = (s + j)[self.valid], s[self.valid]
        self.m = min(T, max(p - 1, _BLOCK))
        self.starts = list(range(0, T, self.m))
        block = self.rows // self.m  # entries gathered from block products Y_i Q[lo_i:e_i]ᵀ
        self.g_block = block
        self.g_row = self.rows - block * self.m
        self.g_col = self.cols - np.maximum(block * self.m - self.m, 0)

    def shape(self) -> tuple[int, int]:
        return (self.T, self.p)

    def matrix(self, V: np.ndarray) -> np.ndarray:
        norms = np.sqrt(np.sum(np.where(self.valid, V, 0.0) ** 2, axis=1))
        C = np.zeros((self.T, self.T))
        C[self.rows, self.cols] = (V / norms[:, None])[self.valid]
        return C

    def __call__(self, x: np.ndarray):
        T, m = self.T, self.m
        V = np.zeros((T, self.p))
        V[self.valid] = x
        norms = np.sqrt(np.sum(V**2, axis=1))
        if np.any(norms == 0) or np.any(V[:, 0] == 0):
            return None
        C = self.matrix(V)
        Y, Q = np.zeros_like(self.F), np.empty_like(self.F)
        nb = len(self.starts)
        for i in range(nb - 1, -1, -1):  # Cᵀ Y = F, backward by blocks; Y is upper triangular
            a, e = self.starts[i], min(self.starts[i] + m, T)
            rhs = self.F[a:e, a:].copy()
            if e < T:
                e2 = min(e + m, T)
                rhs -= C[e:e2, a:e].T @ Y[e:e2, a:]
            Y[a:e, a:] = sla.solve_triangular(C[a:e, a:e], rhs, trans="T", lower=True)
        for i in range(nb):  # C Q = Y, forward by blocks
            a, e = self.starts[i], min(self.starts[i] + m, T)
            rhs = Y[a:e].copy()
            if a:
                rhs -= C[a:e, a - m : a] @ Q[a - m : a]
            Q[a:e] = sla.solve_triangular(C[a:e, a:e], rhs, lower=True)
        value = float(np.einsum("ij,ij->", Y, Y))
        products = np.zeros((nb, m, 2 * m))
        for i in range(nb):
            a, e = self.starts[i], min(self.starts[i] + m, T)
            lo = max(a - m, 0)
            products[i, : e - a, : e - lo] = Y[a:e, a:] @ Q[lo:e, a:].T
        gC = np.zeros((T, self.p))  # ∂/∂C[s + j, s]
        gC[self.valid] = -2.0 * products[self.g_block, self.g_row, self.g_col]
        Cn = V / norms[:, None]
        gV = (gC - Cn * np.sum(Cn * gC, axis=1, keepdims=True)) / norms[:, None]
        return np.log(value), gV[self.valid] / value


def _toeplitz_banded_objective(x, toe: _Toeplitz, p: int):
    c = np.zeros(toe.T)
    c[0], c[1:p] = 1.0, x
    out = toe(c, _impulse(np.ones(1), c[:p], toe.T))
    if out is None or out[0] <= 0:
        return None
    return np.log(out[0]), out[1][1:p] / out[0]


def fit_banded(
    workload_gram,
    *,
    participation: Participation,
    bandwidth: int,
    refine: bool = True,
    max_iterations: int = 500,
    dense_loss: float | None = None,
    progress: Callable[[int, float], None] | None = None,
    blas_threads: int | None = 1,
) -> CompactFit:
    """Fit a banded strategy (``factors.Banded``, bandwidth p) to a workload.

    Module docstring, "Banded fit": for p <= b (or k = 1) a column-normalized p-banded C
    with sens² = k' exactly — banded Toeplitz first, then (``refine``) every band entry;
    for b < p < T a banded Toeplitz C >= 0; for p >= T the dense optimum.

    Args:
        workload_gram: H, T × T symmetric positive definite, or a
            :class:`~edgedp.planning.workload.SpectralWorkload` (long horizons: no refinement
            and no dense optimum; ``CompactFit.skipped`` says so).
        participation: The (k, b) participation schema.
        bandwidth: p >= 1, the number of diagonals (device state: p − 1 vectors).
        refine: Optimize all band entries after the Toeplitz stage (p <= b only).
        max_iterations: L-BFGS iterations per stage (>= 1).
        dense_loss: Loss of the dense optimum; computed with ``mf_optimal.optimize`` if None.
        progress: Called as progress(evaluations, best_loss) after each stage.
        blas_threads: BLAS threads during the fit (as in ``mf_optimal.optimize``; None keeps
            the process setting). One thread was 20× faster on the loaded 2-core machine.

    Returns:
        A :class:`CompactFit` (method "banded", "banded-toeplitz" or "dense").

    Raises:
        TypeError: If participation is not a Participation or an integer is not int.
        ValueError: On a bad H or a non-positive dense_loss.

    >>> H = mf_optimal.prefix_sum_gram(64)
    >>> fit = fit_banded(H, participation=Participation(2, 32), bandwidth=8)
    >>> print(f"{fit.loss_ratio:.3f} {fit.sensitivity ** 2:.1f} {fit.exact}")
    1.554 2.0 True
    """
    part = _participation(participation)
    integer(1, bandwidth=bandwidth, max_iterations=max_iterations)
    if blas_threads is not None:
        integer(1, blas_threads=blas_threads)
    H = _gram(workload_gram)
    with mf_optimal._blas_limit(blas_threads):
        return _fit_banded(H, part, int(bandwidth), refine, max_iterations, dense_loss, progress)


def _fit_banded(H, part, bandwidth, refine, max_iterations, dense_loss, progress) -> CompactFit:
    T = _steps(H)
    p = min(bandwidth, T)
    spectral = isinstance(H, workload.SpectralWorkload)
    skipped: tuple[str, ...] = ()
    if p >= T and spectral:
        raise ValueError(
            f"bandwidth {bandwidth} >= T is the dense optimum, planned up to T = "
            f"{workload.DENSE_MAX_STEPS}; choose a bandwidth below T = {T}."
        )
    if p >= T:
        t0 = time.perf_counter()
        dense = mf_optimal.optimize(H, participation=part)
        reference = dense.loss if dense_loss is None else _dense_loss(H, part, dense_loss)
        factor, method, calls = factors.Banded.from_matrix(np.tril(dense.C), T), "dense", 0
    else:
        reference = _dense_loss(H, part, dense_loss)
        t0 = time.perf_counter()
        separated = p <= part.b or part.count(T) == 1
        toe = _Toeplitz(H, part)
        counter = _Counter(lambda x: _toeplitz_banded_objective(x, toe, p), progress)
        c = _sqrt_coefficients(p)
        if p > 1:
            bounds = None if separated else [(0.0, None)] * (p - 1)
            c[1:] = _lbfgs(counter, c[1:], bounds, max_iterations)
            counter.record(np.exp(counter(c[1:])[0]), c[1:])
        bands = np.zeros((T, p))  # the Toeplitz C's diagonals, without the T × T matrix
        for j in range(p):
            bands[j:, j] = c[j]
        factor, method = factors.Banded(bands), "banded-toeplitz"
        if separated and refine and p > 1 and spectral:
            skipped += (
                "the refinement of every band entry (it needs a T x T Cholesky factor of H, "
                f"planned up to T = {workload.DENSE_MAX_STEPS}): the factor is the best "
                "banded Toeplitz one",
            )
        elif separated and refine and p > 1:
            obj = _BandedObjective(H, p, part.count(T))
            x0 = np.broadcast_to(c, (T, p))[obj.valid]
            counter.fun = obj
            x = _lbfgs(counter, x0, None, max_iterations)
            V = np.zeros((T, p))
            V[obj.valid] = x
            refined = factors.Banded.from_matrix(obj.matrix(V), p)
            if _certify(refined, H, part)[0] <= _certify(factor, H, part)[0]:
                factor, method = refined, "banded"
        calls = counter.calls
    loss, s = _certify(factor, H, part)
    if progress is not None:
        progress(calls, loss)
    if reference is None:
        skipped = (NO_DENSE_OPTIMUM.format(limit=workload.DENSE_MAX_STEPS), *skipped)
    return CompactFit(
        factor=factor,
        loss=loss,
        loss_ratio=None if reference is None else loss / reference,
        dense_loss=reference,
        sensitivity=s.value,
        exact=s.exact,
        seconds=time.perf_counter() - t0,
        evaluations=calls,
        method=method,
        skipped=skipped,
    )
