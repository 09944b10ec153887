"""Pairwise network DP of DP-D-SGD by the accounting of Cyffers et al. 2022 (Muffliato).

Source: Cyffers, Even, Bellet, Massoulié, "Muffliato: peer-to-peer privacy amplification
for decentralized optimization and averaging", NeurIPS 2022 — Theorem 11 of its arXiv
version (2206.05091, Muffliato-SGD) in the corrected form that paper 000 compares its own
accounting with (§7.1, Fig. 2). For K = 1 gossip step per gradient step, Muffliato-SGD is
DP-D-SGD (000 App. A.4). With T steps, clip norm Δ and noise std ν per step and coordinate,
the privacy loss from victim u to attacker v at Rényi order α is

    ε_{u→v}(α) = α Δ² / (2 ν²) · min(T, S_{u→v}),

    S_{u→v} = Σ_{t=1}^{T} Σ_{j=t}^{T} Σ_{w ∈ N(v) ∪ {v}} (W^{j−t})_{u,w} / ‖W^{j−t} e_w‖²
            = Σ_{s=0}^{T−1} (T − s) Σ_{w ∈ N(v) ∪ {v}} (W^s)_{u,w} / ‖W^s e_w‖².

The numerator is not squared (the corrected theorem; the NeurIPS version squares it and
is smaller). The cap at T is the LDP bound (T steps of sensitivity Δ), applied as paper 000
applied it. Paper 000 evaluated the sum on graphs with a self-loop at every node, so the
attacker's own column w = v is in it; we keep it (it only adds).

Trust model: one curious node v that sees every message its neighbours send at every step,
plus its own state, data and noise (Muffliato's pairwise network DP; the attacker set of
:mod:`edgedp.accounting.pndp` with ``observer="node"`` and a single member).
Adjacency: zero-out of victim u's data at user level — every one of u's T clipped gradients
may change by at most Δ. A record-level change under (k, b)-participation changes fewer of
them, so the bound holds for it too; the result is the minimum of it and the plan's LDP
RDP (which is record-level). Model: as paper 000 compares it, every node's gradients are
fixed in advance (:data:`MODEL`, as for :mod:`edgedp.accounting.pndp`); the LDP value beside
it is certified for adaptive training.

Scope: independent Gaussian noise per step (C = I, i.e. DP-D-SGD plans) and a symmetric,
doubly stochastic gossip matrix (the theorem's assumption). Muffliato-SGD with K > 1 gossip
rounds per gradient step is not covered here (its plans are refused by
:meth:`edgedp.accounting.pndp.PNDPSetting.from_plan`).

Computation: M = Σ_s (T − s) W^s D_s⁻¹ with D_s the squared column norms of W^s, one n × n
matrix; then S = M (A + I) with A the receive adjacency, every pair at once. Time O(T n³).
"""

# Paper letters W, M, S, D, A; see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgedp._validate import non_negative
from edgedp.accounting import mf, pndp, rdp

__all__ = [
    "MODEL",
    "SOURCE",
    "TRUST_MODEL",
    "MuffliatoResult",
    "pair_sums",
    "pndp_guarantees",
]

SOURCE = "Cyffers et al. 2022 (Muffliato), arXiv 2206.05091 Thm 11, corrected form (000 Fig. 2)"
"""Where the formula comes from (for reports)."""

TRUST_MODEL = (
    "one curious node that sees every message its neighbours send at every step, plus its "
    "own state, data and noise; zero-out adjacency at user level (every clipped gradient of "
    "the victim may change by at most the clip norm)"
)
"""The attacker and adjacency the guarantee holds against, in one sentence."""

MODEL = pndp.MODEL
"""Gradients fixed in advance, as paper 000 compares it (the LDP value is adaptive)."""

_SYMMETRY_TOL = 1e-10


@dataclass(frozen=True, slots=True, eq=False)
class MuffliatoResult:
    """All (attacker, victim) pairs of one run, as parallel arrays.

    Attributes:
        attacker, victim, distance: Per pair (hop distance from the attacker).
        pair_sum: S_{u→v} before the cap at T (module docstring).
        rho: RDP per unit order, ε(α)/α = min(T, S) Δ²/(2ν²), capped by the plan's LDP
            value; non-adaptive gradients (:data:`MODEL`).
        capped: Whether the LDP value was reported (the bound was not smaller).
        ldp: The plan's LDP guarantee (μ-GDP, certified for adaptive training).
        steps: T.
    """

    attacker: np.ndarray
    victim: np.ndarray
    distance: np.ndarray
    pair_sum: np.ndarray
    rho: np.ndarray
    capped: np.ndarray
    ldp: mf.LDPGuarantee
    steps: int

    def __len__(self) -> int:
        return int(self.victim.size)

    @property
    def ldp_rho(self) -> float:
        """ε(α)/α of the LDP guarantee, μ²/2."""
        return self.ldp.mu * self.ldp.mu / 2.0

    def rdp(self, order: float = 2.0) -> np.ndarray:
        """Per-pair Rényi DP ε_{u→v}(α) at ``order`` (α = 2: paper 000 Fig. 2)."""
        non_negative(order=order)
        return order * self.rho

    def epsilon(self, delta: float) -> np.ndarray:
        """Per-pair ε at ``delta`` from the linear RDP curve (:func:`rdp.epsilon`)."""
        uniq, inv = np.unique(self.rho, return_inverse=True)
        orders = np.asarray(rdp.DEFAULT_ORDERS)
        eps = [rdp.epsilon(orders, orders * float(r), delta=delta)[0] for r in uniq]
        return np.asarray(eps)[inv.ravel()]


def _stochastic_mixing(W) -> np.ndarray:
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise ValueError(f"Expected mixing to be a square n x n matrix, got shape {W.shape}.")
    if not np.all(np.isfinite(W)) or np.any(W < 0):
        raise ValueError("Expected mixing to be finite and non-negative.")
    if not np.allclose(W.sum(axis=1), 1.0, atol=1e-9, rtol=0):
        raise ValueError("Expected a row-stochastic mixing matrix (rows summing to 1).")
    return W


def _symmetric_mixing(W) -> np.ndarray:
    W = _stochastic_mixing(W)
    if not np.allclose(W, W.T, atol=_SYMMETRY_TOL, rtol=0):
        raise ValueError(
            "Expected a symmetric mixing matrix: Cyffers et al.'s theorem assumes a symmetric "
            "gossip matrix (use Metropolis-Hastings or max-degree weights)."
        )
    return W


def pair_sums(mixing, *, steps: int, edges=None) -> np.ndarray:
    """S_{u→v} for every victim u (rows) and attacker v (columns), before the cap at T.

    A W that is not symmetric is evaluated as paper 000's Fig. 2 code evaluates it, entry
    (u, w) of W^s over the squared norm of column w; the theorem is proved for symmetric W
    only, so :func:`pndp_guarantees` refuses such a W (this function certifies nothing).

    Args:
        mixing: W, row-stochastic n × n gossip matrix.
        steps: T, the number of gradient steps (one gossip step each).
        edges: Optional (E, 2) communication edges added to W's support.

    Returns:
        An n × n array; entry [u, v] is the sum of the module docstring.

    >>> W = np.array([[2, 1, 0], [1, 1, 1], [0, 1, 2]]) / 3  # path 0-1-2, MH weights
    >>> S = pair_sums(W, steps=2)
    >>> print(f"{S[2, 0]:.6f} {S[1, 0]:.6f}")  # by hand: (1/3)/(1/3); 2 + (1/3)/(1/3) + (1/3)/(5/9)
    1.000000 3.600000
    """
    W = _stochastic_mixing(mixing)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"Expected steps to be an integer >= 1, got {steps!r}.")
    n = W.shape[0]
    T = int(steps)
    M = np.zeros((n, n))
    P = np.eye(n)
    for s in range(T):
        M += (T - s) * P / np.einsum("ij,ij->j", P, P)  # ‖W^s e_w‖² > 0 (W^s stochastic)
        P = P @ W
    A = np.zeros((n, n))
    for v, heard in enumerate(pndp.receive_lists(W, edges)):
        A[heard, v] = 1.0
    A[np.arange(n), np.arange(n)] = 1.0  # the attacker's own column, w = v
    return M @ A


def pndp_guarantees(
    setting,
    *,
    attackers: Sequence[int] | None = None,
    victims: Sequence[int] | None = None,
) -> MuffliatoResult:
    """Cyffers et al.'s per-pair Rényi DP of a DP-D-SGD setting (module docstring).

    Args:
        setting: A :class:`edgedp.accounting.pndp.PNDPSetting` with the identity strategy,
            or a DP-D-SGD NoisePlan.
        attackers: Single attacker nodes (default: every node).
        victims: Victims (default: every other node).

    Returns:
        MuffliatoResult; ``rdp(α)`` is ε_{u→v}(α), ``epsilon(δ)`` the (ε, δ) it implies.

    Raises:
        ValueError: A strategy other than the identity, a mixing matrix that is not
            symmetric doubly stochastic, or node ids out of range.

    >>> from edgedp.accounting.participation import Participation
    >>> W = np.array([[2, 1, 0], [1, 1, 1], [0, 1, 2]]) / 3
    >>> s = pndp.PNDPSetting(W, np.eye(2), Participation(2, 1), noise_multiplier=1.0)
    >>> r = pndp_guarantees(s, attackers=[0], victims=[2])
    >>> print(f"{r.rdp(2.0)[0]:.6f} ldp={2 * r.ldp_rho:.1f}")  # 2 · min(2, 1) / (2 · 2)
    0.500000 ldp=1.0
    """
    if not isinstance(setting, pndp.PNDPSetting):
        setting = pndp.PNDPSetting.from_plan(setting)
    C = np.asarray(setting.strategy, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or not np.array_equal(C, np.eye(C.shape[0])):
        raise ValueError(
            "Cyffers et al.'s accounting covers independent noise per step (DP-D-SGD, "
            "strategy = identity); this setting correlates its noise over time."
        )
    T = C.shape[0]
    W = _symmetric_mixing(setting.mixing)
    n = W.shape[0]
    ldp = mf.ldp_guarantee(
        C, participation=setting.participation, noise_multiplier=setting.noise_multiplier
    )
    S = pair_sums(W, steps=T, edges=setting.edges)
    sigma = float(setting.noise_multiplier)
    std = sigma * ldp.sensitivity  # ν / Δ: the plan's per-step noise
    if std == math.inf:
        base = np.zeros_like(S)
    elif std == 0.0:
        base = np.where(S > 0, math.inf, 0.0)
    else:
        base = np.minimum(S, T) / (2.0 * std * std)
    ldp_rho = ldp.mu * ldp.mu / 2.0
    att = list(range(n)) if attackers is None else [_node("attackers", a, n) for a in attackers]
    lists = pndp.receive_lists(W, setting.edges)
    rows: dict[str, list] = {k: [] for k in ("a", "v", "d", "s", "r")}
    for a in att:
        vic = [v for v in range(n) if v != a] if victims is None else victims
        vic = [_node("victims", v, n) for v in vic if v != a]
        dist = pndp.hop_distances(lists, (a,))
        rows["a"] += [a] * len(vic)
        rows["v"] += vic
        rows["d"] += [dist[v] for v in vic]
        rows["s"] += [S[v, a] for v in vic]
        rows["r"] += [base[v, a] for v in vic]
    raw = np.asarray(rows["r"], dtype=np.float64)
    return MuffliatoResult(
        attacker=np.asarray(rows["a"], dtype=np.int64),
        victim=np.asarray(rows["v"], dtype=np.int64),
        distance=np.asarray(rows["d"], dtype=np.float64),
        pair_sum=np.asarray(rows["s"], dtype=np.float64),
        rho=np.minimum(raw, ldp_rho),
        capped=raw >= ldp_rho,
        ldp=ldp,
        steps=T,
    )


def _node(name: str, v, n: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < n:
        raise ValueError(f"Expected {name} to be node ids in [0, {n}), got {v!r}.")
    return int(v)
