"""Compiled loops of the simulator (numba): keyed Laplace draws in bulk, and the sorted
scans of the KSG estimator.

Every function here computes exactly what a numpy, scipy or scikit-learn path elsewhere
computes — the same bits — only in one compiled pass without temporaries:

- :func:`laplace_logs`: the Philox-4x64-10 words of every (step, key) and numpy's Laplace
  transform of them, as :class:`edgedp.rng.LaplaceAhead` computes them in numpy uint64
  arithmetic (the C library's ``log``: numba calls libm's, as numpy's sampler and
  ``math.log`` do; ``numpy.log`` is a different, vectorised one). :class:`LaplaceAhead`
  is that class with this fill.
- :func:`sorted_knn_radius` and :func:`sorted_ball_counts`: Chebyshev (max-norm) k-th
  neighbour distances and ball counts of points sorted in one coordinate, by scanning that
  order — cKDTree's and scikit-learn's KDTree's numbers (distances ``max_d |p_jd − p_id|``
  are exact in floating point, and ``fl(s_j − s_i)`` is monotone in s_j, so a scan that
  stops at a first-coordinate gap misses no one). Both give up (None) when the scan would
  cost more than a tree.
- :func:`ksg_counts`: those scans fused for one KSG estimate (the joint's radii, both
  marginals' counts), rows a scan would cost more for left to a tree; :func:`row_std`
  (numpy's std up to rounding) only chooses which coordinate is sorted, so it changes no
  number.

numba is an optional dependency of the ``sim`` extra: without it (``AVAILABLE`` false) the
callers keep their numpy, scipy and scikit-learn paths. The functions compile on first use
and are cached on disk (``cache=True``).
"""

from __future__ import annotations

import math

import numpy as np

from edgedp import rng

try:  # optional: the callers fall back to numpy, scipy and scikit-learn without it
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None
    AVAILABLE = False

__all__ = [
    "AVAILABLE",
    "LaplaceAhead",
    "ksg_counts",
    "laplace_ahead",
    "row_std",
    "laplace_logs",
    "sorted_ball_counts",
    "sorted_knn_radius",
]


def _jit(f):
    return numba.njit(cache=True, nogil=True)(f) if AVAILABLE else f


_M0 = np.uint64(0xD2E7470EE14C6C93)
_M1 = np.uint64(0xCA5A826395121157)
_W0 = np.uint64(0x9E3779B97F4A7C15)
_W1 = np.uint64(0xBB67AE8584CAA73B)
_LOW = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@_jit
def _mulhi(m, a):  # pragma: no cover - compiled
    """High 64-bit word of the 128-bit product m·a (32-bit halves, as rng._mulhilo)."""
    m_lo, m_hi = m & _LOW, m >> _S32
    a_lo, a_hi = a & _LOW, a >> _S32
    p0, p1, p2 = a_lo * m_lo, a_lo * m_hi, a_hi * m_lo
    carry = (p0 >> _S32) + (p1 & _LOW) + (p2 & _LOW)
    return a_hi * m_hi + (p1 >> _S32) + (p2 >> _S32) + (carry >> _S32)


@_jit
def _laplace_logs(words, first, ahead, size, logs, upper, zero):  # pragma: no cover
    n_keys = words.shape[0]
    scale = 1.0 / 9007199254740992.0
    blocks = (size + 3) // 4
    x = np.empty(4, dtype=np.uint64)
    for s in range(ahead):
        step = np.uint64(first + s)
        for i in range(n_keys):
            for b in range(blocks):
                k0, k1 = words[i, 0], words[i, 1]
                x[0] = np.uint64(b) + _ONE
                x[1] = _ZERO
                x[2] = step
                x[3] = _ZERO
                for r in range(10):
                    if r > 0:
                        k0 += _W0
                        k1 += _W1
                    hi0, lo0 = _mulhi(_M0, x[0]), _M0 * x[0]
                    hi1, lo1 = _mulhi(_M1, x[2]), _M1 * x[2]
                    c1, c3 = x[1], x[3]
                    x[0] = hi1 ^ c1 ^ k0
                    x[1] = lo1
                    x[2] = hi0 ^ c3 ^ k1
                    x[3] = lo0
                for lane in range(4):
                    w = 4 * b + lane
                    if w >= size:
                        break
                    u = float(x[lane] >> _S11) * scale
                    up = u >= 0.5
                    if u == 0.0:
                        zero[s, i] = True
                        arg = 1.0
                    elif up:
                        arg = (2.0 - u) - u
                    else:
                        arg = u + u
                    upper[s, i, w] = up
                    logs[s, i, w] = math.log(arg)


@_jit
def _signed(logs, upper, scale, out):  # pragma: no cover - compiled
    """out = 0 − scale·log where upper else 0 + scale·log (rng.LaplaceAhead.draw's ops)."""
    for i in range(logs.shape[0]):
        for j in range(logs.shape[1]):
            v = scale * logs[i, j]
            out[i, j] = 0.0 - v if upper[i, j] else 0.0 + v


def laplace_logs(words: np.ndarray, first: int, ahead: int, size: int):
    """For steps ``first .. first + ahead − 1`` and every key of ``words`` (K, 2) uint64:
    the logs (ahead, K, size) of numpy's Laplace transform, whether each word took the upper
    branch, and whether a key's U was exactly 0 (numpy then skips a word: the caller draws
    that key through :func:`edgedp.rng.laplace`) — :meth:`edgedp.rng.LaplaceAhead._fill`'s
    arrays."""
    words = np.ascontiguousarray(words, dtype=np.uint64)
    k = len(words)
    logs = np.empty((ahead, k, size))
    upper = np.empty((ahead, k, size), dtype=np.bool_)
    zero = np.zeros((ahead, k), dtype=np.bool_)
    _laplace_logs(words, int(first), int(ahead), int(size), logs, upper, zero)
    return logs, upper, zero


class LaplaceAhead(rng.LaplaceAhead):
    """:class:`edgedp.rng.LaplaceAhead` filled by :func:`laplace_logs` (the same numbers,
    tested), ``ahead`` steps per pass: by default as many as keep the pass within 2²² draws
    (32 MiB of logs), at most 64."""

    def __init__(
        self, keys: np.ndarray, shape: tuple[int, ...], *, ahead: int | None = None
    ) -> None:
        if ahead is None:
            keys = np.asarray(keys)
            lead = keys.shape[:-1] if keys.dtype == np.uint64 else keys.shape
            per_step = max(1, math.prod(lead) * math.prod(shape))
            ahead = min(64, max(1, (1 << 22) // per_step))
        super().__init__(keys, shape, ahead=ahead)

    def _fill(self, step: int) -> None:
        size = math.prod(self._shape)
        self._logs, self._upper, self._zero = laplace_logs(self._words, step, self._ahead, size)
        self._any_zero = self._zero.any(axis=1)
        self._first = step

    def draw(self, step: int, *, scale: float) -> np.ndarray:
        """``laplace_stacked(keys, step, shape, scale=scale)``: the parent's numbers (its
        ``scale · log`` and ``0 ∓`` in one compiled pass); a step with a zero uniform goes to
        the parent, which redraws that key."""
        i = self._row(step, scale)
        if self._any_zero[i]:
            return super().draw(step, scale=scale)
        out = np.empty(self._logs.shape[1:])
        _signed(self._logs[i], self._upper[i], float(scale), out)
        return out.reshape((*self._lead, *self._shape))


def laplace_ahead(keys: np.ndarray, shape: tuple[int, ...]) -> rng.LaplaceAhead:
    """The compiled :class:`LaplaceAhead` with numba, else :class:`edgedp.rng.LaplaceAhead`."""
    return LaplaceAhead(keys, shape) if AVAILABLE else rng.LaplaceAhead(keys, shape)


@_jit
def _scan_knn(points, k, rows, out):  # pragma: no cover - compiled
    """out[i] for i in rows; returns the number of distances computed."""
    n = points.shape[0]
    best = np.empty(k + 1)
    work = 0
    for i in rows:
        for j in range(k + 1):
            best[j] = np.inf
        best[0] = 0.0  # the point itself
        lo, hi = i - 1, i + 1
        go_lo, go_hi = True, True
        while go_lo or go_hi:
            if go_hi:
                if hi >= n or points[hi, 0] - points[i, 0] >= best[k]:
                    go_hi = False
                else:
                    _offer(points, i, hi, best, k)
                    hi += 1
            if go_lo:
                if lo < 0 or points[i, 0] - points[lo, 0] >= best[k]:
                    go_lo = False
                else:
                    _offer(points, i, lo, best, k)
                    lo -= 1
        work += hi - lo
        out[i] = best[k]
    return work


@_jit
def _offer(points, i, j, best, k):  # pragma: no cover - compiled
    bound = best[k]
    dist = 0.0
    for c in range(points.shape[1]):
        g = abs(points[j, c] - points[i, c])
        if g > dist:
            dist = g
            if dist >= bound:  # cannot enter the k nearest
                return
    if dist < bound:
        p = k
        while p > 0 and best[p - 1] > dist:
            best[p] = best[p - 1]
            p -= 1
        best[p] = dist


@_jit
def _runs(s, radius, first, last):  # pragma: no cover - compiled
    """For each i: the run [first_i, last_i] of rows with |s_j − s_i| ≤ r_i (s ascending;
    fl(s_j − s_i) is monotone in s_j, so binary searches on that exact test find both
    ends); returns the runs' total length."""
    n = s.shape[0]
    total = 0
    for i in range(n):
        r = radius[i]
        if not r >= 0.0:
            first[i], last[i] = i + 1, i  # empty
            continue
        step = 1  # gallop out from i (runs are mostly short), then bisect
        while i - step >= 0 and not s[i] - s[i - step] > r:
            step *= 2
        a, b = max(0, i - step + 1), i - step // 2
        while a < b:
            m = (a + b) // 2
            if s[i] - s[m] > r:
                a = m + 1
            else:
                b = m
        first[i] = a
        step = 1
        while i + step < n and not s[i + step] - s[i] > r:
            step *= 2
        a, b = i + step // 2, min(n - 1, i + step - 1)
        while a < b:
            m = (a + b + 1) // 2
            if s[m] - s[i] > r:
                b = m - 1
            else:
                a = m
        last[i] = a
        total += a - first[i] + 1
    return total


@_jit
def _filter_runs(points, radius, first, last):  # pragma: no cover - compiled
    n, d = points.shape
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        r = radius[i]
        count = 0
        for j in range(first[i], last[i] + 1):
            inside = True
            for c in range(1, d):
                if abs(points[j, c] - points[i, c]) > r:
                    inside = False
                    break
            if inside:
                count += 1
        out[i] = count
    return out


#: Distances per point above which :func:`sorted_knn_radius` gives up (a k-d tree is then
#: faster: comparable spreads in several coordinates), judged on every 64th point first.
SCAN_BUDGET = 256
#: Run length per point above which :func:`sorted_ball_counts` gives up (likewise).
RUN_BUDGET = 512


def sorted_knn_radius(points: np.ndarray, k: int, *, budget: float = SCAN_BUDGET):
    """Chebyshev distance of each point of ``points`` (N, d), sorted ascending in their
    first coordinate, to its k-th nearest other point (the (k+1)-th smallest counting
    itself: ``cKDTree.query(points, [k + 1], p=inf)``), by scanning that order outwards
    from each point until the first coordinate's gap alone reaches the k-th distance —
    fast when the first coordinate outspreads the others. None when a scan of every 64th
    point costs more than ``budget`` distances per point (then a tree is faster).

    Every distance is ``max_d |p_jd − p_id|``, exact, and a point left unscanned is at
    least as far in the first coordinate alone (``fl(s_j − s_i)`` is monotone in s_j):
    the radii are the tree's, bit for bit."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    n = len(points)
    out = np.empty(n)
    sample = np.arange(0, n, 64)
    if _scan_knn(points, int(k), sample, out) > budget * len(sample):
        return None
    _scan_knn(points, int(k), np.arange(n), out)
    return out


def sorted_ball_counts(points: np.ndarray, radius: np.ndarray, *, budget: float = RUN_BUDGET):
    """#{j : max_d |p_jd − p_id| ≤ radius_i} for each point i of ``points`` (N, d), sorted
    ascending in their first coordinate (itself included; 0 where radius_i < 0) — what
    scikit-learn's ``KDTree.query_radius(count_only=True)`` counts: the run of each ball in
    the first coordinate by two exact binary searches, filtered by the others. None when
    the runs hold more than ``budget`` points per point on average (then a tree is faster)."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    radius = np.ascontiguousarray(radius, dtype=np.float64)
    n = len(points)
    first = np.empty(n, dtype=np.int64)
    last = np.empty(n, dtype=np.int64)
    total = _runs(np.ascontiguousarray(points[:, 0]), radius, first, last)
    if points.shape[1] == 1:
        return last - first + 1
    if total > budget * n:
        return None
    return _filter_runs(points, radius, first, last)


@_jit
def _gather(columns, rows, order):  # pragma: no cover - compiled
    """points[j, a] = columns[rows[a], order[j]]: (N, len(rows)), C order."""
    n = order.shape[0]
    out = np.empty((n, rows.shape[0]))
    for a in range(rows.shape[0]):
        col = columns[rows[a]]
        for j in range(n):
            out[j, a] = col[order[j]]
    return out


@_jit
def _marginal(columns, rows, order, r_in, knn_budget, run_budget, out):  # pragma: no cover
    """Counts of one marginal (``columns[rows]``, sorted by ``order`` in ``rows[0]``) into
    ``out`` in input order; False when its runs are too long."""
    n = order.shape[0]
    m = _gather(columns, rows, order)
    rr = np.empty(n)
    for j in range(n):
        rr[j] = r_in[order[j]]
    first = np.empty(n, dtype=np.int64)
    last = np.empty(n, dtype=np.int64)
    total = _runs(np.ascontiguousarray(m[:, 0]), rr, first, last)
    if rows.shape[0] == 1:
        for j in range(n):
            out[order[j]] = last[j] - first[j] + 1
        return True
    if total > run_budget * n:
        return False
    got = _filter_runs(m, rr, first, last)
    for j in range(n):
        out[order[j]] = got[j]
    return True


@_jit
def _ksg_counts(
    columns,
    joint_rows,
    order,
    x_rows,
    x_order,
    y_rows,
    y_order,
    k,
    shrink,
    knn_budget,
    run_budget,
    r_in,
    counts,
):  # pragma: no cover - compiled
    n = order.shape[0]
    points = _gather(columns, joint_rows, order)
    radius = np.empty(n)
    sample = np.arange(0, n, 64)
    if _scan_knn(points, k, sample, radius) > knn_budget * sample.shape[0]:
        return 0
    _scan_knn(points, k, np.arange(n), radius)
    for j in range(n):
        r_in[order[j]] = radius[j] - shrink
    done = 1
    if _marginal(columns, x_rows, x_order, r_in, knn_budget, run_budget, counts[0]):
        done += 2
    if _marginal(columns, y_rows, y_order, r_in, knn_budget, run_budget, counts[1]):
        done += 4
    return done


@_jit
def _row_std(columns):  # pragma: no cover - compiled
    d, n = columns.shape
    out = np.empty(d)
    for c in range(d):
        mean = 0.0
        for j in range(n):
            mean += columns[c, j]
        mean /= n
        ss = 0.0
        for j in range(n):
            e = columns[c, j] - mean
            ss += e * e
        out[c] = math.sqrt(ss / n)
    return out


def row_std(columns: np.ndarray) -> np.ndarray:
    """The std of every row of ``columns`` (d, N) in one pass over memory (numpy's up to
    rounding: a scale that only chooses orders)."""
    return _row_std(np.ascontiguousarray(columns, dtype=np.float64))


def ksg_counts(columns: np.ndarray, dx: int, k: int, shrink: float, spread: np.ndarray):
    """The KSG estimate's radii and marginal counts, all by scans, for one problem.

    ``columns`` (dx + dy, N): x's coordinates then y's, one row each (C order); ``spread``
    a per-row scale (e.g. the std) that picks the sorted coordinates (any choice gives the
    same numbers). Returns ``(r, counts, done)``: r the k-th neighbour distances in the
    joint minus ``shrink`` (None when the scan would cost more than a tree), counts (2, N)
    the points within r_i in x and in y (itself included), and ``done`` which count rows
    were computed (a row whose runs were too long is left for a tree)."""
    columns = np.ascontiguousarray(columns, dtype=np.float64)
    dims, n = columns.shape
    # coordinates by decreasing spread: the widest sorts, the next ones exclude the most
    # points first (any order gives the same numbers)
    joint = np.argsort(-np.asarray(spread), kind="stable").astype(np.int64)
    wide = int(joint[0])
    order = np.argsort(columns[wide])  # any ascending order gives the same numbers
    orders = []
    for part in (joint[joint < dx], joint[joint >= dx]):
        orders.append((part, order if part[0] == wide else np.argsort(columns[part[0]])))
    r = np.empty(n)
    counts = np.zeros((2, n), dtype=np.int64)
    (x_rows, x_order), (y_rows, y_order) = orders
    flag = _ksg_counts(
        columns,
        joint,
        order,
        x_rows,
        x_order,
        y_rows,
        y_order,
        int(k),
        float(shrink),
        float(SCAN_BUDGET),
        float(RUN_BUDGET),
        r,
        counts,
    )
    if flag == 0:
        return None, counts, (False, False)
    return r, counts, (bool(flag & 2), bool(flag & 4))
