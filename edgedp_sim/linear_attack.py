"""The generic linear-Gaussian attack: O_A = A G + B Z solved by least squares, GLS or MMSE.

Notation as in :mod:`edgedp_sim.attacks` (docs/NOTATION.md). In the D-SGD family the
messages stacked over rounds are m = M θ₀ − η W_T (G + N/B) (paper 000 Eq. 5–6), with M's
block t = W^t and W_T's block (t, τ) = W^{t−τ} for τ ≤ t. An attacker subtracts what it
knows (θ₀ terms, its members' own gradients and noise — paper 000 Lemma 11) and solves the
linear system of everything it received (paper 000 Def. 4, App. A; the reconstruction
attacks of El Mrini et al., ICML 2024):

* :func:`dsgd_linear_view` / :func:`dsgd_linear_observations` — the view (A, B) and the
  observations y of a D-SGD-family plan;
* :func:`cross_linear_view` / :func:`cross_linear_observations` — the same under Whisper's
  or DECOR's cross-agent noise covariance, minus the part of the noise the attacker can
  regenerate (:func:`edgedp_sim.attacks.known_cross_noise`);
* :func:`solve` — least squares, generalized least squares (BLUE under the known noise
  covariance) or MMSE under a Gaussian prior on the gradients.
"""

# Paper letters (W, T, A, B, G, N, M) inside; see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp import mechanisms
from edgedp_sim.adversary import ObservationLog
from edgedp_sim.attacks import known_cross_noise

__all__ = [
    "LinearView",
    "cross_linear_observations",
    "cross_linear_view",
    "dsgd_linear_observations",
    "dsgd_linear_view",
    "linear_estimator",
    "solve",
]


@dataclass(frozen=True, slots=True, eq=False)
class LinearView:
    """y = A g + B z for one coordinate (the same for every coordinate of d).

    ``columns`` name g's entries (round, node) — the gradients the attacker does not know;
    ``rows`` name y's entries (round, sender) — the messages it saw; z ~ N(0, I).
    ``known_gain`` multiplies what the members know of their own updates (g + n/B at
    ``known_columns``); :func:`dsgd_linear_observations` moves it to the left-hand side.
    """

    gain: np.ndarray
    noise_gain: np.ndarray
    columns: tuple[tuple[int, int], ...]
    rows: tuple[tuple[int, int], ...]
    known_gain: np.ndarray
    known_columns: tuple[tuple[int, int], ...]

    def of(self, estimate: np.ndarray, node: int) -> np.ndarray:
        """``(trials, T, d)``: the rows of ``solve``'s estimate that belong to ``node``."""
        idx = [i for i, (_, u) in enumerate(self.columns) if u == node]
        if not idx:
            raise ValueError(f"Node {node} is not among the unknowns (is it a member?).")
        return estimate[:, idx]


def _powers(W: np.ndarray, T: int) -> np.ndarray:
    P = np.empty((T, *W.shape))
    P[0] = np.eye(len(W))
    for k in range(1, T):
        P[k] = P[k - 1] @ W
    return P


def _stacked(P: np.ndarray, rows, cols) -> np.ndarray:
    """W_T[rows, cols]: block (t, τ) = W^{t−τ} for τ ≤ t, entries (t, u), (τ, v)."""
    if not rows or not cols:
        return np.zeros((len(rows), len(cols)))
    rt, ru = np.array(rows).T
    ct, cu = np.array(cols).T
    lag = rt[:, None] - ct[None, :]
    return np.where(lag >= 0, P[np.maximum(lag, 0), ru[:, None], cu[None, :]], 0.0)


def dsgd_linear_view(
    log: ObservationLog,
    *,
    mixing_matrix: np.ndarray,
    learning_rate: float,
    noise_std: float,
    batch_size: int,
    noise_factor: np.ndarray,
) -> LinearView:
    """A and B of the attacker's reduced view of a D-SGD-family run (paper 000 App. A.2–A.3).

    A = −η W_T[seen, unknown], B = A (C⁻¹ ⊗ I)[unknown, unknown] ν/B: every unknown node's
    noise is its own temporal factor applied to its own normals.

    Args:
      log: the attacker's observations (which senders it sees; its members).
      mixing_matrix: W (n × n).
      learning_rate: η.
      noise_std: ν (0 for D-SGD).
      batch_size: B.
      noise_factor: C⁻¹ (T × T or larger), the plan factor's ``materialize(T)``.
    """
    if log.messages is None:
        raise ValueError("An encrypted-link eavesdropper sees no message; nothing to solve.")
    W = np.asarray(mixing_matrix, dtype=np.float64)
    n, T = len(W), log.messages.shape[1]
    P = _powers(W, T)
    rows = tuple((t, u) for t in range(T) for u in log.senders)
    cols = tuple((t, u) for t in range(T) for u in range(n) if u not in log.members)
    known = tuple((t, u) for t in range(T) for u in log.members)
    A = -learning_rate * _stacked(P, rows, cols)
    ct, cu = np.array(cols).T
    Cinv = np.asarray(noise_factor, dtype=np.float64)[:T, :T]
    noise_map = Cinv[ct[:, None], ct[None, :]] * (cu[:, None] == cu[None, :])
    B = A @ noise_map * (noise_std / batch_size)
    return LinearView(A, B, cols, rows, -learning_rate * _stacked(P, rows, known), known)


def _noise_sources(plan, members, knows_seed: bool):
    """G (n x S) with n_t = ν G s_t, s_t ~ N(0, I): own streams √D_u, shared-seed U[u, k],
    edge streams ±√c_e (paper 001, :mod:`edgedp.families.cross.noise`), and which sources the
    attacker regenerates (its members' own streams, their edges, the seed if it knows it)."""
    spec = plan.cross_agent
    n = spec.n
    e = np.asarray(plan.edges, dtype=np.int64).reshape(-1, 2)
    cols, known = [], []
    for u in range(n):
        col = np.zeros(n)
        col[u] = np.sqrt(spec.diag[u])
        cols.append(col)
        known.append(u in members)
    for k in range(spec.rank):
        cols.append(spec.factor[:, k].copy())
        known.append(knows_seed)
    for idx, c in enumerate(spec.edge_variance):
        if c > 0:
            i, j = int(e[idx, 0]), int(e[idx, 1])
            col = np.zeros(n)
            col[i], col[j] = np.sqrt(c), -np.sqrt(c)
            cols.append(col)
            known.append(i in members or j in members)
    return np.array(cols).T, np.array(known, dtype=bool)


def cross_linear_view(
    log: ObservationLog, plan: Any, *, batch_size: int, knows_seed: bool | None = None
) -> LinearView:
    """The generic linear-Gaussian view of a Whisper / DECOR run: GLS under the noise
    covariance the attacker faces (paper 000 App. A.5, SecLDP).

    As :func:`dsgd_linear_view`, but the unknown nodes' noises are correlated:
    n_t = ν G s_t with independent sources s (own streams, shared seed, edge streams). The
    attacker regenerates the sources it holds — its members' streams and edges, and the
    shared seed when ``knows_seed`` (default: insiders, per the whisper trust model) — and
    :func:`cross_linear_observations` subtracts their part; the rest is B's columns.
    """
    correlated = mechanisms.names(correlated=True)
    if plan.cross_agent is None or plan.cross_agent.kind not in correlated:
        raise ValueError(f"cross_linear_view is for {' and '.join(correlated)} plans.")
    members = set(log.members)
    if knows_seed is None:
        knows_seed = log.attacker.kind == "hbc"
    base = dsgd_linear_view(
        log,
        mixing_matrix=plan.mixing_matrix(),
        learning_rate=plan.learning_rate,
        noise_std=0.0,
        batch_size=batch_size,
        noise_factor=np.eye(log.messages.shape[1]),
    )
    G, known = _noise_sources(plan, members, knows_seed)
    unk = np.flatnonzero(~known)
    ct, cu = np.array(base.columns).T
    T = log.messages.shape[1]
    # noise of unknown column (t, u) = ν Σ_s G[u, s] src(t, s): B = A · M, M[(t,u), (t,s)]
    M = np.zeros((len(base.columns), T * len(unk)))
    for c, (t, u) in enumerate(zip(ct, cu, strict=True)):
        M[c, t * len(unk) : (t + 1) * len(unk)] = G[u, unk]
    B = base.gain @ M * (plan.noise_std / batch_size)
    return LinearView(base.gain, B, base.columns, base.rows, base.known_gain, base.known_columns)


def cross_linear_observations(
    log: ObservationLog,
    view: LinearView,
    plan: Any,
    *,
    theta0: np.ndarray,
    knows_seed: bool | None = None,
    first_trial: int = 0,
) -> np.ndarray:
    """:func:`dsgd_linear_observations` minus the regenerated known part of the unknown
    nodes' noise (their edges with members, the shared seed when known)."""
    y = dsgd_linear_observations(log, view, mixing_matrix=plan.mixing_matrix(), theta0=theta0)
    members = set(log.members)
    if knows_seed is None:
        knows_seed = log.attacker.kind == "hbc"
    trials, T, _, d = log.messages.shape
    nodes = sorted({u for _, u in view.columns})
    known = np.zeros((trials, len(view.columns), d))
    for u in nodes:
        nb = [v for v in plan.mixing_index[u].tolist() if v != u and v in members]
        if not nb and not (knows_seed and plan.cross_agent.rank):
            continue
        part = known_cross_noise(
            plan,
            victim=u,
            neighbours=nb,
            shared_seed=knows_seed,
            first_trial=first_trial,
            trials=trials,
            steps=T,
            dim=d,
        )
        for c, (t, v) in enumerate(view.columns):
            if v == u:
                known[:, c] = part[:, t]
    return y - np.einsum("rc,ncd->nrd", view.gain, known / log.batch_size)


def dsgd_linear_observations(
    log: ObservationLog,
    view: LinearView,
    *,
    mixing_matrix: np.ndarray,
    theta0: np.ndarray,
) -> np.ndarray:
    """y = m[seen] − (M θ₀)[seen] − A_known (g + n/B)_members, ``(trials, rows, d)``.

    The members' own gradients and noise come from ``log.own`` (paper 000 Lemma 11).
    ``theta0``: the common initial model ``(d,)``, every node's ``(n, d)``, or every node's
    per trial ``(trials, n, d)`` (random initial states, :mod:`edgedp_sim.initial`).
    """
    W = np.asarray(mixing_matrix, dtype=np.float64)
    trials, T, _, d = log.messages.shape
    P = _powers(W, T)
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.ndim < 3:
        theta0 = np.broadcast_to(theta0, (len(W), d))[None]
    y = log.messages.reshape(trials, -1, d).copy()
    rt, ru = np.array(view.rows).T
    y -= np.einsum("rv,nvd->nrd", P[rt, ru], theta0)
    if view.known_columns:
        own = log.own["gradient"]
        if "noise" in log.own:
            own = own + log.own["noise"] / log.batch_size
        y -= np.einsum("rk,nkd->nrd", view.known_gain, own.reshape(trials, -1, d))
    return y


def linear_estimator(
    gain: np.ndarray,
    noise_gain: np.ndarray | None = None,
    *,
    method: str = "gls",
    prior_var: float | None = None,
) -> np.ndarray:
    """L with ĝ = L y: ``"ls"`` = A⁺; ``"gls"`` = BLUE under Σ = BBᵀ (Rao's unified least
    squares, T = Σ + λAAᵀ, L = (AᵀT⁺A)⁺AᵀT⁺ — also for singular Σ, e.g. no noise); ``"mmse"``
    = s²Aᵀ(s²AAᵀ + Σ)⁺ for a prior g ~ N(0, s² I) (``prior_var`` = s²; subtract the prior
    mean from y first).

    >>> A = np.array([[1.0], [1.0]]); B = np.diag([1.0, 3.0])  # two looks, noise std 1 and 3
    >>> linear_estimator(A, B, method="gls").round(3).tolist()  # weights ∝ 1/variance
    [[0.9, 0.1]]
    """
    A = np.asarray(gain, dtype=np.float64)
    S = np.zeros((len(A), len(A))) if noise_gain is None else noise_gain @ noise_gain.T
    if method == "ls":
        return np.linalg.pinv(A, rcond=1e-12)
    if method == "gls":
        AA = A @ A.T
        lam = np.trace(S) / np.trace(AA) if np.trace(S) > 0 and np.trace(AA) > 0 else 1.0
        Tp = np.linalg.pinv(S + lam * AA, rcond=1e-12, hermitian=True)
        return np.linalg.pinv(A.T @ Tp @ A, rcond=1e-12, hermitian=True) @ A.T @ Tp
    if method == "mmse":
        if prior_var is None or not prior_var > 0:
            raise ValueError(f"Expected prior_var={prior_var!r} > 0 for method='mmse'.")
        K = np.linalg.pinv(prior_var * (A @ A.T) + S, rcond=1e-12, hermitian=True)
        return prior_var * A.T @ K
    raise ValueError(f"Unknown method={method!r}; expected 'ls', 'gls' or 'mmse'.")


def solve(
    view: LinearView,
    observations: np.ndarray,
    *,
    method: str = "gls",
    prior_mean: float = 0.0,
    prior_var: float | None = None,
) -> np.ndarray:
    """Estimates of every unknown gradient, ``(trials, len(view.columns), d)``."""
    L = linear_estimator(view.gain, view.noise_gain, method=method, prior_var=prior_var)
    y = observations
    if method == "mmse" and prior_mean:
        y = y - (view.gain.sum(axis=1) * prior_mean)[None, :, None]
    est = np.einsum("cr,nrd->ncd", L, y)
    return est + prior_mean if method == "mmse" else est
