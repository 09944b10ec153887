# ruff: noqa: N803, N806  (paper letters W, H, C, F, K, T: see docs/NOTATION.md)
"""MAFALDA workload Gram matrix H (paper 000, Lemma 10, App. D) and its objective.

Notation (paper 000, Eq. 5, 0-based steps). MF-D-SGD stacks the models as
θ = (I_T⊗W)(Mθ₀ − η W_T(G + C†Z)), rows time-major (row t·n + u is node u at step t).
W_T is block lower-triangular Toeplitz with block (t, τ) = W^{t−τ} (I_n on the diagonal),
so the block (t, τ) of the utility workload (I_T⊗W)W_T is W^{t−τ+1} for t ≥ τ and 0 above.
Lemma 10 permutes its columns to node-major order with the commutation matrix K^{(T,n)}
(column i·T + a of the result is column a·n + i of the original) and sets
A_i = columns iT … (i+1)T − 1 (node i's T columns), H = Σᵢ A_iᵀA_i (T × T). Column a of A_i
is the stack over t ≥ a of (W^{t−a+1})[:, i], hence

    H[a, b] = Σ_{t=max(a,b)}^{T−1} tr((W^{t−a+1})ᵀ W^{t−b+1})
            = Σ_{k=0}^{L−1} ⟨W^{d+1+k}, W^{1+k}⟩_F,    d = |a − b|,  L = T − max(a, b),

with F[i, j] = ⟨W^{i+1}, W^{j+1}⟩_F the Gram matrix of the powers. H depends on (a, b) only
through (d, L), and H[a, b] = H[a + 1, b + 1] + F[T − 1 − a, T − 1 − b] (the t = T − 1
term), which fills H row by row from the bottom in O(T²).

* Symmetric W = Q diag(λ) Qᵀ: F[i, j] = τ(i + j + 2) with the power sums τ(e) = Σⱼ λⱼ^e, so
  H[a, b] = Σⱼ Σ_{t=max(a,b)}^{T−1} λⱼ^{2t−a−b+2} (DESIGN §4). Cost O(n³) for the spectrum,
  O(n·T) for τ, O(T²) for H; memory O(T²) (H itself) + O(n·T). No closed-form geometric
  sums are used, so λ = ±1 and |λ| ≈ 1 need no special case (only sums of powers).
* Reversible W (π_u W_uv = π_v W_vu, e.g. uniform-neighbour weights, π ∝ degree + 1):
  S = D^{1/2} W D^{-1/2} (D = diag π) is symmetric, S = Q diag(λ) Qᵀ, and
  F[i, i'] = Σ_{j,k} λⱼ^{i+1} K_{jk} λ_k^{i'+1} with K = (QᵀD⁻¹Q) ∘ (QᵀDQ). Cost O(n³ + T·n² +
  T²·n), memory O(T²).
* Other diagonalizable W = V diag(λ) V⁻¹ with cond(V) <= 1e4 (unit-norm columns): the same
  formula with complex λ and K = (VᴴV) ∘ (V⁻¹V⁻ᴴ)ᵀ, F = Re(conj(Λ) K Λᵀ). Same cost.
* Any other row-stochastic W (defective or ill-conditioned eigenvectors): F = P Pᵀ from the
  explicit powers P[i] = vec(W^{i+1}), generated in blocks of at most
  ``_POWER_BLOCK_ELEMENTS`` = E numbers. Cost O(T²·n² + (T²·n²/E)·n³) (each block of
  powers is regenerated once per earlier block), memory O(T² + E). Exact (no
  eigen-decomposition) but slow: of the order of a minute for n = 271, T = 2000 on a 2-core laptop.

Only the lower triangle of F is read (F is symmetric in exact arithmetic); only the upper
triangle of H is computed, then mirrored, so H is exactly symmetric.

The objective of a local factorization C = C_local ⊗ I_n (Lemma 10, Eq. 11) is
sens_Πlocal(C_local)² · ‖(I_T⊗W)W_T (C_local⁻¹⊗I_n)‖_F² = sens² · tr(H (C_localᵀC_local)⁻¹).
(App. D writes C_local where C_local† is meant in its last lines; the identity above is the
one that holds, and the one the tests check against the explicit nT × nT matrices.)

Planning runs offline; this module needs numpy only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgedp import _validate, topology
from edgedp.accounting import sensitivity as sens_lib
from edgedp.accounting.participation import Participation

__all__ = [
    "BRUTEFORCE_MAX_SIZE",
    "objective",
    "workload_gram",
    "workload_gram_bruteforce",
]

BRUTEFORCE_MAX_SIZE = 2000
"""Largest n·T :func:`workload_gram_bruteforce` accepts (it forms nT × nT matrices)."""

_SYMMETRY_ATOL = 1e-12  # auto-detection of symmetric W (max |W − Wᵀ|)
_SYMMETRIC_ATOL = 1e-10  # symmetric=True: W must be this close to Wᵀ (topology's default)
_REVERSIBLE_RTOL = 1e-12  # detailed balance, relative to the largest flux π_u W_uv
_MAX_STATIONARY_RATIO = 1e8  # max π / min π above which D^{±1/2} is too ill-conditioned
_MAX_EIGVEC_COND = 1e4  # cond(V) above which W = VΛV⁻¹ is not trusted (direct powers instead)
_POWER_BLOCK_ELEMENTS = 1 << 23  # numbers per block of explicit powers (64 MB)
_MIRROR_BLOCK = 256  # rows per block when copying the upper triangle of H to the lower


def _mixing(mixing_matrix: Any, validate: bool, symmetric: bool | None) -> np.ndarray:
    W = _validate.finite_array("mixing_matrix", mixing_matrix)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise ValueError(f"Expected mixing_matrix to be a square n x n matrix, got {W.shape}.")
    W = W.astype(np.float64, copy=False)
    if symmetric and not np.allclose(W, W.T, rtol=0.0, atol=_SYMMETRIC_ATOL):
        u, v = np.unravel_index(np.argmax(np.abs(W - W.T)), W.shape)
        raise ValueError(
            f"Expected a symmetric mixing_matrix (symmetric=True), but W[{u}, {v}] = "
            f"{W[u, v]:.12g} and W[{v}, {u}] = {W[v, u]:.12g}; pass symmetric=None."
        )
    if validate:
        topology.validate(W)
    return W


def _rows_from_bottom(T: int, last_term: Callable[[int], np.ndarray]) -> np.ndarray:
    """H from the recurrence H[a, b] = H[a + 1, b + 1] + ⟨W^{T−a}, W^{T−b}⟩_F (H[·, T] = 0).

    ``last_term(a)`` is the t = T − 1 summand for b = a … T − 1. Each entry is a sum of
    the terms t = T − 1, T − 2, …, max(a, b) added in that order (highest powers, i.e. the
    smallest terms of a mixing W, first); rows are filled bottom-up so memory is touched
    contiguously. Only the upper triangle is computed; it is mirrored at the end.
    """
    H = np.empty((T, T))
    for a in range(T - 1, -1, -1):
        term = last_term(a)
        if a < T - 1:
            np.add(H[a + 1, a + 1 :], term[:-1], out=H[a, a : T - 1])
        H[a, T - 1] = term[-1]
    for i0 in range(0, T, _MIRROR_BLOCK):  # lower triangle, one block column at a time
        i1 = min(T, i0 + _MIRROR_BLOCK)
        H[i0:i1, :i0] = H[:i0, i0:i1].T
        block = H[i0:i1, i0:i1]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return H


def _power_sums(lam: np.ndarray, max_exponent: int) -> np.ndarray:
    """τ(e) = Σⱼ λⱼ^e for e = 0 … max_exponent, in blocks of eigenvalues (O(n·T) work)."""
    exps = np.arange(max_exponent + 1, dtype=np.float64)
    tau = np.zeros(max_exponent + 1)
    step = max(1, _POWER_BLOCK_ELEMENTS // exps.size)
    with np.errstate(under="ignore"):
        for lo in range(0, lam.size, step):
            tau += np.power(lam[lo : lo + step, None], exps[None, :]).sum(axis=0)
    return tau


def _gram_symmetric(W: np.ndarray, T: int, stochastic: bool) -> np.ndarray:
    lam = np.linalg.eigvalsh((W + W.T) / 2.0)
    if stochastic:  # spectral radius of a stochastic matrix is 1: drop round-off beyond ±1
        lam = np.clip(lam, -1.0, 1.0)
    tau = _power_sums(lam, 2 * T)
    # term_d(k) = F[d + k, k] = τ(d + 2k + 2), k = 0 … T − d − 1
    # last term for b = a … T − 1: τ(2T − a − b), i.e. τ[2T − 2a], …, τ[T − a + 1]
    return _rows_from_bottom(T, lambda a: tau[2 * T - 2 * a : T - a : -1])


def _stationary(W: np.ndarray) -> np.ndarray | None:
    """Left Perron vector π (πᵀW = πᵀ, Σπ = 1) or None if it is not positive and finite."""
    n = W.shape[0]
    A = np.eye(n) - W.T
    A[-1, :] = 1.0
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    try:
        pi = np.linalg.solve(A, rhs)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(pi)) or pi.min() <= 0:
        return None
    return pi


def _powers_gram_reversible(W: np.ndarray, T: int, stochastic: bool) -> np.ndarray | None:
    """F[i, j] = ⟨W^{i+1}, W^{j+1}⟩_F via the symmetrization of a reversible W, else None."""
    pi = _stationary(W)
    if pi is None or pi.max() / pi.min() > _MAX_STATIONARY_RATIO:
        return None
    flux = pi[:, None] * W
    if np.max(np.abs(flux - flux.T)) > _REVERSIBLE_RTOL * np.max(np.abs(flux)):
        return None
    root = np.sqrt(pi)
    S = root[:, None] * W / root[None, :]
    lam, Q = np.linalg.eigh((S + S.T) / 2.0)
    if stochastic:
        lam = np.clip(lam, -1.0, 1.0)
    K = (Q.T @ (Q / pi[:, None])) * (Q.T @ (Q * pi[:, None]))
    with np.errstate(under="ignore"):
        pows = np.power(lam[None, :], np.arange(1, T + 1, dtype=np.float64)[:, None])
    return (pows @ K) @ pows.T


def _powers_gram_eig(W: np.ndarray, T: int, stochastic: bool) -> np.ndarray | None:
    """F[i, j] = ⟨W^{i+1}, W^{j+1}⟩_F from W = V diag(λ) V⁻¹ if V is well conditioned."""
    lam, V = np.linalg.eig(W)
    if np.linalg.cond(V) > _MAX_EIGVEC_COND:
        return None
    V_inv = np.linalg.inv(V)
    if stochastic:  # spectral radius 1: drop round-off beyond the unit circle
        lam = lam / np.maximum(1.0, np.abs(lam))
    # tr((W^p)ᴴ W^q) = Σ_{j,k} conj(λⱼ)^p (VᴴV)_{jk} λ_k^q (V⁻¹V⁻ᴴ)_{kj}
    K = (V.conj().T @ V) * (V_inv @ V_inv.conj().T).T
    with np.errstate(under="ignore"):
        pows = np.power(lam[None, :], np.arange(1, T + 1)[:, None])
    left = pows.conj() @ K
    F = left.real @ pows.real.T  # Re(left @ powsᵀ) without a complex T × T temporary
    F -= left.imag @ pows.imag.T
    return F


def _powers_gram_direct(W: np.ndarray, T: int) -> np.ndarray:
    """F[i, j] = ⟨W^{i+1}, W^{j+1}⟩_F from explicit powers, generated block by block."""
    n = W.shape[0]
    block = max(1, min(T, _POWER_BLOCK_ELEMENTS // (n * n)))

    def powers(first: np.ndarray, count: int) -> np.ndarray:
        out = np.empty((count, n, n))
        out[0] = first
        for k in range(1, count):
            np.matmul(out[k - 1], W, out=out[k])
        return out.reshape(count, n * n)

    F = np.empty((T, T))
    row_first = W.copy()
    for i0 in range(0, T, block):
        i1 = min(T, i0 + block)
        rows = powers(row_first, i1 - i0)
        row_first = rows[-1].reshape(n, n) @ W
        F[i0:i1, i0:i1] = rows @ rows.T
        col_first = row_first
        for j0 in range(i1, T, block):
            j1 = min(T, j0 + block)
            cols = powers(col_first, j1 - j0)
            col_first = cols[-1].reshape(n, n) @ W
            F[i0:i1, j0:j1] = rows @ cols.T
            F[j0:j1, i0:i1] = F[i0:i1, j0:j1].T
    return F


def workload_gram(
    mixing_matrix: Any,
    *,
    steps: int,
    symmetric: bool | None = None,
    validate: bool = True,
    blas_threads: int | None = 1,
) -> np.ndarray:
    """MAFALDA workload Gram matrix H = Σᵢ AᵢᵀAᵢ without forming nT × nT matrices.

    Paper 000, Lemma 10 (Eq. 10) with the stacked form of Eq. 5:
    H[a, b] = Σ_{t=max(a,b)}^{T−1} tr((W^{t−a+1})ᵀ W^{t−b+1}) (0-based steps), which for
    symmetric W with eigenvalues λⱼ is Σⱼ Σ_{t=max(a,b)}^{T−1} λⱼ^{2t−a−b+2}. See the module
    docstring for the derivation and for the cost of each path.

    Args:
        mixing_matrix: Gossip matrix W (n × n, row-stochastic).
        steps: Horizon T (>= 1).
        symmetric: True: treat W as symmetric (it must be, within 1e-10); False: use the
            general path even for a symmetric W; None: detect (max |W − Wᵀ| <= 1e-12).
        validate: Check W with :func:`edgedp.topology.validate` (stochastic, connected).
            Shape and finiteness are always checked. With False the eigenvalues are not
            clipped to [−1, 1], so a non-stochastic W (e.g. the identity) is allowed.
        blas_threads: BLAS threads for the eigendecompositions and products (threadpoolctl
            when installed, as in ``mf_optimal.optimize``; None keeps the process setting).
            One by default: a multi-threaded BLAS on shared, loaded cores is many times
            slower than one thread.

    Returns:
        H, a symmetric positive definite T × T float64 array.

    Raises:
        TopologyError: If validate and W is not a connected row-stochastic gossip matrix.
        ValueError: On a non-square or non-finite W, or if H overflows.
        TypeError: If steps is not an integer.

    >>> W = np.full((3, 3), 1 / 3)  # complete graph: W^p = W, so H[a, b] = T − max(a, b)
    >>> print(workload_gram(W, steps=3).round(12))
    [[3. 2. 1.]
     [2. 2. 1.]
     [1. 1. 1.]]
    """
    _validate.integer(1, steps=steps)
    if blas_threads is not None:
        _validate.integer(1, blas_threads=blas_threads)
    from edgedp.planning import mf_optimal

    with mf_optimal._blas_limit(blas_threads):
        return _workload_gram(mixing_matrix, int(steps), symmetric, validate)


def _workload_gram(mixing_matrix, T: int, symmetric, validate) -> np.ndarray:
    W = _mixing(mixing_matrix, validate, symmetric)
    is_sym = bool(np.max(np.abs(W - W.T)) <= _SYMMETRY_ATOL) if symmetric is None else symmetric
    # only a non-stochastic W (validate=False) can overflow; reported below as a ValueError
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if is_sym:
            H = _gram_symmetric(W, T, stochastic=validate)
        else:
            F = _powers_gram_reversible(W, T, stochastic=validate)
            if F is None:
                F = _powers_gram_eig(W, T, stochastic=validate)
            if F is None:
                F = _powers_gram_direct(W, T)
            # last term for b = a … T − 1: F[T − 1 − a, T − 1 − b]
            H = _rows_from_bottom(T, lambda a: F[T - 1 - a, T - 1 - a :: -1])
    if not np.all(np.isfinite(H)):
        raise ValueError(
            f"Workload Gram overflowed for steps={T}: mixing_matrix has spectral radius > 1; "
            "use a stochastic W (validate=True)."
        )
    return H


def _stacked_workload(W: np.ndarray, T: int) -> np.ndarray:
    """(I_T⊗W)W_T (paper 000, Eq. 5), W_T block (t, τ) = W^{t−τ}, time-major rows."""
    n = W.shape[0]
    W_T = np.zeros((n * T, n * T))
    power = np.eye(n)
    for lag in range(T):
        for tau in range(T - lag):
            t = tau + lag
            W_T[t * n : (t + 1) * n, tau * n : (tau + 1) * n] = power
        power = power @ W
    return np.kron(np.eye(T), W) @ W_T


def _commutation(T: int, n: int) -> np.ndarray:
    """K^{(T,n)}: column i·T + a of (X K) is column a·n + i of X (time-major → node-major)."""
    K = np.zeros((n * T, n * T))
    for i in range(n):
        for a in range(T):
            K[a * n + i, i * T + a] = 1.0
    return K


def workload_gram_bruteforce(mixing_matrix: Any, *, steps: int) -> np.ndarray:
    """H = Σᵢ AᵢᵀAᵢ formed literally from Lemma 10 (paper 000, Eq. 10); tests only.

    Builds W_T, (I_T⊗W)W_T and the commutation matrix K^{(T,n)} explicitly and sums
    AᵢᵀAᵢ over the node-major column blocks Aᵢ. Cost O((nT)³), memory O((nT)²).

    Args:
        mixing_matrix: Gossip matrix W (n × n); only shape and finiteness are checked.
        steps: Horizon T (>= 1), with n·T <= BRUTEFORCE_MAX_SIZE.

    Returns:
        H (T × T).

    Raises:
        ValueError: If n·T > BRUTEFORCE_MAX_SIZE, or W is not square and finite.

    >>> print(workload_gram_bruteforce(np.full((3, 3), 1 / 3), steps=3).round(12))
    [[3. 2. 1.]
     [2. 2. 1.]
     [1. 1. 1.]]
    """
    _validate.integer(1, steps=steps)
    T = int(steps)
    W = _mixing(mixing_matrix, validate=False, symmetric=None)
    n = W.shape[0]
    if n * T > BRUTEFORCE_MAX_SIZE:
        raise ValueError(
            f"Expected n*steps={n * T} <= {BRUTEFORCE_MAX_SIZE} for the brute-force Gram; "
            "use workload_gram for larger sizes."
        )
    A = _stacked_workload(W, T) @ _commutation(T, n)
    H = np.zeros((T, T))
    for i in range(n):
        A_i = A[:, i * T : (i + 1) * T]
        H += A_i.T @ A_i
    return H


def objective(
    strategy: Any,
    mixing_matrix: Any,
    *,
    steps: int,
    participation: Participation,
) -> float:
    """MAFALDA loss of a local factorization C = C_local ⊗ I_n (paper 000, Lemma 10, Eq. 11).

    sens_Πlocal(C_local)² · tr(H (C_localᵀC_local)⁻¹) = sens² · ‖L C_local⁻¹‖_F² with
    H = LᵀL, which equals Definition 9's sens(C; B)² · ‖(I_T⊗W)W_T C⁻¹‖_F² under LDP.
    The sensitivity is :func:`edgedp.accounting.sensitivity.sensitivity` (Thm 7 bound).

    Args:
        strategy: C_local, an invertible T × T matrix.
        mixing_matrix: Gossip matrix W (validated as in :func:`workload_gram`).
        steps: Horizon T; must match the strategy's size.
        participation: Local (k, b)-participation of each node's data.

    Returns:
        The loss (a float >= 0).

    Raises:
        ValueError: If the strategy is not square T × T, finite and invertible.

    >>> W = np.full((3, 3), 1 / 3)
    >>> print(round(objective(np.eye(4), W, steps=4, participation=Participation(4, 1)), 9))
    40.0
    """
    _validate.integer(1, steps=steps)
    T = int(steps)
    if not isinstance(participation, Participation):
        raise TypeError(f"Expected participation to be a Participation, got {participation!r}.")
    C = _validate.finite_array("strategy", strategy).astype(np.float64, copy=False)
    _validate.shape_is("strategy", C, (T, T))
    H = workload_gram(mixing_matrix, steps=T)
    L = np.linalg.cholesky(H)  # H = L Lᵀ (numpy's lower factor)
    try:
        M = np.linalg.solve(C.T, L)  # ‖C⁻ᵀL‖_F² = tr(H (CᵀC)⁻¹)
    except np.linalg.LinAlgError:
        raise ValueError("Expected an invertible strategy (C_local is singular).") from None
    if not np.all(np.isfinite(M)):
        raise ValueError("Expected a well-conditioned strategy (C_local⁻¹ is not finite).")
    sens = sens_lib.sensitivity(C, participation, steps=T).value
    return float(sens**2 * np.sum(M * M))
