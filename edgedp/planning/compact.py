# Paper letters H (workload Gram), C, X = CᵀC, T, S, E: see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""Compact temporal factors fitted to a workload: banded and BLT (DESIGN §4).

A device streams ``C⁻¹ z`` with bounded state: a banded C keeps its last p − 1 outputs
(``edgedp.factors.Banded``), a buffered linear Toeplitz (BLT) C keeps one running sum per
buffer (``edgedp.factors.BLT``). The planner fits either form to a workload Gram H (prefix
sums, or MAFALDA's H from ``planning.mafalda``) under (k, b)-participation and reports the
loss ``sens(C)²·tr(H (CᵀC)⁻¹)`` (``mf_optimal.loss``) relative to the dense optimum of
``mf_optimal.optimize``. Every reported loss is recomputed from ``factor.strategy(T)`` with
``edgedp.accounting.sensitivity`` — the same C the plan's accountant certifies.

**Toeplitz objective** (BLT and banded Toeplitz). For lower-triangular Toeplitz C with first
column c (c₀ = 1) and C⁻¹ with first column β (β = impulse response of 1/c(x)):

* ``tr(H (CᵀC)⁻¹) = Σ_{k,l} β_k β_l tr(H S^k S^lᵀ) = βᵀ G β`` with S the down-shift and
  ``G[k, l] = Σ_{m=0}^{T−1−max(k,l)} H[m+k, m+l]`` (suffix sums along H's diagonals):
  O(T²) once, O(T²) per evaluation. For prefix sums A C⁻¹ is Toeplitz with column
  cumsum(β), so the trace is ``Σ_t (T − t)·cumsum(β)_t²``: O(T) per evaluation.
* Sensitivity (paper 000 Thm 7, squared): for a window π, ``Σ_{s,t∈π} |X[s,t]|`` with
  ``X[s, t] = Σ_{u<T−t} c_u c_{u+t−s}`` (s <= t), a prefix sum of the lag-(t − s)
  autocorrelation of c: O(k·T) for all windows' entries at once. When c >= 0 (BLT with
  ω >= 0), X >= 0 and the value is the exact sensitivity (paper 003, Eq. 3); then the first
  window {0, b, …} is the largest one.
* Gradients in c by the adjoint of the Toeplitz inverse: dβ = −β ⋆ β ⋆ dc, so
  ``∂(βᵀGβ)/∂c_s = −2 Σ_{t>=s} (Gβ)_t (β⋆β)_{t−s}`` (two FFT convolutions).

**BLT fit**: L-BFGS on log(loss) in (logit θ, log ω) — decays stay in (0, 1), weights
positive so the sensitivity is exact and smooth — from deterministic and seeded random
starts, plus a warm start from a smaller fit (``initial``), which makes the loss
non-increasing in the number of buffers. ``signed=True`` lets ω take any sign and prices
the sensitivity with Thm 7's |X| bound (not exact; the max over windows is replaced by
q-norms, q = 30 then 300, during the first stages), starting from the best positive fit.
Measured (benchmarks/compact.py) at T = 2000, (k, b) = (20, 100): positive BLTs
stall at 1.40× the dense optimum from 2 buffers on (jax_privacy's 2-buffer BLT: 1.40×);
signed 3–4-buffer BLTs reach 1.36×. The dense optimum has C[t + b, t] < 0 (columns
orthogonal across participations), which a sum of <= 4 real exponentials cannot follow:
the best Toeplitz C found with all T − 1 coefficients free is 1.12×, the best b-banded
Toeplitz C 1.25×.

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
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.optimize as sopt
import scipy.signal as ssig
from scipy.special import expit

from edgedp import factors
from edgedp._validate import integer
from edgedp.accounting import sensitivity as sens_mod
from edgedp.accounting.participation import Participation
from edgedp.planning import mf_optimal

__all__ = ["CompactFit", "fit_banded", "fit_blt", "toeplitz_loss"]

_BIG = 1e300  # objective value outside the domain (unstable inverse); L-BFGS backtracks
_SMOOTHING = (30.0, 300.0, None)  # q-norms over windows for signed fits, then the max
_BLOCK = 64  # minimum block size of the banded block solves


@dataclass(frozen=True, slots=True)
class CompactFit:
    """A fitted compact factor and how far it is from the dense optimum.

    Attributes:
        factor: The fitted ``factors.Banded`` or ``factors.BLT``.
        loss: sens(C)²·tr(H (CᵀC)⁻¹) of ``factor.strategy(T)``, sensitivity from
            ``edgedp.accounting.sensitivity`` (what the plan's accountant certifies).
        loss_ratio: loss / dense_loss (>= 1 up to the dense solver's tolerance).
        dense_loss: Loss of the dense optimum (``mf_optimal.optimize``).
        sensitivity: sens(C) under the participation schema.
        exact: Whether that sensitivity is exact (X >= 0 on the maximizing window).
        seconds: Wall time of the fit (without the dense optimum).
        evaluations: Objective evaluations.
        method: "blt", "blt-signed", "banded-toeplitz", "banded" or "dense".

    ``factor, loss = fit`` unpacks the first two fields.
    """

    factor: Any
    loss: float
    loss_ratio: float
    dense_loss: float
    sensitivity: float
    exact: bool
    seconds: float
    evaluations: int
    method: str

    def __iter__(self):
        return iter((self.factor, self.loss))


def _gram(H) -> np.ndarray:
    return mf_optimal._gram("workload_gram", H)


def _participation(participation) -> Participation:
    if not isinstance(participation, Participation):
        raise TypeError(f"Expected participation to be a Participation, got {participation!r}.")
    return participation


class _Toeplitz:
    """Loss of a Toeplitz C (c₀ = 1) from its column c and C⁻¹'s column β, with ∂/∂c."""

    def __init__(self, H: np.ndarray, part: Participation):
        T = self.T = H.shape[0]
        self.prefix = bool(np.array_equal(H, mf_optimal.prefix_sum_gram(T)))
        if not self.prefix:
            G = np.empty_like(H)
            for d in range(T):  # G[k, k+d] = Σ_{m>=0} H[k+m, k+d+m]: suffix sums of diagonal d
                suffix = np.cumsum(np.diagonal(H, d)[::-1])[::-1]
                idx = np.arange(T - d)
                G[idx, idx + d] = suffix
                G[idx + d, idx] = suffix
            self.G = G
        parts = []  # (window, lag, N, multiplicity): X[s, t] = Σ_{u<N} c_u c_{u+lag}
        for w, p in enumerate(part.patterns(T)):
            i, j = np.triu_indices(p.size)
            parts.append(np.stack([np.full(i.size, w), p[j] - p[i], T - p[j], 2 - (i == j)]))
        rows = np.concatenate(parts, axis=1)
        self.lags, lag_index = np.unique(rows[1], return_inverse=True)
        self.windows, self.mult = rows[0], rows[3].astype(np.float64)
        self.flat = lag_index * (T + 1) + rows[2]  # index into the (lags, T + 1) prefix sums
        self.diagonal = rows[1] == 0

    def energy(self, beta: np.ndarray) -> tuple[float, np.ndarray]:
        """tr(H (CᵀC)⁻¹) and its gradient in β."""
        if self.prefix:
            s = np.cumsum(beta)
            ws = (self.T - np.arange(self.T)) * s
            return float(ws @ s), 2.0 * np.cumsum(ws[::-1])[::-1]
        g = self.G @ beta
        return float(beta @ g), 2.0 * g

    def sensitivity2(self, c: np.ndarray, smooth: float | None) -> tuple[float, np.ndarray]:
        """max_π Σ_{s,t∈π} |X[s,t]| (or its log-sum-exp smoothing) and the gradient in c."""
        T, L = self.T, self.lags.size
        cum = np.zeros((L, T + 1))
        for i, lag in enumerate(self.lags):
            cum[i, 1 : T - lag + 1] = np.cumsum(c[: T - lag] * c[lag:])
        vals = cum.ravel()[self.flat]
        sign = np.where(self.diagonal | (vals >= 0), 1.0, -1.0)
        per = np.bincount(self.windows, weights=self.mult * np.abs(vals))
        top = float(per.max())
        if smooth is None or per.size == 1:
            weight = (self.windows == int(np.argmax(per))).astype(np.float64)
            S = top
        else:  # ‖per‖_q: smooth, scale invariant, within a factor windows^(1/q) of the max
            r = per / top
            M = float(np.sum(r**smooth))
            S = top * M ** (1.0 / smooth)
            weight = (r ** (smooth - 1.0) / M ** ((smooth - 1.0) / smooth))[self.windows]
        acc = np.bincount(self.flat, weights=weight * self.mult * sign, minlength=L * (T + 1))
        suffix = np.cumsum(acc.reshape(L, T + 1)[:, ::-1], axis=1)[:, ::-1]  # Σ_{N>u}: [u+1]
        grad = np.zeros(T)
        for i, lag in enumerate(self.lags):
            W = suffix[i, 1 : T - lag + 1]
            grad[: T - lag] += W * c[lag:]
            grad[lag:] += W * c[: T - lag]
        return S, grad

    def __call__(self, c: np.ndarray, beta: np.ndarray, smooth: float | None = None):
        """(loss, ∂loss/∂c) or None if C⁻¹ is numerically unstable."""
        if not np.all(np.isfinite(beta)) or np.abs(beta).max() > 1e60:
            return None
        T = self.T
        with np.errstate(over="ignore", invalid="ignore"):
            E, dE_dbeta = self.energy(beta)
            S, dS_dc = self.sensitivity2(c, smooth)
            w = ssig.fftconvolve(beta, beta)[:T]
            dE_dc = -ssig.fftconvolve(dE_dbeta[::-1], w)[:T][::-1]
            grad = E * dS_dc + S * dE_dc
        if not (np.isfinite(S * E) and np.all(np.isfinite(grad))):
            return None
        return S * E, grad


def _impulse(numerator: np.ndarray, denominator: np.ndarray, T: int) -> np.ndarray:
    impulse = np.zeros(T)
    impulse[0] = 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        return ssig.lfilter(numerator, denominator, impulse)


def toeplitz_loss(column, workload_gram, *, participation: Participation) -> float:
    """Loss sens(C)²·tr(H (CᵀC)⁻¹) of the lower-triangular Toeplitz C with first column c.

    Uses the O(T²) (prefix sums: O(T)) Toeplitz formulas of the module docstring; equals
    ``mf_optimal.loss`` on the materialized C (tested). The sensitivity is Thm 7's bound.

    Args:
        column: c (length T, c₀ != 0; scaled to c₀ = 1, the loss is scale invariant).
        workload_gram: H, T × T symmetric.
        participation: The (k, b) schema.

    Returns:
        The loss (inf when C⁻¹ overflows).

    >>> T = 6
    >>> H = mf_optimal.prefix_sum_gram(T)
    >>> print(f"{toeplitz_loss(np.ones(T), H, participation=Participation(3, 2)):.1f}")
    168.0
    """
    part = _participation(participation)
    H = _gram(workload_gram)
    c = np.asarray(column, dtype=np.float64)
    if c.shape != (H.shape[0],) or not np.all(np.isfinite(c)) or c[0] == 0:
        raise ValueError(f"Expected column of shape ({H.shape[0]},), finite, c[0] != 0.")
    c = c / c[0]
    out = _Toeplitz(H, part)(c, _impulse(np.ones(1), c, c.size))
    return float("inf") if out is None else float(out[0])


def _certify(factor, H: np.ndarray, part: Participation):
    C = factor.strategy(H.shape[0])
    s = sens_mod.sensitivity(C, part)
    return mf_optimal.loss(C, H, part), s


def _dense_loss(H, part, dense_loss) -> float:
    if dense_loss is None:
        return mf_optimal.optimize(H, participation=part).loss
    if not (isinstance(dense_loss, (int, float)) and np.isfinite(dense_loss) and dense_loss > 0):
        raise ValueError(f"Expected dense_loss={dense_loss!r} > 0 and finite.")
    return float(dense_loss)


class _Counter:
    """Wraps an objective: counts calls, keeps the best point, reports progress."""

    def __init__(self, fun, progress):
        self.fun, self.progress = fun, progress
        self.calls, self.best, self.best_x = 0, np.inf, None

    def __call__(self, x):
        self.calls += 1
        out = self.fun(x)
        if out is None:
            return _BIG, np.zeros_like(x)
        value, grad = out
        return value, grad

    def record(self, value: float, x: np.ndarray) -> None:
        if value < self.best:
            self.best, self.best_x = value, x.copy()
        if self.progress is not None:
            self.progress(self.calls, self.best)


def _lbfgs(counter: _Counter, x0, bounds, max_iterations: int) -> np.ndarray:
    res = sopt.minimize(
        counter,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": max_iterations, "ftol": 1e-13, "gtol": 1e-10},
    )
    return res.x


# --- BLT ---------------------------------------------------------------------------------


def _blt_column(theta, omega, T: int):
    """c and dc/d(θ, ω) (T × 2n) of the BLT, and the polynomials of c(x) = P(x)/Q(x)."""
    t = np.arange(T - 1)[:, None]
    powers = np.power(theta[None, :], t)
    c = np.concatenate([[1.0], powers @ omega])
    d_theta = omega * t * np.power(theta[None, :], np.maximum(t - 1, 0))
    J = np.vstack([np.zeros((1, 2 * theta.size)), np.hstack([d_theta, powers])])
    Q = np.ones(1)
    for th in theta:
        Q = np.convolve(Q, [1.0, -th])
    P = np.concatenate([Q, [0.0]])
    for j in range(theta.size):
        others = np.ones(1)
        for i, th in enumerate(theta):
            if i != j:
                others = np.convolve(others, [1.0, -th])
        P[1 : others.size + 1] += omega[j] * others
    return c, J, P, Q


def _blt_objective(x, toe: _Toeplitz, n: int, signed: bool, smooth):
    theta = expit(x[:n])
    with np.errstate(over="ignore"):
        omega = x[n:] if signed else np.exp(x[n:])
    if not (np.all(theta > 0) and np.all(theta < 1) and np.all(np.isfinite(omega))):
        return None
    c, J, P, Q = _blt_column(theta, omega, toe.T)
    out = toe(c, _impulse(Q, P, toe.T), smooth)
    if out is None or not np.isfinite(out[0]) or out[0] <= 0:
        return None
    value, grad_c = out
    grad = J.T @ grad_c
    grad[:n] *= theta * (1.0 - theta)
    if not signed:
        grad[n:] *= omega
    return np.log(value), grad / value


def _blt_starts(n: int, T: int, restarts: int, seed: int, signed: bool, initial):
    """(θ, ω) starting points: 1 − θ log-spaced in [2/T, 1/2] (perturbed after the first),
    ω > 0 (signed: ω ~ N(0, 1/(2n))), and ``initial`` padded with buffers of weight ~0."""
    rng = np.random.default_rng(seed)
    frac = (np.arange(n) + 0.5) / n
    base_gap = (2.0 / T) ** (1.0 - frac) * 0.5**frac
    starts = []
    if initial is not None:
        m = min(initial.buffers, n)
        theta = np.concatenate([initial.decays[:m], 1.0 - base_gap[: n - m][::-1] * 0.7])
        omega = np.concatenate([initial.weights[:m], np.full(n - m, 1e-6)])
        starts.append((theta, omega if signed else np.maximum(omega, 1e-6)))
    for r in range(restarts):
        gap = base_gap * (np.exp(rng.normal(0.0, 1.0, n)) if r else 1.0)
        theta = 1.0 - np.clip(gap, 1e-9, 0.99)
        if signed:
            omega = rng.normal(0.0, 0.5 / n, n)
        else:
            omega = np.full(n, 0.5 / n) * (rng.uniform(0.5, 1.5, n) if r else 1.0)
        starts.append((theta, omega))
    return starts


def _blt_x(theta, omega, signed: bool) -> np.ndarray:
    theta = np.clip(theta, 1e-12, 1.0 - 1e-12)
    return np.concatenate([np.log(theta / (1.0 - theta)), omega if signed else np.log(omega)])


def _blt_params(x, n: int, signed: bool):
    theta = np.clip(expit(x[:n]), np.nextafter(0.0, 1.0), np.nextafter(1.0, 0.0))
    return theta, (x[n:] if signed else np.exp(x[n:]))


def fit_blt(
    workload_gram,
    *,
    participation: Participation,
    buffers: int,
    signed: bool = False,
    restarts: int = 8,
    max_iterations: int = 500,
    initial: factors.BLT | None = None,
    seed: int = 0,
    dense_loss: float | None = None,
    progress: Callable[[int, float], None] | None = None,
    blas_threads: int | None = 1,
) -> CompactFit:
    """Fit a BLT strategy (``factors.BLT``) to a workload under (k, b)-participation.

    Minimizes sens(C)²·tr(H (CᵀC)⁻¹) over the decays θ ∈ (0, 1) and weights ω of a BLT
    with ``buffers`` buffers (module docstring: Toeplitz objective, BLT fit).

    Args:
        workload_gram: H, T × T symmetric positive definite (``mf_optimal.prefix_sum_gram``,
            ``mafalda.workload_gram``).
        participation: The (k, b) participation schema.
        buffers: Number of buffers n (>= 1): the device keeps n vectors of size d.
        signed: Allow negative weights (sensitivity then from Thm 7's |X| bound).
        restarts: Starting points (>= 1): one deterministic, the rest seeded random.
        max_iterations: L-BFGS iterations per start and stage (>= 1).
        initial: A fitted BLT to warm-start from (extra buffers start with weight ~0).
        seed: Seed of the random starts.
        dense_loss: Loss of the dense optimum; computed with ``mf_optimal.optimize`` if None.
        progress: Called as progress(evaluations, best_loss) after every start.
        blas_threads: BLAS threads during the fit (None keeps the process setting).

    Returns:
        A :class:`CompactFit` (method "blt" or "blt-signed").

    Raises:
        TypeError: If participation is not a Participation or an integer is not int.
        ValueError: On a bad H or a non-positive dense_loss.

    >>> H = mf_optimal.prefix_sum_gram(64)
    >>> fit = fit_blt(H, participation=Participation(2, 32), buffers=1, restarts=2)
    >>> print(f"{fit.loss_ratio:.3f} {fit.exact}")
    1.168 True
    """
    part = _participation(participation)
    integer(1, buffers=buffers, restarts=restarts, max_iterations=max_iterations)
    if initial is not None and not isinstance(initial, factors.BLT):
        raise TypeError(f"Expected initial to be a factors.BLT, got {initial!r}.")
    if blas_threads is not None:
        integer(1, blas_threads=blas_threads)
    H = _gram(workload_gram)
    reference = _dense_loss(H, part, dense_loss)
    with mf_optimal._blas_limit(blas_threads):
        return _fit_blt(
            H,
            part,
            int(buffers),
            signed,
            restarts,
            max_iterations,
            initial,
            seed,
            reference,
            progress,
        )


def _fit_blt(H, part, n, signed, restarts, max_iterations, initial, seed, reference, progress):
    t0 = time.perf_counter()
    T = H.shape[0]
    toe = _Toeplitz(H, part)
    counter = _Counter(None, progress)
    best = (np.inf, None, None)

    def run(starts, sign: bool, smooths) -> None:
        nonlocal best
        for theta, omega in starts:
            for _ in range(20):  # shrink signed weights until C⁻¹ is stable
                if _blt_objective(_blt_x(theta, omega, sign), toe, n, sign, None) is not None:
                    break
                omega = omega / 2
            x = _blt_x(theta, omega, sign)
            for smooth in smooths:
                counter.fun = lambda y, s=smooth: _blt_objective(y, toe, n, sign, s)
                x = _lbfgs(counter, x, None, max_iterations)
            out = _blt_objective(x, toe, n, sign, None)
            params = _blt_params(x, n, sign)
            # a finite loss over T steps does not make C⁻¹ stable: factors.BLT refuses ρ >= 1
            if out is not None and out[0] < best[0] and factors.blt_inverse_radius(*params) < 1:
                best = (out[0], *params)
            counter.record(float(np.exp(best[0])), x)

    run(_blt_starts(n, T, restarts, seed, False, initial), False, (None,))
    if signed:  # from the best positive fit, then from small weights of either sign
        starts = [(best[1], best[2])] + _blt_starts(n, T, restarts - 1, seed, True, initial)
        run(starts, True, _SMOOTHING)
    if best[1] is None:
        raise ValueError(
            f"No BLT with {n} buffers and a stable inverse fits this workload (T={T}); "
            "try fewer buffers or more restarts."
        )
    blt = factors.BLT(tuple(best[1]), tuple(best[2]))
    loss, s = _certify(blt, H, part)
    return CompactFit(
        factor=blt,
        loss=loss,
        loss_ratio=loss / reference,
        dense_loss=reference,
        sensitivity=s.value,
        exact=s.exact,
        seconds=time.perf_counter() - t0,
        evaluations=counter.calls,
        method="blt-signed" if signed else "blt",
    )


# --- banded ------------------------------------------------------------------------------


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
        workload_gram: H, T × T symmetric positive definite.
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
    T = H.shape[0]
    p = min(bandwidth, T)
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
        C = factors._lower_toeplitz(np.concatenate([c, np.zeros(T - p)]))
        factor, method = factors.Banded.from_matrix(C, p), "banded-toeplitz"
        if separated and refine and p > 1:
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
    return CompactFit(
        factor=factor,
        loss=loss,
        loss_ratio=loss / reference,
        dense_loss=reference,
        sensitivity=s.value,
        exact=s.exact,
        seconds=time.perf_counter() - t0,
        evaluations=calls,
        method=method,
    )
