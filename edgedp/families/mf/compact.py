# Paper letters H (workload Gram), C, X = CᵀC, T, S, E: see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""Compact temporal factors fitted to a workload: banded and BLT (DESIGN §4).

A device streams ``C⁻¹ z`` with bounded state: a banded C keeps its last p − 1 outputs
(``edgedp.factors.Banded``), a buffered linear Toeplitz (BLT) C keeps one running sum per
buffer (``edgedp.factors.BLT``). The planner fits either form to a workload Gram H (prefix
sums, or MAFALDA's H from ``families.mf.mafalda``) under (k, b)-participation and reports the
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

**Long horizons** (a :class:`~edgedp.planning.workload.SpectralWorkload` instead of H,
for T above ``workload.DENSE_MAX_STEPS``): the energy is O(T) per distinct eigenvalue of W
(that module), and the sensitivity is the first window's, O(T) with its gradient — exact
where the fits use it: for c >= 0 (X >= 0) the window {0, b, …} is the largest and
Σ_{s,t∈π} X[s,t] = ‖C 1_π‖² with C 1_π = g − g shifted by k'b (g the b-strided cumulative
sum of c); for a banded c no longer than b (co-participating columns never overlap), and
for any c with one step per window, it is Σ_{s∈π} ‖C[:, s]‖². Signed BLTs (|X| over all
pairs) and the dense optimum are not computed there; the fits say so (``CompactFit.skipped``).

The fitters: :func:`edgedp.families.mf.compact_blt.fit_blt` and
:func:`edgedp.families.mf.compact_banded.fit_banded`; both return a :class:`CompactFit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize as sopt
import scipy.signal as ssig

from edgedp.accounting import factor_sensitivity
from edgedp.accounting import sensitivity as sens_mod
from edgedp.accounting.factor_sensitivity import _strided_cumsum, windows
from edgedp.accounting.participation import Participation
from edgedp.planning import mf_optimal, workload

__all__ = ["CompactFit", "toeplitz_loss"]

_BIG = 1e300  # objective value outside the domain (unstable inverse); L-BFGS backtracks


@dataclass(frozen=True, slots=True)
class CompactFit:
    """A fitted compact factor and how far it is from the dense optimum.

    Attributes:
        factor: The fitted ``factors.Banded`` or ``factors.BLT``.
        loss: sens(C)²·tr(H (CᵀC)⁻¹) of ``factor.strategy(T)``, sensitivity from
            ``edgedp.accounting.sensitivity`` (what the plan's accountant certifies).
        loss_ratio: loss / dense_loss (>= 1 up to the dense solver's tolerance); None when
            the dense optimum was not computed (long horizons).
        dense_loss: Loss of the dense optimum (``mf_optimal.optimize``), or None.
        sensitivity: sens(C) under the participation schema.
        exact: Whether that sensitivity is exact (X >= 0 on the maximizing window).
        seconds: Wall time of the fit (without the dense optimum).
        evaluations: Objective evaluations.
        method: "blt", "blt-signed", "banded-toeplitz", "banded" or "dense".
        skipped: What was not computed at this horizon, one sentence each.

    ``factor, loss = fit`` unpacks the first two fields.
    """

    factor: Any
    loss: float
    loss_ratio: float | None
    dense_loss: float | None
    sensitivity: float
    exact: bool
    seconds: float
    evaluations: int
    method: str
    skipped: tuple[str, ...] = ()

    def __iter__(self):
        return iter((self.factor, self.loss))


def _gram(H):
    """H checked (a SpectralWorkload passes as it is)."""
    if isinstance(H, workload.SpectralWorkload):
        return H
    return mf_optimal._gram("workload_gram", H)


def _steps(H) -> int:
    return H.steps if isinstance(H, workload.SpectralWorkload) else H.shape[0]


def _participation(participation) -> Participation:
    if not isinstance(participation, Participation):
        raise TypeError(f"Expected participation to be a Participation, got {participation!r}.")
    return participation


class _Toeplitz:
    """Loss of a Toeplitz C (c₀ = 1) from its column c and C⁻¹'s column β, with ∂/∂c."""

    def __init__(self, H, part: Participation):
        self.spectral = H if isinstance(H, workload.SpectralWorkload) else None
        if self.spectral is not None:  # long horizons: no T × T matrix at all
            self.T, self.prefix = H.steps, False
            self.first = int(windows(part, H.steps)[1].max())  # k' of the window at 0
            self.b = part.b
            return
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
        if self.spectral is not None:
            return self.spectral.energy(beta)
        if self.prefix:
            s = np.cumsum(beta)
            ws = (self.T - np.arange(self.T)) * s
            return float(ws @ s), 2.0 * np.cumsum(ws[::-1])[::-1]
        g = self.G @ beta
        return float(beta @ g), 2.0 * g

    def first_window(self, c: np.ndarray) -> tuple[float, np.ndarray]:
        """The window {0, b, …}'s Σ|X| and its gradient in c (module docstring, *Long
        horizons*): ‖C 1_π‖² for c >= 0, Σ_{s∈π} ‖C[:, s]‖² for c shorter than b."""
        T, b, k = self.T, self.b, self.first
        if np.all(c >= 0):
            g = _strided_cumsum(c, b)
            y = g.copy()
            if k * b < T:
                y[k * b :] -= g[: T - k * b]
            h = _strided_cumsum(y[::-1], b)[::-1]  # h[u] = Σ_{i >= 0} y[u + ib]
            grad = h.copy()
            if k * b < T:
                grad[: T - k * b] -= h[k * b :]
            return float(y @ y), 2.0 * grad
        if k > 1 and np.any(c[b:] != 0):
            raise ValueError(
                f"The sensitivity of a Toeplitz C with negative entries longer than b = {b} "
                f"needs every pair of a window (|X| bound): T <= {workload.DENSE_MAX_STEPS}."
            )
        u = np.arange(T)
        count = np.minimum(k, -(-(T - u) // b)).astype(np.float64)  # windows steps ib < T − u
        return float(count @ (c * c)), 2.0 * count * c

    def sensitivity2(self, c: np.ndarray, smooth: float | None) -> tuple[float, np.ndarray]:
        """max_π Σ_{s,t∈π} |X[s,t]| (or its log-sum-exp smoothing) and the gradient in c."""
        if self.spectral is not None:
            return self.first_window(c)
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


def _certify(factor, H, part: Participation):
    """(loss, sensitivity) of ``factor``: from ``factor.strategy(T)`` with
    ``accounting.sensitivity`` (what a plan's accountant certifies), or for a long horizon
    from the factor's compact form (``accounting.factor_sensitivity``, the device's route)
    and the spectral energy."""
    if isinstance(H, workload.SpectralWorkload):
        fs = factor_sensitivity.sensitivity(factor, part, steps=H.steps)
        columns = workload.toeplitz_columns(factor, H.steps)
        if fs.value is None or columns is None:
            raise ValueError(f"{factor.kind} factor: no exact sensitivity at T = {H.steps}.")
        return fs.value.value**2 * H.energy(columns[1])[0], fs.value
    C = factor.strategy(H.shape[0])
    s = sens_mod.sensitivity(C, part)
    return mf_optimal.loss(C, H, part), s


#: What a long-horizon fit does not compute (CompactFit.skipped, the plan report).
NO_DENSE_OPTIMUM = (
    "the dense optimum (it needs T x T matrices, planned up to T = {limit}): no loss ratio "
    "to it, duality gap or dual bound"
)


def _dense_loss(H, part, dense_loss) -> float | None:
    """The dense optimum's loss: given, computed, or None for a long horizon."""
    if dense_loss is None:
        if isinstance(H, workload.SpectralWorkload):
            return None
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
