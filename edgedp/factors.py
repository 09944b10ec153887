"""Temporal correlation factors with streaming, bounded-state noise generation.

Notation (docs/NOTATION.md): the strategy (encoder) matrix is ``C`` (T×T, lower
triangular, invertible); the noise a node adds at step t is row t of ``C⁻¹ Z`` where the
rows ``z_τ`` of ``Z`` are the node's own standard normals, regenerable from its key
(paper 000, Alg. 1 with ``C = C_local ⊗ I_n``).

Every factor exposes the same names (CONVENTIONS C3/C4):

* ``init(shape) -> state``            — state for vectors of ``shape`` (e.g. ``(d,)`` or
                                        ``(trials, nodes, d)``; all operations are elementwise);
* ``next(draw, state) -> (noise, state)`` — ``draw(τ)`` returns ``z_τ`` (a pure function of
                                        the stream key and τ); the state carries the step;
* ``materialize(steps)``               — the dense ``C⁻¹`` (noise = ``C⁻¹ @ Z``), for tests and
                                        planning;
* ``strategy(steps)``                  — the dense ``C``, which the accountant certifies;
* ``state_at(draw, step, shape)``      — the state at ``step`` rebuilt from the draws alone
                                        (resume: checkpoints hold no noise);
* ``noise_row_norms(steps)``           — ‖C⁻¹[t, :]‖ for t < steps: the std of one
                                        coordinate of the noise at step t, per unit ν;
* ``state_bytes(d)``                   — memory the streaming state needs for dimension d;
* ``sensitivity(participation, steps)`` — the Thm 7 sensitivity of ``strategy(steps)``
                                        (:mod:`edgedp.accounting.factor_sensitivity`);
* ``to_dict()``                        — plain data for the plan; ``from_dict`` (a class
                                        method; :func:`from_dict` picks the class by
                                        ``kind``) inverts it, ``load_bytes`` sizes it.

A new factor is one class with these names and one entry in :data:`KINDS`.

| factor      | C                              | state                 | draws / step |
|-------------|--------------------------------|-----------------------|--------------|
| identity    | I (DP-D-SGD)                   | none                  | 1            |
| antipgd     | lower-triangular ones          | z_{t-1}               | 1            |
| banded      | banded, bandwidth p            | last p-1 outputs      | 1            |
| blt         | Toeplitz, c_t = Σ ω_j θ_j^(t-1) | one sum per buffer    | 1            |
| dense       | any lower-triangular C         | none (regenerates)    | t+1          |

``dense`` regenerates past normals instead of storing them, so its memory is O(d) but its
work is O(t·d) per step; ``banded`` and ``blt`` are the bounded-work forms for devices
(fitted to a workload by ``edgedp.families.mf.compact_blt`` and ``compact_banded``).
"""

# ruff: noqa: N803, N806  (paper letters C, Z, T: see docs/NOTATION.md)
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from edgedp import _validate

__all__ = [
    "AntiPGD",
    "BLT",
    "Banded",
    "Dense",
    "KINDS",
    "Identity",
    "StreamState",
    "blt_inverse_radius",
    "from_dict",
    "load_bytes",
    "noise_matrix_product",
    "stream_error",
]

Draw = Callable[[int], np.ndarray]


@dataclass(frozen=True, slots=True)
class StreamState:
    """Streaming state: the next step to produce and the factor's buffers."""

    step: int
    buffers: tuple[np.ndarray, ...] = ()


class TemporalFactor(Protocol):
    """What every factor class below provides to a noise source (for type checking)."""

    def init(self, shape: tuple[int, ...]) -> StreamState: ...

    def next(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]: ...

    def state_at(self, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState: ...

    def state_bytes(self, d: int) -> int: ...

    def sensitivity(self, participation: Any, steps: int) -> Any: ...


def _check_steps(steps: int) -> None:
    _validate.integer(minimum=1, steps=steps)


@dataclass(frozen=True, slots=True)
class Identity:
    """C = I: independent noise at every step (DP-D-SGD)."""

    kind: str = field(default="identity", init=False)

    def init(self, shape: tuple[int, ...]) -> StreamState:
        return StreamState(0)

    def next(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]:
        return draw(state.step), StreamState(state.step + 1)

    def state_at(self, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState:
        return StreamState(step)

    def noise_row_norms(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        return np.ones(steps)

    def materialize(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        return np.eye(steps)

    def strategy(self, steps: int) -> np.ndarray:
        return self.materialize(steps)

    def state_bytes(self, d: int) -> int:
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def sensitivity(self, participation, steps: int):
        """Thm 7 sensitivity of :meth:`strategy` (:mod:`edgedp.accounting.factor_sensitivity`)."""
        from edgedp.accounting import factor_sensitivity as fs

        return fs.identity(participation, steps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Identity:
        return cls()

    @staticmethod
    def load_bytes(d: Mapping[str, Any]) -> tuple[int, str]:
        """(bytes, shape) decoding :meth:`to_dict` output ``d`` takes, from its sizes alone."""
        return 0, ""


@dataclass(frozen=True, slots=True)
class AntiPGD:
    """C = lower-triangular ones: the noise at step t is ``z_t − z_{t−1}`` (Koloskova et al.

    2023; paper 000 App. A.3). Each step cancels the previous step's noise.
    """

    kind: str = field(default="antipgd", init=False)

    def init(self, shape: tuple[int, ...]) -> StreamState:
        return StreamState(0, (np.zeros(shape),))

    def next(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]:
        z = draw(state.step)
        noise = z - state.buffers[0]
        return noise, StreamState(state.step + 1, (z,))

    def state_at(self, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState:
        """The buffer is z_{step−1}: one draw, no replay."""
        if step == 0:
            return self.init(shape)
        return StreamState(step, (draw(step - 1),))

    def noise_row_norms(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        out = np.full(steps, math.sqrt(2.0))
        out[0] = 1.0
        return out

    def materialize(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        return np.eye(steps) - np.eye(steps, k=-1)

    def strategy(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        return np.tril(np.ones((steps, steps)))

    def state_bytes(self, d: int) -> int:
        return 8 * d

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def sensitivity(self, participation, steps: int):
        """Thm 7 sensitivity of :meth:`strategy` (:mod:`edgedp.accounting.factor_sensitivity`)."""
        from edgedp.accounting import factor_sensitivity as fs

        return fs.toeplitz(np.ones(steps), participation, steps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AntiPGD:
        return cls()

    @staticmethod
    def load_bytes(d: Mapping[str, Any]) -> tuple[int, str]:
        """(bytes, shape) decoding :meth:`to_dict` output ``d`` takes, from its sizes alone."""
        return 0, ""


def _lower_triangular(name: str, C: np.ndarray) -> np.ndarray:
    C = _validate.finite_array(name, C).astype(np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"Expected {name} to be square, got shape {C.shape}.")
    if np.any(np.triu(C, k=1) != 0):
        raise ValueError(
            f"Expected {name} to be lower triangular; it has entries above the diagonal."
        )
    if np.any(np.diag(C) == 0):
        raise ValueError(f"Expected {name} to have a non-zero diagonal (invertible).")
    return C


@dataclass(frozen=True, slots=True, eq=False)
class Banded:
    """Banded lower-triangular C with bandwidth p: ``C[t, t−j] = bands[t, j]`` for j < p.

    Streaming by forward substitution, ``y_t = (z_t − Σ_{j=1}^{p−1} C[t,t−j] y_{t−j}) / C[t,t]``,
    which keeps only the last p−1 outputs (paper 003 and the banded MF literature).
    The horizon is ``bands.shape[0]``.
    """

    bands: np.ndarray
    kind: str = field(default="banded", init=False)

    def __post_init__(self) -> None:
        b = _validate.finite_array("bands", self.bands).astype(np.float64)
        if b.ndim != 2 or b.shape[1] < 1:
            raise ValueError(f"Expected bands to have shape (steps, bandwidth), got {b.shape}.")
        if np.any(b[:, 0] == 0):
            raise ValueError("Expected bands[:, 0] (the diagonal of C) to be non-zero.")
        for j in range(1, b.shape[1]):
            if np.any(b[:j, j] != 0):
                raise ValueError(f"Expected bands[:{j}, {j}] = 0 (entries before step 0).")
        b.setflags(write=False)
        object.__setattr__(self, "bands", b)

    @classmethod
    def from_matrix(cls, C: np.ndarray, bandwidth: int) -> Banded:
        """Take the first ``bandwidth`` diagonals of a lower-triangular C (the rest must be 0)."""
        C = _lower_triangular("C", C)
        _validate.integer(minimum=1, bandwidth=bandwidth)
        if np.any(np.tril(C, k=-bandwidth) != 0):
            raise ValueError(f"Expected C to be zero below its first {bandwidth} diagonals.")
        T = C.shape[0]
        bands = np.zeros((T, bandwidth))
        for j in range(bandwidth):
            bands[j:, j] = np.diagonal(C, offset=-j)
        return cls(bands)

    @property
    def steps(self) -> int:
        return int(self.bands.shape[0])

    @property
    def bandwidth(self) -> int:
        return int(self.bands.shape[1])

    def init(self, shape: tuple[int, ...]) -> StreamState:
        return StreamState(0, tuple(np.zeros(shape) for _ in range(self.bandwidth - 1)))

    def next(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]:
        t = state.step
        if t >= self.steps:
            raise ValueError(f"Expected step < {self.steps} (the factor's horizon), got {t}.")
        # acc − b·y and acc / c in place once acc is ours (a draw may be a read-only memo):
        # the same bits as the plain expressions, one d-sized temporary
        acc, owned = draw(t), False
        for j, y in enumerate(state.buffers, start=1):  # buffers[j-1] = y_{t-j}
            term = np.multiply(self.bands[t, j], y)
            acc = np.subtract(acc, term, out=acc if owned else term)
            owned = True
            del term
        y_t = np.divide(acc, self.bands[t, 0], out=acc if owned else None)
        buffers = ((y_t,) + state.buffers[:-1]) if state.buffers else ()
        return y_t, StreamState(t + 1, buffers)

    def state_at(self, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState:
        """Replays the forward substitution: ``step`` draws, O(step · p · d) work."""
        return _replay(self, draw, step, shape)

    def noise_row_norms(self, steps: int) -> np.ndarray:
        """‖C⁻¹[t, :]‖ = the std of y_t for y = C⁻¹z: the forward substitution run on the
        (p−1)×(p−1) covariance of its state, O(steps · p²) work and O(p²) memory."""
        _check_steps(steps)
        if steps > self.steps:
            raise ValueError(f"Expected steps={steps} <= the factor's horizon {self.steps}.")
        p = self.bandwidth
        out = np.empty(steps)
        if p == 1:
            out[:] = 1.0 / np.abs(self.bands[:steps, 0])
            return out
        S = np.zeros((p - 1, p - 1))  # Cov(y_{t-1..t-p+1}); zero before step 0
        for t in range(steps):
            a = self.bands[t, 1:]
            c = self.bands[t, 0]
            Sa = S @ a
            var = (1.0 + float(a @ Sa)) / (c * c)
            out[t] = math.sqrt(var)
            S[1:, 1:] = S[:-1, :-1].copy()
            S[0, 0] = var
            S[1:, 0] = S[0, 1:] = -Sa[:-1] / c
        return out

    def strategy(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        if steps > self.steps:
            raise ValueError(f"Expected steps={steps} <= the factor's horizon {self.steps}.")
        C = np.zeros((self.steps, self.steps))
        for j in range(self.bandwidth):
            idx = np.arange(j, self.steps)
            C[idx, idx - j] = self.bands[j:, j]
        return C[:steps, :steps]

    def materialize(self, steps: int) -> np.ndarray:
        return np.linalg.inv(self.strategy(steps))

    def state_bytes(self, d: int) -> int:
        return 8 * d * (self.bandwidth - 1)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "bands": self.bands}

    def sensitivity(self, participation, steps: int):
        """Thm 7 sensitivity of :meth:`strategy` (:mod:`edgedp.accounting.factor_sensitivity`)."""
        from edgedp.accounting import factor_sensitivity as fs

        return fs.banded(self.bands, participation, steps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Banded:
        return cls(np.asarray(d["bands"], dtype=np.float64))

    @staticmethod
    def load_bytes(d: Mapping[str, Any]) -> tuple[int, str]:
        """(bytes, shape) decoding :meth:`to_dict` output ``d`` takes, from its sizes alone."""
        rows, *rest = _shape(d.get("bands")) or (0,)
        width = rest[0] if rest else 1
        return 3 * 8 * rows * width, f" {rows:,}x{width}"


#: Largest ‖C·M − I‖₂ (M: the inverse a Dense factor streams) it accepts: the noise that
#: runs realises C' = (I + R)⁻¹C, whose sensitivity is at most 1/(1 − ‖R‖₂) times C's — the
#: relative tolerance certification already allows a stored sensitivity.
STREAM_TOLERANCE = 1e-9


def stream_error(C: np.ndarray, C_inv: np.ndarray) -> float:
    """An upper bound on ‖C·M − I‖₂ for the floats M = ``C_inv``, rounding included.

    The computed residual's Frobenius norm plus the rounding of its product,
    γ_{T+1}·‖|C||M| + I‖_F (γ_n = nu/(1 − nu), u = 2⁻⁵³; Higham, *Accuracy and Stability
    of Numerical Algorithms*, §3.5), first with ‖|C||M|‖_F ≤ ‖C‖_F‖M‖_F (O(T²)), and from
    |C||M| itself only when that is not small enough. O(T³) work, like the inverse.

    >>> stream_error(np.eye(3), np.eye(3)) < 1e-14
    True
    """
    T = C.shape[0]
    u = 2.0**-53
    gamma = (T + 1) * u / (1 - (T + 1) * u)
    eye = np.eye(T)
    residual = float(np.linalg.norm(C @ C_inv - eye))
    slack = 1.0 + 1e-6  # the norms' own rounding, generously
    cheap = residual + gamma * (float(np.linalg.norm(C) * np.linalg.norm(C_inv)) + math.sqrt(T))
    if cheap * slack <= STREAM_TOLERANCE:
        return cheap * slack
    product = float(np.linalg.norm(np.abs(C) @ np.abs(C_inv) + eye))
    return (residual + gamma * product) * slack


@dataclass(frozen=True, slots=True, eq=False)
class Dense:
    """Any lower-triangular invertible C given as a matrix.

    The noise of step t is ``Σ_{τ≤t} C⁻¹[t, τ] z_τ`` with every ``z_τ`` regenerated from the
    stream, summed in increasing τ: O(d) memory, O(t·d) work per step.

    The accountant certifies C, but what runs is the stored inverse M: an ill-conditioned C
    (e.g. Toeplitz (1, −10, 0, …), whose inverse holds 10^(T−1)) is refused unless
    ``stream_error`` — a bound on ‖C·M − I‖₂, rounding included (:func:`stream_error`) —
    is at most :data:`STREAM_TOLERANCE`, as unstable BLT factors are.
    """

    matrix: np.ndarray
    inverse: np.ndarray = field(init=False, repr=False)
    stream_error: float = field(init=False, repr=False)
    kind: str = field(default="dense", init=False)

    def __post_init__(self) -> None:
        C = _lower_triangular("C", self.matrix)
        with np.errstate(over="ignore", invalid="ignore"):
            C_inv = np.tril(np.linalg.inv(C))
            error = stream_error(C, C_inv) if np.all(np.isfinite(C_inv)) else math.inf
        if not error <= STREAM_TOLERANCE:
            raise ValueError(
                f"Expected a well-conditioned C; it is ill-conditioned: its inverse M, the "
                f"noise a device streams, gives ‖C·M − I‖ <= {error:.3g} > {STREAM_TOLERANCE:g},"
                " so the noise that runs realises another C that its certificate does not "
                "bound. Use a planned factor (dmf, mafalda) or a banded or BLT form."
            )
        C.setflags(write=False)
        C_inv.setflags(write=False)
        object.__setattr__(self, "matrix", C)
        object.__setattr__(self, "inverse", C_inv)
        object.__setattr__(self, "stream_error", error)

    @property
    def steps(self) -> int:
        return int(self.matrix.shape[0])

    def init(self, shape: tuple[int, ...]) -> StreamState:
        return StreamState(0)

    def next(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]:
        t = state.step
        if t >= self.steps:
            raise ValueError(f"Expected step < {self.steps} (the factor's horizon), got {t}.")
        row = self.inverse[t]
        acc = row[0] * draw(0)
        for tau in range(1, t + 1):
            if row[tau] != 0.0:  # acc + c·z in place: the same bits, no second accumulator
                np.add(acc, np.multiply(row[tau], draw(tau)), out=acc)
        return acc, StreamState(t + 1)

    def state_at(self, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState:
        """No state: every step regenerates its past draws."""
        return StreamState(step)

    def noise_row_norms(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        return np.sqrt(np.sum(self.inverse[:steps, :steps] ** 2, axis=1))

    def strategy(self, steps: int) -> np.ndarray:
        _check_steps(steps)
        if steps > self.steps:
            raise ValueError(f"Expected steps={steps} <= the factor's horizon {self.steps}.")
        return np.array(self.matrix[:steps, :steps])

    def materialize(self, steps: int) -> np.ndarray:
        return np.array(self.inverse[:steps, :steps])

    def state_bytes(self, d: int) -> int:
        return 8 * d  # the running sum

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "matrix": self.matrix}

    def sensitivity(self, participation, steps: int):
        """Thm 7 sensitivity of :meth:`strategy` (:mod:`edgedp.accounting.factor_sensitivity`)."""
        from edgedp.accounting import factor_sensitivity as fs

        return fs.dense(self.matrix, participation, steps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Dense:
        return cls(np.asarray(d["matrix"], dtype=np.float64))

    @staticmethod
    def load_bytes(d: Mapping[str, Any]) -> tuple[int, str]:
        """(bytes, shape) decoding :meth:`to_dict` output ``d`` takes, from its sizes alone."""
        rows = (_shape(d.get("matrix")) or (0,))[0]
        return 6 * 8 * rows * rows, f" {rows:,}x{rows:,}"


@dataclass(frozen=True, slots=True)
class BLT:
    """Buffered linear Toeplitz C (Dvijotham, McMahan, Pillutla, Steinke, Thakurta 2024,
    "Efficient and near-optimal noise generation for streaming differential privacy").

    C is lower-triangular Toeplitz with ``c_0 = 1`` and ``c_t = Σ_j ω_j θ_j^(t−1)`` (t >= 1),
    buffer decays θ_j ∈ (0, 1) (``decays``) and weights ω_j (``weights``). With the
    buffers ``s_j(t) = Σ_{τ<t} θ_j^(t−1−τ) y_τ`` row t of ``C y = z`` reads
    ``z_t = y_t + Σ_j ω_j s_j(t)``, so the noise ``y = C⁻¹ z`` streams as

        y_t = z_t − Σ_j ω_j s_j,    then  s_j ← θ_j s_j + y_t,

    with C's own parameters: ``buffers`` state vectors, one draw and 2·buffers
    multiply-adds per step, any horizon. (C⁻¹ is again a BLT, with decays the
    eigenvalues of diag(θ) − 1ωᵀ; streaming with C's parameters needs no such
    eigen-decomposition.) With ω >= 0, C >= 0 elementwise, so X = CᵀC >= 0 and the
    accountant's sensitivity is exact (paper 003, Eq. 3).

    The buffers evolve as s ← (diag(θ) − 1ωᵀ) s + 1·z_t, so the factor is refused unless
    the spectral radius of diag(θ) − 1ωᵀ (:func:`blt_inverse_radius`) is < 1: otherwise
    the noise grows without bound. ω >= 0 alone does not ensure it (θ = 0.5, ω = 2 gives −1.5).

    >>> f = BLT((0.5,), (0.25,))
    >>> print(f.strategy(4))
    [[1.     0.     0.     0.    ]
     [0.25   1.     0.     0.    ]
     [0.125  0.25   1.     0.    ]
     [0.0625 0.125  0.25   1.    ]]
    """

    decays: tuple[float, ...]
    weights: tuple[float, ...]
    kind: str = field(default="blt", init=False)

    def __post_init__(self) -> None:
        theta = _validate.finite_array("decays", self.decays).astype(np.float64)
        omega = _validate.finite_array("weights", self.weights).astype(np.float64)
        if theta.ndim != 1 or theta.size < 1 or omega.shape != theta.shape:
            raise ValueError(
                f"Expected decays and weights to be 1-D of equal length >= 1, got shapes "
                f"{theta.shape} and {omega.shape}."
            )
        for j, value in enumerate(theta):
            if not 0.0 < value < 1.0:
                raise ValueError(f"Expected 0 < decays[{j}]={value!r} < 1.")
        radius = blt_inverse_radius(theta, omega)
        if not radius < 1.0:
            raise ValueError(
                f"Expected spectral radius of diag(decays) − 1·weightsᵀ = {radius:.6g} < 1: "
                "the noise stream y = C⁻¹z would grow without bound. Refit the BLT "
                "(edgedp.families.mf.compact_blt.fit_blt) or use smaller weights."
            )
        object.__setattr__(self, "decays", tuple(float(v) for v in theta))
        object.__setattr__(self, "weights", tuple(float(v) for v in omega))

    @property
    def buffers(self) -> int:
        return len(self.decays)

    def coefficients(self, steps: int) -> np.ndarray:
        """``c_0, …, c_{steps−1}``: the first column of C."""
        _check_steps(steps)
        powers = np.power(np.asarray(self.decays)[None, :], np.arange(steps - 1)[:, None])
        return np.concatenate([[1.0], powers @ np.asarray(self.weights)])

    def inverse_coefficients(self, steps: int) -> np.ndarray:
        """First column of C⁻¹: the streaming recursion applied to an impulse."""
        _check_steps(steps)
        theta, omega = np.asarray(self.decays), np.asarray(self.weights)
        s, out = np.zeros(self.buffers), np.empty(steps)
        for t in range(steps):
            out[t] = float(t == 0) - omega @ s
            s = theta * s + out[t]
        return out

    def init(self, shape: tuple[int, ...]) -> StreamState:
        return StreamState(0, tuple(np.zeros(shape) for _ in range(self.buffers)))

    def next(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]:
        y = self._output(draw, state)
        buffers = tuple(
            np.add(new, y, out=new)
            for new in (
                np.multiply(theta, s) for theta, s in zip(self.decays, state.buffers, strict=True)
            )
        )
        return y, StreamState(state.step + 1, buffers)

    def next_in_place(self, draw: Draw, state: StreamState) -> tuple[np.ndarray, StreamState]:
        """:meth:`next` with ``state``'s buffers updated in place (``state`` is consumed):
        the same bits, without a second set of buffers (``NoiseSource(consume=True)``)."""
        y = self._output(draw, state)
        for theta, s in zip(self.decays, state.buffers, strict=True):
            np.add(np.multiply(theta, s, out=s), y, out=s)
        return y, StreamState(state.step + 1, state.buffers)

    def _output(self, draw: Draw, state: StreamState) -> np.ndarray:
        """y_t = z_t − Σ_j ω_j s_j: the plain expression's bits, computed in place once the
        array is ours (a draw may be a read-only memo), one d-sized temporary."""
        y, owned = draw(state.step), False
        for omega, s in zip(self.weights, state.buffers, strict=True):
            term = np.multiply(omega, s)
            y = np.subtract(y, term, out=y if owned else term)
            owned = True
            del term
        return y

    def state_at(self, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState:
        """Replays the buffers: ``step`` draws, O(step · buffers · d) work."""
        return _replay(self, draw, step, shape)

    def noise_row_norms(self, steps: int) -> np.ndarray:
        """C⁻¹ is lower-triangular Toeplitz: row t holds the first t+1 inverse coefficients."""
        return np.sqrt(np.cumsum(self.inverse_coefficients(steps) ** 2))

    def strategy(self, steps: int) -> np.ndarray:
        return _lower_toeplitz(self.coefficients(steps))

    def materialize(self, steps: int) -> np.ndarray:
        return _lower_toeplitz(self.inverse_coefficients(steps))

    def state_bytes(self, d: int) -> int:
        return 8 * d * self.buffers

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "decays": np.array(self.decays),
            "weights": np.array(self.weights),
        }

    def sensitivity(self, participation, steps: int):
        """Thm 7 sensitivity of :meth:`strategy` (:mod:`edgedp.accounting.factor_sensitivity`)."""
        from edgedp.accounting import factor_sensitivity as fs

        return fs.toeplitz(self.coefficients(steps), participation, steps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BLT:
        return cls(tuple(np.asarray(d["decays"])), tuple(np.asarray(d["weights"])))

    @staticmethod
    def load_bytes(d: Mapping[str, Any]) -> tuple[int, str]:
        """(bytes, shape) decoding :meth:`to_dict` output ``d`` takes, from its sizes alone."""
        return 0, ""


def _replay(factor, draw: Draw, step: int, shape: tuple[int, ...]) -> StreamState:
    """The streaming state at ``step``, rebuilt by running the factor from its start."""
    _validate.integer(minimum=0, step=step)
    state = factor.init(shape)
    for _ in range(step):
        _, state = factor.next(draw, state)
    return state


def _streamed_row_norms(factor, steps: int) -> np.ndarray:
    """‖C⁻¹[t, :]‖ by streaming unit impulses: draw(τ) = e_τ makes output t row t of C⁻¹."""
    _check_steps(steps)

    def unit(tau: int) -> np.ndarray:
        e = np.zeros(steps)
        e[tau] = 1.0
        return e

    state = factor.init((steps,))
    out = np.empty(steps)
    for t in range(steps):
        row, state = factor.next(unit, state)
        out[t] = math.sqrt(float(np.dot(row, row)))
    return out


def blt_inverse_radius(decays, weights) -> float:
    """Spectral radius of diag(θ) − 1ωᵀ, the matrix that carries a BLT's noise buffers.

    The noise stream y = C⁻¹z is bounded iff this is < 1 (then C⁻¹'s coefficients decay
    geometrically). numpy only: eigenvalues of a (buffers × buffers) matrix.

    >>> blt_inverse_radius([0.5], [0.25]), blt_inverse_radius([0.5], [2.0])
    (0.25, 1.5)
    """
    theta = np.asarray(decays, dtype=np.float64)
    omega = np.asarray(weights, dtype=np.float64)
    carry = np.diag(theta) - omega[None, :]
    return float(np.max(np.abs(np.linalg.eigvals(carry))))


def _lower_toeplitz(column: np.ndarray) -> np.ndarray:
    T = column.size
    idx = np.arange(T)
    lag = idx[:, None] - idx[None, :]
    return np.where(lag >= 0, column[np.clip(lag, 0, T - 1)], 0.0)


#: Static, read-only mapping from a factor's ``kind`` to its class (which decodes itself,
#: certifies itself and sizes itself): a new factor is one class and one entry here.
KINDS: Mapping[str, Any] = MappingProxyType(
    {"identity": Identity, "antipgd": AntiPGD, "banded": Banded, "blt": BLT, "dense": Dense}
)


def _shape(value: Any) -> tuple[int, ...]:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(s) for s in shape)
    if isinstance(value, list | tuple):
        return (len(value),) + (_shape(value[0]) if value else ())
    return ()


def _kind(data: Any) -> str:
    kind = data.get("kind") if isinstance(data, Mapping) else None
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"Unknown temporal factor kind={kind!r}; expected one of {sorted(KINDS)}.")
    return kind


def load_bytes(data: Mapping[str, Any]) -> tuple[int, str]:
    """(bytes, description) decoding the plain factor ``data`` takes, from sizes alone;
    unknown kinds raise ValueError.

    >>> load_bytes({"kind": "dense", "matrix": [[1.0, 0.0], [0.5, 1.0]]})
    (192, 'dense factor 2x2')
    """
    kind = _kind(data)
    size, shape = KINDS[kind].load_bytes(data)
    return size, f"{kind} factor{shape}"


def from_dict(data: Mapping[str, Any]):
    """Rebuild a factor from :meth:`to_dict` output; unknown kinds raise ValueError.

    >>> from_dict(AntiPGD().to_dict()).kind
    'antipgd'
    """
    kind = _kind(data)
    try:
        return KINDS[kind].from_dict(data)
    except KeyError as exc:
        raise ValueError(f"Temporal factor {kind!r} is missing field {exc.args[0]!r}.") from None


def noise_matrix_product(factor, Z: np.ndarray) -> np.ndarray:
    """Run the streaming factor over all rows of Z (for tests): row t is the t-th output."""
    Z = np.asarray(Z, dtype=np.float64)
    state = factor.init(Z.shape[1:])
    out = np.empty_like(Z)
    for t in range(Z.shape[0]):
        out[t], state = factor.next(lambda tau: Z[tau], state)
    return out
