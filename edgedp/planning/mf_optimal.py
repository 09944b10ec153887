# Paper letters H (workload Gram), X = CᵀC, C, B, S, T, v: see docs/NOTATION.md.
# ruff: noqa: N803, N806
"""Optimal temporal factorizations under (k, b)-participation, with a duality certificate.

Paper 003 (Choquette-Choo et al., ICML 2023), Eq. 5-6: for a workload Gram matrix H = AᵀA
(T × T, positive definite) minimize tr(H X⁻¹) over X = CᵀC ≻ 0 with sens(C) <= 1; the loss
sens(C)²·‖A C⁻¹‖²_F = sens²·tr(H X⁻¹) is scale invariant. Windows π are the maximal
``Participation.patterns``; "co-participating" pairs (s, t) lie in a common window. Programs:

* (P)   003 Eq. 35: X >= 0 everywhere and 1ᵀX[π,π]1 <= 1 (exact sensitivity, 003 Eq. 3).
* (P36) 003 Eq. 36: the same with X >= 0 only on co-participating pairs (P ⊆ P36).
* (P')  paper 000 Thm 7: Σ_{s,t∈π} |X[s,t]| <= 1, no sign condition.
* (P_Z) X[s,t] = 0 for co-participating s ≠ t, Σ_{s∈π} X[s,s] <= 1. C[:, π] then has
  orthogonal columns, ‖C[:,π] G‖²_F = Σ_s X[s,s]‖g_s‖², so sens is exact for every d.

Certificate (derived here from 003 Thm 3.1). Let S be symmetric, zero off the co-participating
pairs, and v >= 0 (one per window) with S[s,t] <= U(v)[s,t] := Σ_{π∋s,t} v_π. If Y is feasible
for P36 then tr(SY) <= Σ U[s,t]·Y[s,t] = Σ_π v_π 1ᵀY[π,π]1 <= Σv, and by 003 Thm 3.1 (Eq. 7)
inf_{Y≻0} tr(HY⁻¹) + tr(SY) = 2h(S), h(S) = tr((S^½HS^½)^½), attained at
X(S) = S^-½(S^½HS^½)^½S^-½. So tr(HY⁻¹) >= 2h(S) − Σv; rescaling (S, v) by t and maximizing
2√t·h − tΣv gives

    OPT(P) >= OPT(P36) >= dual_bound := h(S)² / Σ_π v_π.

When the windows partition the steps (steps <= k·b: epochs) each block S[π,π] ≻ 0 has
constant diagonal v_π, so |S[s,t]| <= v_π and the same chain with |Y[s,t]| bounds OPT(P')
too; stationarity then forces X[s,t] = 0 on co-participating pairs (003 Fig. 2), hence
OPT(P_Z) = OPT(P') = OPT(P36) <= OPT(P), with equality when that optimum is >= 0 (prefix
sums, 003 §3; not momentum, Table 6). We return a P_Z point there, and one with X >= 0 when
that costs less than the tolerance. For overlapping windows (steps > k·b) we solve P36: S =
U(v) − M with M >= 0, and primal points either zero or clip the co-participating entries.

Method: projected L-BFGS ascent on the concave dual g = 2h(S) − Σv over the free entries of
S: b·k(k+1)/2 ≈ 21,000 variables for T = 2000, (k, b) = (20, 100), instead of T²/2 primal
ones. Grouping the steps by residue mod b makes S block diagonal (k × k blocks), so with
S = LLᵀ, K = LᵀHL and X(S) = L⁻ᵀK^½L⁻¹ an iteration costs one T × T symmetric eigensolve plus
O(T²k); ∂g/∂v_π = Σ_{s∈π} X[s,s] − 1 and ∂g/∂S[s,t] = 2X[s,t] (003 Cor 3.1). Each iterate
also yields a primal point (co-participating entries of X(S) zeroed, step s rescaled by
1/√(largest window sum through s)) priced exactly with one Cholesky; its error is second
order in the dual error, so loss and bound close together. The initial inverse Hessian is
the diagonal of ½tr(EXEX) (an AM-GM upper bound of the Daleckii-Krein curvature). Not chosen:
primal descent (T²/2 ill-conditioned variables: the dense reference optimizer needs ~26 min
at T = 2000 on 2 cores) and 003's fixed point Eq. 8 (no line search). Here T = 2000,
(20, 100) reaches a 1e-3 gap in ~30 iterations (benchmarks/mf_optimal.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla

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
    >>> print(f"{loss(np.eye(T), prefix_sum_gram(T), Participation(2, 2)):.6f}")  # k·tr(H)
    20.000000
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
        groups.append(
            _Group(offset, len(classes), m, member, pi, pj, member[:, pi] * member[:, pj])
        )
        perm += [np.arange(r, T, part.b) for r in classes]
        offset += len(classes) * m
    return np.concatenate(perm), groups


def _window_sums(blocks: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Σ_{s,t∈w} blocks[c, s, t] for every class c and window w → (classes, windows)."""
    return np.einsum("wm,cmk,wk->cw", member, blocks, member, optimize=True)


class _Dual:
    """The dual g(S) = 2h(S) − Σv in block coordinates, its certificate and primal points.

    Per class block (steps r, r + b, … after the permutation), S has diagonal U(v) and, on the
    co-participating pairs, free entries when one window covers the class (partition case),
    else S = U(v) − M with M >= 0 (so that S <= U(v) holds by construction).
    """

    def __init__(self, H: np.ndarray, part: Participation):
        self.T = H.shape[0]
        self.perm, self.groups = _layout(part, self.T)
        self.overlap = any(g.member.shape[0] > 1 for g in self.groups)
        self.Hp = H[np.ix_(self.perm, self.perm)]
        self.Hp_chol = np.linalg.cholesky(self.Hp)
        self.slices, lower, start = [], [], 0
        for g in self.groups:
            nv, nb = g.n * g.member.shape[0], g.n * g.pi.size
            self.slices.append((slice(start, start + nv), slice(start + nv, start + nv + nb)))
            lower += [np.zeros(nv), np.full(nb, 0.0 if g.member.shape[0] > 1 else -np.inf)]
            start += nv + nb
        self.lower = np.concatenate(lower)
        self.blocks = [
            g.offset + g.m * np.arange(g.n)[:, None] + np.arange(g.m) for g in self.groups
        ]
        rows = [
            (i[:, g.pi].ravel(), i[:, g.pj].ravel())
            for g, i in zip(self.groups, self.blocks, strict=True)
        ]
        self.band_rows = np.concatenate([r for r, _ in rows])
        self.band_cols = np.concatenate([c for _, c in rows])

    def start(self) -> np.ndarray:
        """v = 1 per window and S zero off the diagonal."""
        theta = np.zeros(self.size)
        for g, (sv, sb) in zip(self.groups, self.slices, strict=True):
            theta[sv] = 1.0
            if g.member.shape[0] > 1:
                theta[sb] = np.tile(g.pair_member.sum(axis=0), g.n)  # M = U(v)
        return theta

    @property
    def size(self) -> int:
        return self.lower.size

    def _blocks(self, theta: np.ndarray):
        for g, (sv, sb) in zip(self.groups, self.slices, strict=True):
            v = theta[sv].reshape(g.n, -1)
            band = theta[sb].reshape(g.n, -1)
            if g.member.shape[0] > 1:
                band = v @ g.pair_member - band
            S = np.zeros((g.n, g.m, g.m))
            idx = np.arange(g.m)
            S[:, idx, idx] = v @ g.member
            S[:, g.pi, g.pj] = band
            S[:, g.pj, g.pi] = band
            yield g, v, S

    def evaluate(self, theta: np.ndarray) -> dict | None:
        """Dual value, gradient, preconditioner, certificate and primal candidates at θ."""
        T, parts = self.T, []
        for g, v, S in self._blocks(theta):
            try:
                parts.append((g, v, np.linalg.cholesky(S)))
            except np.linalg.LinAlgError:
                return None  # outside the domain S ≻ 0
        K = np.empty_like(self.Hp)
        for (g, _, L), idx in zip(parts, self.blocks, strict=True):  # K = Lᵀ Hp L, blockwise
            cols = slice(idx[0, 0], idx[-1, -1] + 1)
            HL = self.Hp[:, cols].reshape(T, g.n, g.m).transpose(1, 0, 2) @ L
            K[:, cols] = HL.transpose(1, 0, 2).reshape(T, -1)
        for (g, _, L), idx in zip(parts, self.blocks, strict=True):
            rows = slice(idx[0, 0], idx[-1, -1] + 1)
            K[rows] = (L.transpose(0, 2, 1) @ K[rows].reshape(g.n, g.m, T)).reshape(-1, T)
        w, Q = sla.eigh(K, overwrite_a=True, check_finite=False, driver="evd")  # lower half
        w = np.maximum(w, 0.0)
        h = float(np.sqrt(w).sum())
        Z = Q * w**0.25  # K^½ = Z Zᵀ, X(S) = L⁻ᵀ Z Zᵀ L⁻¹
        grads, pre, v_total, sens_abs = [], [], 0.0, 0.0
        for (g, v, L), idx in zip(parts, self.blocks, strict=True):
            rows = slice(idx[0, 0], idx[-1, -1] + 1)
            Zb = np.linalg.inv(L).transpose(0, 2, 1) @ Z[rows].reshape(g.n, g.m, T)
            Z[rows] = Zb.reshape(-1, T)
            Xb = Zb @ Zb.transpose(0, 2, 1)
            dX, Xp = np.einsum("cmm->cm", Xb), Xb[:, g.pi, g.pj]
            if g.member.shape[0] > 1:  # ∂g/∂v_w = 1ᵀX[w,w]1 − 1, ∂g/∂M = −2X
                sums = _window_sums(Xb, g.member)
                grads += [(sums - 1.0).ravel(), -2.0 * Xp.ravel()]
                pre_v = 2.0 / sums**2
            else:  # ∂g/∂v_π = Σ_{s∈π} X[s,s] − 1, ∂g/∂S[s,t] = 2X[s,t]  (003 Cor 3.1)
                grads += [(dX @ g.member.T - 1.0).ravel(), 2.0 * Xp.ravel()]
                pre_v = 2.0 / _window_sums(Xb**2, g.member)
            pre += [pre_v.ravel(), (1.0 / (dX[:, g.pi] * dX[:, g.pj] + Xp**2)).ravel()]
            sens_abs = max(sens_abs, float(_window_sums(np.abs(Xb), g.member).max()))
            v_total += float(v.sum())
        X = Z @ Z.T
        del Z, Q
        modes = ("zero", "clip") if self.overlap else ("zero",)
        candidates = [(True, *c) for c in (self._project(X.copy(), m) for m in modes) if c]
        if not candidates:  # X(S) itself, priced with Thm 7 (|X| sums): valid, maybe not exact
            candidates.append((False, h * sens_abs, X / sens_abs))
        return {
            "theta": theta,
            "h": h,
            "g": 2 * h - v_total,
            "v_total": v_total,
            "grad": np.concatenate(grads),
            "pre": np.concatenate(pre),
            "bound": h * h / v_total,
            "candidates": candidates,
        }

    def _project(self, X: np.ndarray, mode: str):
        """Primal point from X(S): co-participating off-diagonals set to 0 ("zero") or
        clipped at 0 ("clip"), then priced (see ``price``)."""
        band = X[self.band_rows, self.band_cols]
        X[self.band_rows, self.band_cols] = 0.0 if mode == "zero" else np.maximum(band, 0.0)
        X[self.band_cols, self.band_rows] = X[self.band_rows, self.band_cols]
        return self.price(X)

    def price(self, X: np.ndarray):
        """Rescale step s by 1/√(largest window sum through s) so every window sums to <= 1,
        then return (sens²·tr(Hp X⁻¹), X / sens²) — exact when no co-participating entry is
        negative — or None if X is not positive definite. Overwrites X."""
        scale = np.empty(self.T)
        for g, idx in zip(self.groups, self.blocks, strict=True):
            sums = _window_sums(X[idx[:, :, None], idx[:, None, :]], g.member)
            scale[idx] = 1.0 / np.sqrt(np.max(sums[:, :, None] * g.member[None], axis=1))
        X *= scale[:, None]
        X *= scale
        try:
            Lx = sla.cholesky(X, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            return None
        W = sla.solve_triangular(Lx, self.Hp_chol, lower=True, check_finite=False)
        sens2 = max(
            float(_window_sums(X[idx[:, :, None], idx[:, None, :]], g.member).max())
            for g, idx in zip(self.groups, self.blocks, strict=True)
        )
        return sens2 * float(np.einsum("ij,ij->", W, W)), X / sens2


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


def _blas_limit(threads: int | None):
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: the limit is only a speed hint
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


def _solve(dual: _Dual, max_iterations: int, tolerance: float, progress) -> tuple[dict, int]:
    """Projected L-BFGS ascent on g over θ >= lower; keeps the best primal and bound."""
    state: dict[str, Any] | None = dual.evaluate(dual.start())
    assert state is not None  # the starting point is positive definite
    scale = (state["h"] / state["v_total"]) ** 2  # g(tS) = 2√t·h − tΣv is largest here
    state = dual.evaluate(dual.start() * scale)
    assert state is not None  # a positive multiple of the start
    best: dict[str, Any] = {"key": (True, np.inf), "loss": np.inf, "X": None, "bound": 0.0}

    def record(st) -> None:  # a point with exact sensitivity beats any point without
        for exact, value, X in st.pop("candidates"):
            if (not exact, value) < best["key"]:
                best.update(key=(not exact, value), loss=value, X=X)
        best["bound"] = max(best["bound"], st["bound"])

    def done() -> bool:
        """Gap within tolerance; prefers X >= 0 (feasible for 003 Eq. 35 too): a point
        whose clipped copy misses the tolerance by less than 10× is refined further."""
        if best["loss"] > (1 + tolerance) * best["bound"]:
            return False
        if best["key"][0] or best["X"].min() >= 0:
            return True
        clipped = dual.price(np.maximum(best["X"], 0.0))
        if clipped is not None and clipped[0] <= (1 + tolerance) * best["bound"]:
            best.update(key=(False, clipped[0]), loss=clipped[0], X=clipped[1])
            return True
        return clipped is None or clipped[0] > (1 + 10 * tolerance) * best["bound"]

    record(state)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    iteration = 0
    if progress is not None:
        progress(0, best["loss"], best["bound"])
    while iteration < max_iterations and not done():
        iteration += 1
        theta, f, grad = state["theta"], -state["g"], -state["grad"]
        free = (theta > dual.lower) | (grad < 0)  # bounds bind only for overlapping windows
        d = _direction(grad * free, state["pre"], pairs) * free
        if grad @ d >= 0:  # not a descent direction: restart from the preconditioned gradient
            pairs.clear()
            d = -state["pre"] * grad * free
        step, trial = 1.0, None
        for _ in range(_MAX_BACKTRACKS):
            candidate = np.maximum(theta + step * d, dual.lower)
            trial = dual.evaluate(candidate)
            if trial is not None and -trial["g"] <= f + _ARMIJO * (grad @ (candidate - theta)):
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
    return best, iteration


def optimize(
    workload_gram,
    *,
    participation: Participation,
    workload=None,
    max_iterations: int = 1000,
    tolerance: float = 1e-4,
    progress: Callable[[int, float, float], None] | None = None,
    blas_threads: int | None = 1,
) -> Factorization:
    """Optimal strategy C for the workload Gram H under (k, b)-participation (003, Eq. 5-6).

    Solves the dual of 003 Thm 3.1 / Cor 3.1 (with paper 000 Thm 7 sensitivity) by L-BFGS
    and returns the best primal point found — columns orthogonal within every participation
    window, so the sensitivity is exact — with a certified lower bound on the optimal loss
    (module docstring). Among equally good points one with X >= 0 is preferred.

    Args:
        workload_gram: H = AᵀA, T × T symmetric positive definite (prefix sums, MAFALDA, …).
        participation: The (k, b) participation schema over the T steps.
        workload: Optional A (q × T) with AᵀA = H; then the decoder B = A C⁻¹ is returned.
        max_iterations: L-BFGS iteration limit (>= 1).
        tolerance: Stop when (loss − dual_bound)/dual_bound <= tolerance (> 0).
        progress: Called as progress(iteration, loss, dual_bound) with the best values so far
            after the start point (iteration 0) and every iteration. Nothing is printed.
        blas_threads: BLAS threads during the solve (via threadpoolctl when installed; None
            keeps the process setting). OpenBLAS's threaded symmetric eigensolver was 50×
            slower than one thread on the 2-core development machine under load.

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
    if blas_threads is not None:
        integer(1, blas_threads=blas_threads)
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
    with _blas_limit(blas_threads):
        try:
            dual = _Dual(H, participation)
        except np.linalg.LinAlgError:
            raise ValueError(
                "Expected workload_gram to be positive definite (Cholesky failed); "
                "add a small ridge, e.g. H + 1e-9·tr(H)/T·I."
            ) from None
        best, iterations = _solve(dual, max_iterations, tolerance, progress)
        X = np.empty_like(H)
        X[np.ix_(dual.perm, dual.perm)] = best["X"]
        X = (X + X.T) / 2
        C = np.linalg.cholesky(X[::-1, ::-1]).T[::-1, ::-1]  # lower triangular, CᵀC = X
        sens2 = sens_mod.from_gram(X, participation.patterns(T)).value ** 2
        factor = dual.Hp_chol[np.argsort(dual.perm)]  # H = factor·factorᵀ
        final = sens2 * float(np.sum(sla.solve_triangular(C, factor, trans="T", lower=True) ** 2))
        B = None if A is None else sla.solve_triangular(C, A.T, trans="T", lower=True).T
    gap = final / best["bound"] - 1.0
    return Factorization(
        X=X,
        C=C,
        B=B,
        loss=final,
        dual_bound=best["bound"],
        gap=gap,
        iterations=iterations,
        seconds=time.perf_counter() - t0,
        converged=bool(gap <= tolerance),
    )
