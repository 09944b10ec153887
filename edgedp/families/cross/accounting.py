"""Privacy of noise correlated across agents (Whisper, DECOR, Zip-DL, Muffliato).

Per step an attacker sees the nodes' releases ``y = g + v`` (the half-step messages, minus
what it can recompute), ``v ~ N(0, ν² R̃ ⊗ I_d)`` independent across steps
(:mod:`edgedp.families.cross.noise`). Adding or removing one example of node u moves ``g_u`` by at
most the clip norm Δ, so one step is a Gaussian mechanism with Mahalanobis sensitivity
Δ·√([R̃⁻¹]_uu)/ν, and k participations compose (adaptively) to

    μ_u = Δ √(k · [R̃⁻¹]_uu) / ν        (μ-GDP; paper 001 Thm 2's RDP argument, exact in GDP).

Plans store ``sensitivity = √(k · max_u [R̃⁻¹]_uu)`` so that ν = σ·sens·Δ gives μ = 1/σ, as
for every other mechanism. Trust models (what the attacker subtracts before looking):

* eavesdropper — every message, no secrets: R̃ itself (001 Thm 2; 000 "LDP").
* insider — a curious node knows the shared seed (Whisper's U part, DESIGN §6) and the
  pairwise secrets of its own edges: the rest covariance on honest nodes (000 App. A.5
  "SecLDP"); a node whose neighbours all collude keeps only its own D_u.
* Zip-DL — all noise is node-private, so one node's messages with covariance
  ``D_u 11ᵀ + m P_w`` bound every attacker; Muffliato — independent noise (D = 1), only
  gradient rounds (every K-th) release data, so k counts gradient rounds.

Paper 001 Thm 2 (ε ≤ 2C²T·max[R⁻¹]_ii + 2C√(2T log(1/δ)·max[R⁻¹]_ii)) is the RDP
conversion of μ = 2C√(T·max[R⁻¹]_ii) (replace-one adjacency, per-step sensitivity 2C):
:func:`theorem2_epsilon`; the exact GDP conversion of the same μ is never larger (tested).
Numpy only: devices re-certify plans with it.
"""

# Paper letters R, D, U, P (precision): see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math

import numpy as np

from edgedp import mechanisms
from edgedp._validate import non_negative, positive
from edgedp.accounting import factor_sensitivity, gdp, mf
from edgedp.accounting.participation import Participation

__all__ = [
    "guarantee",
    "participations",
    "precision_diagonal",
    "rdp_epsilon",
    "theorem2_epsilon",
    "trust_report",
    "unit_precision",
    "view_precision",
]


def precision_diagonal(covariance) -> np.ndarray:
    """diag(R⁻¹) via Cholesky; +inf everywhere when R is not positive definite (conservative).

    >>> precision_diagonal(np.array([[2.0, 1.0], [1.0, 2.0]])).round(6).tolist()
    [0.666667, 0.666667]
    """
    R = np.asarray(covariance, dtype=np.float64)
    try:
        L = np.linalg.cholesky(R)
    except np.linalg.LinAlgError:
        return np.full(R.shape[0], math.inf)
    Linv = np.linalg.solve(L, np.eye(R.shape[0]))  # R⁻¹ = Linvᵀ Linv
    return np.einsum("ij,ij->j", Linv, Linv)


def _message_precision(D_u: float, m: float, weights: np.ndarray) -> float:
    """1ᵀ Σ⁻¹ 1 for Σ = D_u 11ᵀ + m (I − ŵŵᵀ): the precision of one node's Zip-DL release."""
    s = weights.size
    w = weights / np.sqrt(weights @ weights)
    S = D_u * np.ones((s, s)) + m * (np.eye(s) - np.outer(w, w))
    one = np.ones(s)
    try:
        return float(one @ np.linalg.solve(S, one))
    except np.linalg.LinAlgError:
        return math.inf


def unit_precision(spec, *, edges, mixing_index, mixing_weight) -> np.ndarray:
    """Per-node precision of one step's release in units of ν (1/variance per unit Δ²).

    ``diag(R̃⁻¹)`` for Whisper/DECOR/Muffliato; 1ᵀΣ̃_u⁻¹1 over u's messages for Zip-DL.
    """
    if not mechanisms.get(spec.kind).has("message_noise"):
        return precision_diagonal(spec.covariance(edges))
    index, weight = np.asarray(mixing_index), np.asarray(mixing_weight)
    out = np.empty(spec.n)
    for u in range(spec.n):
        mask = (index[u] != u) & (weight[u] != 0)
        w = weight[u][mask]
        if w.size == 0:
            out[u] = 1.0 / spec.diag[u]
        else:
            out[u] = _message_precision(spec.diag[u], spec.message_variance, w)
    return out


def participations(
    spec, participation: Participation, steps: int, *, steps_done: int | None = None
) -> int:
    """Most data-dependent releases of one example within ``steps_done`` (default all) rounds.

    (k, b) counts rounds; for Muffliato only gradient rounds (multiples of K) release data.

    >>> from edgedp.families.cross.noise import CrossAgentSpec
    >>> spec = CrossAgentSpec("muffliato", np.ones(2), np.zeros((2, 0)), [], gossip_rounds=3)
    >>> participations(spec, Participation(12, 1), 12)
    4
    """
    t = steps if steps_done is None else int(steps_done)
    if t == 0:
        return 0
    if spec.gossip_rounds == 1:
        return participation.count(t)
    K = spec.gossip_rounds
    start, length = factor_sensitivity.windows(participation, steps)
    index = np.arange(steps, dtype=np.int64)
    released = ((index % K == 0) & (index < t)).astype(np.int64)
    b = participation.b
    counts = factor_sensitivity.strided_sums(released, b, start, length)  # O(T), no patterns
    return int(counts.max()) if counts.size else 0


def guarantee(plan, *, steps_done: int | None = None) -> mf.LDPGuarantee:
    """The plan's μ-GDP guarantee against the eavesdropper (module docstring), from its factors.

    ``sensitivity = √(k · max_u P_u)`` with P the unit precision, μ = √(k_t/k)/σ after t rounds.
    Non-positive-definite factors give sensitivity inf (the plan is then refused).
    """
    spec = plan.cross_agent
    P = unit_precision(
        spec,
        edges=plan.edges,
        mixing_index=plan.mixing_index,
        mixing_weight=plan.mixing_weight,
    )
    k = participations(spec, plan.participation, plan.steps)
    kt = participations(spec, plan.participation, plan.steps, steps_done=steps_done)
    sens = math.sqrt(k * float(np.max(P)))
    sigma = float(plan.noise_multiplier)
    if kt == 0 or sigma == math.inf:
        mu = 0.0
    elif sigma == 0.0:
        mu = math.inf
    else:
        mu = math.sqrt(kt / k) / sigma
    return mf.LDPGuarantee(
        mu=mu,
        noise_multiplier=sigma,
        sensitivity=sens,
        exact=True,
        steps=plan.steps if steps_done is None else int(steps_done),
    )


def view_precision(spec, edges, *, colluders=(), knows_seed: bool = False) -> np.ndarray:
    """diag of the inverse rest covariance of the honest nodes (NaN at colluders).

    The colluders know their own noise, the per-edge secrets of their edges and, with
    ``knows_seed``, the shared seed; what stays unknown in the honest nodes' messages is
    diag(D_H) + [UUᵀ]_HH (seed unknown) + Σ_{e ⊂ H} c_e a_e a_eᵀ (paper 000 App. A.5).
    """
    bad = set(int(a) for a in colluders)
    honest = np.array([u for u in range(spec.n) if u not in bad], dtype=np.int64)
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    keep = np.ones(len(e), dtype=bool)
    if spec.edge_variance.size and bad:
        keep = ~(np.isin(e[:, 0], list(bad)) | np.isin(e[:, 1], list(bad)))
    sub = type(spec)(
        kind=spec.kind,
        diag=spec.diag,
        factor=np.zeros((spec.n, 0)) if knows_seed else spec.factor,
        edge_variance=spec.edge_variance * keep if spec.edge_variance.size else [],
        message_variance=spec.message_variance,
        gossip_rounds=spec.gossip_rounds,
    )
    R = sub.covariance(e)[np.ix_(honest, honest)]
    out = np.full(spec.n, np.nan)
    out[honest] = precision_diagonal(R)
    return out


def trust_report(plan, *, delta: float, steps_done: int | None = None) -> dict[str, float]:
    """(ε, delta) per trust model: eavesdropper, worst single insider, victim's whole
    neighbourhood colluding (with the seed), after ``steps_done`` rounds (default all).
    Zip-DL and Muffliato noise is node-private, so one number covers every attacker."""
    spec = plan.cross_agent
    g = guarantee(plan, steps_done=steps_done)
    eps = g.epsilon(delta)
    if not mechanisms.get(spec.kind).has("correlated"):
        return {"eavesdropper": eps, "insider": eps, "neighbourhood": eps}
    P = unit_precision(
        spec, edges=plan.edges, mixing_index=plan.mixing_index, mixing_weight=plan.mixing_weight
    )
    m = float(np.max(P))

    def eps_of(precision: float) -> float:
        if not precision < math.inf:
            return math.inf
        return gdp.epsilon(g.mu * math.sqrt(precision / m), delta=delta)

    insider = 0.0
    seed = spec.rank > 0
    for a in range(spec.n):
        insider = max(
            insider,
            float(np.nanmax(view_precision(spec, plan.edges, colluders=[a], knows_seed=seed))),
        )
    hood = float(np.max(1.0 / spec.diag))
    return {"eavesdropper": eps, "insider": eps_of(insider), "neighbourhood": eps_of(hood)}


def rdp_epsilon(mu: float, *, delta: float) -> float:
    """ε = μ²/2 + μ√(2 log(1/δ)): RDP αμ²/2 converted with Mironov Prop. 3, optimal α.

    >>> print(f"{rdp_epsilon(1.0, delta=1e-5):.6f}")
    5.298526
    """
    non_negative(mu=mu)
    positive(delta=delta)
    if delta >= 1:
        return 0.0
    return mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta))


def theorem2_epsilon(covariance, *, clip_norm: float, steps: int, delta: float) -> float:
    """Paper 001 Thm 2: ε ≤ 2C²T·max_i[R⁻¹]_ii + 2C√(2T log(1/δ)·max_i[R⁻¹]_ii).

    C is the paper's clip norm (replace-one agent adjacency: per-step sensitivity 2C), R the
    absolute per-step covariance. Equals :func:`rdp_epsilon` at μ = 2C√(T·max[R⁻¹]_ii).

    >>> R = np.eye(2) * 92.1034  # σ²_ldp at ε = 10: Prop. 1 gives ε²/(8 log(1/δ)) + ε/√2
    >>> print(f"{theorem2_epsilon(R, clip_norm=0.1, steps=5000, delta=1e-5):.3f}")
    8.157
    """
    positive(clip_norm=clip_norm, delta=delta)
    m = float(np.max(precision_diagonal(covariance)))
    C, T = float(clip_norm), int(steps)
    if not m < math.inf:
        return math.inf
    return 2 * C * C * T * m + 2 * C * math.sqrt(2 * T * math.log(1 / delta) * m)
