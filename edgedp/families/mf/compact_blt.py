# Paper letters H (workload Gram), C, X = CᵀC, T, S, E: see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""BLT factors fitted to a workload (:mod:`edgedp.families.mf.compact` has the objective).

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
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from scipy.special import expit

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

__all__ = ["fit_blt"]

_SMOOTHING = (30.0, 300.0, None)  # q-norms over windows for signed fits, then the max


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
            ``mafalda.workload_gram``), or a :class:`~edgedp.planning.workload.SpectralWorkload`
            (long horizons: no dense optimum, unsigned only; ``CompactFit.skipped``).
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
    if signed and isinstance(H, workload.SpectralWorkload):
        raise ValueError(
            "signed BLT fits price every pair of a window (|X| bound); above T = "
            f"{workload.DENSE_MAX_STEPS} fit with signed=False."
        )
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
    T = _steps(H)
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
        loss_ratio=None if reference is None else loss / reference,
        dense_loss=reference,
        sensitivity=s.value,
        exact=s.exact,
        seconds=time.perf_counter() - t0,
        evaluations=counter.calls,
        method="blt-signed" if signed else "blt",
        skipped=()
        if reference is not None
        else (NO_DENSE_OPTIMUM.format(limit=workload.DENSE_MAX_STEPS),),
    )
