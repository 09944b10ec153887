"""Compiled loops of the simulator (numba): keyed Laplace draws in bulk.

Every function here computes exactly what a numpy path elsewhere computes — the same bits —
only in one compiled pass without temporaries:

- :func:`laplace_logs`: the Philox-4x64-10 words of every (step, key) and numpy's Laplace
  transform of them, as :class:`edgedp.rng.LaplaceAhead` computes them in numpy uint64
  arithmetic (the C library's ``log``: numba calls libm's, as numpy's sampler and
  ``math.log`` do; ``numpy.log`` is a different, vectorised one). :class:`LaplaceAhead`
  is that class with this fill.

numba is an optional dependency of the ``sim`` extra: without it (``AVAILABLE`` false) the
callers keep their numpy paths. The functions compile on first use and are cached on disk
(``cache=True``).
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

__all__ = ["AVAILABLE", "LaplaceAhead", "laplace_ahead", "laplace_logs"]


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
        self._first = step


def laplace_ahead(keys: np.ndarray, shape: tuple[int, ...]) -> rng.LaplaceAhead:
    """The compiled :class:`LaplaceAhead` with numba, else :class:`edgedp.rng.LaplaceAhead`."""
    return LaplaceAhead(keys, shape) if AVAILABLE else rng.LaplaceAhead(keys, shape)
