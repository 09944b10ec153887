"""Pairwise Network DP (PNDP) accountant for DP-D-SGD and MF-D-SGD (paper 000, §7.1, App. A.2).

Trust model (``observer="node"``, the default). A colluding set 𝒜 of nodes observes the
messages θ_{t+½}^v it receives, i.e. from every neighbour v ∈ O = N(𝒜) \\ 𝒜 at every step
t < T, plus its own gradients and its own noise (000 App. A.2; its own messages are functions
of those). With C = C_local ⊗ I_n (C = I: DP-D-SGD) and time-major rows t·n + u, the view is

    O_𝒜 = [P W_T; K_G] G + [P W_T C⁻¹; K_Z] Z,

P = I_T ⊗ K_O selecting the rows of O, W_T the block Toeplitz workload (block (t, τ) =
W^{t−τ}), K_G, K_Z selecting the attackers' rows. Lemma 11 removes the known gradients:
Ã = [P W_T D; 0], B = [P W_T C⁻¹; K_Z] and Ã = B·(C D), D = I − K_Gᵀ K_G. Thm 7 with the
square (DESIGN §4) bounds victim v's sensitivity by max_{π ⊆ rows of v} Σ_{π×π} |X|, with
X = (CD)ᵀ B†B (CD). The K_Z rows are unit vectors on attacker coordinates, so B†B is the
projector onto those plus the projector onto the row space of M' = M̃ C̃⁻¹, where M̃ is P W_T
restricted to the non-attacker columns and C̃ = C_local ⊗ I. Hence, for every victim v,

    X_vv = M̃_vᵀ K⁻¹ M̃_v,   K = M' M'ᵀ   (mT × mT, m = |O|),                          (1)

with M̃_v the T columns of v: the Fisher information of the observed messages about v's
inputs when every other non-attacker input is noise. M̃ is unit block lower triangular on
the columns of O, so K is positive definite.

``observer="eavesdropper"`` is §7.1 Eq. 12, B_a = P_a W_T, for a tap on every link into 𝒜,
links between members included (a → a' is a link into a'): P_a selects the messages of
O = N(𝒜) = ∪_{a ∈ 𝒜} N(a), which holds every member with a neighbour in 𝒜. The tap knows
nobody's noise or gradients, so every input (members' too) stays noise and every column
enters K. Its view is a function of the curious members' view (a member knows what it
sends), so it learns no more than they do, and exactly as much when 𝒜 is connected with two
or more members (it then recovers every member's input from the tapped messages). It is the
right number for a tap and can be too small for a curious node.

Engines (private module ``_pndp_gram``), both exact:

* ``statespace`` (C_local lower-triangular Toeplitz: identity, AntiPGD, Toeplitz banded).
  Toeplitz C_local⁻¹ commutes with the time shift, so M̃ C̃⁻¹ = (C_local⁻¹ ⊗ I_m) M̃: the row
  spaces coincide and X_vv = C_localᵀ X⁰_vv C_local with X⁰ the C = I Gram. X⁰ comes from a
  Kalman filter, which factors K causally: messages m_t = W m_{t−1} + x_t, unit white
  inputs on unknown nodes, observed set O, hidden set U (V \\ O for "eavesdropper"; for
  "node" V \\ (O ∪ 𝒜) — a row of W at an attacker only touches O ∪ 𝒜). With P_t the
  posterior covariance of m_t[U]:
  S_t = W_OU P_{t−1} W_OUᵀ + I, K_t = W_UU P_{t−1} W_OUᵀ S_t⁻¹, F_t = W_UU − K_t W_OU,
  P_t = W_UU P_{t−1} W_UUᵀ + I − K_t S_t K_tᵀ, P_{−1} = 0. A unit input of victim v at step τ
  gives innovations ε_t(τ) and filter errors e_t(τ): ε_τ = 1_O(v), e_τ = 1_U(v) − K_τ ε_τ;
  for t > τ, ε_t = W_OU e_{t−1}, e_t = F_t e_{t−1}; X⁰[τ, τ'] = Σ_t ε_t(τ)ᵀ S_t⁻¹ ε_t(τ').
  With the backward Gramian Ω_{T−1} = 0, Ω_s = W_OUᵀ S_{s+1}⁻¹ W_OU + F_{s+1}ᵀ Ω_{s+1} F_{s+1}:

      X⁰[τ, τ'] = e_{τ'−1}(τ) · (W_OUᵀ S_{τ'}⁻¹ ε_{τ'}(τ') + F_{τ'}ᵀ Ω_{τ'} e_{τ'}(τ'))  (τ < τ'),

  X⁰[τ, τ] = ε_τᵀ S_τ⁻¹ ε_τ + e_τᵀ Ω_τ e_τ. The filter transient (t < t_s, until the gain is
  stationary to 1e-15) is swept exactly; afterwards the filter is time invariant and the
  propagation collapses to one vector per lag (details in ``_pndp_gram``). Time
  O(T·|U|³ + t_s²·|U|²·V + T·|U|²·V + T²·|U|·V) for V victims, memory O(T·|U|² + T²·V);
  never an nT × nT matrix. S_t ⪰ I, so the filter is well conditioned.
* ``dense`` (any C_local): forms K by accumulating M'_w M'_wᵀ over nodes, Cholesky, then
  X_vv = (L⁻¹M̃_v)ᵀ(L⁻¹M̃_v). Time O((mT)²·nT + (mT)³), memory O((mT)²).

Privacy. The noise std is ν = σ · sens_LDP · Δ (the plan's calibration), so the victim is
μ = sens_PNDP / (σ · sens_LDP)-GDP against 𝒜 and RDP(α) = αμ²/2. The LDP view contains every
PNDP view, so μ_LDP = 1/σ is valid too; the reported μ is min(bound, μ_LDP). A failed
numerical check gives the pair μ_LDP and a warning — never a smaller number. Patterns run
over victim v's rows {v, n+v, …} (Remark 8); (T, 1) is §7.1's user-level worst case.

Model (``MODEL``). As in paper 000's PNDP analysis, G is fixed in advance: every node's
gradients are given, not adaptive, and the view is Gaussian with a mean linear in G. The
PNDP μ is not certified for adaptive training: there another node's gradient depends on
its model, which carries victim messages 𝒜 never sees, and its own messages relay them
(path 0–1–2, 𝒜 = {0}, victim 2, T = 3, σ = 1, (3, 1): the bound is μ = 0.3397, while a
node 1 with gradient c·θ¹, ηc = −2, gives μ = 0.6583; tests/privacy/test_pndp_views.py).
Thm 7's adaptive argument needs every gradient to be a function of the attacker's view,
which holds for the LDP view (all messages): μ_LDP is certified for adaptive training, and
it also bounds every PNDP attacker, whose view is a function of the LDP view and of the
attackers' own data.
"""

# Paper letters W, C, K, P, O, U, X; see docs/NOTATION.md.
# ruff: noqa: N803, N806, E741

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from edgedp._validate import finite_array, integer, non_negative
from edgedp.accounting import _pndp_gram, gdp, mf
from edgedp.accounting.participation import Participation

__all__ = [
    "ASSUMPTION",
    "LDP_MODEL",
    "MODEL",
    "OBSERVERS",
    "PNDPResult",
    "PNDPSetting",
    "PairGuarantee",
    "check_size",
    "pndp_guarantees",
    "victim_grams",
    "view_matrices",
    "working_bytes",
]

OBSERVERS = ("node", "eavesdropper")
"""Trust models: a curious node set (App. A.2), or a tap on every link into the set, links
between members included (Eq. 12)."""

MODEL = "non-adaptive"
"""What the PNDP μ assumes: every node's gradients fixed in advance (module docstring, "Model")."""

LDP_MODEL = "adaptive"
"""The LDP μ reported beside it is certified for adaptive training (paper 000 Thm 7)."""

ASSUMPTION = (
    "PNDP mu/epsilon hold under paper 000's PNDP model, where every node's gradients are fixed "
    "in advance (non-adaptive). They are not certified for adaptive training: there another "
    "node's gradient depends on its model, which carries victim messages the attacker never "
    "sees. ldp_mu/ldp_epsilon are certified for adaptive training."
)
"""The two models in one sentence, for reports."""

_TOL = 1e-8  # relative slack of the numerical self-checks

#: Largest working memory :func:`pndp_guarantees` takes on (bytes, estimated): one T × T
#: Gram per victim and two temporaries of the same size (X, CᵀX, CᵀXC), plus C itself.
MAX_WORKING_BYTES = 8 * 2**30


def working_bytes(steps: int, victims: int) -> int:
    """The estimated peak memory of the victim Grams of ``victims`` victims over ``steps``
    steps: 8 bytes × T² × (3 per victim + C)."""
    return 8 * steps * steps * (3 * victims + 1)


def _check_plan_size(plan, attackers) -> None:
    """:func:`check_size` of a plan, before its T × T strategy is built (attackers that
    are not a sequence of ids are left to the argument checks)."""
    try:
        count = 1 if attackers is None else len(set(attackers))
    except TypeError:
        return
    check_size(plan.steps, plan.n - count)


def check_size(steps: int, victims: int) -> None:
    """ValueError naming the size when :func:`working_bytes` exceeds the limit."""
    need = working_bytes(steps, victims)
    if need > MAX_WORKING_BYTES:
        raise ValueError(
            f"PNDP accounting keeps a T x T Gram per victim: about {need / 2**30:.1f} GiB at "
            f"T = {steps} with {victims} victims, above the {MAX_WORKING_BYTES / 2**30:.0f} GiB "
            "it takes on; it is not computed at this size (the LDP guarantee is: "
            "edgedp account without --trust pndp)"
        )


_ROUND = 1e-12  # relative size below which an entry or a tie is rounding


@dataclass(frozen=True, slots=True, eq=False)
class PNDPSetting:
    """What the PNDP accountant needs: gossip matrix, strategy, participation, σ, edges.

    Attributes:
        mixing: W, n × n row-stochastic gossip matrix.
        strategy: C_local, T × T lower-triangular (identity for DP-D-SGD).
        participation: Local (k, b) participation of one record.
        noise_multiplier: σ; the noise std is σ · sens_LDP · Δ.
        edges: Optional (E, 2) communication edges; a node receives from its graph
            neighbours and from every v with W[u, v] != 0 or W[v, u] != 0.
    """

    mixing: np.ndarray
    strategy: np.ndarray
    participation: Participation
    noise_multiplier: float
    edges: np.ndarray | None = None

    @classmethod
    def from_plan(cls, plan) -> PNDPSetting:
        """The setting of a :class:`edgedp.plan.NoisePlan` (its factor over its T steps).

        Raises:
          ValueError: the plan's noise is not independent across nodes (cross-agent or
            Laplace plans); this accountant would credit cancellations it cannot see.
        """
        if getattr(plan, "cross_agent", None) is not None or getattr(plan, "laplace", None):
            raise ValueError(
                f"PNDP accounting assumes independent Gaussian noise per node; plan mechanism "
                f"{plan.mechanism!r} is certified by its own accountant instead."
            )
        if getattr(plan, "sketch", None) is not None:
            # DOME mixes only inside span(S_t): its messages are not D-SGD's W-mixed models,
            # so the decoder B_a = P_a W_T of 000 §7.1 does not describe what an attacker sees
            raise ValueError(
                "PNDP accounting is derived for D-SGD's model messages; 'dome' plans send "
                "sketched models and are certified under LDP only "
                "(edgedp.families.dome.accounting)."
            )
        return cls(
            mixing=plan.mixing_matrix(),
            strategy=plan.factor.strategy(plan.steps),
            participation=plan.participation,
            noise_multiplier=plan.noise_multiplier,
            edges=np.asarray(plan.edges),
        )


@dataclass(frozen=True, slots=True)
class PairGuarantee:
    """μ-GDP of one victim against one attacker set, with the LDP value beside it.

    ``mu`` holds under :data:`MODEL` (gradients fixed in advance, not adaptive); ``ldp_mu``
    is certified for adaptive training (:data:`LDP_MODEL`).
    """

    attackers: tuple[int, ...]
    victim: int
    distance: float
    sensitivity: float
    mu: float
    exact: bool
    ldp_mu: float

    @property
    def rdp_alpha2(self) -> float:
        """Rényi DP at α = 2: αμ²/2 = μ² (paper 000, Fig. 2)."""
        return self.mu * self.mu

    def epsilon(self, delta: float) -> float:
        """Smallest ε with (ε, delta)-DP for this pair; see :func:`gdp.epsilon`."""
        return gdp.epsilon(self.mu, delta=delta)


@dataclass(frozen=True, slots=True, eq=False)
class PNDPResult:
    """All pairs of one accounting run as parallel arrays, one entry per pair.

    ``mu`` (and ``epsilon``, ``rdp``) hold under :data:`MODEL`: every node's gradients fixed
    in advance, not adaptive. ``ldp`` is certified for adaptive training (:data:`LDP_MODEL`).

    Attributes:
        attacker_sets: The attacker sets; ``attacker_index`` points into it.
        attacker_index, victim: Per pair.
        distance: Hop distance from the attacker set (inf if unreachable).
        sensitivity: Thm 7 bound, capped at the LDP sensitivity.
        mu: GDP parameter, <= ldp.mu; non-adaptive gradients (:data:`MODEL`).
        exact: The bound is attained (no negative entry in a maximizing block, no cap).
        capped: Thm 7's PNDP bound exceeded the LDP one (or a check failed): LDP reported.
        ldp: The LDP guarantee of the same setting, certified for adaptive training.
        observer: "node" or "eavesdropper".
        method: Engine used: "statespace" or "dense".
    """

    attacker_sets: tuple[tuple[int, ...], ...]
    attacker_index: np.ndarray
    victim: np.ndarray
    distance: np.ndarray
    sensitivity: np.ndarray
    mu: np.ndarray
    exact: np.ndarray
    capped: np.ndarray
    ldp: mf.LDPGuarantee
    observer: str
    method: str

    def __len__(self) -> int:
        return int(self.victim.size)

    @property
    def ldp_mu(self) -> float:
        """μ of the same plan against the LDP attacker (1/σ), certified for adaptive training."""
        return self.ldp.mu

    @property
    def model(self) -> str:
        """What ``mu`` assumes: :data:`MODEL`, "non-adaptive" (gradients fixed in advance)."""
        return MODEL

    def rdp(self, order: float = 2.0) -> np.ndarray:
        """Per-pair RDP αμ²/2 at ``order`` (α = 2 gives μ², paper 000 Fig. 2)."""
        non_negative(order=order)
        return order * self.mu * self.mu / 2.0

    def epsilon(self, delta: float) -> np.ndarray:
        """Per-pair ε at ``delta`` (one root search per distinct μ)."""
        uniq, inv = np.unique(self.mu, return_inverse=True)
        return np.array([gdp.epsilon(float(m), delta=delta) for m in uniq])[inv.ravel()]

    def pairs(self) -> list[PairGuarantee]:
        """The pairs as records, in computation order."""
        cols = (self.attacker_index, self.victim, self.distance, self.sensitivity, self.mu)
        return [
            PairGuarantee(
                self.attacker_sets[a], int(v), float(d), float(s), float(m), bool(e), self.ldp.mu
            )
            for (a, v, d, s, m), e in zip(zip(*cols, strict=True), self.exact, strict=True)
        ]


# ----------------------------------------------------------------------------- helpers
def _mixing(W) -> np.ndarray:
    W = finite_array("mixing", W).astype(np.float64, copy=False)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise ValueError(f"Expected mixing to be a square n x n matrix, got shape {W.shape}.")
    return W


def _strategy(C) -> np.ndarray:
    C = finite_array("strategy", C).astype(np.float64, copy=False)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] == 0:
        raise ValueError(f"Expected strategy to be a square T x T matrix, got shape {C.shape}.")
    if np.any(np.triu(C, 1)) or np.any(np.diagonal(C) == 0):
        raise ValueError("Expected strategy to be lower-triangular with a nonzero diagonal.")
    return C


def _nodes(name: str, nodes, n: int) -> tuple[int, ...]:
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, (Sequence, np.ndarray)):
        raise TypeError(f"Expected {name} to be a sequence of node ids, got {nodes!r}.")
    out = []
    for u in nodes:
        integer(0, **{name: u})
        if u >= n:
            raise ValueError(f"Expected every {name} < n={n}, got {u}.")
        out.append(int(u))
    if len(set(out)) != len(out):
        raise ValueError(f"Expected {name} without repeated nodes, got {out}.")
    return tuple(out)


def _observer(observer: str) -> str:
    if observer not in OBSERVERS:
        raise ValueError(f"Expected observer in {OBSERVERS}, got {observer!r}.")
    return observer


def receive_lists(W: np.ndarray, edges) -> list[np.ndarray]:
    """Whom each node hears: W's off-diagonal support (both directions) ∪ graph edges."""
    A = (W != 0) | (W.T != 0)
    if edges is not None:
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if e.size and (e.min() < 0 or e.max() >= W.shape[0]):
            raise ValueError(f"Expected edges with node ids in [0, {W.shape[0]}).")
        A[e[:, 0], e[:, 1]] = True
        A[e[:, 1], e[:, 0]] = True
    np.fill_diagonal(A, False)
    return [np.flatnonzero(row) for row in A]


def hop_distances(lists: list[np.ndarray], sources: tuple[int, ...]) -> np.ndarray:
    """Hop distance of every node from the nearest source (inf if unreachable)."""
    dist = np.full(len(lists), math.inf)
    frontier = list(sources)
    dist[frontier] = 0.0
    d = 0
    while frontier:
        d += 1
        frontier = sorted({int(v) for u in frontier for v in lists[u] if dist[v] == math.inf})
        dist[frontier] = d
    return dist


def _is_toeplitz(C: np.ndarray) -> bool:
    i, j = np.tril_indices(C.shape[0])
    return bool(np.array_equal(C[i, j], C[i - j, 0]))


def _block_sums(X: np.ndarray, part: Participation) -> tuple[np.ndarray, np.ndarray]:
    """Per victim: max over patterns of Σ|X[π, π]|, and whether a maximizer has no X < 0.

    Same windows as :meth:`Participation.patterns` (strided views, no copies).
    """
    nv, T, _ = X.shape
    if nv == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    absX = np.abs(X)
    scale = absX.reshape(nv, -1).max(axis=1, initial=0.0)[:, None, None]
    negX = (X < -_ROUND * scale).astype(np.int64)  # rounding-level negatives do not count
    sum_parts: list[np.ndarray] = []
    neg_parts: list[np.ndarray] = []
    for r in range(min(part.b, T)):
        kk = min(part.k, len(range(r, T, part.b)))
        for src, out in ((absX, sum_parts), (negX, neg_parts)):
            sub = src[:, r : T : part.b, r : T : part.b]
            s0, s1, s2 = sub.strides
            w = as_strided(sub, (nv, sub.shape[1] - kk + 1, kk, kk), (s0, s1 + s2, s1, s2))
            out.append(w.sum(axis=(2, 3)))
    sums, negs = np.concatenate(sum_parts, axis=1), np.concatenate(neg_parts, axis=1)
    best = sums.max(axis=1)
    exact = np.any((sums >= best[:, None] * (1 - _ROUND)) & (negs == 0), axis=1)
    return best, exact


def _split(W, A: tuple[int, ...], edges, observer: str):
    """Observed O, hidden U and noisy nodes of attacker set A under the trust model.

    The observer sees the links into A. Curious nodes know their own inputs, hence what
    members send each other: O = N(A) \\ A. A tap knows no input: O = N(A), members that
    send to a member included (their messages travel on tapped links), and every node is noisy.
    """
    n = W.shape[0]
    lists = receive_lists(W, edges)
    senders = set(np.concatenate([lists[a] for a in A]).tolist())  # lists exclude self
    known = set(A) if observer == "node" else set()
    O = sorted(senders - known)
    U = [w for w in range(n) if w not in known and w not in senders]
    noisy = [w for w in range(n) if w not in known]
    return O, U, noisy


# ----------------------------------------------------------------------------- Gram blocks
def victim_grams(
    mixing,
    *,
    attackers: Sequence[int],
    strategy,
    victims: Sequence[int] | None = None,
    edges=None,
    observer: str = "node",
    method: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Each victim's T × T block of X = (CD)ᵀ B†B (CD) (paper 000 Thm 7, App. A.2; Eq. 1).

    Args:
        mixing: W (n × n).
        attackers: One colluding set 𝒜 (non-empty).
        strategy: C_local (T × T, lower-triangular, nonzero diagonal).
        victims: Victims outside 𝒜 (default: all of them).
        edges: Optional (E, 2) communication edges (see :class:`PNDPSetting`).
        observer: "node" (App. A.2) or "eavesdropper" (Eq. 12; a tap on every link into
            𝒜, links between members included).
        method: "auto" (statespace when C_local is Toeplitz, else dense), "statespace"
            or "dense".

    Returns:
        (victims as an int64 array, X of shape (victims, T, T)).

    Raises:
        ValueError: On bad shapes, node ids, or "statespace" with a non-Toeplitz strategy.
        FloatingPointError, numpy.linalg.LinAlgError: If a numerical check fails.

    >>> W = np.full((3, 3), 1 / 3)  # complete graph: node 0 receives every message
    >>> _, X = victim_grams(W, attackers=[0], strategy=np.eye(2))
    >>> print(np.round(X[0], 12))
    [[1. 0.]
     [0. 1.]]
    """
    W, C = _mixing(mixing), _strategy(strategy)
    n, T = W.shape[0], C.shape[0]
    A = _nodes("attackers", attackers, n)
    if not A:
        raise ValueError("Expected at least one attacker.")
    vic = [v for v in range(n) if v not in A] if victims is None else _nodes("victims", victims, n)
    if set(vic) & set(A):
        raise ValueError(f"Expected victims outside the attacker set {list(A)}.")
    toeplitz = _is_toeplitz(C)
    if method == "auto":
        method = "statespace" if toeplitz else "dense"
    if method not in ("statespace", "dense"):
        raise ValueError(f"Expected method in ('auto', 'statespace', 'dense'), got {method!r}.")
    if method == "statespace" and not toeplitz:
        raise ValueError("method='statespace' needs a Toeplitz strategy; use 'dense'.")
    O, U, noisy = _split(W, A, edges, _observer(observer))
    vic_arr = np.asarray(vic, dtype=np.int64)
    if not vic or not O:
        return vic_arr, np.zeros((len(vic), T, T))
    if method == "dense":
        X = _pndp_gram.dense_grams(W, O, noisy, C, vic)
    else:
        X = _pndp_gram.statespace_grams(W, T, O, U, vic)
        if not np.array_equal(C, np.eye(T)):
            X = C.T @ X @ C
    bound = np.einsum("ij,ij->j", C, C)  # X ⪯ CᵀC, so 0 <= X[s,s] <= (CᵀC)[s,s]
    diag = np.diagonal(X, axis1=1, axis2=2)
    if np.any(diag < -_TOL * bound) or np.any(diag > bound * (1 + _TOL)):
        raise FloatingPointError("victim Gram violates 0 <= X_vv[s,s] <= (CᵀC)[s,s]")
    return vic_arr, X


def view_matrices(
    mixing, *, attackers: Sequence[int], strategy, edges=None, observer: str = "node"
):
    """The attacker-view matrices (A, B, C) with A = B C, materialized (O(n²T²) memory).

    For tests and small examples. P selects the rows of the observed senders O (see the
    module docstring). "node": Ã = [P W_T D; 0], B = [P W_T C⁻¹; K_Z], C·D (App. A.2 after
    Lemma 11), O = N(𝒜) \\ 𝒜. "eavesdropper": P W_T, P W_T C⁻¹, C (Eq. 12), O = N(𝒜), the
    members that send to a member included.

    >>> W = np.array([[0.5, 0.5], [0.5, 0.5]])
    >>> A_t, B, CD = view_matrices(W, attackers=[0], strategy=np.eye(2))
    >>> print(A_t.shape, B.shape, bool(np.allclose(A_t, B @ CD)))
    (4, 4) (4, 4) True
    """
    W, Cl = _mixing(mixing), _strategy(strategy)
    n, T = W.shape[0], Cl.shape[0]
    A = _nodes("attackers", attackers, n)
    O, _, _ = _split(W, A, edges, _observer(observer))
    WT = np.zeros((n * T, n * T))
    power = np.eye(n)
    for k in range(T):
        for t in range(k, T):
            WT[t * n : (t + 1) * n, (t - k) * n : (t - k + 1) * n] = power
        power = power @ W
    C = np.kron(Cl, np.eye(n))
    PW = WT[[t * n + i for t in range(T) for i in O]]
    B = PW @ np.kron(np.linalg.inv(Cl), np.eye(n))
    if observer == "eavesdropper":
        return PW, B, C
    att_rows = [t * n + a for t in range(T) for a in A]
    KZ = np.eye(n * T)[att_rows]
    D = np.eye(n * T)
    D[att_rows, att_rows] = 0.0
    return np.vstack([PW @ D, np.zeros_like(KZ)]), np.vstack([B, KZ]), C @ D


# ----------------------------------------------------------------------------- accountant
def pndp_guarantees(
    setting,
    *,
    attackers: Sequence[int] | None = None,
    victims: Sequence[int] | None = None,
    observer: str = "node",
    method: str = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> PNDPResult:
    """PNDP μ-GDP of every (attacker set, victim) pair (paper 000 Thm 7, §7.1, App. A.2).

    The PNDP μ holds under :data:`MODEL`: every node's gradients fixed in advance, not
    adaptive. Only the LDP μ reported beside it is certified for adaptive training.

    Args:
        setting: A :class:`PNDPSetting` or a NoisePlan.
        attackers: One colluding set; None means every single node in turn.
        victims: Victims (default: every node outside the attacker set).
        observer: "node" (curious nodes, App. A.2) or "eavesdropper" (Eq. 12: a tap on
            every link into the set, links between members included).
        method: Engine, see :func:`victim_grams`.
        progress: Optional callback(done, total) after each attacker set.

    Returns:
        PNDPResult, μ = min(sens, sens_LDP) / (σ · sens_LDP) per pair, so μ <= μ_LDP;
        non-adaptive gradients (``result.model``).

    Raises:
        ValueError, TypeError: On invalid settings, node ids, observer or method, or a
            horizon whose Grams need more than :data:`MAX_WORKING_BYTES`.

    >>> W = np.array([[2, 1, 0], [1, 1, 1], [0, 1, 2]]) / 3  # path 0-1-2, MH weights
    >>> s = PNDPSetting(W, np.eye(2), Participation(2, 1), noise_multiplier=1.0)
    >>> r = pndp_guarantees(s, attackers=[0], victims=[2])
    >>> print(f"{r.mu[0]:.6f} ldp={r.ldp_mu}")  # closed form sqrt(1/10) / sqrt(2)
    0.223607 ldp=1.0
    """
    if not isinstance(setting, PNDPSetting):  # refused before C (T × T) is built
        _check_plan_size(setting, attackers)
        setting = PNDPSetting.from_plan(setting)
    W, C = _mixing(setting.mixing), _strategy(setting.strategy)
    n = W.shape[0]
    if not isinstance(setting.participation, Participation):
        raise TypeError("Expected setting.participation to be a Participation.")
    _observer(observer)
    ldp = mf.ldp_guarantee(
        C, participation=setting.participation, noise_multiplier=setting.noise_multiplier
    )
    sets = [(u,) for u in range(n)] if attackers is None else [_nodes("attackers", attackers, n)]
    check_size(C.shape[0], n - min(len(set(A)) for A in sets))
    wanted = tuple(range(n)) if victims is None else _nodes("victims", victims, n)
    if attackers is not None and set(wanted) & set(sets[0]) and victims is not None:
        raise ValueError(f"Expected victims outside the attacker set {list(sets[0])}.")
    lists = receive_lists(W, setting.edges)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("a", "v", "d", "s", "e", "c")}
    for i, A in enumerate(sets):
        vic = [v for v in wanted if v not in A]
        try:
            vic_arr, X = victim_grams(
                W,
                attackers=A,
                strategy=C,
                victims=vic,
                edges=setting.edges,
                observer=observer,
                method=method,
            )
            sums, exact = _block_sums(X, setting.participation)
            sens = np.sqrt(sums)
        except (FloatingPointError, np.linalg.LinAlgError) as exc:
            warnings.warn(
                f"PNDP accounting for attackers {list(A)} failed a numerical check ({exc}); "
                "reporting the LDP guarantee for its victims.",
                RuntimeWarning,
                stacklevel=2,
            )
            vic_arr = np.asarray(vic, dtype=np.int64)
            sens, exact = np.full(len(vic), math.inf), np.zeros(len(vic), dtype=bool)
        capped = sens > ldp.sensitivity
        cols["s"].append(np.where(capped, ldp.sensitivity, sens))
        cols["e"].append(exact & ~capped)
        cols["c"].append(capped)
        cols["a"].append(np.full(vic_arr.size, i, dtype=np.int64))
        cols["v"].append(vic_arr)
        cols["d"].append(hop_distances(lists, A)[vic_arr])
        if progress is not None:
            progress(i + 1, len(sets))
    sens = np.concatenate(cols["s"])
    sigma = float(setting.noise_multiplier)
    if sigma == math.inf:
        mu = np.zeros_like(sens)
    elif sigma == 0.0:
        mu = np.where(sens > 0, math.inf, 0.0)
    else:
        mu = np.minimum(sens / (sigma * ldp.sensitivity), ldp.mu)
    toeplitz = _is_toeplitz(C)
    return PNDPResult(
        attacker_sets=tuple(sets),
        attacker_index=np.concatenate(cols["a"]),
        victim=np.concatenate(cols["v"]),
        distance=np.concatenate(cols["d"]),
        sensitivity=sens,
        mu=mu,
        exact=np.concatenate(cols["e"]),
        capped=np.concatenate(cols["c"]),
        ldp=ldp,
        observer=observer,
        method="statespace" if method != "dense" and toeplitz else "dense",
    )
