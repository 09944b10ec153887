"""Attacker estimators of a victim's private gradients, and reconstruction metrics.

Notation (docs/NOTATION.md): n nodes, T rounds, W the mixing matrix, η the learning rate,
B the batch size, ν the noise std, C⁻¹ the temporal noise factor (``factor.materialize``).
In the D-SGD family (D-SGD, DP-D-SGD, MF-D-SGD; paper 000 Alg. 1) node u sends

    m_t^u = θ_t^u − η (g_t^u + n_t^u / B),   θ_0^u = θ₀ (public),   θ_{t+1}^u = Σ_v W[u,v] m_t^v,

with g_t^u = Σ clip(∇ℓ) / B the private value and n^u = ν (C⁻¹ z^u) its noise. Stacked over
rounds (time-major rows t·n + u; paper 000 Eq. 5–6): m = M θ₀ − η W_T (G + N/B) with
M's block t = W^t and W_T's block (t, τ) = W^{t−τ} for τ ≤ t.

* :func:`dsgd_inversion` — the algorithm-specific attack. A node that knows W and sees the
  victim's message m_t^u and its mixing row's messages of round t − 1 rebuilds θ_t^u and
  reads off (θ_t^u − m_t^u)/η = g_t^u + n_t^u/B exactly: the victim's gradient plus its own
  noise and nothing else (whatever the temporal factor).
* :func:`dsgd_linear_view` + :func:`solve` — the generic linear-Gaussian attack on
  O_A = A G + B Z (paper 000 Def. 4, App. A; the reconstruction attacks of El Mrini et al.,
  ICML 2024): the attacker subtracts what it knows (θ₀ terms, its members' own gradients
  and noise — Lemma 11) and solves the linear system of everything it received by least
  squares, generalized least squares (BLUE under the known noise covariance) or MMSE
  under a Gaussian prior on the gradients.
* :func:`sr_gt_estimate` — paper 004 Eq. 44 for Alg. 1 (HbC and eavesdropper alike);
  :func:`whisper_estimate`, :func:`decor_estimate` — the inversion minus the part of the
  victim's cross-agent noise the attacker can regenerate (shared seed for Whisper insiders,
  its own pairwise secrets with the victim for DECOR/Whisper edges).
"""

# Paper letters (W, T, A, B, G, N, M) inside; see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp.algorithms._gossip import mix_gathered
from edgedp_sim.adversary import ObservationLog

__all__ = [
    "LinearView",
    "cross_linear_observations",
    "cross_linear_view",
    "Reconstruction",
    "decor_estimate",
    "dpop_estimate",
    "dsgd_inversion",
    "dsgd_linear_observations",
    "dsgd_linear_view",
    "linear_estimator",
    "reconstruction_error",
    "solve",
    "known_cross_noise",
    "sr_gt_estimate",
    "traffic_features",
    "whisper_estimate",
]


# ---------------------------------------------------------------- algorithm-specific
def dsgd_inversion(
    log: ObservationLog,
    *,
    victim: int,
    mixing_index: np.ndarray,
    mixing_weight: np.ndarray,
    theta0: np.ndarray,
    learning_rate: float,
) -> np.ndarray:
    """The victim's noisy gradients g_t + n_t/B recovered from messages, ``(trials, T, d)``.

    θ_t = Σ_j w[u, j] m_{t−1}^{index[u, j]} (θ₀ at t = 0) in the padded row's order — the
    engine's own summation, so θ_t has the engine's bits — then (θ_t − m_t)/η.

    Raises:
      ValueError: the attacker does not see the victim's or a neighbour's messages (use the
        generic :func:`solve` then).
    """
    m, cols = _row_messages(log, victim, mixing_index)
    weights = np.asarray(mixing_weight[victim], dtype=np.float64)
    theta = np.empty(m.shape[:2] + m.shape[3:])
    theta[:, 0] = theta0
    theta[:, 1:] = mix_gathered(weights, m[:, :-1][:, :, cols])  # (trials, T-1, width, d)
    return (theta - m[:, :, log.senders.index(victim)]) / learning_rate


def _row_messages(log: ObservationLog, victim: int, mixing_index) -> tuple[np.ndarray, list]:
    row = [int(v) for v in mixing_index[victim]]
    missing = sorted({victim, *row} - set(log.senders))
    if log.messages is None or missing:
        raise ValueError(
            f"Attacker {log.attacker.label} does not see the messages of nodes {missing or 'any'}"
            f" needed to invert node {victim}'s update; use the linear estimator (solve)."
        )
    return log.messages, [log.senders.index(v) for v in row]


def sr_gt_estimate(
    log: ObservationLog, *, victim: int, plan: Any, form: str = "paper"
) -> np.ndarray:
    """Paper 004 Eq. 44 for Alg. 1: ℐ(k) = {z₁(k), y₁(k), (z̄₁(k) − z₁(k))/α_k − y₁(k)}.

    The attacker sees z₁(k) and every z_j(k) of agent 1's mixing row, forms
    z̄₁(k) = Σ_j W₁ⱼ z_j(k) (the engine's fixed-order sum), runs (4b)
    y₁(k) = y₁(k−1) + β (z₁(k) − z̄₁(k)) from y₁(0) = 0 with the public β, and inverts (4c)
    with the public α_k. Paper 004 §6.3 grants this to the colluding neighbours 2, 3 and to
    the eavesdropper alike (ℐ_e = ℐ₂).

    Args:
      log: what the attacker saw (batch or event engine).
      victim: agent 1 of the paper.
      plan: the sr-gt plan (mixing row, β, α_k).
      form: ``"paper"`` — Eq. 44 as printed, ``(trials, T, 3·d)`` [z, y, (z̄ − z)/α − y];
        ``"inversion"`` — the third part with the next message z₁(k+1) = x₁(k) + ξ₁(k+1) in
        place of z₁(k), which (4c) turns into ∇f₁(z₁(k)) − ξ₁(k+1)/α_k: the attacker's
        estimate of the private gradient, ``(trials, T, d)`` (NaN in the last round, which
        has no next message).
    """
    m, cols = _row_messages(log, victim, plan.mixing_index)
    sched = plan.laplace
    if sched is None or not sched.beta > 0:
        raise ValueError("sr_gt_estimate needs an sr-gt plan (a Laplace schedule with beta > 0).")
    if form not in ("paper", "inversion"):
        raise ValueError(f"Unknown form={form!r}; expected 'paper' or 'inversion'.")
    weights = np.asarray(plan.mixing_weight[victim], dtype=np.float64)
    z = m[:, :, log.senders.index(victim)]
    zbar = mix_gathered(weights, m[:, :, cols])  # (trials, T, d)
    T = m.shape[1]
    y = np.empty_like(z)
    acc = np.zeros_like(z[:, 0])
    for t in range(T):
        acc = acc + sched.beta * (z[:, t] - zbar[:, t])
        y[:, t] = acc
    alpha = np.array([sched.stepsize(t) for t in range(T)])[None, :, None]
    if form == "paper":
        return np.concatenate([z, y, (zbar - z) / alpha - y], axis=-1)
    nxt = np.full_like(z, np.nan)
    nxt[:, :-1] = z[:, 1:]
    return (zbar - nxt) / alpha - y


def dpop_estimate(log: ObservationLog, *, victim: int, plan: Any) -> np.ndarray:
    """DPOP (paper 004 Eq. 45): x₁(k) = z̄₁(k) − α_k ∇f₁(z₁(k)) and z₁(k+1) = x₁(k) + ξ₁(k+1),
    so (z̄₁(k) − z₁(k+1))/α_k = ∇f₁(z₁(k)) − ξ₁(k+1)/α_k, ``(trials, T, d)`` (NaN in the last
    round)."""
    m, cols = _row_messages(log, victim, plan.mixing_index)
    if plan.laplace is None:
        raise ValueError("dpop_estimate needs a dpop plan (a Laplace schedule).")
    zbar = mix_gathered(np.asarray(plan.mixing_weight[victim], dtype=np.float64), m[:, :, cols])
    z = m[:, :, log.senders.index(victim)]
    T = m.shape[1]
    alpha = np.array([plan.laplace.stepsize(t) for t in range(T)])[None, :, None]
    nxt = np.full_like(z, np.nan)
    nxt[:, :-1] = z[:, 1:]
    return (zbar - nxt) / alpha


def known_cross_noise(
    plan: Any,
    *,
    victim: int,
    neighbours: Any = (),
    shared_seed: bool = False,
    first_trial: int = 0,
    trials: int = 1,
    steps: int,
    dim: int,
) -> np.ndarray:
    """The part of ``victim``'s cross-agent noise an attacker can regenerate, ``(trials, T, d)``.

    ``neighbours``: the victim's neighbours whose pairwise secrets the attacker holds (its
    own edges with the victim); ``shared_seed``: it knows Whisper's shared seed (insiders,
    per the whisper trust model). Simulation keys (:meth:`edgedp.streams.RunKeys.simulation`)
    — an attacker holding the same secrets on devices regenerates the same draws.
    Scaled like the engines' noise (ν · coefficient · draw); divide by B for a message.
    """
    from edgedp import cross_agent, streams

    spec = plan.cross_agent
    if spec is None:
        raise ValueError("Expected a plan with a cross_agent section (whisper, decor, ...).")
    share = plan.share(victim).cross_agent
    keys = streams.RunKeys.simulation(plan)
    trial_ids = range(first_trial, first_trial + trials)
    nu = float(plan.noise_std)
    known = {int(v) for v in neighbours}
    edges = [(v, c) for v, c in share.edge_terms if v in known]
    pair_keys = {
        v: np.array([keys.pair(victim, v, trial=tr) for tr in trial_ids], dtype=object)
        for v, _ in edges
    }
    shared = np.array([keys.shared(trial=tr) for tr in trial_ids], dtype=object)
    row = share.factor_row if shared_seed else ()
    out = np.zeros((trials, steps, dim))
    for t in range(steps):
        acc = np.zeros((trials, dim))
        if row:
            draws = cross_agent.gaussian_draws(shared, t, (len(row), dim))
            for k, u in enumerate(row):
                acc = acc + nu * u * draws[:, k]
        for v, c in edges:
            acc = acc + nu * c * cross_agent.gaussian_draws(pair_keys[v], t, (dim,))
        out[:, t] = acc
    return out


def _cross_estimate(log, *, victim, plan, shared_seed, theta0, first_trial) -> np.ndarray:
    est = dsgd_inversion(
        log,
        victim=victim,
        mixing_index=plan.mixing_index,
        mixing_weight=plan.mixing_weight,
        theta0=theta0,
        learning_rate=plan.learning_rate,
    )
    members = set(log.members)
    neighbours = [v for v in plan.mixing_index[victim].tolist() if v != victim and v in members]
    if not neighbours and not shared_seed:
        return est
    known = known_cross_noise(
        plan,
        victim=victim,
        neighbours=neighbours,
        shared_seed=shared_seed,
        first_trial=first_trial,
        trials=est.shape[0],
        steps=est.shape[1],
        dim=est.shape[2],
    )
    return est - known / log.batch_size


def whisper_estimate(
    log: ObservationLog, *, victim: int, plan: Any, theta0: Any, first_trial: int = 0
) -> np.ndarray:
    """Whisper (paper 001): the victim's g + n/B from the message inversion, minus what the
    attacker can regenerate of n, ``(trials, T, d)``.

    Trust model (:data:`edgedp.algorithms.whisper.TRUST_MODEL`, DESIGN §6): insiders (an
    honest-but-curious set) know the shared seed and subtract the shared-seed part
    ν Σ_k U[u, k] s_k and the edge terms of their own edges with the victim — what is
    left is the victim's independent part √D_u ν z_u and its other edges; an eavesdropper
    knows no seed and subtracts nothing (for the correlations it could still exploit across
    nodes, use :func:`dsgd_linear_view` with ``node_covariance``).
    """
    return _cross_estimate(
        log,
        victim=victim,
        plan=plan,
        shared_seed=log.attacker.kind == "hbc",
        theta0=theta0,
        first_trial=first_trial,
    )


def decor_estimate(
    log: ObservationLog, *, victim: int, plan: Any, theta0: Any, first_trial: int = 0
) -> np.ndarray:
    """DECOR (paper 001 §II-B, paper 000 App. A.5): the message inversion minus the pairwise
    terms v_uj the colluders share with the victim, ``(trials, T, d)``.

    A colluding neighbour j holds the secret of edge (u, j) and regenerates v_uj; when every
    neighbour colludes only the independent σ_pair part is left (the
    :func:`~edgedp.accounting.cross_agent.trust_report` case). An eavesdropper holds no
    pairwise secret and subtracts nothing.
    """
    return _cross_estimate(
        log, victim=victim, plan=plan, shared_seed=False, theta0=theta0, first_trial=first_trial
    )


def traffic_features(log: ObservationLog) -> np.ndarray:
    """What an encrypted-link eavesdropper has per round: sizes and send times of every tapped
    link, ``(trials, T, 2 · links)`` — independent of the data, hence MI 0 with any gradient."""
    return np.concatenate([log.sizes, np.nan_to_num(log.times, nan=-1.0)], axis=-1)


# ---------------------------------------------------------------- generic linear-Gaussian
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
    edge streams ±√c_e (paper 001, :mod:`edgedp.cross_agent`), and which sources the
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
    if plan.cross_agent is None or plan.cross_agent.kind not in ("whisper", "decor"):
        raise ValueError("cross_linear_view is for whisper and decor plans.")
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


# ---------------------------------------------------------------- metrics
@dataclass(frozen=True, slots=True, eq=False)
class Reconstruction:
    """Per-round MSE (mean over trials and coordinates) and mean cosine similarity."""

    mse: np.ndarray
    cosine: np.ndarray

    @property
    def mse_mean(self) -> float:
        return float(np.mean(self.mse))

    @property
    def cosine_mean(self) -> float:
        return float(np.nanmean(self.cosine)) if np.any(np.isfinite(self.cosine)) else np.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "mse_mean": self.mse_mean,
            "cosine_mean": self.cosine_mean,
            "mse": self.mse.tolist(),
            "cosine": [None if not np.isfinite(c) else float(c) for c in self.cosine],
        }


def reconstruction_error(estimate, truth) -> Reconstruction:
    """MSE and cosine similarity of estimated vs true gradients, both ``(trials, T, d)``.

    >>> r = reconstruction_error(np.ones((2, 1, 2)), np.array([[[1.0, 1.0]], [[1.0, -1.0]]]))
    >>> r.mse.tolist(), r.cosine.round(12).tolist()  # errors 0 and 2 per coordinate; cos 1, 0
    ([1.0], [0.5])
    """
    est = np.asarray(estimate, dtype=np.float64)
    true = np.asarray(truth, dtype=np.float64)
    if est.shape != true.shape or est.ndim != 3:
        raise ValueError(f"Expected two (trials, T, d) arrays, got {est.shape} and {true.shape}.")
    mse = np.mean((est - true) ** 2, axis=(0, 2))
    norms = np.linalg.norm(est, axis=-1) * np.linalg.norm(true, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(norms > 0, np.sum(est * true, axis=-1) / norms, np.nan)
    ok = np.isfinite(cos).any(axis=0)
    cosine = np.full(cos.shape[1], np.nan)
    cosine[ok] = np.nanmean(cos[:, ok], axis=0)
    return Reconstruction(mse, cosine)
