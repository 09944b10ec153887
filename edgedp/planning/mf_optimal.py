# Paper letters H (workload Gram), X = CᵀC, C, B, S, T, v: see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""Optimal temporal factorizations under (k, b)-participation, with a duality certificate.

Paper 003 (Choquette-Choo et al., ICML 2023), Eq. 5-6: for a workload Gram matrix H = AᵀA
(T × T, positive definite) find X = CᵀC ≻ 0 minimizing tr(H X⁻¹) subject to sens(C) <= 1.
The loss of any factorization A = (A C⁻¹) C is sens(C)²·‖A C⁻¹‖²_F = sens²·tr(H X⁻¹),
invariant to scaling C. Three versions of the constraint, for patterns π (``Participation``
windows over the steps, DESIGN §4):

* (P)   003 §3 / Eq. 35: X >= 0 entrywise and 1ᵀX[π,π]1 <= 1 (exact sensitivity, Eq. 3).
* (P')  paper 000 Thm 7: Σ_{s,t∈π} |X[s,t]| <= 1, valid for any X and any dimension d.
* (P_Z) X[s,t] = 0 for s ≠ t co-participating (in one window) and Σ_{s∈π} X[s,s] <= 1.
  The columns of C[:, π] are then orthogonal, so ‖C[:,π] G‖²_F = Σ X[s,s]‖g_s‖² and the
  sensitivity is exact for every d (no sign condition needed elsewhere).

P_Z ⊆ P' and P ⊆ P', so OPT(P') <= OPT(P_Z), OPT(P). We return a P_Z point; when it is also
>= 0 entrywise (prefix sums: always observed, 003 §3) it is feasible for P as well.

Dual certificate (derived here; it is Thm 3.1 / Cor 3.1 of 003 with the |X| constraint).
Let S be symmetric, supported on co-participating pairs (s, t) (s = t included), and v >= 0
one multiplier per window with |S[s,t]| <= U(v)[s,t] := Σ_{π ∋ s,t} v_π. For Y feasible for
P': tr(S Y) <= Σ_{s,t} |S[s,t]||Y[s,t]| <= Σ_π v_π Σ_{s,t∈π}|Y[s,t]| <= Σ_π v_π, and by
003 Thm 3.1 (Eq. 7), for S ≻ 0, inf_{Y≻0} tr(H Y⁻¹) + tr(S Y) = 2h(S) with
h(S) = tr((S^½ H S^½)^½), attained at Y = X(S) = S^-½ (S^½ H S^½)^½ S^-½. Hence
tr(H Y⁻¹) >= 2h(S) − Σv for every feasible Y. (S, v) → (tS, tv) keeps feasibility, and
max_t 2√t·h − tΣv = h²/Σv, so

    OPT(P) >= OPT(P') >= dual_bound := h(S)² / Σ_π v_π.

At the optimum of P_Z (Lagrangian stationarity: S = X⁻¹HX⁻¹ lives on the co-participation
pattern with S[s,s] = U(v)[s,s]) the bound is tight. When the windows partition the steps
(steps <= k·b, every epoch-style schedule) each block S[π,π] is positive definite with constant
diagonal v_π, so |S[s,t]| <= v_π holds automatically and OPT(P_Z) = OPT(P') exactly. With
overlapping windows (steps > k·b) the multipliers are repaired per class (scaling, then a
small LP at the end), the bound stays valid, and the gap says how far P_Z is from P'.

Method: L-BFGS ascent on the concave dual g(S) = 2h(S) − Σv over the free entries of S (one
v per window, the off-diagonal co-participating entries): b·k(k+1)/2 ≈ 21,000 variables for
T = 2000, (k, b) = (20, 100), instead of T²/2 primal ones. After permuting the steps by residue
mod b, S is block diagonal (k × k blocks), so S = LLᵀ, K = LᵀHL and X(S) = L⁻ᵀK^½L⁻¹ cost one
symmetric eigendecomposition plus O(T²k) work; ∂g/∂v_π = Σ_{s∈π} X[s,s] − 1 and
∂g/∂S[s,t] = 2X[s,t] (003 Cor 3.1). Each iteration also turns X(S) into a primal point:
zero its co-participating off-diagonals, rescale each step by 1/√(largest window sum through
it), and price it with one Cholesky (loss = sens²·tr(HX⁻¹) exactly). Its error is second
order in the dual error, so loss and bound close together. The L-BFGS initial inverse
Hessian is the diagonal of -½tr(E X E X) (AM-GM upper bound of the exact Daleckii-Krein
curvature). Why not the alternatives: the primal has T²/2 ill-conditioned variables and the
dense reference optimizer needs thousands of Cholesky steps (~26 min at T = 2000), and 003's
fixed point (Eq. 8) has no line search. Measured on 2 cores: T = 2000, (20, 100) reaches a
1e-3 gap in ~30 iterations (about a minute), see benchmarks/mf_optimal.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.optimize as sopt

from edgedp._validate import finite_array, integer, positive
from edgedp.accounting import sensitivity as sens_mod
from edgedp.accounting.participation import Participation

__all__ = ["Factorization", "loss", "optimize", "prefix_sum_gram"]

_MEMORY = 20  # L-BFGS pairs kept
_ARMIJO = 1e-4
_MAX_BACKTRACKS = 40


@dataclass(frozen=True, slots=True)
class Factorization:
    """An optimized factorization with its optimality certificate (paper 003, §3).

    Attributes:
        X: Gram matrix CᵀC (T × T), scaled so that sens(C) = 1.
        C: Lower-triangular strategy matrix with CᵀC = X.
        B: Decoder A C⁻¹ when the workload A was given, else None.
        loss: sens(C)²·tr(H X⁻¹) (= sens²·‖A C⁻¹‖²_F), scale invariant.
        dual_bound: Certified lower bound on the optimal loss (module docstring).
        gap: (loss − dual_bound) / dual_bound, an upper bound on the relative suboptimality.
        iterations: L-BFGS iterations run.
        seconds: Wall-clock time of the solve.
        converged: True when gap <= the requested tolerance.
    """

    X: np.ndarray
    C: np.ndarray
    B: np.ndarray | None
    loss: float
    dual_bound: float
    gap: float
    iterations: int
    seconds: float
    converged: bool


def prefix_sum_gram(steps: int) -> np.ndarray:
    """H = AᵀA for the prefix-sum workload A = lower-triangular ones (paper 003, §4).

    H[i, j] = steps − max(i, j) (0-based).

    >>> prefix_sum_gram(3)
    array([[3., 2., 1.],
           [2., 2., 1.],
           [1., 1., 1.]])
    """
    integer(1, steps=steps)
    idx = np.arange(int(steps))
    return (steps - np.maximum.outer(idx, idx)).astype(np.float64)


def _gram(name: str, H) -> np.ndarray:
    H = finite_array(name, H).astype(np.float64)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or H.shape[0] == 0:
        raise ValueError(f"Expected {name} to be a non-empty square matrix, got {H.shape}.")
    if np.max(np.abs(H - H.T)) > 1e-10 * max(np.max(np.abs(H)), 1e-300):
        raise ValueError(f"Expected {name} to be symmetric.")
    return (H + H.T) / 2


def _trace_h_xinv(C: np.ndarray, H: np.ndarray) -> float:
    """tr(H (CᵀC)⁻¹) = tr(C⁻ᵀ H C⁻¹) for square invertible C."""
    if not np.any(np.triu(C, 1)):
        Y = sla.solve_triangular(C, H, trans="T", lower=True)
        Z = sla.solve_triangular(C, Y.T, trans="T", lower=True)
    else:
        Z = np.linalg.solve(C.T, np.linalg.solve(C.T, H).T)
    return float(np.trace(Z))


def loss(strategy, workload_gram, participation: Participation) -> float:
    """Loss sens(C)²·tr(H (CᵀC)⁻¹) of a strategy C under (k, b)-participation (003, Eq. 4).

    With the optimal decoder B = A C⁻¹ this is sens²·‖B‖²_F, the total noise variance of
    the workload at unit noise multiplier (sensitivity: paper 000 Thm 7, squared form).

    Args:
        strategy: C, square (T × T) and invertible (lower triangular in practice).
        workload_gram: H = AᵀA, T × T symmetric.
        participation: The (k, b) participation schema.

    Returns:
        The loss as a float.

    Raises:
        ValueError: On shape mismatch or non-finite input.
        TypeError: If participation is not a Participation.

    >>> T = 4
    >>> loss(np.eye(T), prefix_sum_gram(T), Participation(2, 2))  # k·tr(H) = 2·10
    20.0
    """
    if not isinstance(participation, Participation):
        raise TypeError(f"Expected participation to be a Participation, got {participation!r}.")
    H = _gram("workload_gram", workload_gram)
    C = finite_array("strategy", strategy).astype(np.float64)
    if C.shape != H.shape:
        raise ValueError(f"Expected strategy of shape {H.shape}, got {C.shape}.")
    s = sens_mod.sensitivity(C, participation).value
    return s * s * _trace_h_xinv(C, H)


@dataclass(frozen=True, slots=True)
class _Group:
    """Residue classes with one window layout; block (c, m, m) starts at ``offset``."""

    offset: int
    n: int  # classes
    m: int  # steps per class
    member: np.ndarray  # (windows, m) 0/1: which class positions each window covers
    pi: np.ndarray  # co-participating pairs i < j within a class
    pj: np.ndarray
    pair_member: np.ndarray  # (windows, pairs): windows containing both


def _layout(part: Participation, T: int):
    """Permutation grouping steps by residue mod b, and the per-group window structure."""
    by_class: dict[int, list[tuple[int, int]]] = {}
    for p in part.patterns(T):
        by_class.setdefault(int(p[0]) % part.b, []).append((int(p[0]) // part.b, p.size))
    keyed: dict[tuple, list[int]] = {}
    for r in range(min(part.b, T)):
        m = len(range(r, T, part.b))
        keyed.setdefault((m, tuple(sorted(by_class[r]))), []).append(r)
    perm, groups, offset = [], [], 0
    for (m, windows), classes in keyed.items():
        member = np.zeros((len(windows), m))
        for w, (s, length) in enumerate(windows):
            member[w, s : s + length] = 1.0
        pi, pj = np.nonzero(np.triu(member.T @ member, 1))
        groups.append(_Group(offset, len(classes), m, member, pi, pj, member[:, pi] * member[:, pj]))
        perm += [np.arange(r, T, part.b) for r in classes]
        offset += len(classes) * m
    return np.concatenate(perm), groups


def _window_sums(blocks: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Σ_{s,t∈w} blocks[c, s, t] for every class c and window w → (classes, windows)."""
    return np.einsum("wm,cmk,wk->cw", member, blocks, member, optimize=True)


class _Dual:
    """Evaluates the dual g(S), its gradient, the certificate and a primal point."""

    def __init__(self, H: np.ndarray, part: Participation):
        self.T = H.shape[0]
        self.perm, self.groups = _layout(part, self.T)
        self.Hp = H[np.ix_(self.perm, self.perm)]
        self.Hp_chol = np.linalg.cholesky(self.Hp)
        sizes = [(g.n * g.member.shape[0], g.n * g.pi.size) for g in self.groups]
        self.slices, start = [], 0
        for nv, nb in sizes:
            self.slices.append((slice(start, start + nv), slice(start + nv, start + nv + nb)))
            start += nv + nb
        self.size = start
        rows = [g.offset + c * g.m + g.pi for g in self.groups for c in range(g.n)]
        cols = [g.offset + c * g.m + g.pj for g in self.groups for c in range(g.n)]
        self.band_rows, self.band_cols = np.concatenate(rows), np.concatenate(cols)

    def start(self) -> np.ndarray:
        theta = np.zeros(self.size)
        for sv, _ in self.slices:
            theta[sv] = 1.0
        return theta

    def evaluate(self, theta: np.ndarray) -> dict | None:
        T, out = self.T, {}
        parts = []
        for g, (sv, sb) in zip(self.groups, self.slices, strict=True):
            v = theta[sv].reshape(g.n, -1)
            band = theta[sb].reshape(g.n, -1)
            S = np.zeros((g.n, g.m, g.m))
            idx = np.arange(g.m)
            S[:, idx, idx] = v @ g.member
            S[:, g.pi, g.pj] = band
            S[:, g.pj, g.pi] = band
            try:
                L = np.linalg.cholesky(S)
            except np.linalg.LinAlgError:
                return None  # outside the domain S ≻ 0
            parts.append((g, v, band, L))
        HL = np.empty_like(self.Hp)
        K = np.empty_like(self.Hp)
        for g, _, _, L in parts:
            cols = slice(g.offset, g.offset + g.n * g.m)
            HL[:, cols] = np.einsum("tcm,cmk->tck", self.Hp[:, cols].reshape(T, g.n, g.m), L)
        for g, _, _, L in parts:
            rows = slice(g.offset, g.offset + g.n * g.m)
            K[rows] = np.einsum("cmk,cmt->ckt", L, HL[rows].reshape(g.n, g.m, T)).reshape(-1, T)
        K = (K + K.T) / 2
        w, Q = sla.eigh(K, overwrite_a=True, check_finite=False, driver="evd")
        w = np.maximum(w, 0.0)
        h = float(np.sqrt(w).sum())
        Z = Q * w**0.25  # K^½ = Z Zᵀ; X(S) = L⁻ᵀ Z Zᵀ L⁻¹
        grads, pre, v_total, v_fixed, sens_abs = [], [], 0.0, 0.0, 0.0
        for g, v, band, L in parts:
            rows = slice(g.offset, g.offset + g.n * g.m)
            Linv = np.linalg.inv(L)
            Z[rows] = np.einsum("ckm,ckt->cmt", Linv, Z[rows].reshape(g.n, g.m, T)).reshape(-1, T)
            Zb = Z[rows].reshape(g.n, g.m, T)
            Xb = Zb @ Zb.transpose(0, 2, 1)
            dX = np.einsum("cmm->cm", Xb)
            grads += [(dX @ g.member.T - 1.0).ravel(), 2.0 * Xb[:, g.pi, g.pj].ravel()]
            pre += [
                (2.0 / _window_sums(Xb**2, g.member)).ravel(),
                (1.0 / (dX[:, g.pi] * dX[:, g.pj] + Xb[:, g.pi, g.pj] ** 2)).ravel(),
            ]
            sens_abs = max(sens_abs, float(_window_sums(np.abs(Xb), g.member).max()))
            # Certificate: scale each class's multipliers until |S| <= U(v) on its pairs.
            need = np.ones(g.n)
            if g.pi.size:
                U = v @ g.pair_member
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(band == 0, 0.0, np.abs(band) / U)
                need = np.maximum(need, ratio.max(axis=1))
            v_total += float(v.sum())
            v_fixed += float((need * v.sum(axis=1)).sum())
        out.update(h=h, g=2 * h - v_total, grad=np.concatenate(grads), pre=np.concatenate(pre))
        out["bound"] = h * h / v_fixed if np.isfinite(v_fixed) and v_fixed > 0 else 0.0
        X = Z @ Z.T
        out["candidates"] = [(h * sens_abs, X / sens_abs)]  # X(S) itself (Thm 7, |X| sums)
        projected = self._project(X)
        if projected is not None:
            out["candidates"].append(projected)
        out["theta"] = theta
        return out

    def _project(self, X: np.ndarray):
        """Zero co-participating off-diagonals, rescale steps, price exactly; None if not PD."""
        X[self.band_rows, self.band_cols] = 0.0
        X[self.band_cols, self.band_rows] = 0.0
        d = np.diag(X).copy()
        scale = np.empty(self.T)
        for g in self.groups:
            rows = slice(g.offset, g.offset + g.n * g.m)
            sums = d[rows].reshape(g.n, g.m) @ g.member.T  # (classes, windows)
            through = np.max(sums[:, :, None] * g.member[None], axis=1)
            scale[rows] = (1.0 / np.sqrt(through)).ravel()
        X *= np.outer(scale, scale)
        try:
            Lx = sla.cholesky(X, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            return None
        W = sla.solve_triangular(Lx, self.Hp_chol, lower=True, check_finite=False)
        d = np.diag(X)
        sens2 = max(float((d[g.offset : g.offset + g.n * g.m].reshape(g.n, g.m) @ g.member.T).max())
                    for g in self.groups)
        return sens2 * float(np.einsum("ij,ij->", W, W)), X / sens2

    def lp_bound(self, theta: np.ndarray, h: float) -> float:
        """Certificate with the smallest Σv for S (per-class LP, then an exact repair)."""
        total = 0.0
        for g, (sv, sb) in zip(self.groups, self.slices, strict=True):
            v = theta[sv].reshape(g.n, -1)
            band = np.abs(theta[sb].reshape(g.n, -1))
            A_ub = -np.hstack([g.member, g.pair_member]).T
            for c in range(g.n):
                need = np.concatenate([v[c] @ g.member, band[c]])
                res = sopt.linprog(np.ones(A_ub.shape[1]), A_ub=A_ub, b_ub=-need,
                                   bounds=(0, None), method="highs")
                x = res.x if res.status == 0 else v[c]
                have = -A_ub @ x
                with np.errstate(divide="ignore", invalid="ignore"):
                    fix = np.max(np.where(need > 0, need / have, 0.0))
                total += float(x.sum()) * max(fix, 1.0) if np.isfinite(fix) else np.inf
        return h * h / total if 0 < total < np.inf else 0.0


def _direction(grad: np.ndarray, pre: np.ndarray, pairs: list) -> np.ndarray:
    """L-BFGS two-loop recursion for minimizing −g, initial inverse Hessian γ·diag(pre)."""
    q, alphas = grad.copy(), []
    for s, y in reversed(pairs):
        a = (s @ q) / (y @ s)
        alphas.append(a)
        q -= a * y
    gamma = 1.0
    if pairs:
        s, y = pairs[-1]
        gamma = (s @ y) / (y @ (pre * y))
    q *= gamma * pre
    for (s, y), a in zip(pairs, reversed(alphas), strict=True):
        q += s * (a - (y @ q) / (y @ s))
    return -q


def optimize(
    workload_gram,
    *,
    participation: Participation,
    workload=None,
    max_iterations: int = 1000,
    tolerance: float = 1e-4,
    progress: Callable[[int, float, float], None] | None = None,
) -> Factorization:
    """Optimal strategy C for the workload Gram H under (k, b)-participation (003, Eq. 5-6).

    Solves the dual of Thm 3.1 / Cor 3.1 (with Thm 7 sensitivity) by L-BFGS and returns the
    best primal point found, which has orthogonal columns within every participation window
    (exact sensitivity), with a certified lower bound on the optimal loss (module docstring).

    Args:
        workload_gram: H = AᵀA, T × T symmetric positive definite (prefix sums, MAFALDA, …).
        participation: The (k, b) participation schema over the T steps.
        workload: Optional A (q × T) with AᵀA = H; then the decoder B = A C⁻¹ is returned.
        max_iterations: L-BFGS iteration limit (>= 1).
        tolerance: Stop when (loss − dual_bound)/dual_bound <= tolerance (> 0).
        progress: Called as progress(iteration, loss, dual_bound) with the best values so far
            after the start point (iteration 0) and every iteration. Nothing is printed.

    Returns:
        A :class:`Factorization` (X scaled to sensitivity 1, C lower triangular, CᵀC = X).

    Raises:
        TypeError: If participation is not a Participation or an integer argument is not int.
        ValueError: If H is not finite, symmetric and positive definite, or A does not match.

    >>> f = optimize(prefix_sum_gram(6), participation=Participation(3, 2), tolerance=1e-8)
    >>> print(f"{f.loss:.3f} {f.gap < 1e-8}")  # 003 App. I.3, Table 6: error 6.461 = √41.74
    41.743 True
    """
    t0 = time.perf_counter()
    if not isinstance(participation, Participation):
        raise TypeError(f"Expected participation to be a Participation, got {participation!r}.")
    integer(1, max_iterations=max_iterations)
    positive(tolerance=tolerance)
    H = _gram("workload_gram", workload_gram)
    T = H.shape[0]
    A = None
    if workload is not None:
        A = finite_array("workload", workload).astype(np.float64)
        if A.ndim != 2 or A.shape[1] != T:
            raise ValueError(f"Expected workload with {T} columns, got shape {A.shape}.")
        if np.max(np.abs(A.T @ A - H)) > 1e-8 * np.max(np.abs(H)):
            raise ValueError("Expected workload A with AᵀA = workload_gram.")
    try:
        dual = _Dual(H, participation)
    except np.linalg.LinAlgError:
        raise ValueError(
            "Expected workload_gram to be positive definite (Cholesky failed); "
            "add a small ridge, e.g. H + 1e-9·tr(H)/T·I."
        ) from None

    state = dual.evaluate(dual.start())
    scale = (state["h"] / (state["h"] - state["g"] / 2)) ** 2  # optimal t for S → tS
    state = dual.evaluate(dual.start() * scale)
    best = {"loss": np.inf, "X": None, "bound": 0.0, "theta": None, "h": 0.0}

    def record(st):
        for value, X in st["candidates"]:
            if value < best["loss"]:
                best["loss"], best["X"] = value, X
        if st["bound"] > best["bound"]:
            best.update(bound=st["bound"], theta=st["theta"], h=st["h"])

    def gap() -> float:
        return best["loss"] / best["bound"] - 1.0 if best["bound"] > 0 else np.inf

    record(state)
    if progress is not None:
        progress(0, best["loss"], best["bound"])
    pairs: list = []
    iteration = 0
    while gap() > tolerance and iteration < max_iterations:
        iteration += 1
        theta, f, grad = state["theta"], -state["g"], -state["grad"]
        d = _direction(grad, state["pre"], pairs)
        slope = grad @ d
        if slope >= 0:  # not a descent direction: restart from the preconditioned gradient
            pairs.clear()
            d = -state["pre"] * grad
            slope = grad @ d
        step, trial = 1.0, None
        for _ in range(_MAX_BACKTRACKS):
            trial = dual.evaluate(theta + step * d)
            if trial is not None and -trial["g"] <= f + _ARMIJO * step * slope:
                break
            step *= 0.5 if trial is not None else 0.25
            trial = None
        if trial is None:
            break  # no progress possible at floating-point resolution
        s, y = trial["theta"] - theta, state["grad"] - trial["grad"]
        if s @ y > 1e-12 * np.sqrt((s @ s) * (y @ y)):
            pairs = (pairs + [(s, y)])[-_MEMORY:]
        state = trial
        record(state)
        if progress is not None:
            progress(iteration, best["loss"], best["bound"])

    if gap() > tolerance and best["theta"] is not None:
        best["bound"] = max(best["bound"], dual.lp_bound(best["theta"], best["h"]))
    X = np.empty_like(H)
    X[np.ix_(dual.perm, dual.perm)] = best["X"]
    X = (X + X.T) / 2
    C = np.linalg.cholesky(X[::-1, ::-1]).T[::-1, ::-1]  # lower triangular, CᵀC = X
    sens2 = sens_mod.from_gram(X, participation.patterns(T)).value ** 2
    trace = float(np.sum(sla.solve_triangular(C, dual.Hp_chol[np.argsort(dual.perm)][:, :],
                                               trans="T", lower=True) ** 2))
    final = sens2 * trace
    B = None if A is None else sla.solve_triangular(C, A.T, trans="T", lower=True).T
    bound = best["bound"]
    final_gap = final / bound - 1.0 if bound > 0 else np.inf
    return Factorization(
        X=X, C=C, B=B, loss=final, dual_bound=bound, gap=final_gap, iterations=iteration,
        seconds=time.perf_counter() - t0, converged=bool(final_gap <= tolerance),
    )
