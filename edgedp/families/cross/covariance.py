"""Whisper's covariance program (paper 001 Eq. 10) and the §V-C calibrations.

Paper 001 (Rodio, Chen, Larsson), Eq. (10): over R ≻ 0 (R = σ²_mix I + R_cor)

    minimize  Tr(W R Wᵀ)               (10a: the privacy-noise variance of Thm 1)
    s.t.      [R⁻¹]_ii <= b  ∀i,       b = ε² / (16 C² T log(1/δ))   (10b, via Thm 2).

The program is homogeneous — R(b) = R(1)/b — so one solve serves every ε. With
X = b·R⁻¹ it is tr(M X⁻¹) s.t. diag(X) <= 1 (M = WᵀW), the same shape as the optimal
factorization program of paper 003 with single participations, and the same dual applies:
for λ >= 0, min_R Tr(MR) + Σλ_i([R⁻¹]_ii − 1) = 2h(λ) − Σλ with
h(λ) = tr((M^½ Λ M^½)^½), attained at R(λ) = M^-½ (M^½ΛM^½)^½ M^-½; rescaling λ gives the
certified lower bound h²/Σλ, and S R(λ) S with S = diag([R(λ)⁻¹]_ii^½) is a primal point
with every constraint tight: we stop when their gap is below the tolerance (the primal is
only first-order accurate in λ, so L-BFGS, which stalls at machine precision in g, ends at
gaps of 1e-10–1e-8). Gradient ∂/∂λ_i = [R(λ)⁻¹]_ii − 1 (003 Cor 3.1 with k = 1). L-BFGS in
log λ; one n × n eigensolve per evaluation, so n = 100 plans in ~0.3 s, n = 300 in ~2.5 s and
n = 1000 in ~45 s on one core (benchmarks/whisper_planner.py); cvxpy needs 78 s at n = 50.

When W is singular (e.g. the complete graph with uniform weights, W = 11ᵀ/n) the infimum
is not attained: R_cor grows without bound in W's null space. ``ridge`` ρ adds ρ·Tr(R) to
the objective (M = WᵀW + ρI), which bounds it; reported objectives are always the plain
Tr(W R Wᵀ). :func:`optimal_covariance_cvxpy` solves the same program with cvxpy (Clarabel or
SCS; the paper used MOSEK) — the n Schur-complement LMIs of the paper or one 2n × 2n LMI
[[R, I], [I, X]] ⪰ 0 with diag(X) <= b — and validates the structured solver (tests: 1e-6).

§V-C calibrations (Fig. 1): σ²_ldp = 1/b (R = σ²I), σ²_cdp = σ²_ldp/n, DECOR's
R_pair = σ²_pair I + σ²_cor L put in (10) (a ray search over σ²_cor/σ²_pair, exact),
and σ²_mix := λ_min(R⋆), the largest independent variance every agent can add
(R⋆ − σ²_mix I ⪰ 0). λ_min(R⋆) >= 1/(n b) = σ²_cdp since λ_max(R⁻¹) <= Tr R⁻¹ <= n b.
"""

# Paper letters W, R, M, L (Laplacian), b (bound): see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize as so

from edgedp._validate import finite_array, integer, non_negative, positive
from edgedp.planning.mf_optimal import _blas_limit

__all__ = [
    "DEFAULT_RIDGE",
    "Calibration",
    "CovarianceSolution",
    "PairSolution",
    "calibrate",
    "laplacian",
    "optimal_covariance",
    "optimal_covariance_cvxpy",
    "pair_covariance",
    "pair_covariance_cvxpy",
    "privacy_bound",
]

_RESTARTS = 4
DEFAULT_RIDGE = 1e-6
"""ρ in Tr(W R Wᵀ) + ρ Tr(R): bounds the correlated variance when W is (nearly) singular."""


@dataclass(frozen=True, slots=True)
class CovarianceSolution:
    """A solution of Eq. (10).

    Attributes:
      covariance: R⋆ (n × n) with max_i [R⋆⁻¹]_ii = bound.
      objective: Tr(W R⋆ Wᵀ) (without the ridge term).
      dual_bound: certified lower bound on the (ridged) optimum.
      gap: (ridged objective − dual_bound) / dual_bound.
      independent_variance: σ²_mix = λ_min(R⋆).
      bound: b of Eq. (10b).
      ridge: ρ.
      iterations, seconds: solver effort.
      method: "dual-lbfgs" or "cvxpy:<SOLVER>".
    """

    covariance: np.ndarray
    objective: float
    dual_bound: float
    gap: float
    independent_variance: float
    bound: float
    ridge: float
    iterations: int
    seconds: float
    method: str


@dataclass(frozen=True, slots=True)
class PairSolution:
    """DECOR's calibration: R_pair = σ²_pair I + σ²_cor L with max_i [R⁻¹]_ii = bound."""

    pair_variance: float
    correlated_variance: float
    covariance: np.ndarray
    objective: float
    bound: float


@dataclass(frozen=True, slots=True)
class Calibration:
    """The four variances of paper 001 Fig. 1 at one (ε, δ, C, T) and topology."""

    ldp: float
    cdp: float
    pair: float
    correlated: float
    mix: float
    objective_ldp: float
    objective_pair: float
    objective_mix: float


def privacy_bound(*, epsilon: float, delta: float, clip_norm: float, steps: int) -> float:
    """b = ε²/(16 C² T log(1/δ)), the bound on max_i [R⁻¹]_ii of 001 Eq. (10b).

    >>> print(f"{1 / privacy_bound(epsilon=10, delta=1e-5, clip_norm=0.1, steps=5000):.4f}")
    92.1034
    """
    positive(epsilon=epsilon, clip_norm=clip_norm)
    integer(1, steps=steps)
    if not 0 < delta < 1:
        raise ValueError(f"Expected 0 < delta={delta!r} < 1.")
    return epsilon**2 / (16 * clip_norm**2 * steps * math.log(1 / delta))


def laplacian(n: int, edges) -> np.ndarray:
    """Combinatorial graph Laplacian L = Σ_{(i,j)} (e_i − e_j)(e_i − e_j)ᵀ."""
    L = np.zeros((n, n))
    for i, j in np.asarray(edges, dtype=np.int64).reshape(-1, 2):
        L[i, i] += 1
        L[j, j] += 1
        L[i, j] -= 1
        L[j, i] -= 1
    return L


def _mixing(W) -> np.ndarray:
    W = finite_array("mixing_matrix", W).astype(np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise ValueError(f"Expected mixing_matrix to be square, got shape {W.shape}.")
    return W


def _workload(W: np.ndarray, ridge: float) -> np.ndarray:
    non_negative(ridge=ridge)
    M = W.T @ W + ridge * np.eye(W.shape[0])
    return (M + M.T) / 2


class _Dual:
    """g(λ) = 2 tr((M^½ΛM^½)^½) − Σλ, its gradient and the primal point R(λ)."""

    def __init__(self, M: np.ndarray):
        m, V = np.linalg.eigh(M)
        if m[0] <= 0:
            raise ValueError("WᵀW is singular; use ridge > 0.")
        self.M = M
        self.Ms = (V * np.sqrt(m)) @ V.T
        self.Ms_inv = (V / np.sqrt(m)) @ V.T
        self.best: dict[str, Any] = {"primal": math.inf, "bound": 0.0}
        self.evaluations = 0

    def __call__(self, theta: np.ndarray):
        lam = np.exp(theta)
        k, Q = np.linalg.eigh((self.Ms * lam) @ self.Ms)
        k = np.maximum(k, 1e-300)
        h = float(np.sqrt(k).sum())
        P = ((self.Ms @ Q) ** 2) @ k**-0.5  # diag R(λ)⁻¹
        # primal point S R(λ) S with S = diag(√P): every constraint tight, priced exactly
        S = np.sqrt(P)
        Z = (S[:, None] * self.Ms_inv) @ (Q * k**0.25)  # S R(λ) S = Z Zᵀ
        primal = float(np.einsum("ij,ij->", Z, self.M @ Z))
        self.evaluations += 1
        if primal < self.best["primal"]:
            self.best.update(primal=primal, Z=Z)
        bound = h * h / float(lam.sum())
        if bound > self.best["bound"]:
            self.best.update(bound=bound, theta=theta.copy())
        g = 2 * h - float(lam.sum())
        return -g, -(lam * (P - 1.0))

    def primal(self) -> np.ndarray:
        Z = self.best["Z"]
        return Z @ Z.T


def optimal_covariance(
    mixing_matrix,
    *,
    bound: float = 1.0,
    ridge: float = DEFAULT_RIDGE,
    tolerance: float = 1e-9,
    max_iterations: int = 5000,
    blas_threads: int | None = 1,
) -> CovarianceSolution:
    """Solve 001 Eq. (10) by its dual (module docstring), with a certificate.

    Args:
      mixing_matrix: W (n × n).
      bound: b of Eq. (10b) (see :func:`privacy_bound`).
      ridge: ρ >= 0 (needs > 0 when W is singular).
      tolerance: stop at relative duality gap <= tolerance.
      max_iterations: L-BFGS iteration limit.
      blas_threads: BLAS threads during the solve (None: process default).

    Returns:
      A :class:`CovarianceSolution` whose R⋆ satisfies max_i [R⋆⁻¹]_ii = bound.

    >>> W = np.array([[0.5, 0.5, 0.0], [0.5, 0.25, 0.25], [0.0, 0.25, 0.75]])
    >>> s = optimal_covariance(W, ridge=0.0)
    >>> print(f"{s.objective:.6f} {s.gap < 1e-9} {np.trace(W @ W.T):.4f}")
    1.212953 True 1.5000
    """
    t0 = time.perf_counter()
    W = _mixing(mixing_matrix)
    positive(bound=bound, tolerance=tolerance)
    integer(1, max_iterations=max_iterations)
    M = _workload(W, ridge)
    n = W.shape[0]
    with _blas_limit(blas_threads):
        dual = _Dual(M)
        dual(np.zeros(n))
        t = dual.best["bound"] / n  # g(t·1) = 2√t·h − tn peaks at t = (h/n)² = bound/n
        theta = np.full(n, math.log(t))
        iterations = [0]

        def callback(_):
            iterations[0] += 1
            if dual.best["primal"] <= (1 + tolerance) * dual.best["bound"]:
                raise StopIteration

        for _ in range(_RESTARTS):  # L-BFGS may stop early when g is flat to rounding
            so.minimize(
                dual,
                theta,
                jac=True,
                method="L-BFGS-B",
                callback=callback,
                options={"maxiter": max_iterations, "ftol": 0.0, "gtol": 0.0, "maxcor": 30},
            )
            if dual.best["primal"] <= (1 + tolerance) * dual.best["bound"]:
                break
            theta = dual.best["theta"]
        R = dual.primal() / bound
    gap = max(dual.best["primal"] / dual.best["bound"] - 1.0, 0.0)
    return CovarianceSolution(
        covariance=R,
        objective=float(np.trace(W @ R @ W.T)),
        dual_bound=dual.best["bound"] / bound,
        gap=gap,
        independent_variance=float(np.linalg.eigvalsh(R)[0]),
        bound=float(bound),
        ridge=float(ridge),
        iterations=iterations[0],
        seconds=time.perf_counter() - t0,
        method="dual-lbfgs",
    )


def _cvxpy():
    """The cvxpy module, or an ImportError naming the extra that installs it."""
    try:
        import cvxpy
    except ImportError:
        raise ImportError(
            "cvxpy is not installed (the reference solver): pip install 'edgedp[reference]'"
        ) from None
    return cvxpy


def optimal_covariance_cvxpy(
    mixing_matrix,
    *,
    bound: float = 1.0,
    ridge: float = DEFAULT_RIDGE,
    formulation: str = "joint",
    solver: str = "CLARABEL",
) -> CovarianceSolution:
    """Eq. (10) with cvxpy (optional dependency, ``pip install 'edgedp[reference]'``).

    ``formulation="paper"``: R = σ²I + R_cor (R_cor ⪰ 0, σ² >= 0) and one Schur LMI
    [[R, e_i], [e_iᵀ, b]] ⪰ 0 per node, as in the paper; ``"joint"``: one 2n × 2n LMI
    [[R, I], [I, X]] ⪰ 0 with diag(X) <= b (X ⪰ R⁻¹), far fewer constraints. Interior-point
    cost grows like n⁶: use it to validate, up to n ≈ 50.

    Raises:
      ImportError: cvxpy is not installed (its message names the extra to install).
    """
    cp = _cvxpy()

    t0 = time.perf_counter()
    W = _mixing(mixing_matrix)
    positive(bound=bound)
    M = _workload(W, ridge)
    n = W.shape[0]
    eye = np.eye(n)
    if formulation == "paper":
        sigma2 = cp.Variable(nonneg=True)
        cor = cp.Variable((n, n), PSD=True)
        R = sigma2 * eye + cor
        cons = [
            cp.bmat([[R, eye[:, [i]]], [eye[[i], :], np.array([[bound]])]]) >> 0 for i in range(n)
        ]
    elif formulation == "joint":
        R = cp.Variable((n, n), symmetric=True)
        X = cp.Variable((n, n), symmetric=True)
        cons = [cp.bmat([[R, eye], [eye, X]]) >> 0, cp.diag(X) <= bound]
    else:
        raise ValueError(f"Unknown formulation={formulation!r}; expected 'joint' or 'paper'.")
    problem = cp.Problem(cp.Minimize(cp.trace(M @ R)), cons)
    problem.solve(solver=getattr(cp, solver))
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"cvxpy/{solver} did not solve Eq. (10): status {problem.status}.")
    Rv = np.asarray(R.value)
    Rv = (Rv + Rv.T) / 2
    return CovarianceSolution(
        covariance=Rv,
        objective=float(np.trace(W @ Rv @ W.T)),
        dual_bound=math.nan,
        gap=math.nan,
        independent_variance=float(np.linalg.eigvalsh(Rv)[0]),
        bound=float(bound),
        ridge=float(ridge),
        iterations=0,
        seconds=time.perf_counter() - t0,
        method=f"cvxpy:{solver}",
    )


def pair_covariance(
    mixing_matrix,
    laplacian_matrix,
    *,
    bound: float = 1.0,
    ridge: float = DEFAULT_RIDGE,
    grid: int = 241,
) -> PairSolution:
    """DECOR's R_pair = σ²_pair I + σ²_cor L in Eq. (10) (paper 001 §V-C), exactly.

    For a ratio τ = σ²_cor/σ²_pair the constraint is tight at
    σ²_pair = max_i Σ_k Q_ik²/(1 + τ l_k) / b (L = Q diag(l) Qᵀ); the objective
    σ²_pair (Tr M + τ Tr(M L)) is then minimized over τ >= 0 on a log grid refined by Brent.
    """
    W = _mixing(mixing_matrix)
    L = finite_array("laplacian_matrix", laplacian_matrix).astype(np.float64)
    positive(bound=bound)
    M = _workload(W, ridge)
    lam, Q = np.linalg.eigh(L)
    lam = np.maximum(lam, 0.0)
    Q2 = Q**2
    a, c = float(np.trace(M)), float(np.trace(M @ L))

    def pair(tau: float) -> float:
        return float(np.max(Q2 @ (1.0 / (1.0 + tau * lam)))) / bound

    def cost(log_tau: float) -> float:
        tau = math.exp(log_tau)
        return pair(tau) * (a + tau * c)

    logs = np.linspace(-12 * math.log(10), 12 * math.log(10), grid)
    values = np.array([cost(x) for x in logs])
    values = np.concatenate([[pair(0.0) * a], values])
    i = int(np.argmin(values))
    if i == 0:
        tau = 0.0
    else:
        lo, hi = logs[max(i - 2, 0)], logs[min(i, grid - 1)]
        res = so.minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
        tau = math.exp(res.x) if res.fun <= values[i] else math.exp(logs[i - 1])
    sp = pair(tau)
    R = sp * np.eye(W.shape[0]) + sp * tau * L
    return PairSolution(sp, sp * tau, R, float(np.trace(W @ R @ W.T)), float(bound))


def pair_covariance_cvxpy(
    mixing_matrix, laplacian_matrix, *, bound: float = 1.0, ridge: float = DEFAULT_RIDGE
) -> PairSolution:
    """The DECOR calibration with cvxpy (two scalar variables, one 2n × 2n LMI)."""
    cp = _cvxpy()

    W = _mixing(mixing_matrix)
    L = np.asarray(laplacian_matrix, dtype=np.float64)
    M = _workload(W, ridge)
    n = W.shape[0]
    eye = np.eye(n)
    sp, sc = cp.Variable(nonneg=True), cp.Variable(nonneg=True)
    X = cp.Variable((n, n), symmetric=True)
    R = sp * eye + sc * L
    problem = cp.Problem(
        cp.Minimize(cp.trace(M @ R)), [cp.bmat([[R, eye], [eye, X]]) >> 0, cp.diag(X) <= bound]
    )
    problem.solve(solver=cp.CLARABEL)
    if sp.value is None or sc.value is None:
        raise RuntimeError(f"cvxpy/CLARABEL did not calibrate DECOR: status {problem.status}.")
    sigma_private, sigma_pair = float(sp.value), float(sc.value)
    Rv = sigma_private * eye + sigma_pair * L
    return PairSolution(sigma_private, sigma_pair, Rv, float(np.trace(W @ Rv @ W.T)), float(bound))


def calibrate(
    mixing_matrix,
    edges,
    *,
    epsilon: float,
    delta: float,
    clip_norm: float,
    steps: int,
    ridge: float = DEFAULT_RIDGE,
    solution: CovarianceSolution | None = None,
) -> Calibration:
    """σ²_ldp, σ²_cdp, σ²_pair (σ²_cor), σ²_mix of paper 001 §V-C at one privacy target.

    ``solution`` (a unit-bound :func:`optimal_covariance`) may be passed to reuse a solve
    across ε (R scales as 1/b).

    >>> W = np.full((4, 4), 0.25)
    >>> cal = calibrate(W, [(0, 1), (1, 2), (2, 3), (0, 3)], epsilon=10, delta=1e-5,
    ...                 clip_norm=0.1, steps=5000, ridge=1e-3)
    >>> print(cal.cdp <= cal.mix <= cal.pair <= cal.ldp, round(cal.ldp, 3))
    True 92.103
    """
    W = _mixing(mixing_matrix)
    n = W.shape[0]
    b = privacy_bound(epsilon=epsilon, delta=delta, clip_norm=clip_norm, steps=steps)
    if solution is None:
        solution = optimal_covariance(W, bound=1.0, ridge=ridge)
    scale = solution.bound / b  # R(b) = R(b₀)·b₀/b
    pair = pair_covariance(W, laplacian(n, edges), bound=b, ridge=ridge)
    ldp = 1.0 / b
    return Calibration(
        ldp=ldp,
        cdp=ldp / n,
        pair=pair.pair_variance,
        correlated=pair.correlated_variance,
        mix=solution.independent_variance * scale,
        objective_ldp=ldp * float(np.trace(W @ W.T)),
        objective_pair=pair.objective,
        objective_mix=solution.objective * scale,
    )
