"""Compact cross-agent covariances a device can generate in O((r+1)·d) per step.

A dense R⋆ (paper 001 Eq. 10) costs each agent n·d shared draws per step (its row of
R⋆^½). Two compact families (:mod:`edgedp.families.cross.noise`), both ``diag(D) + Σ_a x_a v_a
v_aᵀ`` with fixed atoms v_a:

* ``lowrank`` — atoms are the r leading eigenvectors of R⋆ (shared seed; r + 1 draws);
* ``local`` — atoms are e_i − e_j for every edge (per-edge secrets; deg_u + 1 draws),
  DECOR's shape with per-node D and per-edge c instead of two scalars;
* ``dense`` — D = λ_min(R⋆), U = (R⋆ − λ_min I)^½: exactly R⋆ (n + 1 draws).

For fixed atoms the program min Tr(M R) s.t. max_i [R⁻¹]_ii <= 1 is convex in (D, x).
Being homogeneous, it equals the unconstrained min of Tr(M R)·max_i [R⁻¹]_ii; we minimize
the smooth upper bound Tr(M R)·‖diag R⁻¹‖_p over log-parameters by L-BFGS with p = 16, 256,
4096 (the bound is within n^{1/p} of the max), then rescale R so max_i [R⁻¹]_ii = 1
exactly. The utility ratio Tr(W R Wᵀ)/Tr(W R⋆ Wᵀ) and the exact guarantee of the R actually
used are reported by the plan (tests check both). Cost: one n × n inverse per evaluation.
"""

# Paper letters W, R, M, D, U: see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.optimize as so

from edgedp._validate import integer
from edgedp.planning.mf_optimal import _blas_limit

__all__ = ["FORMS", "CompactCovariance", "fit"]

FORMS = ("local", "lowrank", "dense")


@dataclass(frozen=True, slots=True)
class CompactCovariance:
    """diag(D) + U Uᵀ + Σ_e c_e a_e a_eᵀ with max_i [R⁻¹]_ii = 1 (unit privacy bound).

    Attributes:
      form: one of :data:`FORMS`.
      diag, factor, edge_variance: D (n,), U (n, r), c (|E|,).
      covariance: the dense R it represents.
      objective: Tr(W R Wᵀ).
      ratio: objective / the dense optimum's (>= 1 up to the solver gap).
      draws_per_step: shared + own draws of the busiest node, in units of d.
      iterations, seconds: fitting effort.
    """

    form: str
    diag: np.ndarray
    factor: np.ndarray
    edge_variance: np.ndarray
    covariance: np.ndarray
    objective: float
    ratio: float
    draws_per_step: int
    iterations: int
    seconds: float


def _incidence(n: int, edges) -> np.ndarray:
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    A = np.zeros((len(e), n))
    A[np.arange(len(e)), e[:, 0]] = 1.0
    A[np.arange(len(e)), e[:, 1]] = -1.0
    return A


def _minimize(M: np.ndarray, atoms: np.ndarray, d0: np.ndarray, x0: np.ndarray, max_iter: int):
    """min over (D, x) > 0 of log(Tr(M R)·‖diag R⁻¹‖_p), p increasing; returns (D, x, its)."""
    n = M.shape[0]
    cost = np.concatenate([np.diag(M), np.einsum("aj,aj->a", atoms @ M, atoms)])

    def f(theta: np.ndarray, p: float):
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            return _f(theta, p)

    def _f(theta: np.ndarray, p: float):
        v = np.exp(theta)
        if not np.all(np.isfinite(v)):
            return math.inf, np.zeros_like(theta)
        R = np.diag(v[:n]) + (atoms.T * v[n:]) @ atoms
        try:
            L = sla.cholesky(R, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            return math.inf, np.zeros_like(theta)
        Li = sla.solve_triangular(L, np.eye(n), lower=True, check_finite=False)
        Ri = Li.T @ Li
        g = np.diag(Ri)
        top = float(g.max())
        q = (g / top) ** p
        s = float(q.sum())
        norm = top * s ** (1.0 / p)
        w = q / (g / top) / s ** (1.0 - 1.0 / p)  # ∂‖g‖_p/∂g
        tr = float(cost @ v)
        G = (Ri * w) @ Ri  # Σ_i w_i R⁻¹e_i e_iᵀR⁻¹
        dg = np.concatenate([np.diag(G), np.einsum("aj,aj->a", atoms @ G, atoms)])
        grad = cost / tr - dg / norm  # ∂ log(tr·norm)/∂v
        if not (np.isfinite(tr * norm) and np.all(np.isfinite(grad))):
            return math.inf, np.zeros_like(theta)
        return math.log(tr * norm), grad * v

    theta = np.log(np.concatenate([d0, x0]))
    iterations = 0
    for p in (16.0, 256.0, 4096.0):
        res = so.minimize(
            f, theta, args=(p,), jac=True, method="L-BFGS-B", options={"maxiter": max_iter}
        )
        if np.all(np.isfinite(res.x)) and res.fun < math.inf:
            theta = res.x
        iterations += int(res.nit)
    v = np.exp(theta)
    return v[:n], v[n:], iterations


def _normalize(D, U, c, edges, n):
    R = np.diag(D) + U @ U.T
    if c.size:
        A = _incidence(n, edges)
        R = R + (A.T * c) @ A
    m = float(np.max(np.diag(np.linalg.inv(R))))
    return D * m, U * math.sqrt(m), c * m, R * m


def fit(
    mixing_matrix,
    edges,
    optimum: np.ndarray,
    *,
    form: str = "local",
    rank: int = 8,
    ridge: float = 0.0,
    start_pair: tuple[float, float] | None = None,
    max_iterations: int = 2000,
    blas_threads: int | None = 1,
) -> CompactCovariance:
    """Fit a compact covariance to the dense optimum ``R⋆`` (unit bound) of 001 Eq. (10).

    Args:
      mixing_matrix: W (n × n).
      edges: the graph's edges (i < j), as in the plan.
      optimum: R⋆ from :func:`edgedp.families.cross.covariance.optimal_covariance` (bound 1).
      form: ``local``, ``lowrank`` or ``dense``.
      rank: r for ``lowrank`` (1 <= r < n).
      ridge: ρ of the objective (as for R⋆).
      start_pair: (σ²_pair, σ²_cor) start for ``local`` (default: DECOR-like 0.5, 1).
      max_iterations: L-BFGS iterations per smoothing stage.
      blas_threads: BLAS threads during the fit (None: process default).

    Returns:
      A :class:`CompactCovariance` with max_i [R⁻¹]_ii = 1 exactly (up to rounding).

    >>> W = np.array([[0.5, 0.5, 0.0], [0.5, 0.25, 0.25], [0.0, 0.25, 0.75]])
    >>> from edgedp.families.cross import covariance
    >>> opt = covariance.optimal_covariance(W, ridge=0.0).covariance
    >>> c = fit(W, [(0, 1), (1, 2)], opt, form="local")
    >>> print(c.ratio < 1.05, c.draws_per_step)
    True 3
    """
    with _blas_limit(blas_threads):
        return _fit(mixing_matrix, edges, optimum, form, rank, ridge, start_pair, max_iterations)


def _fit(mixing_matrix, edges, optimum, form, rank, ridge, start_pair, max_iterations):
    t0 = time.perf_counter()
    if form not in FORMS:
        raise ValueError(f"Unknown form={form!r}; expected one of {FORMS}.")
    W = np.asarray(mixing_matrix, dtype=np.float64)
    n = W.shape[0]
    Rs = np.asarray(optimum, dtype=np.float64)
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    M = W.T @ W + ridge * np.eye(n)
    mu, Q = np.linalg.eigh(Rs)
    mu, Q = mu[::-1], Q[:, ::-1]
    lam_min = float(mu[-1])
    c = np.zeros(0)
    U = np.zeros((n, 0))
    iterations = 0
    if form == "dense":
        D = np.full(n, lam_min)
        U = Q * np.sqrt(np.maximum(mu - lam_min, 0.0))
        U = U[:, mu - lam_min > 1e-12 * mu[0]]
        draws = 1 + U.shape[1]
    elif form == "lowrank":
        integer(1, rank=rank)
        if rank >= n:
            raise ValueError(f"Expected rank={rank} < n={n}; use form='dense'.")
        atoms = Q[:, :rank].T
        x0 = np.maximum(mu[:rank] - lam_min, 1e-6 * mu[0])
        D, x, iterations = _minimize(M, atoms, np.full(n, lam_min), x0, max_iterations)
        U = atoms.T * np.sqrt(x)
        draws = 1 + rank
    else:
        atoms = _incidence(n, e)
        p0, c0 = start_pair or (0.5, 1.0)
        c0 = max(c0, 0.1 * p0)  # log-parameters: start strictly inside
        D, c, iterations = _minimize(M, atoms, np.full(n, p0), np.full(len(e), c0), max_iterations)
        deg = np.bincount(e.reshape(-1), minlength=n) if len(e) else np.zeros(n, dtype=int)
        draws = 1 + int(deg.max())
    D, U, c, R = _normalize(D, U, c, e, n)
    objective = float(np.trace(W @ R @ W.T))
    best = float(np.trace(W @ Rs @ W.T) / np.max(np.diag(np.linalg.inv(Rs))))
    return CompactCovariance(
        form=form,
        diag=D,
        factor=U,
        edge_variance=c if form == "local" else np.zeros(0),
        covariance=R,
        objective=objective,
        ratio=objective / best,
        draws_per_step=draws,
        iterations=iterations,
        seconds=time.perf_counter() - t0,
    )
