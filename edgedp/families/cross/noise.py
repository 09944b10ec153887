"""Noise correlated across agents: the plan section, each device's share, and its generation.

Paper 001 (Whisper D-SGD) §III: at every step the nodes' noises are jointly Gaussian,
``v ~ N(0, ν² R̃ ⊗ I_d)``, with a normalized covariance (docs/NOTATION.md)

    R̃ = diag(D) + U Uᵀ + Σ_{e=(i,j)} c_e (e_i − e_j)(e_i − e_j)ᵀ,

built so that every node generates only its own row (001 Remark 1, but never with a full
dense square root):

* ``D`` — the node's *independent* part, from its own secret stream (``√D_u · ν z_u``);
* ``U`` (n × r) — a low-rank part from streams every node derives from a shared seed
  (``Σ_k ν U[u, k] s_k``); r = n with ``U = (R̃ − D)^½`` is the dense Remark-1 form;
* ``c`` (one per edge, i < j) — a graph-local part from per-edge streams known only to
  the edge's two ends: node i adds ``+ν√c_e e_t``, node j adds ``−ν√c_e e_t``, so the pair
  cancels in any sum (DECOR, 001 §II-B: R̃ = σ²_pair I + σ²_cor L is D = σ²_pair,
  c = σ²_cor).

Zip-DL (paper 000 App. A.6) adds one noise per outgoing *message*: the message to
recipient j is ``√D_u ν z_u + ν√m (y_j − w_j Σ_k w_k y_k / Σ_k w_k²)``, with w_j = W[j, u]
the recipient's weight, so the message-wise parts cancel in the weighted sum the
recipients form. Muffliato (000 App. A.4) uses D = 1 and ``gossip_rounds`` K.

Per-node cost per step: (1 + r + deg_u)·d normal draws (dense: (1 + n)·d). Keys
(:mod:`edgedp.streams`, bound to the plan hash and the run): in simulations every stream
comes from the plan seed; on devices per-edge keys come from
:func:`edgedp.keys.pairwise_secret` (:func:`edgedp.streams.edge_key`) and the shared seed is
not available — neither is ever in a plan file.
Every operation is elementwise or a fixed-order sum, so one node's noise has the same bits
alone and inside the batch engine's ``(trials, nodes)`` stack.
"""

# Paper letters D, U, R (covariance factors): see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgedp import _validate, mechanisms, rng

__all__ = [
    "CrossAgentSpec",
    "CrossKeys",
    "CrossNoise",
    "NodeCrossAgent",
    "gaussian_draws",
    "reverse_slots",
]


def _vector(name: str, x: Any, length: int | None = None) -> np.ndarray:
    arr = _validate.finite_array(name, x).astype(np.float64).reshape(-1)
    if length is not None and arr.size != length:
        raise ValueError(f"Expected {name} to have {length} entries, got {arr.size}.")
    if np.any(arr < 0):
        raise ValueError(f"Expected {name} >= 0 everywhere.")
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class CrossAgentSpec:
    """A plan's cross-agent section: normalized covariance factors (scaled by the plan's ν).

    Attributes:
      kind: a mechanism of the registry's family ``cross`` (:mod:`edgedp.mechanisms`).
      diag: D (n,), variance of each node's independent part (> 0).
      factor: U (n, r), shared-seed part; r = 0 when absent.
      edge_variance: c (|E|,) aligned with the plan's sorted edges; all 0 when absent.
      message_variance: m, Zip-DL's message-wise part (0 otherwise).
      gossip_rounds: K, Muffliato's gossip rounds per gradient step (1 otherwise).
      info: planner facts kept with the plan (form, rank, utility ratio, ...); hashed.
    """

    kind: str
    diag: np.ndarray
    factor: np.ndarray
    edge_variance: np.ndarray
    message_variance: float = 0.0
    gossip_rounds: int = 1
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in (kinds := mechanisms.names(family="cross")):
            raise ValueError(f"Unknown cross-agent kind={self.kind!r}; expected one of {kinds}.")
        D = _vector("diag", self.diag)
        if D.size == 0 or np.any(D <= 0):
            raise ValueError("Expected diag > 0 for every node (the independent part).")
        U = _validate.finite_array("factor", self.factor).astype(np.float64)
        U = U.reshape(D.size, -1) if U.size else np.zeros((D.size, 0))
        object.__setattr__(self, "diag", D)
        object.__setattr__(self, "factor", U)
        object.__setattr__(self, "edge_variance", _vector("edge_variance", self.edge_variance))
        _validate.non_negative(message_variance=self.message_variance)
        _validate.integer(minimum=1, gossip_rounds=self.gossip_rounds)
        object.__setattr__(self, "message_variance", float(self.message_variance))
        object.__setattr__(self, "gossip_rounds", int(self.gossip_rounds))

    @property
    def n(self) -> int:
        return int(self.diag.size)

    @property
    def rank(self) -> int:
        return int(self.factor.shape[1])

    def covariance(self, edges: np.ndarray) -> np.ndarray:
        """R̃ = diag(D) + U Uᵀ + Σ_e c_e a_e a_eᵀ (n × n), the per-node noise covariance / ν²."""
        R = np.diag(self.diag) + self.factor @ self.factor.T
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if self.edge_variance.size:
            if self.edge_variance.size != len(e):
                raise ValueError(
                    f"Expected {len(e)} edge variances (one per edge), "
                    f"got {self.edge_variance.size}."
                )
            c = self.edge_variance
            np.add.at(R, (e[:, 0], e[:, 0]), c)
            np.add.at(R, (e[:, 1], e[:, 1]), c)
            np.add.at(R, (e[:, 0], e[:, 1]), -c)
            np.add.at(R, (e[:, 1], e[:, 0]), -c)
        return R

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "diag": self.diag,
            "factor": self.factor,
            "edge_variance": self.edge_variance,
            "message_variance": self.message_variance,
            "gossip_rounds": self.gossip_rounds,
            "info": dict(self.info),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrossAgentSpec:
        return cls(
            kind=str(d["kind"]),
            diag=np.asarray(d["diag"], dtype=np.float64),
            factor=np.asarray(d["factor"], dtype=np.float64),
            edge_variance=np.asarray(d["edge_variance"], dtype=np.float64),
            message_variance=float(d["message_variance"]),
            gossip_rounds=int(d["gossip_rounds"]),
            info=dict(d.get("info", {})),
        )

    def node(self, u: int, *, edges, neighbours, weights) -> NodeCrossAgent:
        """Node ``u``'s share: its own row of every factor (nothing about other nodes).

        ``neighbours``/``weights`` are u's padded mixing row (the recipients of Zip-DL
        messages, whose weights w_j = W[j, u] equal W[u, j] for the symmetric W it needs).
        """
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        terms = []
        if self.edge_variance.size:
            touching = ((e[:, 0] == u) | (e[:, 1] == u)) & (self.edge_variance > 0)
            for idx in np.flatnonzero(touching):
                i, j = int(e[idx, 0]), int(e[idx, 1])
                sign = 1.0 if u == i else -1.0
                terms.append((j if u == i else i, sign * float(np.sqrt(self.edge_variance[idx]))))
        terms.sort()
        return NodeCrossAgent(
            kind=self.kind,
            node=int(u),
            diag_sqrt=float(np.sqrt(self.diag[u])),
            factor_row=tuple(float(x) for x in self.factor[u]),
            edge_terms=tuple(terms),
            message_scale=float(np.sqrt(self.message_variance)),
            recipients=tuple(v != u for v in neighbours),
            recipient_weights=tuple(
                float(w) if v != u else 0.0 for v, w in zip(neighbours, weights, strict=True)
            ),
            gossip_rounds=self.gossip_rounds,
        )


@dataclass(frozen=True, slots=True)
class NodeCrossAgent:
    """One device's cross-agent share (its row of D, U, its edges' ±√c_e, its recipients)."""

    kind: str
    node: int
    diag_sqrt: float
    factor_row: tuple[float, ...]
    edge_terms: tuple[tuple[int, float], ...]  # (neighbour, ±√c_e), by neighbour id
    message_scale: float
    recipients: tuple[bool, ...]  # per padded-row slot: a real recipient (not self/padding)
    recipient_weights: tuple[float, ...]
    gossip_rounds: int = 1


@dataclass(frozen=True, slots=True)
class CrossKeys:
    """The extra streams a node needs: shared seed, per-edge keys, own message stream."""

    shared: rng.StreamKey | None = None
    pairs: Mapping[int, rng.StreamKey] = field(default_factory=dict)
    messages: rng.StreamKey | None = None


def gaussian_draws(keys: np.ndarray, step: int, shape: tuple[int, ...]) -> np.ndarray:
    """``rng.gaussian(key, step, shape)`` for every key, stacked: ``keys.shape + shape``.

    Bit for bit the per-key calls (tested), through :func:`edgedp.rng.stacked`.

    >>> keys = np.array([rng.derive_key(b"doc", "x", u) for u in range(2)], dtype=object)
    >>> bool(np.array_equal(gaussian_draws(keys, 3, (4,))[1], rng.gaussian(keys[1], 3, (4,))))
    True
    """
    return rng.stacked(keys, step, shape, lambda gen: gen.standard_normal(shape))


def reverse_slots(mixing_index: np.ndarray) -> np.ndarray:
    """For row u, slot j (sender v = index[u, j]): the slot of u in v's row.

    Per-slot (Zip-DL) messages are gathered as ``message[..., index, reverse_slots(index), :]``.
    Self and padding entries map to u's own self slot.

    >>> reverse_slots(np.array([[0, 1, 0], [0, 1, 2], [1, 2, 2]])).tolist()
    [[0, 0, 0], [1, 1, 0], [2, 1, 1]]
    """
    index = np.asarray(mixing_index, dtype=np.int64)
    n, m = index.shape
    out = np.empty_like(index)
    for u in range(n):
        for j in range(m):
            v = int(index[u, j])
            out[u, j] = int(np.flatnonzero(index[v] == u)[0])
    return out


@dataclass(frozen=True, slots=True, eq=False)
class CrossNoise:
    """Adds a plan's cross-agent components to the nodes' own noise, for one node or a stack.

    Build it with :meth:`for_node` (one device) or :meth:`for_plan` (the batch engine);
    :meth:`compose` takes the node's own noise ``ν z`` (shape ``(..., d)``) and returns
    its full noise (``(..., d)``, or ``(..., m, d)`` per padded-row slot for Zip-DL).
    """

    kind: str
    scale: float  # ν
    diag_sqrt: np.ndarray  # (...,) broadcast against the node axis
    factor: np.ndarray  # (..., r)
    shared_keys: np.ndarray  # (trials,) object; empty when r = 0
    edge_coef: np.ndarray  # (..., s) ±√c_e per incident-edge slot (0 at padding)
    edge_valid: np.ndarray  # (..., s) bool
    edge_keys: np.ndarray  # (..., s) object (None at padding)
    message_scale: float
    recipients: np.ndarray  # (..., m) bool
    recipient_weights: np.ndarray  # (..., m)
    message_keys: np.ndarray  # (...) object, Zip-DL only
    shared_axis: int = 0  # number of node axes to insert after the trial axis for U·s
    # each edge is drawn once per step and used by both ends: the distinct edge keys, and
    # for each slot of ``edge_keys`` the position of its key among them (−1 at padding)
    _edge_unique: np.ndarray = field(init=False, repr=False)
    _edge_slot: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        position: dict[rng.StreamKey, int] = {}
        slot = np.full(self.edge_keys.shape, -1, dtype=np.int64)
        for index in np.ndindex(self.edge_keys.shape):
            key = self.edge_keys.item(index)
            if key is not None:
                slot[index] = position.setdefault(key, len(position))
        unique = np.empty(len(position), dtype=object)
        unique[:] = list(position)
        object.__setattr__(self, "_edge_unique", unique)
        object.__setattr__(self, "_edge_slot", slot)

    @classmethod
    def for_node(cls, share: NodeCrossAgent, keys: CrossKeys, *, scale: float) -> CrossNoise:
        terms = share.edge_terms
        edge_keys = np.empty(len(terms), dtype=object)
        for j, (v, _) in enumerate(terms):
            if v not in keys.pairs:
                raise ValueError(f"node {share.node}: no pairwise key for neighbour {v}.")
            edge_keys[j] = keys.pairs[v]
        if share.factor_row and keys.shared is None:
            raise ValueError(f"node {share.node}: the plan needs the shared seed's key.")
        if mechanisms.get(share.kind).has("message_noise") and keys.messages is None:
            raise ValueError(f"node {share.node}: {share.kind} needs its message stream key.")
        return cls(
            kind=share.kind,
            scale=float(scale),
            diag_sqrt=np.asarray(share.diag_sqrt),
            factor=np.asarray(share.factor_row, dtype=np.float64),
            shared_keys=np.array(keys.shared if share.factor_row else None, dtype=object),
            edge_coef=np.asarray([c for _, c in terms], dtype=np.float64),
            edge_valid=np.ones(len(terms), dtype=bool),
            edge_keys=edge_keys,
            message_scale=share.message_scale,
            recipients=np.asarray(share.recipients, dtype=bool),
            recipient_weights=np.asarray(share.recipient_weights, dtype=np.float64),
            message_keys=np.array(keys.messages, dtype=object),
        )

    @classmethod
    def for_plan(cls, plan, keys, trial_ids) -> CrossNoise:
        """All nodes of ``plan`` for the given simulation trials (batch engine); ``keys`` is
        the run's :class:`edgedp.streams.RunKeys`."""
        spec = plan.cross_agent
        n, trials = plan.n, list(trial_ids)
        shares = [plan.share(u).cross_agent for u in range(n)]
        s = max((len(sh.edge_terms) for sh in shares), default=0)
        coef, valid = np.zeros((n, s)), np.zeros((n, s), dtype=bool)
        edge_keys = np.empty((len(trials), n, s), dtype=object)
        message_keys = np.empty((len(trials), n), dtype=object)
        for i, tr in enumerate(trials):
            for u, sh in enumerate(shares):
                message_keys[i, u] = keys.messages(u, trial=tr)
                for j, (v, c) in enumerate(sh.edge_terms):
                    coef[u, j], valid[u, j] = c, True
                    edge_keys[i, u, j] = keys.pair(u, v, trial=tr)
        shared = np.array([keys.shared(trial=tr) for tr in trials], dtype=object)
        return cls(
            kind=spec.kind,
            scale=float(plan.noise_std),
            diag_sqrt=np.sqrt(spec.diag),
            factor=spec.factor,
            shared_keys=shared if spec.rank else np.empty(0, dtype=object),
            edge_coef=coef,
            edge_valid=valid,
            edge_keys=edge_keys,
            message_scale=float(np.sqrt(spec.message_variance)),
            recipients=np.array([sh.recipients for sh in shares], dtype=bool),
            recipient_weights=np.array([sh.recipient_weights for sh in shares]),
            message_keys=message_keys,
            shared_axis=1,
        )

    def compose(self, own: np.ndarray, step: int) -> np.ndarray:
        """The full noise of ``step`` from the node's own noise ``own = ν z`` (``(..., d)``)."""
        d = own.shape[-1]
        out = self.diag_sqrt[..., None] * own
        r = self.factor.shape[-1]
        if r:
            draws = gaussian_draws(self.shared_keys, step, (r, d))  # (trials?, r, d)
            for _ in range(self.shared_axis):
                draws = draws[:, None]
            for k in range(r):
                out = out + (self.scale * self.factor[..., k])[..., None] * draws[..., k, :]
        s = self.edge_coef.shape[-1]
        if s:
            edge = self._edge_draws(step, d)
            for j in range(s):
                term = out + (self.scale * self.edge_coef[..., j])[..., None] * edge[..., j, :]
                out = np.where(self.edge_valid[..., j, None], term, out)
        if not mechanisms.get(self.kind).has("message_noise"):
            return out
        return self._messages(out, step, d)

    def _edge_draws(self, step: int, d: int) -> np.ndarray:
        if self.edge_keys.ndim == 1:  # one node: every slot is a real edge
            return gaussian_draws(self.edge_keys, step, (d,))
        draws = gaussian_draws(self._edge_unique, step, (d,))
        out = np.zeros((*self.edge_keys.shape, d))
        real = self._edge_slot >= 0
        out[real] = draws[self._edge_slot[real]]
        return out

    def _messages(self, common: np.ndarray, step: int, d: int) -> np.ndarray:
        """Zip-DL: common part + message-wise part cancelling in the recipients' weighted sum."""
        m = self.recipients.shape[-1]
        y = np.zeros((*common.shape[:-1], m, d))
        for index in np.ndindex(self.message_keys.shape):
            slots = np.flatnonzero(self.recipients[index[1:] if self.shared_axis else index])
            draws = rng.gaussian(self.message_keys.item(index), step, (slots.size, d))
            y[(*index, slots)] = draws
        w = self.recipient_weights
        acc = np.zeros_like(common)
        wsq = np.zeros(w.shape[:-1])
        for j in range(m):
            acc = acc + w[..., j, None] * y[..., j, :]
            wsq = wsq + w[..., j] * w[..., j]
        coef = acc / wsq[..., None]
        scale = self.scale * self.message_scale
        out = np.empty_like(y)
        for j in range(m):
            part = common + scale * (y[..., j, :] - w[..., j, None] * coef)
            out[..., j, :] = np.where(self.recipients[..., j, None], part, common)
        return out
