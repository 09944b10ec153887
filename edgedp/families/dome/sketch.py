"""Shared orthonormal sketches S_t ∈ ℝ^{d×k} for DOME-style messages (paper 002 §3.1).

Every node must use the *same* S_t in round t without communicating it, so S_t is a pure
function of public inputs only: the plan's sketch seed, the basis index ``t // refresh``
(``refresh = 0``: one fixed basis for the whole run) and the dimensions (d, k). Nothing
about the data enters S_t, so the sketch itself costs no privacy and the same bits come out
on every device and in every engine.

Two families, both with orthonormal columns (SᵀS = I_k up to rounding, so ‖Sᵀx‖ ≤ ‖x‖):

* ``block`` (device default): the d coordinates are split by a random permutation into k
  groups of ⌊d/k⌋ or ⌈d/k⌉ coordinates; column j is a Gaussian vector supported on group j,
  normalized. Disjoint supports make the columns orthonormal by construction. Generation,
  projection Sᵀx and lifting Sc all cost O(d) (benchmarks/dome.py).
* ``gaussian``: the paper's "orthogonal random Gaussian sketch" — k Gaussian vectors in ℝᵈ
  orthonormalized by classical Gram–Schmidt applied twice (CGS2). O(d·k²) per basis and
  O(d·k) per projection; written with elementwise products reduced in a fixed order (no
  BLAS), so every node computes the same bits.

``SketchSpec`` is the plan section (hashed with the plan); :func:`basis` builds S_t.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp import _validate, rng

__all__ = [
    "ADAPTIVE",
    "BASES",
    "CLIP_SPACES",
    "OPTIMIZERS",
    "Basis",
    "SketchSpec",
    "basis",
    "basis_index",
]

#: Families of shared data-independent orthonormal bases.
BASES = ("block", "gaussian")
#: The data-dependent family: paper 002 Alg. 2 fed by a lagged network aggregate of the
#: released coefficients (:mod:`edgedp.families.dome.sketch_adaptive`).
ADAPTIVE = "adaptive"
#: Where per-example gradients are clipped to Δ: after projection (paper 002 Alg. 1 line 11)
#: or before it, in ℝᵈ. Both bound the sensitivity of the k-dim release by Δ.
CLIP_SPACES = ("sketch", "model")
#: Local optimizers of the sketched update (paper 002 Alg. 1 lines 18-20 for ``adam``).
OPTIMIZERS = ("sgd", "adam")
_BASIS_SECRET = b"edgedp.dome.basis.v1"
_CHUNK = 1 << 20  # elements per temporary in the Gaussian family's products


@dataclass(frozen=True, slots=True)
class SketchSpec:
    """The ``sketch`` section of a DOME plan (public; part of the plan hash).

    Args:
      dim: k, the number of floats per message (1 ≤ k ≤ d, checked against the model).
      basis: one of :data:`BASES` or :data:`ADAPTIVE`.
      clip: one of :data:`CLIP_SPACES` — ``sketch`` clips ‖Sᵀg_b‖ (the paper's choice: the
        whole budget Δ goes to the part of g_b the message carries), ``model`` clips ‖g_b‖.
      seed: public seed of the shared bases.
      refresh: a new basis every ``refresh`` rounds; 0 keeps one basis for the whole run
        (needed for temporal noise cancellation in the sketched space).
      optimizer: ``sgd`` or ``adam`` (bias-corrected moments of the decoded private update).
      beta1, beta2, floor: Adam's β₁, β₂ and γ' (θ ← θ − η m̂ / √max(v̂, γ')).
      noise_aware: subtract the known noise variance a²·Diag(S Sᵀ) from the second moment
        (paper 002 Lemma 3.2, Alg. 1 line 19).
      energy: ``adaptive`` only — q, the proportion of spectral energy the kept PCA
        columns must carry (Alg. 2 line 10).
      probes: ``adaptive`` only — at least this many Gaussian probe columns (r ≤ k − probes).
      lag: ``adaptive`` only — D ≥ 1: the basis of window w (``refresh`` rounds each) is
        built from the network aggregates of windows ≤ w − D (checked against the
        topology's spanning-tree height by the plan).
      mean_removal: ``adaptive`` only — paper 002 Alg. 1 lines 9 and 17: per-example
        gradients minus m̄ before projection, m̄ added back to the decoded update; m̄ (the
        paper's m̂) is the bias-corrected β₁-average of the decoded network aggregates,
        with the basis' lag.
    """

    dim: int
    basis: str = "block"
    clip: str = "sketch"
    seed: int = 0
    refresh: int = 1
    optimizer: str = "sgd"
    beta1: float = 0.9
    beta2: float = 0.999
    floor: float = 1e-8
    noise_aware: bool = False
    energy: float = 0.9
    probes: int = 1
    lag: int = 0
    mean_removal: bool = False

    def __post_init__(self) -> None:
        _validate.integer(minimum=1, dim=self.dim)
        _validate.integer(minimum=0, seed=self.seed, refresh=self.refresh)
        if self.basis not in (*BASES, ADAPTIVE):
            raise ValueError(f"Unknown basis={self.basis!r}; expected one of {(*BASES, ADAPTIVE)}.")
        if self.clip not in CLIP_SPACES:
            raise ValueError(f"Unknown clip={self.clip!r}; expected one of {CLIP_SPACES}.")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"Unknown optimizer={self.optimizer!r}; expected one of {OPTIMIZERS}.")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"Expected 0 <= {name}={value!r} < 1.")
        _validate.positive(floor=self.floor)
        if self.basis == "adaptive":
            if self.refresh < 1 or self.lag < 1:
                raise ValueError(
                    f"An adaptive basis needs refresh={self.refresh} >= 1 and lag={self.lag} >= 1."
                )
            if not 0.0 < self.energy <= 1.0:
                raise ValueError(f"Expected 0 < energy={self.energy!r} <= 1.")
            _validate.integer(minimum=0, probes=self.probes)
            if self.probes > self.dim:
                raise ValueError(f"Expected probes={self.probes} <= dim={self.dim}.")
            if self.mean_removal and self.clip != "sketch":
                raise ValueError(
                    "mean_removal subtracts m̄ from each example before projection and "
                    "clipping; it needs clip='sketch'."
                )
        elif (self.energy, self.probes, self.lag, self.mean_removal) != (0.9, 1, 0, False):
            raise ValueError(
                "energy, probes, lag and mean_removal belong to basis='adaptive' only."
            )
        if self.noise_aware and self.optimizer != "adam":
            raise ValueError(
                "noise_aware=True corrects Adam's second moment; use optimizer='adam'."
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "basis": self.basis,
            "clip": self.clip,
            "seed": self.seed,
            "refresh": self.refresh,
            "optimizer": self.optimizer,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "floor": self.floor,
            "noise_aware": self.noise_aware,
            # adaptive-only fields: absent otherwise, so earlier plans keep their hash
            **(
                {
                    "energy": self.energy,
                    "probes": self.probes,
                    "lag": self.lag,
                    "mean_removal": self.mean_removal,
                }
                if self.basis == "adaptive"
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SketchSpec:
        return cls(
            dim=int(d["dim"]),
            basis=str(d["basis"]),
            clip=str(d["clip"]),
            seed=int(d["seed"]),
            refresh=int(d["refresh"]),
            optimizer=str(d["optimizer"]),
            beta1=float(d["beta1"]),
            beta2=float(d["beta2"]),
            floor=float(d["floor"]),
            noise_aware=bool(d["noise_aware"]),
            energy=float(d.get("energy", 0.9)),
            probes=int(d.get("probes", 1)),
            lag=int(d.get("lag", 0)),
            mean_removal=bool(d.get("mean_removal", False)),
        )


def basis_index(spec: SketchSpec, round_: int) -> int:
    """Which basis round ``round_`` uses: ``round_ // refresh`` (always 0 when refresh = 0)."""
    return 0 if spec.refresh == 0 else int(round_) // spec.refresh


@dataclass(frozen=True, slots=True, eq=False)
class Basis:
    """S ∈ ℝ^{d×k} with orthonormal columns, in a compact form.

    ``block``: ``index (k, L)`` into x extended by one zero (padding points at d) and
    ``weight (k, L)``; ``gaussian``: ``rows (k, d)`` = Sᵀ.
    """

    kind: str
    d: int
    k: int
    index: np.ndarray | None = None
    weight: np.ndarray | None = None
    rows: np.ndarray | None = None

    def project(self, x: np.ndarray) -> np.ndarray:
        """Sᵀx for x shaped ``(..., d)`` → ``(..., k)``."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape[-1] != self.d:
            raise ValueError(f"Expected x (..., {self.d}), got {x.shape}.")
        out = np.empty((*x.shape[:-1], self.k))
        if self.kind == "block":
            assert self.index is not None and self.weight is not None  # set for "block"
            # Each (lead, column) sums its L products along the last, contiguous axis of a
            # C-ordered array: numpy hands every such row whole to its pairwise sum, so a
            # stack of nodes gives each node the bits it has alone (tested); the stack is
            # cut into pieces of at most _CHUNK products.
            nodes = x.reshape(-1, self.d)
            flat = out.reshape(-1, self.k)
            if len(nodes) == 0:
                return out
            ext = np.zeros((min(len(nodes), max(1, _CHUNK // self.index.size)), self.d + 1))
            for lo in range(0, len(nodes), len(ext)):
                part = nodes[lo : lo + len(ext)]
                ext[: len(part), : self.d] = part
                products = np.take(ext[: len(part)], self.index, axis=1)  # C-ordered
                np.multiply(products, self.weight, out=products)
                flat[lo : lo + len(part)] = np.sum(products, axis=-1)
            return out
        assert self.rows is not None  # set for "gaussian"
        step = max(1, _CHUNK // self.d)
        for lead in np.ndindex(x.shape[:-1]):
            for lo in range(0, self.k, step):
                out[lead + (slice(lo, lo + step),)] = np.sum(
                    self.rows[lo : lo + step] * x[lead], axis=-1
                )
        return out

    def lift(self, c: np.ndarray) -> np.ndarray:
        """S c for c shaped ``(..., k)`` → ``(..., d)``."""
        c = np.asarray(c, dtype=np.float64)
        if c.shape[-1] != self.k:
            raise ValueError(f"Expected c (..., {self.k}), got {c.shape}.")
        if self.kind == "block":
            assert self.index is not None and self.weight is not None  # set for "block"
            out = np.zeros((*c.shape[:-1], self.d + 1))
            out[..., self.index] = c[..., :, None] * self.weight  # padding writes 0 at d
            return out[..., : self.d]
        assert self.rows is not None  # set for "gaussian"
        out = np.zeros((*c.shape[:-1], self.d))
        for j in range(self.k):  # fixed order of multiply-adds
            out = out + c[..., j, None] * self.rows[j]
        return out

    def row_energy(self) -> np.ndarray:
        """Diag(S Sᵀ), shape (d,): the variance per coordinate of S z for z ~ N(0, I_k)."""
        if self.kind == "block":
            assert self.index is not None and self.weight is not None  # set for "block"
            out = np.zeros(self.d + 1)
            out[self.index] = self.weight * self.weight
            return out[: self.d]
        assert self.rows is not None  # set for "gaussian"
        out = np.zeros(self.d)
        for j in range(self.k):
            out = out + self.rows[j] * self.rows[j]
        return out

    def dense(self) -> np.ndarray:
        """S as a dense ``(d, k)`` array (tests and small examples only)."""
        return self.lift(np.eye(self.k)).T


def basis(spec: SketchSpec, round_: int, d: int) -> Basis:
    """The shared basis of round ``round_`` for a d-parameter model.

    A pure function of (spec.seed, basis_index, d, k): every node computes the same bits.

    >>> spec = SketchSpec(dim=3, seed=7)
    >>> S = basis(spec, 0, 10).dense()
    >>> S.shape, bool(np.allclose(S.T @ S, np.eye(3)))
    ((10, 3), True)
    """
    _validate.integer(minimum=1, d=d)
    _validate.integer(minimum=0, round_=round_)
    if spec.basis == "adaptive":
        raise ValueError(
            "An adaptive basis depends on the network aggregate, not on the round alone; "
            "use edgedp.families.dome.sketch_adaptive.AdaptiveSketch."
        )
    if spec.dim > d:
        raise ValueError(f"Expected sketch dim={spec.dim} <= model dimension d={d}.")
    return _basis_at(spec, basis_index(spec, round_), d)


@functools.lru_cache(maxsize=2)
def _basis_at(spec: SketchSpec, index: int, d: int) -> Basis:
    """The basis of window ``index``, kept for the next calls: a DOME node asks for it in
    ``send`` and ``receive`` of every round (and every node of a simulation asks), while it
    changes only every ``refresh`` rounds; a Gaussian basis costs O(k²d) to build. Two
    entries, so nodes on either side of a refresh boundary do not evict each other; the
    arrays are read-only since callers share them."""
    k = spec.dim
    key = rng.derive_key(_BASIS_SECRET, spec.basis, spec.seed, d, k)
    gen = rng.generator(key, index)
    out = _block(gen, d, k) if spec.basis == "block" else _gaussian(gen, d, k)
    for array in (out.index, out.weight, out.rows):
        if array is not None:
            array.setflags(write=False)
    return out


def _block(gen: np.random.Generator, d: int, k: int) -> Basis:
    L = math.ceil(d / k)  # noqa: N806 (group length)
    perm = gen.permutation(d)
    values = gen.standard_normal(d)
    slots = np.full(k * L, d, dtype=np.int64)
    slots[:d] = perm
    index = slots.reshape(L, k).T.copy()  # group j: perm[j], perm[j + k], ...; ≥ L-1 ≥ 1 real
    ext = np.concatenate([values, [0.0]])
    weight = ext[index]
    norm = np.sqrt(np.sum(weight * weight, axis=-1))
    if not np.all(norm > 0):
        raise FloatingPointError("degenerate block sketch (a zero Gaussian group)")
    return Basis("block", d, k, index=index, weight=weight / norm[:, None])


def _row_dots(Q: np.ndarray, v: np.ndarray) -> np.ndarray:  # noqa: N803
    out = np.empty(Q.shape[0])
    step = max(1, _CHUNK // max(1, v.shape[0]))
    for lo in range(0, Q.shape[0], step):
        out[lo : lo + step] = np.sum(Q[lo : lo + step] * v, axis=-1)
    return out


def _combine(Q: np.ndarray, coef: np.ndarray) -> np.ndarray:  # noqa: N803
    """Σ_i coef[i] Q[i] in a fixed order (chunks of rows, each summed over axis 0)."""
    out = np.zeros(Q.shape[1])
    step = max(1, _CHUNK // max(1, Q.shape[1]))
    for lo in range(0, Q.shape[0], step):
        out = out + np.sum(coef[lo : lo + step, None] * Q[lo : lo + step], axis=0)
    return out


def _gaussian(gen: np.random.Generator, d: int, k: int) -> Basis:
    G = gen.standard_normal((k, d))  # noqa: N806
    Q = np.empty((k, d))  # noqa: N806
    for j in range(k):
        v = G[j]
        for _ in range(2):  # CGS2: a second pass restores orthogonality to rounding
            if j:
                v = v - _combine(Q[:j], _row_dots(Q[:j], v))
        norm = math.sqrt(float(np.sum(v * v)))
        if not norm > 0:
            raise FloatingPointError("degenerate Gaussian sketch (dependent draws)")
        Q[j] = v / norm
    return Basis("gaussian", d, k, rows=Q)
