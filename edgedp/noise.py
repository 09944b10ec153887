"""Noise sources: keyed normal streams composed with a temporal factor and a scale.

A :class:`NoiseSource` holds everything one node (or a stack of nodes) needs to produce its
privacy noise at each step: the stream keys, the temporal factor and the standard deviation
``ν = σ · sens · Δ``. ``draw(τ)`` stacks the standard normals of step τ for every key, so the
same code serves one device (keys of shape ``()``) and the batch engine (keys of shape
``(trials, nodes)``); the factor works elementwise, so a node's noise has the same bits either
way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from edgedp import _validate, rng
from edgedp.factors import StreamState

__all__ = ["NoiseSource", "laplace_draw", "noise_digest"]


def noise_digest(noise: np.ndarray) -> str:
    """A short fingerprint of one step's noise (for logs: compares runs without revealing it)."""
    # hashed through the buffer protocol: no copy of the noise
    return hashlib.sha256(np.ascontiguousarray(noise, dtype="<f8").data).hexdigest()[:16]


def laplace_draw(keys: np.ndarray, step: int, dim: int, scale: float) -> np.ndarray:
    """Laplace(0, scale) draws of ``step`` for every key, shape ``keys.shape + (d,)``.

    Bit for bit ``rng.laplace(key, step, (d,), scale=scale)`` for every key (tested), so a
    node's draws are the same alone (keys of shape ``()``) or in the batch engine's
    ``(trials, nodes)`` stack (paper 004's sr-gt and DPOP use the node's noise stream for
    these draws); :func:`edgedp.rng.stacked` makes the stack cheap.

    >>> keys = np.array([rng.derive_key(b"doc", "noise", u) for u in range(3)], dtype=object)
    >>> draws = laplace_draw(keys, 4, 2, 0.5)
    >>> draws.shape, bool(np.array_equal(draws[1], rng.laplace(keys[1], 4, (2,), scale=0.5)))
    ((3, 2), True)
    """
    _validate.non_negative(scale=scale)
    _validate.integer(minimum=0, step=step)
    return rng.stacked(keys, step, (dim,), lambda gen: gen.laplace(0.0, scale, dim))


@dataclass(frozen=True, slots=True, eq=False)
class NoiseSource:
    """Correlated noise for one node or a stack of nodes.

    Args:
      factor: a temporal factor from :mod:`edgedp.factors`.
      keys: an object ndarray of :class:`edgedp.rng.StreamKey` (any shape, () for one node).
      dim: model dimension d.
      std: ν, the standard deviation of the normals before correlation (≥ 0).
      memoize: keep every step's normals in memory (simulators only: a dense factor then
        reads past draws instead of regenerating them; the bits are the same, the memory is
        O(T·d) — never on a device).
    """

    factor: object
    keys: np.ndarray
    dim: int
    std: float
    memoize: bool = False
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        _validate.integer(minimum=1, dim=self.dim)
        _validate.non_negative(std=self.std)
        keys = np.asarray(self.keys, dtype=object)
        if not all(isinstance(k, rng.StreamKey) for k in keys.flat):
            raise TypeError("Expected keys to hold edgedp.rng.StreamKey objects.")
        object.__setattr__(self, "keys", keys)

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.keys.shape, self.dim)

    def draw(self, step: int) -> np.ndarray:
        """Standard normals of step ``step`` for every key, shape ``keys.shape + (d,)``."""
        if self.memoize and step in self._memo:
            return self._memo[step]
        d = (self.dim,)
        out = rng.stacked(self.keys, step, d, lambda gen: gen.standard_normal(d))
        if self.memoize:
            out.setflags(write=False)
            self._memo[step] = out
        return out

    def init(self) -> StreamState:
        return self.factor.init(self.shape)

    def next(self, state: StreamState) -> tuple[np.ndarray, StreamState]:
        """The noise of step ``state.step``: ``std · (C⁻¹ Z)[step]``."""
        if self.std == 0.0:
            return np.zeros(self.shape), StreamState(state.step + 1, state.buffers)
        correlated, state = self.factor.next(self.draw, state)
        # scaled in place when the factor handed over a fresh array (not one of its state
        # buffers, not a read-only memoized draw): the same bits, one d-sized array less
        fresh = correlated.flags.writeable and correlated.base is None
        fresh = fresh and all(correlated is not b for b in state.buffers)
        return np.multiply(self.std, correlated, out=correlated if fresh else None), state

    def state_at(self, step: int) -> StreamState:
        """The streaming state at ``step``, regenerated from the key alone (resume).

        Bit-identical to the state ``next`` reached; the factor decides the cost
        (``state_at`` in :mod:`edgedp.factors`: nothing for identity and dense, one draw for
        AntiPGD, a replay of ``step`` draws for banded and BLT)."""
        if self.std == 0.0:  # ``next`` never advanced the factor
            return StreamState(step, self.init().buffers)
        return self.factor.state_at(self.draw, step, self.shape)
