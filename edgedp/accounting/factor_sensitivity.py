"""Sensitivity of a temporal factor under (k, b)-participation without T×T matrices.

:func:`edgedp.accounting.sensitivity.sensitivity` builds X = CᵀC (T×T, O(T³) work for a
dense C). Devices re-certify every plan at start, so this module computes the same Thm 7
value (paper 000, squared form: sens² = max_π Σ_{s,t∈π} |X[s,t]|) from each factor's
compact form. Windows π are those of :meth:`Participation.patterns`: start i, length
k'(i), steps i, i + b, …

| factor   | route                                                   | work        |
|----------|---------------------------------------------------------|-------------|
| identity | X = I: sens² = max k'                                   | O(1)        |
| antipgd  | Toeplitz, c = 1 ≥ 0 (below)                             | O(T)        |
| blt      | Toeplitz, c = C's first column; exact when c ≥ 0         | O(T·buffers)|
| banded   | X is banded (bandwidth p): strided prefix sums per lag   | O(T·p²)     |
| dense    | C ≥ 0: ‖C 1_π‖² from column sums; else bounds only       | O(T²)       |

*Toeplitz, c ≥ 0.* Then X ≥ 0, so Σ_{s,t∈π} X[s,t] = ‖C 1_π‖² (exact, paper 003 Eq. 3).
For a window starting at i, C 1_π is the window at 0's vector y shifted down by i and cut
at T, so its energy is Σ_{m < T−i} y_m²: one y and one cumulative sum per window length
(at most two lengths occur).

*Bounds.* When the exact value needs the Gram matrix (a dense or BLT C with negative
entries), :func:`sensitivity` returns ``value=None`` with two cheap bounds on the Thm 7
value: ``lower`` = √max_π Σ_{s∈π} X[s,s] (the diagonal of a window's block, |X| ≥ it) and
``upper`` = √max_π ‖|C| 1_π‖² (Σ|X[s,t]| ≤ Σ_i |C[i,s]||C[i,t]|). Below ``lower`` a stated
sensitivity is certainly too small; at or above ``upper`` it is certainly enough.

Numpy only: devices run it.
"""

# Paper letters C (strategy), X (Gram), T (steps): see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgedp._validate import integer
from edgedp.accounting import sensitivity as sens_lib
from edgedp.accounting.participation import Participation

__all__ = [
    "DENSE_STEPS",
    "FactorSensitivity",
    "banded",
    "dense",
    "identity",
    "sensitivity",
    "strided_sums",
    "toeplitz",
    "windows",
]

#: Largest T at which the exact value may still come from the T×T Gram matrix (8 MB).
DENSE_STEPS = 1024


@dataclass(frozen=True, slots=True)
class FactorSensitivity:
    """The Thm 7 sensitivity of a factor, or bounds on it.

    Attributes:
        value: The exact Thm 7 value (with its ``exact`` flag), or None when only the
            bounds are cheap.
        lower: A lower bound on the Thm 7 value (equal to it when ``value`` is set).
        upper: An upper bound on the Thm 7 value (equal to it when ``value`` is set).
    """

    value: sens_lib.Sensitivity | None
    lower: float
    upper: float


def windows(participation: Participation, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of :meth:`Participation.patterns` (steps) as two int64 arrays.

    >>> s, n = windows(Participation(3, 2), 6)
    >>> s.tolist(), n.tolist()
    ([0, 1], [3, 3])
    """
    integer(0, steps=steps)
    k, b = participation.k, participation.b
    start = np.arange(steps, dtype=np.int64)
    in_residue = (steps - 1 - start % b) // b + 1
    length = np.minimum(k, in_residue)
    keep = (steps - 1 - start) // b + 1 >= length
    return start[keep], length[keep]


def _strided_cumsum(v: np.ndarray, b: int) -> np.ndarray:
    """G[s] = Σ_{j ≥ 0, s − jb ≥ 0} v[s − jb]."""
    n = v.size
    rows = -(-n // b)
    padded = np.zeros(rows * b, dtype=v.dtype)
    padded[:n] = v
    return np.cumsum(padded.reshape(rows, b), axis=0).reshape(-1)[:n]


def _strided_sums(G: np.ndarray, b: int, start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Σ_{a < count} v[start + a·b] from G = _strided_cumsum(v, b) (0 where count <= 0)."""
    out = np.zeros(start.size, dtype=G.dtype)
    ok = count > 0
    last = start[ok] + (count[ok] - 1) * b
    before = start[ok] - b
    out[ok] = G[last] - np.where(before >= 0, G[np.maximum(before, 0)], 0)
    return out


def strided_sums(v: np.ndarray, b: int, start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Σ_{a < count[i]} v[start[i] + a·b] for every i, in O(len(v) + len(start)).

    >>> strided_sums(np.arange(6), 2, np.array([0, 1]), np.array([3, 2])).tolist()
    [6, 4]
    """
    return _strided_sums(_strided_cumsum(np.asarray(v), b), b, start, count)


def _result(sums: np.ndarray, negs: np.ndarray) -> sens_lib.Sensitivity:
    if sums.size == 0:
        return sens_lib.Sensitivity(0.0, True)
    best = float(sums.max())
    return sens_lib.Sensitivity(math.sqrt(best), bool(np.any(negs[sums == best] == 0)))


def _toeplitz_energy(c: np.ndarray, part: Participation, steps: int) -> float:
    """max_π ‖C 1_π‖² for lower-triangular Toeplitz C with first column c (any sign)."""
    start, length = windows(part, steps)
    b = part.b
    best = 0.0
    for L in np.unique(length):
        g = _strided_cumsum(c, b)
        y = g.copy()
        shift = int(L) * b
        if shift < steps:
            y[shift:] -= g[: steps - shift]
        energy = np.concatenate([[0.0], np.cumsum(y * y)])
        mine = start[length == L]
        best = max(best, float(energy[steps - mine].max()))
    return best


def _toeplitz_diagonal(c: np.ndarray, part: Participation, steps: int) -> float:
    """max_π Σ_{s∈π} X[s,s] with X[s,s] = Σ_{u < T−s} c_u²."""
    tail = np.cumsum(c * c)[::-1]  # tail[s] = Σ_{u <= T-1-s} c_u²
    start, length = windows(part, steps)
    sums = _strided_sums(_strided_cumsum(tail, part.b), part.b, start, length)
    return float(sums.max()) if sums.size else 0.0


def toeplitz(c: np.ndarray, part: Participation, steps: int) -> FactorSensitivity:
    """A lower-Toeplitz C with first column ``c`` (AntiPGD, BLT): O(T) when c ≥ 0."""
    if np.all(c >= 0):
        v = math.sqrt(_toeplitz_energy(c, part, steps))
        return FactorSensitivity(sens_lib.Sensitivity(v, True), v, v)
    lower = math.sqrt(_toeplitz_diagonal(c, part, steps))
    upper = math.sqrt(_toeplitz_energy(np.abs(c), part, steps))
    return _maybe_dense(None, lower, upper, lambda: _toeplitz_matrix(c), part, steps)


def _toeplitz_matrix(c: np.ndarray) -> np.ndarray:
    T = c.size
    idx = np.arange(T)
    lag = idx[:, None] - idx[None, :]
    return np.where(lag >= 0, c[np.clip(lag, 0, T - 1)], 0.0)


def _maybe_dense(value, lower, upper, matrix, part, steps) -> FactorSensitivity:
    """The exact value from the Gram matrix when T is small enough, else the bounds.

    With one step per window the block is one diagonal entry: the lower bound is exact."""
    if value is None and part.count(steps) == 1:
        return FactorSensitivity(sens_lib.Sensitivity(lower, True), lower, lower)
    if value is None and steps <= DENSE_STEPS:
        value = sens_lib.sensitivity(matrix(), part)
        return FactorSensitivity(value, value.value, value.value)
    return FactorSensitivity(value, lower, upper)


def banded(bands: np.ndarray, part: Participation, steps: int) -> FactorSensitivity:
    """A banded C given by its ``bands`` B (row t, lag m), in O(T·p²):
    X[s, s+ℓ] = Σ_{m=ℓ}^{p−1} B[s+m, m]·B[s+m, m−ℓ] (zero for ℓ >= p)."""
    B = bands[:steps]
    p, b = B.shape[1], part.b
    start, length = windows(part, steps)
    sums = np.zeros(start.size)
    negs = np.zeros(start.size, dtype=np.int64)
    for d in range(0, -(-p // b)):
        lag = d * b
        if lag >= steps:
            break
        X = np.zeros(steps)
        for m in range(lag, p):
            n = steps - m  # rows s + m < steps
            if n <= 0:
                break
            X[:n] += B[m:, m] * B[m:, m - lag]
        count = length - d
        mult = 1 if d == 0 else 2
        sums += mult * _strided_sums(_strided_cumsum(np.abs(X), b), b, start, count)
        negs += _strided_sums(_strided_cumsum((X < 0).astype(np.int64), b), b, start, count)
    value = _result(sums, negs)
    return FactorSensitivity(value, value.value, value.value)


def _column_windows(C: np.ndarray, part: Participation, steps: int, *, diagonal: bool) -> float:
    """max_π ‖C 1_π‖² (or max_π Σ_{s∈π} ‖C[:,s]‖² with ``diagonal``), one residue at a time."""
    start, length = windows(part, steps)
    b = part.b
    if diagonal:
        norms = np.einsum("ij,ij->j", C, C)
        sums = _strided_sums(_strided_cumsum(norms, b), b, start, length)
        return float(sums.max()) if sums.size else 0.0
    best = 0.0
    for r in range(min(b, steps)):
        mine = start % b == r
        if not np.any(mine):
            continue
        cols = np.cumsum(C[:, r::b], axis=1)  # cols[:, a] = Σ_{j<=a} C[:, r + jb]
        first = (start[mine] - r) // b
        last = first + length[mine] - 1
        for a0, a1 in zip(first.tolist(), last.tolist(), strict=True):
            v = cols[:, a1] - (cols[:, a0 - 1] if a0 > 0 else 0.0)
            best = max(best, float(v @ v))
    return best


def dense(C: np.ndarray, part: Participation, steps: int) -> FactorSensitivity:
    """Any lower-triangular C, by column windows (O(T²) per residue, no Gram matrix)."""
    C = C[:steps, :steps]
    if np.all(C >= 0):
        v = math.sqrt(_column_windows(C, part, steps, diagonal=False))
        return FactorSensitivity(sens_lib.Sensitivity(v, True), v, v)
    lower = math.sqrt(_column_windows(C, part, steps, diagonal=True))
    upper = math.sqrt(_column_windows(np.abs(C), part, steps, diagonal=False))
    return _maybe_dense(None, lower, upper, lambda: C, part, steps)


def sensitivity(factor, participation: Participation, *, steps: int) -> FactorSensitivity:
    """The Thm 7 sensitivity of ``factor.strategy(steps)`` under ``participation``.

    Equal (up to summation order) to
    ``edgedp.accounting.sensitivity.sensitivity(factor.strategy(steps), participation)``,
    without forming the T×T matrices (module docstring); ``value`` is None when only
    bounds are cheap (a dense or BLT C with negative entries and steps > DENSE_STEPS).

    Raises:
        ValueError: On an unknown factor kind or steps beyond the factor's horizon.

    >>> from edgedp import factors
    >>> s = sensitivity(factors.AntiPGD(), Participation(3, 2), steps=6)
    >>> print(f"{s.value.value ** 2:.6f} exact={s.value.exact}")
    28.000000 exact=True
    """
    if not isinstance(participation, Participation):
        raise TypeError(f"Expected a Participation, got {participation!r}.")
    integer(1, steps=steps)
    horizon = getattr(factor, "steps", None)
    if horizon is not None and steps > horizon:
        raise ValueError(f"Expected steps={steps} <= the factor's horizon {horizon}.")
    own = getattr(factor, "sensitivity", None)
    if own is None:
        raise ValueError(f"Unknown temporal factor kind={getattr(factor, 'kind', factor)!r}.")
    return own(participation, steps)


def identity(part: Participation, steps: int) -> FactorSensitivity:
    """C = I: √(participations), exact."""
    v = math.sqrt(part.count(steps))
    return FactorSensitivity(sens_lib.Sensitivity(v, True), v, v)
