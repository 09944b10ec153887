"""Engines of the PNDP accountant: victim Gram blocks X_vv = M̃_vᵀ K⁻¹ M̃_v (see ``pndp``).

Private module; :mod:`edgedp.accounting.pndp` documents the derivation. ``statespace_grams``
is the fast path (C = I; Toeplitz strategies are reduced to it by the caller), ``dense_grams``
the general one. Both take node lists already split into observed (O), hidden (U, whose
messages the observer must infer) and noisy (nodes whose inputs the observer does not know).
"""

# Paper letters W, C, K, S, P, U, O, X, F, G; see docs/NOTATION.md.
# ruff: noqa: N803, N806, E741

from __future__ import annotations

import numpy as np

__all__ = ["dense_grams", "statespace_grams"]

STEADY = 1e-15  # relative change at which the Kalman gain counts as stationary
_DENSE_CHUNK = 1 << 22  # floats of M̃ columns built at once by the dense engine


def _riccati(WOU, WUU, T: int, steady: bool):
    """Kalman recursion. Returns S⁻¹, K, F for t < t_s (and index t_s), and t_s.

    With ``steady``, stops at the first t whose gain and S⁻¹ repeat the previous ones to
    ``STEADY`` (relative); index t_s then holds the values of every t >= t_s. Else t_s = T.
    """
    m, u = WOU.shape
    Sinv, K, F = [], [], []
    P = np.zeros((u, u))
    for t in range(T):
        G = WUU @ P @ WOU.T
        S = WOU @ P @ WOU.T + np.eye(m)
        if np.linalg.eigvalsh(S)[0] < 1.0 - 1e-6:  # S ⪰ I in exact arithmetic
            raise FloatingPointError(f"innovation covariance lost definiteness at t={t}")
        Si = np.linalg.inv(S)
        Si = 0.5 * (Si + Si.T)
        Kt = G @ Si
        Sinv.append(Si)
        K.append(Kt)
        F.append(WUU - Kt @ WOU)
        if steady and t and _close(Kt, K[-2]) and _close(Si, Sinv[-2]):
            return np.array(Sinv), np.array(K), np.array(F), t
        P = WUU @ P @ WUU.T + np.eye(u) - Kt @ G.T
        P = 0.5 * (P + P.T)
    return np.array(Sinv), np.array(K), np.array(F), T


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.abs(a - b).max(initial=0.0) <= STEADY * np.abs(a).max(initial=0.0))


def _lyapunov(F: np.ndarray, Q: np.ndarray) -> np.ndarray | None:
    """Ω∞ = Σ_k (Fᵀ)^k Q F^k by doubling; None unless ‖F^(2^j)‖_F² <= 1e-17 within 64 steps."""
    Om, A = Q.copy(), F.copy()
    for _ in range(64):
        Om = Om + A.T @ Om @ A
        A = A @ A
        if float(np.sum(A * A)) <= 1e-17:
            return 0.5 * (Om + Om.T)
    return None


def statespace_grams(W, T: int, O, U, victims, *, steady: bool = True) -> np.ndarray:
    """X⁰_vv (C = I) of every victim by a Kalman filter and a backward Gramian.

    Steps t < t_s (the filter's transient) are swept exactly, propagating e_{t−1}(τ) for every
    τ < t and victim in one GEMM per step. From t_s on the filter is time invariant (F∞, K∞,
    S∞): e_{t−1}(τ) = F∞^{t−1−τ} b∞ for τ >= t_s (one vector per lag), and for τ < t_s <= t,
    X⁰[τ, t] = e_{t_s−1}(τ)·ψ_t with ψ_t = (F∞ᵀ)^{t−t_s} κ∞ − (F∞ᵀ)^{T−t_s} Ω∞ F∞^{T−1−t} b∞,
    using Ω_t = Ω∞ − (F∞^{T−1−t})ᵀ Ω∞ F∞^{T−1−t}. If Ω∞ does not converge (a hidden part the
    observer never sees), every step is swept exactly.

    Returns:
        X of shape (victims, T, T).
    """
    m, u, nv = len(O), len(U), len(victims)
    WOU, WUU = W[np.ix_(O, U)], W[np.ix_(U, U)]
    o_pos = {v: i for i, v in enumerate(O)}
    u_pos = {v: i for i, v in enumerate(U)}
    Ev, Bu = np.zeros((m, nv)), np.zeros((u, nv))
    for j, v in enumerate(victims):
        if v in o_pos:
            Ev[o_pos[v], j] = 1.0
        elif v in u_pos:
            Bu[u_pos[v], j] = 1.0
    X = np.zeros((T, T, nv))  # X[τ, t, victim]; victims last keeps every product a GEMM
    if u == 0:  # nothing hidden: only the step's own message carries its input
        X[np.arange(T), np.arange(T)] = Ev.sum(axis=0)
        return np.ascontiguousarray(X.transpose(2, 0, 1))
    Sinv, K, F, ts = _riccati(WOU, WUU, T, steady)
    Om_inf = None
    if ts < T:
        Om_inf = _lyapunov(F[ts], WOU.T @ Sinv[ts] @ WOU)
        if Om_inf is None:
            Sinv, K, F, ts = _riccati(WOU, WUU, T, False)
    last = len(K) - 1
    Om = np.zeros((T, u, u))  # Ω_s = Σ_{t>s} Φ(t−1, s)ᵀ W_OUᵀ S_t⁻¹ W_OU Φ(t−1, s)
    for s in range(T - 2, -1, -1):
        j = min(s + 1, last)
        Om[s] = WOU.T @ Sinv[j] @ WOU + F[j].T @ Om[s + 1] @ F[j]
    E, E2 = np.empty((u, ts * nv)), np.empty((u, ts * nv))  # e_{t−1}(τ), τ < t, τ-major
    for t in range(ts):
        b = Bu - K[t] @ Ev  # e_t(t)
        SiE = Sinv[t] @ Ev
        Ob = Om[t] @ b
        X[t, t] = np.einsum("ij,ij->j", Ev, SiE) + np.einsum("ij,ij->j", b, Ob)
        if t:
            kappa = WOU.T @ SiE + F[t].T @ Ob
            X[:t, t] = np.einsum("utj,uj->tj", E[:, : t * nv].reshape(u, t, nv), kappa)
            np.matmul(F[t], E[:, : t * nv], out=E2[:, : t * nv])
            E, E2 = E2, E
        E[:, t * nv : (t + 1) * nv] = b
    if ts < T:
        _steady_part(X, WOU, Ev, Bu, Sinv[ts], K[ts], F[ts], Om[ts:], Om_inf, E)
    iu, ju = np.triu_indices(T, 1)
    X[ju, iu] = X[iu, ju]
    return np.ascontiguousarray(X.transpose(2, 0, 1))


def _steady_part(X, WOU, Ev, Bu, Si, Ki, Fi, Om, Om_inf, E) -> None:
    """Fill X[τ, t] for t >= t_s (time-invariant filter), see :func:`statespace_grams`."""
    T, L = X.shape[0], Om.shape[0]
    ts, u, nv = T - L, Fi.shape[0], Ev.shape[1]
    b = Bu - Ki @ Ev  # b∞ = e_t(t) for t >= t_s
    SiE = Si @ Ev
    a = WOU.T @ SiE
    Ob = np.tensordot(Om, b, axes=(2, 0))  # Ω_t b∞, (L, u, nv)
    X[np.arange(ts, T), np.arange(ts, T)] = np.einsum("ij,ij->j", Ev, SiE) + np.einsum(
        "uj,luj->lj", b, Ob
    )
    kappa = a[:, None] + (Fi.T @ Ob.transpose(1, 0, 2).reshape(u, L * nv)).reshape(u, L, nv)
    p = np.empty((L, u, nv))  # p_k = F∞^k b∞
    p[0] = b
    for k in range(1, L):
        p[k] = Fi @ p[k - 1]
    # X[τ, t] = p_{t−1−τ} · κ_t for t_s <= τ < t; G[victim, lag, t − t_s]
    G = np.matmul(
        np.ascontiguousarray(p.transpose(2, 0, 1)), np.ascontiguousarray(kappa.transpose(2, 0, 1))
    )
    lo, hi = np.triu_indices(L, 1)
    X[ts + lo, ts + hi] = G[:, hi - 1 - lo, hi].T
    if ts == 0:
        return
    r = np.empty((L, u, nv))  # r_j = (F∞ᵀ)^j κ∞
    r[0] = a + Fi.T @ (Om_inf @ b)
    for k in range(1, L):
        r[k] = Fi.T @ r[k - 1]
    R = np.linalg.matrix_power(Fi.T, L) @ Om_inf
    p_rev = p[::-1].transpose(1, 0, 2).reshape(u, L * nv)
    psi = r.transpose(1, 0, 2) - (R @ p_rev).reshape(u, L, nv)  # ψ_{t_s+j}, (u, L, nv)
    E0 = np.ascontiguousarray(E.reshape(u, ts, nv).transpose(2, 1, 0))  # e_{t_s−1}(τ)
    X[:ts, ts:] = np.matmul(E0, np.ascontiguousarray(psi.transpose(2, 0, 1))).transpose(1, 2, 0)


def dense_grams(W, O, noisy, C: np.ndarray, victims) -> np.ndarray:
    """X_vv = M̃_vᵀ K⁻¹ M̃_v with K = Σ_{w ∈ noisy} (M̃_w C⁻¹)(M̃_w C⁻¹)ᵀ, any strategy C.

    M̃_w (mT × T) holds the blocks (W^{t−τ})[O, w]. Time O((mT)²·|noisy|·T + (mT)³),
    memory O((mT)²). Raises numpy.linalg.LinAlgError if K is not numerically positive definite.

    Returns:
        X of shape (victims, T, T).
    """
    T, n, m = C.shape[0], W.shape[0], len(O)
    pw = np.empty((T, m, n))  # pw[k] = (W^k)[O, :]
    pw[0] = np.eye(n)[O]
    for k in range(1, T):
        pw[k] = pw[k - 1] @ W
    lag = np.subtract.outer(np.arange(T), np.arange(T))
    mask = (lag >= 0)[:, None, :, None]
    Cinv = np.linalg.inv(C)

    def columns(ws):  # M̃ columns of nodes ws: (len(ws), mT, T), rows t·m + i
        blk = np.where(mask, pw[:, :, ws][np.clip(lag, 0, None)].transpose(0, 2, 1, 3), 0.0)
        return blk.transpose(3, 0, 1, 2).reshape(len(ws), m * T, T)

    chunk = max(1, _DENSE_CHUNK // max(1, m * T * T))
    K = np.zeros((m * T, m * T))
    noisy = list(noisy)
    for lo in range(0, len(noisy), chunk):
        Mp = (columns(noisy[lo : lo + chunk]) @ Cinv).transpose(1, 0, 2).reshape(m * T, -1)
        K += Mp @ Mp.T
    L = np.linalg.cholesky(K)
    X = np.empty((len(victims), T, T))
    victims = list(victims)
    for lo in range(0, len(victims), chunk):
        Mv = columns(victims[lo : lo + chunk])
        Y = np.linalg.solve(L, Mv.transpose(1, 0, 2).reshape(m * T, -1))
        Y = Y.reshape(m * T, -1, T).transpose(1, 0, 2)
        X[lo : lo + len(Mv)] = Y.transpose(0, 2, 1) @ Y
    return X
