"""Sensitivity of a matrix-factorization strategy under a participation schema.

Paper 000, Thm 7 (with the square, see DESIGN §4): for a strategy (encoder) C, decoder B and
participation schema Π, with X = Cᵀ B†B C,

    sens_Π(C; B)² <= max_{π ∈ Π} Σ_{s,t ∈ π} |X[s, t]|.

Paper 000 prints Eq. 8 without the square; C = I with k participations must give √k, which
the squared form does. The bound is attained (exact, for any model dimension d) when the
maximizing block X[π, π] has no negative entry: all per-step contributions equal then give
1ᵀX[π,π]1 (paper 003, Eq. 3 / Cor. 2.1, stated there for X >= 0 everywhere). Patterns index
the columns of C (the gradient rows).

B†B is the orthogonal projector onto the row space of B. We build it from the SVD of B,
keeping singular values above ``DECODER_RCOND``·max(B.shape)·s_max — the same cut-off as
``numpy.linalg.matrix_rank`` and equivalent to ``numpy.linalg.pinv(B, rcond) @ B``. A larger
cut-off would drop real directions and under-estimate the sensitivity; a smaller one only
keeps round-off directions, which can only increase it.
"""

# Paper letters C (strategy), B (decoder), X (Gram matrix); see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from edgedp._validate import finite_array, integer
from edgedp.accounting.participation import Participation

__all__ = [
    "DECODER_RCOND",
    "Sensitivity",
    "from_gram",
    "sensitivity",
]

DECODER_RCOND = float(np.finfo(np.float64).eps)
"""Relative singular-value cut-off (times max(B.shape)) used for B†B."""

_CHUNK_ELEMENTS = 1 << 22  # gathered X entries per vectorized chunk of explicit patterns


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """An L2 sensitivity value.

    Attributes:
        value: sens_Π(C; B) (paper 000, Eq. 8, squared form), or its Thm 7 upper bound.
        exact: True when the bound is attained (maximizing block of X has no negative
            entry, paper 003 Eq. 3); False when ``value`` is only an upper bound.
    """

    value: float
    exact: bool


def _matrix(name: str, x) -> np.ndarray:
    arr = finite_array(name, x)
    if arr.ndim != 2:
        raise ValueError(f"Expected {name} to be a 2-D matrix, got shape {arr.shape}.")
    return arr.astype(np.float64, copy=False)


def _patterns(patterns: Sequence, size: int) -> list[np.ndarray]:
    if isinstance(patterns, np.ndarray) and patterns.ndim == 1:
        raise TypeError("Expected patterns to be a list of index arrays, got one 1-D array.")
    out = []
    for i, p in enumerate(patterns):
        idx = np.asarray(p)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise TypeError(f"Expected patterns[{i}] to be a 1-D integer array, got {p!r}.")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= size):
            raise ValueError(f"Expected patterns[{i}] within [0, {size}), got {idx.tolist()}.")
        if np.unique(idx).size != idx.size:
            raise ValueError(f"Expected patterns[{i}] without repeated indices.")
        if idx.size:
            out.append(idx)
    return out


def _explicit_sums(absX, negX, patterns):
    """Per-pattern Σ|X| and number of negative entries, vectorized per pattern length."""
    sums, negs = [], []
    by_len: dict[int, list[np.ndarray]] = {}
    for p in patterns:
        by_len.setdefault(p.size, []).append(p)
    for length, group in by_len.items():
        stacked = np.stack(group)
        step = max(1, _CHUNK_ELEMENTS // (length * length))
        for lo in range(0, len(stacked), step):
            idx = stacked[lo : lo + step]
            rows, cols = idx[:, :, None], idx[:, None, :]
            sums.append(absX[rows, cols].sum(axis=(1, 2)))
            negs.append(negX[rows, cols].sum(axis=(1, 2), dtype=np.int64))
    return np.concatenate(sums), np.concatenate(negs)


def _window_sums(absX, negX, part: Participation, steps: int):
    """Same as _explicit_sums over part.patterns(steps), without gathering copies.

    For residue r the patterns are the k'×k' diagonal blocks of X[r::b, r::b]; a strided view
    (stride = row + column stride) enumerates them.
    """
    sums: list[np.ndarray] = []
    negs: list[np.ndarray] = []
    for r in range(min(part.b, steps)):
        sub_abs = absX[r : steps : part.b, r : steps : part.b]
        sub_neg = negX[r : steps : part.b, r : steps : part.b]
        m = sub_abs.shape[0]
        kk = min(part.k, m)
        for sub, out, dtype in ((sub_abs, sums, None), (sub_neg, negs, np.int64)):
            s0, s1 = sub.strides
            blocks = as_strided(sub, (m - kk + 1, kk, kk), (s0 + s1, s0, s1), writeable=False)
            out.append(blocks.sum(axis=(1, 2), dtype=dtype))
    return np.concatenate(sums), np.concatenate(negs)


def _result(sums: np.ndarray, negs: np.ndarray) -> Sensitivity:
    if sums.size == 0:
        return Sensitivity(0.0, True)
    best = float(sums.max())
    exact = bool(np.any(negs[sums == best] == 0))
    return Sensitivity(math.sqrt(best), exact)


def from_gram(X, patterns: Sequence) -> Sensitivity:
    """Sensitivity from a Gram matrix X = Cᵀ B†B C and explicit participation patterns.

    Args:
        X: Square matrix (p × p), finite.
        patterns: Sequence of 1-D integer index arrays into [0, p) (empty ones are ignored).

    Returns:
        Sensitivity(sqrt(max_π Σ_{s,t∈π} |X[s,t]|), exact) — paper 000, Thm 7.

    Raises:
        ValueError: If X is not square and finite or a pattern is out of range.
        TypeError: If a pattern is not an integer array.

    >>> print(from_gram(np.eye(4), [np.array([0, 2]), np.array([1, 3])]))
    Sensitivity(value=1.4142135623730951, exact=True)
    """
    X = _matrix("X", X)
    if X.shape[0] != X.shape[1]:
        raise ValueError(f"Expected X to be square, got shape {X.shape}.")
    pats = _patterns(patterns, X.shape[0])
    if not pats:
        return Sensitivity(0.0, True)
    return _result(*_explicit_sums(np.abs(X), X < 0, pats))


def _gram(C: np.ndarray, B: np.ndarray | None) -> np.ndarray:
    if B is None:
        return C.T @ C
    U, s, Vt = np.linalg.svd(B, full_matrices=False)
    if s.size == 0 or s[0] == 0.0:
        return np.zeros((C.shape[1], C.shape[1]))
    rank = int(np.count_nonzero(s > DECODER_RCOND * max(B.shape) * s[0]))
    VC = Vt[:rank] @ C  # B†B = VᵣVᵣᵀ, so X = (VᵣᵀC)ᵀ(VᵣᵀC)
    return VC.T @ VC


def sensitivity(
    strategy,
    participation: Participation | Sequence,
    *,
    decoder=None,
    steps: int | None = None,
) -> Sensitivity:
    """sens_Π(C; B) of a strategy matrix C with decoder B (paper 000, Def. 6 and Thm 7).

    Args:
        strategy: C, an m × p matrix (p = number of gradient rows, e.g. steps).
        participation: A :class:`Participation` (expanded over the first ``steps`` columns
            of C) or an explicit sequence of index arrays into [0, p).
        decoder: B, a q × m matrix; None means B†B = I (B square and full rank). Rank
            deficiency lowers the sensitivity: only directions B can see count.
        steps: Horizon for a Participation; default p. Not allowed with explicit patterns.

    Returns:
        Sensitivity(value, exact).

    Raises:
        ValueError: On non-finite matrices, mismatched shapes or out-of-range patterns.
        TypeError: If steps is given together with explicit patterns.

    >>> prefix_sum = np.tril(np.ones((6, 6)))
    >>> s = sensitivity(prefix_sum, Participation(3, 2))
    >>> print(f"{s.value ** 2:.6f} exact={s.exact}")
    28.000000 exact=True
    """
    C = _matrix("strategy", strategy)
    B = None
    if decoder is not None:
        B = _matrix("decoder", decoder)
        if B.shape[1] != C.shape[0]:
            raise ValueError(
                f"Expected decoder with {C.shape[0]} columns (rows of strategy), "
                f"got shape {B.shape}."
            )
    p = C.shape[1]
    if isinstance(participation, Participation):
        if steps is None:
            steps = p
        integer(0, steps=steps)
        if steps > p:
            raise ValueError(f"Expected steps={steps!r} <= strategy columns {p}.")
        if steps == 0:
            return Sensitivity(0.0, True)
        X = _gram(C, B)
        return _result(*_window_sums(np.abs(X), X < 0, participation, int(steps)))
    if steps is not None:
        raise TypeError("steps only applies to a Participation, not to explicit patterns.")
    pats = _patterns(participation, p)
    if not pats:
        return Sensitivity(0.0, True)
    X = _gram(C, B)
    return _result(*_explicit_sums(np.abs(X), X < 0, pats))
