"""Empirical leakage: the KSG mutual-information estimator, M-NMI and exact Gaussian MI.

Paper 004 §6.3 measures what attacker j learns about agent i's private value 𝒱ᵢ(k) (its
gradient at iteration k) from what it can compute, ℐⱼ(k), by the Maximum Normalized Mutual
Information over Monte Carlo trials (Eq. 43)::

    M-NMI = max_k I(𝒱ᵢ(k); ℐⱼ(k)) / I(𝒱ᵢ(k); 𝒱ᵢ(k))

with both mutual informations estimated by NPEET's ``mi`` (Ver Steeg's toolbox, the
reference [38] of 004). :func:`ksg_mi` reproduces that estimator exactly — Kraskov,
Stögbauer & Grassberger (2004) estimator 1 with k = 3, Chebyshev (max) norm in the joint
space, marginal counts within the k-th-neighbour distance minus 1e-15 (so, for values of
moderate scale, *strictly* inside it; the count includes the point itself), tie-breaking
noise ``1e-10 · U[0, 1)`` added to x and then to y, base 2::

    I = ψ(k) + ψ(N) − ⟨ψ(n_x)⟩ − ⟨ψ(n_y)⟩   (in nats, then / ln 2)

— but draws the noise from a passed-in :class:`numpy.random.Generator` (no global RNG) and
takes arrays of many estimation problems at once, shaped ``(..., N, d)`` (e.g. one problem
per iteration). The k-NN search in the joint space first tries sorted windows in the
order of the joint's widest coordinate that provably hold the neighbours (I(V; V), or a
joint one of whose coordinates outspreads the others), then one ``scipy.spatial.cKDTree``
per problem for the rest (estimates on recurring raw samples may share neighbours through
``knn_memo``); marginal counts of scalar variables use sorted arrays (``searchsorted`` plus
an exact boundary fix-up, so the counts equal the tree's), other marginals the same runs
in their widest coordinate filtered by the others when short, else scikit-learn's
``KDTree`` ball counts (NPEET's own). Distances are max |differences| in every path, so
the estimates equal NPEET's bit for bit. With numba, both the k-NN and the counts are first
compiled scans in the widest coordinate's order (:mod:`edgedp_sim.kernels`); the numpy and
tree paths above take over where a scan would cost more than a tree, and without numba.

The normalizer I(V; V) is finite only because of the tie noise: for V of moderate scale
(typical k-NN distances well above 1e-10 and below ~8, where 1e-15 still subtracts) the
k-th joint neighbour is the k-th V-neighbour, it sits on the radius in exactly one
marginal, and the estimate is (ψ(N) − ψ(k+1))/ln 2 whatever V's distribution
(:func:`self_mi_reference`; 10.4754 bits at N = 5,000, k = 3) — up to rare points where the
two copies' noises tie to 1e-15, each moving it by (ψ(k+1) − ψ(k))/(N ln 2) (1e-4 bits).
:func:`leakage_curve` flags iterations whose estimated I(V; V) departs from that value (V
constant or nearly so across trials, discrete, or of extreme scale): the ratio means
nothing there and they are left out of the maximum.

For jointly Gaussian variables the MI is known in closed form (:func:`gaussian_mi`): the
cross-check of the estimator (tests, experiments/ksg_vs_gaussian.py).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial import cKDTree
from scipy.special import digamma

from edgedp import strict_json
from edgedp_sim import kernels

__all__ = [
    "DEFAULT_NEIGHBORS",
    "TIE_NOISE",
    "LeakageCurve",
    "add_tie_noise",
    "gaussian_mi",
    "json_floats",
    "ksg_mi",
    "leakage_curve",
    "self_mi_reference",
]

#: k of the KSG estimator, as in NPEET's ``mi`` default and paper 004 §6.3.
DEFAULT_NEIGHBORS = 3
#: Scale of NPEET's tie-breaking noise (``add_noise(x, intens=1e-10)``: x + 1e-10 · U[0, 1)).
TIE_NOISE = 1e-10
_RADIUS_SHRINK = 1e-15  # NPEET's avgdigamma: dvec - 1e-15


def add_tie_noise(x: np.ndarray, rng: np.random.Generator, *, intensity: float = TIE_NOISE):
    """``x + intensity · U[0, 1)``, NPEET's ``add_noise`` with an explicit generator.

    >>> add_tie_noise(np.zeros(2), np.random.default_rng(0)) < 1e-10
    array([ True,  True])
    """
    x = np.asarray(x, dtype=np.float64)
    return x + intensity * rng.random(x.shape)


def _samples(name: str, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        raise ValueError(f"Expected {name} with a samples axis, got a scalar.")
    if a.ndim == 1:
        a = a[:, None]
    if not np.all(np.isfinite(a)):
        raise ValueError(f"Expected finite {name}; found NaN or Inf.")
    return a


def _counts_sorted(s: np.ndarray, r: np.ndarray, *, bounds: bool = False):
    """#{j : |s_j − s_i| ≤ r_i} for each i of an ascending array s — a tree's ball count.

    ``fl(s_j − s_i)`` is monotone in s_j, so the set is a contiguous run of s;
    ``searchsorted`` finds it up to rounding of ``s_i ± r_i`` and a few exact steps settle it.
    With ``bounds``: the run ``[lo, hi)`` of every i instead of its length."""
    n = s.size
    hi = np.searchsorted(s, s + r, side="right")
    lo = np.searchsorted(s, s - r, side="left")
    rows = np.arange(n)  # the points whose run may still move (fewer each round)
    while rows.size:
        si, ri, h, lo_ = s[rows], r[rows], hi[rows], lo[rows]

        def inside(j, si=si, ri=ri):
            return np.abs(s[np.clip(j, 0, n - 1)] - si) <= ri

        step_hi = ((h < n) & inside(h)).astype(np.int64) - ((h > 0) & ~inside(h - 1))
        step_lo = ((lo_ > 0) & inside(lo_ - 1)).astype(np.int64) - ((lo_ < n) & ~inside(lo_))
        hi[rows] += step_hi
        lo[rows] -= step_lo
        rows = rows[(step_hi != 0) | (step_lo != 0)]
    if bounds:
        return lo, np.maximum(hi, lo)
    return np.where(r >= 0, hi - lo, 0)


#: Largest mean run (points per sample) that :func:`_marginal_counts` filters by numpy
#: rather than a tree: beyond it scikit-learn's KDTree is faster.
_MAX_MEAN_RUN = 64


def _run_counts(m: np.ndarray, r: np.ndarray, hint=None):
    """Chebyshev ball counts of ``m`` (N, d) by runs of its widest coordinate, or None when
    the runs are too long (then a tree is faster).

    The ball of i lies in the run of points within r_i of it in one coordinate (sorted,
    exact as in :func:`_counts_sorted`); the other coordinates filter that run, and a
    coordinate whose whole range is within min r_i cannot exclude anyone and is skipped."""
    n = len(m)
    lo_r = float(np.min(r))
    span = m.max(axis=0) - m.min(axis=0)
    c = int(np.argmax(span))
    # any ascending order gives the same runs; ``hint`` (the joint's order) often nearly
    # sorts the widest coordinate already (the same column): a quick merge of few runs
    if hint is None:
        order = np.argsort(m[:, c])
    else:
        order = hint[np.argsort(m[hint, c], kind="stable")]
    ms, rs = m[order], r[order]
    s = np.ascontiguousarray(ms[:, c])
    few = slice(None, None, max(1, n // 128))  # a sample first: long runs leave early
    guess = np.searchsorted(s, s[few] + rs[few]) - np.searchsorted(s, s[few] - rs[few])
    if guess.mean() > 2 * _MAX_MEAN_RUN:
        return None
    lo, hi = _counts_sorted(s, rs, bounds=True)
    lens = hi - lo
    total = int(lens.sum())
    if total > _MAX_MEAN_RUN * n:
        return None
    owner = np.repeat(np.arange(n), lens)
    other = np.arange(total) - np.repeat(np.cumsum(lens) - lens - lo, lens)
    ok = np.ones(total, dtype=bool)
    r_pair = rs[owner]
    for d in range(m.shape[1]):
        if d == c or span[d] <= lo_r:
            continue
        col = np.ascontiguousarray(ms[:, d])
        ok &= np.abs(col[other] - col[owner]) <= r_pair
    counts = np.empty(n, dtype=np.int64)
    counts[order] = np.bincount(owner[ok], minlength=n)
    return np.where(r >= 0, counts, 0)


def _compiled_counts(m: np.ndarray, r: np.ndarray, hint=None):
    """:func:`_marginal_counts` by :func:`edgedp_sim.kernels.sorted_ball_counts` in the order
    of the widest coordinate (``hint`` nearly sorts it: a quick merge), or None when numba
    is missing or the runs are long (then the trees)."""
    if not kernels.AVAILABLE:
        return None
    c = 0 if m.shape[1] == 1 else int(np.argmax(np.ptp(np.ascontiguousarray(m.T), axis=1)))
    if hint is None:
        order = np.argsort(m[:, c], kind="stable")
    else:
        order = hint[np.argsort(m[hint, c], kind="stable")]
    cols = [c, *(j for j in range(m.shape[1]) if j != c)]
    got = kernels.sorted_ball_counts(m[order][:, cols], r[order])
    if got is None:
        return None
    counts = np.empty(len(m), dtype=np.int64)
    counts[order] = got
    return counts


def _marginal_counts(
    m: np.ndarray, r: np.ndarray, *, ascending: bool = False, hint=None, compiled: bool = True
):
    """Points of ``m`` (N, d) within Chebyshev distance r_i of each point i (itself included).

    Scalars: sorted arrays (``hint``: an order that nearly sorts them, e.g. the joint's, so
    the sort is a quick merge of few runs; any ascending order gives the same counts).
    Vectors: runs of the widest coordinate filtered by the others when they are short
    (:func:`_run_counts`), else scikit-learn's ``KDTree.query_radius`` with ``count_only``
    — NPEET's own count (it prunes whole nodes inside the ball: ~2.5x faster than
    ``cKDTree.query_ball_point`` in 3-D)."""
    compiled = compiled and kernels.AVAILABLE
    if ascending and compiled:
        return kernels.sorted_ball_counts(m, r)  # a scalar: never None
    counts = _compiled_counts(m, r, hint) if compiled else None
    if counts is not None:
        return counts
    if m.shape[1] == 1:
        if ascending:
            return _counts_sorted(m[:, 0], r)
        if hint is None:
            order = np.argsort(m[:, 0], kind="stable")
        else:
            order = hint[np.argsort(m[hint, 0], kind="stable")]
        counts = np.empty(len(m), dtype=np.int64)
        counts[order] = _counts_sorted(m[order, 0], r[order])
        return counts
    counts = _run_counts(m, r, hint)
    if counts is not None:
        return counts
    from sklearn.neighbors import KDTree

    # a coordinate whose whole range is within min r_i excludes no one: the tree goes without
    keep = (m.max(axis=0) - m.min(axis=0)) > np.min(r)
    if 0 < keep.sum() < m.shape[1]:
        m = np.ascontiguousarray(m[:, keep])
    tree = KDTree(m, leaf_size=20, metric="chebyshev")  # leaves of 20: ~7% faster than 40
    counts = tree.query_radius(m, np.maximum(r, 0.0), count_only=True)
    return np.where(r >= 0, counts, 0)


def _window_radius(points: np.ndarray, k: int, width: int):
    """For every point: the (k+1)-th smallest Chebyshev distance to the ``width`` neighbours
    on each side in the order of the ascending first coordinate (the point itself
    included), and whether it is the distance over all points — every point outside the
    window is at least as far in the first coordinate alone (``fl(s_j − s_i)`` is monotone
    in s_j). Shifted slices, no gathers: points past either end are at infinity."""
    n = len(points)
    pad = np.full((n + 2 * width + 2, points.shape[1]), np.inf)
    pad[width + 1 : width + 1 + n] = points
    cols = [np.ascontiguousarray(pad[:, c]) for c in range(points.shape[1])]
    own = [np.ascontiguousarray(points[:, c]) for c in range(points.shape[1])]
    dist = np.empty((n, 2 * width + 1))
    for o in range(1, 2 * width + 2):
        d = np.abs(cols[0][o : o + n] - own[0])
        for col, mine in zip(cols[1:], own[1:], strict=True):
            np.maximum(d, np.abs(col[o : o + n] - mine), out=d)
        dist[:, o - 1] = d
    radius = np.partition(dist, k, axis=1)[:, k]
    gap_lo = np.abs(cols[0][:n] - own[0])
    gap_hi = np.abs(cols[0][2 * width + 2 : 2 * width + 2 + n] - own[0])
    return radius, (gap_lo >= radius) & (gap_hi >= radius)


#: Ratio of the widest coordinate's std to the next one's above which :func:`ksg_mi` tries
#: sorted windows for a joint of more than two coordinates (Table 4's Eq. 44 sets: from ~10).
_WINDOW_DOMINANCE = 4.0


#: Joint dimension from which scikit-learn's KDTree finds the k nearest faster than cKDTree
#: (N = 5,000, max norm: 23 against 27 ms in 6-D; 12 against 11 ms in 4-D).
_SKLEARN_KNN_DIMS = 6


def _knn_radius(
    points: np.ndarray, k: int, workers: int, rest=None, *, windows: bool = True
) -> np.ndarray:
    """Chebyshev distance of each point to its k-th neighbour (the (k+1)-th point counting
    itself), the points sorted by their first coordinate.

    First windows of k + 1 (then 4(k + 1)) neighbours in that order wherever they provably
    hold the k nearest (a (V, V) pair, or a joint whose first coordinate outspreads the
    others: nearly all points), then ``cKDTree`` for the rest (faster than scikit-learn's
    k-NN query), or ``rest(points, rows, radius)`` when given (:class:`_SharedKnn`). The
    distances are max |differences|, exact in every method, so they agree bit for bit."""
    n = len(points)
    radius = np.empty(n)
    todo = np.arange(n)
    width = k + 1
    while windows and todo.size and width <= 4 * (k + 1) and 2 * width < n:
        r, ok = _window_radius(points, k, width)
        done = ok[todo]
        radius[todo[done]] = r[todo[done]]
        todo = todo[~done]
        if done.mean() < 0.5:  # weakly dependent pair: the tree is faster for the rest
            break
        width *= 4
    if todo.size and rest is not None:
        rest(points, todo, radius)
    elif todo.size and points.shape[1] >= _SKLEARN_KNN_DIMS:
        from sklearn.neighbors import KDTree

        tree = KDTree(points, leaf_size=10, metric="chebyshev")  # 15% faster than 40
        found = tree.query(points[todo], k=k + 1)[0]
        radius[todo] = found[:, k]
    elif todo.size:
        tree = cKDTree(points)
        if todo.size == n:  # queries in the tree's leaf order walk memory in order (~15%)
            todo = tree.indices
        radius[todo] = tree.query(points[todo], [k + 1], p=np.inf, workers=workers)[0][:, 0]
    return radius


#: Neighbours beyond the k-th kept by :func:`ksg_mi` for a later estimate on the same samples.
_SPARE_NEIGHBORS = 4


@dataclass(slots=True)
class _SharedKnn:
    """The tree part of :func:`_knn_radius` for a joint whose raw samples recur with fresh
    tie noise.

    The first estimate queries k + 1 + 4 neighbours of the points the windows left and
    keeps them (in input order) in ``memo[key]``, with each point's mark "safe": the last
    kept neighbour is farther than the k-th by more than ``margin`` = 2δ, δ bounding how
    much two tie noises of the same raw samples can move a distance. A later estimate then
    takes the k-th distance among the kept neighbours of each safe point: its k + 1 nearest
    moved by at most δ, and every point that may now be nearer was within 2δ of the k-th
    before, so it is kept — the radius is the exact one, bit for bit. Other points go to
    the tree. ``order[p]`` is the input index of sorted point p."""

    memo: dict
    key: bytes
    order: np.ndarray
    margin: float
    k: int
    workers: int

    def __call__(self, points: np.ndarray, rows: np.ndarray, radius: np.ndarray) -> None:
        n, k, order = len(points), self.k, self.order
        entry = self.memo.get(self.key)
        if entry is not None:
            kept, safe = entry
            inverse = np.empty(n, dtype=np.intp)
            inverse[order] = np.arange(n)
            mine = safe[order[rows]]
            known, rows = rows[mine], rows[~mine]
            cand = inverse[kept[order[known]]]
            dist = np.abs(points[cand] - points[known][:, None, :]).max(axis=-1)
            radius[known] = np.partition(dist, k, axis=1)[:, k]
            if rows.size:
                tree = cKDTree(points)
                query = tree.query(points[rows], [k + 1], p=np.inf, workers=self.workers)
                radius[rows] = query[0][:, 0]
            return
        tree = cKDTree(points)
        if rows.size == n:
            rows = tree.indices
        spare = k + 1 + _SPARE_NEIGHBORS
        dist, idx = tree.query(points[rows], spare, p=np.inf, workers=self.workers)
        radius[rows] = dist[:, k]
        kept = np.zeros((n, spare), dtype=np.uint16 if n < 2**16 else np.int32)  # memory
        kept[order[rows]] = order[idx]
        safe = np.zeros(n, dtype=bool)  # points the windows settled are not kept
        safe[order[rows]] = dist[:, -1] > dist[:, k] + self.margin
        self.memo[self.key] = (kept, safe)


def _raw_key(x: np.ndarray, y: np.ndarray, k: int) -> bytes:
    h = hashlib.blake2b(repr((x.shape, y.shape, k)).encode(), digest_size=16)
    h.update(np.ascontiguousarray(x).tobytes())
    h.update(np.ascontiguousarray(y).tobytes())
    return h.digest()


def ksg_mi(
    x,
    y,
    *,
    k: int = DEFAULT_NEIGHBORS,
    rng: np.random.Generator | None = None,
    prenoised: bool = False,
    base: float = 2.0,
    workers: int = 1,
    knn_memo: dict | None = None,
) -> np.ndarray:
    """KSG estimate of I(X; Y), NPEET's ``mi(x, y, k=k, base=base)`` for many problems at once.

    Kraskov et al. (2004) estimator 1 as NPEET implements it (see the module docstring).

    Args:
      x: samples shaped ``(..., N, dx)``; a 1-D array is ``(N,)`` samples of a scalar.
      y: samples shaped ``(..., N, dy)`` with the same leading axes and N.
      k: neighbours (NPEET and paper 004: 3).
      rng: generator for the tie-breaking noise (x's first, then y's); required unless
        ``prenoised``.
      prenoised: the samples already carry the noise (e.g. to compare with NPEET on the
        same noised samples); no noise is added.
      base: logarithm base (2: bits).
      workers: threads for the joint k-NN query (the result does not depend on it).
      knn_memo: a dict shared by estimates whose raw samples may recur with fresh tie noise
        (e.g. two attackers with the same information set): the first keeps each joint's
        nearest neighbours, a later one on the same raw samples reuses them and gets the
        same radii as a tree (exactly). Only with noise added here (not ``prenoised``), for
        joints of more than 2 dimensions; it does not change any result.

    Returns:
      The estimates, shaped like the leading axes (a 0-d array for a single problem).

    Raises:
      ValueError: shapes disagree, N ≤ k, or non-finite samples.

    >>> g = np.random.default_rng(0)
    >>> v = g.standard_normal(2000)
    >>> round(float(ksg_mi(v, v + g.standard_normal(2000), rng=g)), 2)  # exact: 0.5 bits
    0.48
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"Expected an integer k={k!r} >= 1.")
    x, y = _samples("x", x), _samples("y", y)
    if x.shape[:-1] != y.shape[:-1]:
        raise ValueError(
            f"Expected x and y with the same leading axes and N, got {x.shape} and {y.shape}."
        )
    n = x.shape[-2]
    if n <= k:
        raise ValueError(f"Expected more than k={k} samples, got N={n}.")
    shared = knn_memo is not None and not prenoised and x.shape[-1] + y.shape[-1] > 2
    shared = shared and n > k + 1 + _SPARE_NEIGHBORS
    if shared:
        raw_x = x.reshape(-1, n, x.shape[-1])
        raw_y = y.reshape(-1, n, y.shape[-1])
        top = max(float(np.max(np.abs(x))), float(np.max(np.abs(y)))) + 1.0
        # two tie noises of one raw coordinate differ by < TIE_NOISE + rounding, so a
        # distance moves by δ < 2 TIE_NOISE + the roundings (taken as 4 TIE_NOISE + 4 ulps);
        # kept neighbours must clear 2δ, asked here with twice that
        margin = 4.0 * (4.0 * TIE_NOISE + 4.0 * float(np.spacing(2.0 * top)))
    if not prenoised:
        if not isinstance(rng, np.random.Generator):
            raise TypeError("Expected rng=numpy.random.Generator for the tie-breaking noise.")
        x = add_tie_noise(x, rng)
        y = add_tie_noise(y, rng)
    lead = x.shape[:-2]
    xs = x.reshape(-1, n, x.shape[-1])
    ys = y.reshape(-1, n, y.shape[-1])
    c, d = digamma(k), digamma(n)
    out = np.empty(xs.shape[0])
    dx = xs.shape[-1]
    for i in range(xs.shape[0]):
        # the joint sorted by its widest coordinate (first): windows in that order settle
        # most k-NN radii, the tree and the queries walk memory in order (2x faster); counts
        # stay in the input order so the means are NPEET's bits
        columns = np.concatenate([xs[i].T, ys[i].T])  # (dx + dy, N): rows contiguous
        std = kernels.row_std(columns) if kernels.AVAILABLE else columns.std(axis=1)
        spread = np.sort(std)
        # windows and scans pay off in 2-D (I(V; V)) or when one coordinate outspreads the
        # others; in 5-D and more without that, a scan costs more than the trees
        windows = len(spread) == 2 or spread[-1] >= _WINDOW_DOMINANCE * spread[-2]
        scans = kernels.AVAILABLE and (windows or len(spread) < 5)
        if scans:  # everything in compiled scans, unless one costs more than a tree
            r, counts, done = kernels.ksg_counts(columns, dx, k, _RADIUS_SHRINK, std)
            if r is not None:
                for row, (m, ok) in enumerate(zip((xs[i], ys[i]), done, strict=True)):
                    if not ok:
                        counts[row] = _marginal_counts(m, r, compiled=False)
                out[i] = _digamma_mean(counts, c, d, base)
                continue
        wide = int(np.argmax(std))
        order = np.argsort(columns[wide])  # any ascending order gives the same radii
        cols = [wide, *(j for j in range(len(columns)) if j != wide)]
        points = columns[cols][:, order].T
        r = np.empty(n)
        rest = None
        if shared:
            key = _raw_key(raw_x[i], raw_y[i], k)
            rest = _SharedKnn(knn_memo, key, order, margin, k, workers)
        # with numba the scan has just said that windows are long
        windows = windows and not kernels.AVAILABLE
        radius = _knn_radius(points, k, workers, rest, windows=windows)
        r[order] = radius - _RADIUS_SHRINK
        counts = np.empty((2, n), dtype=np.int64)
        if wide == 0 and dx == 1:  # x is the sorted coordinate
            counts[0, order] = _marginal_counts(xs[i][order], r[order], ascending=True)
        else:
            counts[0] = _marginal_counts(xs[i], r, hint=order, compiled=scans or dx == 1)
        counts[1] = _marginal_counts(ys[i], r, hint=order, compiled=scans or ys.shape[-1] == 1)
        out[i] = _digamma_mean(counts, c, d, base)
    return out.reshape(lead)


def _digamma_mean(counts: np.ndarray, c: float, d: float, base: float) -> float:
    """(ψ(k) + ψ(N) − ⟨ψ(n_x)⟩ − ⟨ψ(n_y)⟩) / ln(base), the means as NPEET takes them."""
    table = digamma(np.arange(int(counts.max()) + 1))  # digamma of each count, once
    a, b = np.mean(table[counts], axis=1)
    return float((-a - b + c + d) / math.log(base))


def self_mi_reference(n_samples: int, k: int = DEFAULT_NEIGHBORS, *, base: float = 2.0) -> float:
    """(ψ(N) − ψ(k+1)) / ln(base): the KSG estimate of I(V; V) for V of moderate scale.

    >>> round(self_mi_reference(5000, 3), 4)
    10.4754
    """
    return float((digamma(n_samples) - digamma(k + 1)) / math.log(base))


def gaussian_mi(cov, dim_x: int, *, base: float = 2.0) -> float:
    """Exact I(X; Y) of jointly Gaussian (X, Y) from the joint covariance ``cov``.

    I = ½ log(det Σ_xx · det Σ_yy / det Σ), X the first ``dim_x`` coordinates. For a scalar
    channel Y = X + E with signal-to-noise ratio SNR it is ½ log₂(1 + SNR).

    >>> snr = 3.0
    >>> round(gaussian_mi([[1.0, 1.0], [1.0, 1.0 + 1.0 / snr]], 1), 12)  # ½ log2(1 + 3) = 1 bit
    1.0
    """
    cov = np.asarray(cov, dtype=np.float64)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or not 0 < dim_x < cov.shape[0]:
        raise ValueError(f"Expected a square joint covariance and 0 < dim_x < {len(cov)}.")
    parts = [cov[:dim_x, :dim_x], cov[dim_x:, dim_x:], cov]
    signs, logdets = zip(*(np.linalg.slogdet(p) for p in parts), strict=True)
    if min(signs) <= 0:
        raise ValueError("Expected a positive-definite covariance.")
    return float((logdets[0] + logdets[1] - logdets[2]) / (2 * math.log(base)))


def json_floats(a) -> list[float | str | None]:
    """``a`` as a JSON list (:func:`edgedp.strict_json.clean`: NaN -> None, ±Inf -> "±inf")."""
    return strict_json.clean(np.asarray(a, dtype=float))


@dataclass(frozen=True, slots=True, eq=False)
class LeakageCurve:
    """Per-iteration NMI of one attacker's estimate (paper 004 Eq. 43) and its maximum.

    ``nmi[k] = mi[k] / self_mi[k]`` (NaN where ``degenerate[k]``); ``m_nmi`` is the max over
    the other iterations. Always report ``n_trials`` (N) and ``k_neighbors`` with it: the
    normalizer depends on both (:func:`self_mi_reference`).
    """

    nmi: np.ndarray
    mi: np.ndarray
    self_mi: np.ndarray
    degenerate: np.ndarray
    spread: np.ndarray
    n_trials: int
    k_neighbors: int

    @property
    def reference_self_mi(self) -> float:
        return self_mi_reference(self.n_trials, self.k_neighbors)

    @property
    def m_nmi(self) -> float:
        """max_k NMI over non-degenerate iterations (NaN when every iteration is flagged)."""
        return float(np.nanmax(self.nmi)) if np.any(~self.degenerate) else math.nan

    @property
    def argmax_iteration(self) -> int | None:
        return int(np.nanargmax(self.nmi)) if np.any(~self.degenerate) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "m_nmi": None if math.isnan(self.m_nmi) else self.m_nmi,
            "argmax_iteration": self.argmax_iteration,
            "n_trials": self.n_trials,
            "k_neighbors": self.k_neighbors,
            "reference_self_mi_bits": self.reference_self_mi,
            "nmi": json_floats(self.nmi),
            "mi_bits": json_floats(self.mi),
            "self_mi_bits": json_floats(self.self_mi),
            "degenerate_iterations": [int(i) for i in np.flatnonzero(self.degenerate)],
        }


def leakage_curve(
    private,
    inferred,
    *,
    rng: np.random.Generator,
    k: int = DEFAULT_NEIGHBORS,
    self_tolerance: float = 0.1,
    min_spread: float = 0.0,
    workers: int = 1,
    self_mi: np.ndarray | None = None,
    knn_memo: dict | None = None,
) -> LeakageCurve:
    """NMI per iteration and M-NMI (paper 004 Eq. 43) of an attacker's view of a private value.

    Args:
      private: the victim's private value 𝒱ᵢ(k) over trials, ``(iterations, N, dv)``
        (or ``(iterations, N)`` for a scalar).
      inferred: what the attacker computes, ℐⱼ(k), ``(iterations, N, di)`` (or 2-D).
      rng: generator for the tie-breaking noise (per iteration: V then ℐ for I(V; ℐ), then
        two copies of V for I(V; V), as two NPEET calls would).
      k: KSG neighbours.
      self_tolerance: flag an iteration when its estimated I(V; V) is more than this many
        bits from :func:`self_mi_reference` (V nearly constant, discrete or of extreme scale).
      min_spread: also flag iterations where V's largest per-coordinate std over trials is
        at most this.
      workers: threads for the k-NN queries.
      self_mi: the estimates of I(V; V) per iteration from an earlier call on the same V
        (``curve.self_mi``), to score several attackers against one victim without
        re-estimating them (the generator then draws only the noise of I(V; ℐ)).
      knn_memo: passed to :func:`ksg_mi` for the I(V; ℐ) estimates (one dict for attackers
        whose information sets may be equal: the later ones reuse the k-NN of the first).

    Returns:
      A :class:`LeakageCurve`.

    >>> g = np.random.default_rng(1)
    >>> v = g.standard_normal((3, 1000))
    >>> v[0] = 0.5  # the first iteration's V never varies: flagged, left out of the max
    >>> c = leakage_curve(v, v + g.standard_normal((3, 1000)), rng=g)
    >>> c.degenerate.tolist(), round(c.m_nmi, 2), c.n_trials, c.k_neighbors
    ([True, False, False], 0.06, 1000, 3)
    """
    v = np.asarray(private, dtype=np.float64)
    j = np.asarray(inferred, dtype=np.float64)
    v = v[..., None] if v.ndim == 2 else v
    j = j[..., None] if j.ndim == 2 else j
    if v.ndim != 3 or j.ndim != 3 or v.shape[:2] != j.shape[:2]:
        raise ValueError(
            "Expected private and inferred shaped (iterations, trials[, dim]) with the same "
            f"iterations and trials, got {np.shape(private)} and {np.shape(inferred)}."
        )
    iterations, n = v.shape[:2]
    mi = np.empty(iterations)
    given = self_mi is not None
    if given:
        self_mi = np.asarray(self_mi, dtype=np.float64)
        if self_mi.shape != (iterations,):
            raise ValueError(f"Expected self_mi shaped ({iterations},), got {self_mi.shape}.")
    else:
        self_mi = np.empty(iterations)
    for i in range(iterations):  # noise in NPEET's call order, iteration by iteration
        mi[i] = ksg_mi(v[i], j[i], k=k, rng=rng, workers=workers, knn_memo=knn_memo)
        if not given:
            self_mi[i] = ksg_mi(v[i], v[i], k=k, rng=rng, workers=workers)
    spread = v.std(axis=1).max(axis=-1)
    ref = self_mi_reference(n, k)
    degenerate = (np.abs(self_mi - ref) > self_tolerance) | (spread <= min_spread)
    with np.errstate(divide="ignore", invalid="ignore"):
        nmi = np.where(degenerate, np.nan, mi / self_mi)
    return LeakageCurve(nmi, mi, self_mi, degenerate, spread, n, k)
