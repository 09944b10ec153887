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
* :mod:`edgedp_sim.linear_attack` — the generic linear-Gaussian attack on O_A = A G + B Z
  (paper 000 Def. 4, App. A), for attackers that do not see enough for the inversion.
* :func:`sr_gt_estimate` — paper 004 Eq. 44 for Alg. 1 (HbC and eavesdropper alike);
  :func:`whisper_estimate`, :func:`decor_estimate` — the inversion minus the part of the
  victim's cross-agent noise the attacker can regenerate (shared seed for Whisper insiders,
  its own pairwise secrets with the victim for DECOR/Whisper edges);
  :func:`zipdl_estimate` — Zip-DL's weighted outgoing messages cancel its message-wise noise.

:data:`ATTACKS` names them; each mechanism's registry record names the one that applies to
it (:attr:`edgedp.mechanisms.Mechanism.attack`), and :func:`algorithm_attack` looks it up.
"""

# Paper letters (W, T, A, B, G, N, M) inside; see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from edgedp import mechanisms
from edgedp.gossip import mix_gathered
from edgedp_sim.adversary import ObservationLog

__all__ = [
    "ATTACKS",
    "Attack",
    "algorithm_attack",
    "zipdl_estimate",
    "Reconstruction",
    "decor_estimate",
    "dpop_estimate",
    "dsgd_inversion",
    "reconstruction_error",
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
        generic :func:`edgedp_sim.linear_attack.solve` then).
    """
    m, row = _row_messages(log, victim, mixing_index)
    weights = np.asarray(mixing_weight[victim], dtype=np.float64)
    theta = np.empty(m.shape[:2] + m.shape[3:])
    theta[:, 0] = theta0
    theta[:, 1:] = mix_gathered(weights, row[:, :-1])  # (trials, T-1, width, d)
    return (theta - m[:, :, log.senders.index(victim)]) / learning_rate


def _row_messages(log: ObservationLog, victim: int, mixing_index) -> tuple[np.ndarray, np.ndarray]:
    """``(messages, row)``: every seen message, and the messages of ``victim``'s mixing row
    as it mixed them, ``(trials, T, width, d)`` — NaN where it did not mix one (lost, late:
    :attr:`ObservationLog.unmixed`), so the rounds that depend on it are left out."""
    nodes = [int(v) for v in mixing_index[victim]]
    missing = sorted({victim, *nodes} - set(log.senders))
    if log.messages is None or missing:
        raise ValueError(
            f"Attacker {log.attacker.label} does not see the messages of nodes {missing or 'any'}"
            f" needed to invert node {victim}'s update; use the linear estimator (solve)."
        )
    row = log.messages[:, :, [log.senders.index(v) for v in nodes]]
    _unmixed_to_nan(log, victim, nodes, row)
    return log.messages, row


def _unmixed_to_nan(log: ObservationLog, victim: int, nodes, row: np.ndarray) -> None:
    """Set ``row[:, t, j]`` (node ``nodes[j]``'s round-t message) to NaN where ``victim``
    did not mix it (event engine: one trial per log)."""
    for (t, node), gone in log.unmixed.items():
        if node == victim:
            for j, v in enumerate(nodes):
                if v in gone:
                    row[:, t, j] = np.nan


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
    m, row = _row_messages(log, victim, plan.mixing_index)
    sched = plan.laplace
    if sched is None or not sched.beta > 0:
        raise ValueError("sr_gt_estimate needs an sr-gt plan (a Laplace schedule with beta > 0).")
    if form not in ("paper", "inversion"):
        raise ValueError(f"Unknown form={form!r}; expected 'paper' or 'inversion'.")
    weights = np.asarray(plan.mixing_weight[victim], dtype=np.float64)
    z = m[:, :, log.senders.index(victim)]
    zbar = mix_gathered(weights, row)  # (trials, T, d)
    T = m.shape[1]
    # y(k) = y(k−1) + β (z − z̄) from y(0) = 0, added in order: accumulate is sequential, and
    # the leading +0.0 keeps even the signs of zeros of the loop acc = acc + β (z − z̄)
    steps = np.concatenate([np.zeros_like(z[:, :1]), sched.beta * (z - zbar)], axis=1)
    y = np.add.accumulate(steps, axis=1)[:, 1:]
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
    m, row = _row_messages(log, victim, plan.mixing_index)
    if plan.laplace is None:
        raise ValueError("dpop_estimate needs a dpop plan (a Laplace schedule).")
    zbar = mix_gathered(np.asarray(plan.mixing_weight[victim], dtype=np.float64), row)
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
    per the whisper trust model). Simulation keys (:func:`edgedp.runtime.simulation_keys`)
    — an attacker holding the same secrets on devices regenerates the same draws.
    Scaled like the engines' noise (ν · coefficient · draw); divide by B for a message.
    """
    from edgedp import runtime
    from edgedp.families.cross import noise as cross_agent

    spec = plan.cross_agent
    if spec is None:
        raise ValueError("Expected a plan with a cross_agent section (whisper, decor, ...).")
    share = plan.share(victim).cross_agent
    keys = runtime.simulation_keys(plan)
    trial_ids = range(first_trial, first_trial + trials)
    nu = float(plan.noise_std)
    known = {int(v) for v in neighbours}
    edges = [(v, c) for v, c in share.edge_terms if v in known]
    pair_keys = {
        v: np.array(
            [runtime.node_key(keys, "pair", victim, trial=tr, peer=v) for tr in trial_ids],
            dtype=object,
        )
        for v, _ in edges
    }
    shared = np.array(
        [runtime.node_key(keys, "shared", victim, trial=tr) for tr in trial_ids], dtype=object
    )
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


def _plan_inversion(log: ObservationLog, *, victim: int, plan: Any, theta0: Any) -> np.ndarray:
    """:func:`dsgd_inversion` with the plan's mixing row and learning rate."""
    return dsgd_inversion(
        log,
        victim=victim,
        mixing_index=plan.mixing_index,
        mixing_weight=plan.mixing_weight,
        theta0=theta0,
        learning_rate=plan.learning_rate,
    )


def _cross_estimate(log, *, victim, plan, shared_seed, theta0, first_trial) -> np.ndarray:
    est = _plan_inversion(log, victim=victim, plan=plan, theta0=theta0)
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

    Trust model (:data:`edgedp.families.cross.whisper.TRUST_MODEL`, DESIGN §6): insiders (an
    honest-but-curious set) know the shared seed and subtract the shared-seed part
    ν Σ_k U[u, k] s_k and the edge terms of their own edges with the victim — what is
    left is the victim's independent part √D_u ν z_u and its other edges; an eavesdropper
    knows no seed and subtracts nothing (for the correlations it could still exploit across
    nodes, use :func:`edgedp_sim.linear_attack.dsgd_linear_view` with ``node_covariance``).
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
    :func:`~edgedp.families.cross.accounting.trust_report` case). An eavesdropper holds no
    pairwise secret and subtracts nothing.
    """
    return _cross_estimate(
        log, victim=victim, plan=plan, shared_seed=False, theta0=theta0, first_trial=first_trial
    )


def zipdl_estimate(log: ObservationLog, *, victim: int, plan: Any, theta0: Any) -> np.ndarray:
    """Zip-DL: the victim's weighted outgoing messages cancel the message-wise noise.

    Σ_j w_j m_{u→j} / Σ_j w_j = θ_u − η(g + √D ν z)/B (the self slot carries the common
    part only), and θ_u = Σ_j W[u, j] m_{j→u} of the previous round (θ₀ first) — so an
    attacker seeing every link of the victim gets g + √D ν z/B.
    """
    if log.link_messages is None:
        raise ValueError(f"Attacker {log.attacker.label} sees no Zip-DL message.")
    idx = {link: i for i, link in enumerate(log.links)}
    row = [int(v) for v in plan.mixing_index[victim]]
    weights = np.asarray(plan.mixing_weight[victim], dtype=np.float64)
    others = [v for v in row if v != victim]
    need = [(victim, v) for v in others] + [(v, victim) for v in others]
    missing = [link for link in need if link not in idx]
    if missing:
        raise ValueError(
            f"Attacker {log.attacker.label} misses the Zip-DL links {missing} of node {victim}."
        )
    m = log.link_messages
    out_w = [w for v, w in zip(row, weights, strict=True) if v != victim]
    out_avg = mix_gathered(out_w, m[:, :, [idx[(victim, v)] for v in others]]) / sum(out_w)
    theta = np.empty_like(out_avg)
    theta[:, 0] = theta0
    received = np.stack([out_avg if v == victim else m[:, :, idx[(v, victim)]] for v in row], 2)
    _unmixed_to_nan(log, victim, row, received)
    theta[:, 1:] = mix_gathered(weights, received[:, :-1])
    return (theta - out_avg) / plan.learning_rate


def traffic_features(log: ObservationLog) -> np.ndarray:
    """What an encrypted-link eavesdropper has per round: sizes and send times of every tapped
    link, ``(trials, T, 2 · links)`` — independent of the data, hence MI 0 with any gradient."""
    return np.concatenate([log.sizes, np.nan_to_num(log.times, nan=-1.0)], axis=-1)


# ---------------------------------------------------------------- the attack table
@dataclass(frozen=True, slots=True)
class Attack:
    """An algorithm-specific attack: ``estimate(log, *, plan, victim, theta0, first_trial)``
    returns ``(information, point estimate or None)``, both ``(trials, T, ·)`` — what the
    MI is computed on and what MSE and cosine score. Raises ValueError when the attacker
    does not see the messages the attack needs."""

    description: str
    estimate: Callable[..., tuple[np.ndarray, np.ndarray | None]]
    #: ``point(log, *, victim, plan)``: the point estimate alone, for attacks that need no
    #: θ(0) (the Laplace audits' likelihood-ratio statistic); None otherwise.
    point: Callable[..., np.ndarray] | None = None


def _sr_gt(log, *, plan, victim, theta0, first_trial):
    info = sr_gt_estimate(log, victim=victim, plan=plan)
    return info, sr_gt_estimate(log, victim=victim, plan=plan, form="inversion")


def _dpop(log, *, plan, victim, theta0, first_trial):
    point = dpop_estimate(log, victim=victim, plan=plan)
    return np.concatenate([log.sent_by(victim), point], axis=-1), point


def _point(fn: Callable[..., np.ndarray], *, cross: bool) -> Callable[..., tuple]:
    def attack(log, *, plan, victim, theta0, first_trial):
        kw = {"first_trial": first_trial} if cross else {}
        point = fn(log, victim=victim, plan=plan, theta0=theta0, **kw)
        return point, point

    return attack


#: Every algorithm-specific attack by name; a mechanism names its own in its registry record
#: (:attr:`edgedp.mechanisms.Mechanism.attack`).
ATTACKS: Mapping[str, Attack] = MappingProxyType(
    {
        "update-inversion": Attack(
            "update inversion (D-SGD family)", _point(_plan_inversion, cross=False)
        ),
        "sr-gt-eq44": Attack(
            "paper 004 Eq. 44 (sr-gt)",
            _sr_gt,
            point=functools.partial(sr_gt_estimate, form="inversion"),
        ),
        "dpop-inversion": Attack("inversion of Eq. 45 (dpop)", _dpop, point=dpop_estimate),
        "zipdl-weighted-sum": Attack(
            "Zip-DL weighted-sum inversion", _point(zipdl_estimate, cross=False)
        ),
        "whisper-known-noise": Attack(
            "inversion minus known seed/edge noise (whisper)", _point(whisper_estimate, cross=True)
        ),
        "decor-known-secrets": Attack(
            "inversion minus known pairwise secrets (decor)", _point(decor_estimate, cross=True)
        ),
    }
)


def algorithm_attack(mechanism: str) -> Attack:
    """The attack the registry names for ``mechanism``; ValueError for an unknown name."""
    name = mechanisms.get(mechanism).attack
    try:
        return ATTACKS[name]
    except KeyError:
        raise ValueError(
            f"Mechanism {mechanism!r} names attack {name!r}, which edgedp_sim.attacks does not "
            f"define; expected one of {sorted(ATTACKS)}."
        ) from None


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
