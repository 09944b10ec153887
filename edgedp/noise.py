"""Noise sources: keyed normal streams composed with a temporal factor and a scale.

A :class:`NoiseSource` holds everything one node (or a stack of nodes) needs to produce its
privacy noise at each step: the stream keys, the temporal factor and the standard deviation
``ν = σ · sens · Δ``. ``draw(τ)`` stacks the standard normals of step τ for every key, so the
same code serves one device (keys of shape ``()``) and the batch engine (keys of shape
``(trials, nodes)``); the factor works elementwise, so a node's noise has the same bits either
way. :class:`NoiseStreams` is what a node runtime draws in a round (:mod:`edgedp.runtime`):
the source's stream with its cross-agent components, and the Laplace draws.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgedp import _validate, rng
from edgedp.factors import StreamState, TemporalFactor

__all__ = ["NoiseSource", "NoiseStreams", "laplace_draw", "noise_digest"]


def noise_digest(noise: np.ndarray) -> str:
    """A short fingerprint of one step's noise (for logs: compares runs without revealing it)."""
    # hashed through the buffer protocol: no copy of the noise
    return hashlib.sha256(np.ascontiguousarray(noise, dtype="<f8").data).hexdigest()[:16]


def laplace_draw(keys: np.ndarray, step: int, dim: int, scale: float) -> np.ndarray:
    """Laplace(0, scale) draws of ``step`` for every key, shape ``keys.shape + (d,)``.

    Bit for bit ``rng.laplace(key, step, (d,), scale=scale)`` for every key (tested), so a
    node's draws are the same alone (keys of shape ``()``) or in the batch engine's
    ``(trials, nodes)`` stack (paper 004's sr-gt and DPOP use the node's noise stream for
    these draws); :func:`edgedp.rng.laplace_stacked` draws the stack in bulk. ``keys`` may
    also be their uint64 words (:func:`edgedp.rng.key_words`, converted once per run).

    >>> keys = np.array([rng.derive_key(b"doc", "noise", u) for u in range(3)], dtype=object)
    >>> draws = laplace_draw(keys, 4, 2, 0.5)
    >>> draws.shape, bool(np.array_equal(draws[1], rng.laplace(keys[1], 4, (2,), scale=0.5)))
    ((3, 2), True)
    """
    _validate.non_negative(scale=scale)
    _validate.integer(minimum=0, step=step)
    return rng.laplace_stacked(keys, step, (dim,), scale=scale)


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
      consume: ``next(state)`` may update ``state``'s buffers in place (a factor with
        ``next_in_place``, the BLT): for a caller that never reads a state again once it
        has the next one, as an agent does; the bits are the same.
    """

    factor: TemporalFactor
    keys: np.ndarray
    dim: int
    std: float
    memoize: bool = False
    consume: bool = False
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
        step = getattr(self.factor, "next_in_place", None) if self.consume else None
        correlated, state = (step or self.factor.next)(self.draw, state)
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


class NoiseStreams:
    """A node's (or a stack's) noise: the temporal factor's Gaussian stream ν·(C⁻¹z)_t with
    the plan's cross-agent components, and the Laplace draws of Laplace plans — every draw a
    pure function of (key, round), so a resumed node regenerates them.

    Args:
      params: the plan or the node's share (``factor``, ``noise_std``).
      keys: the noise key(s): one StreamKey or a ``(trials, nodes)`` object array.
      dim: the model dimension (Laplace draws are model-sized).
      message_dim: the dimension the Gaussian noise privatizes (k for DOME sketches).
      cross: the :class:`~edgedp.families.cross.noise.CrossNoise` of a cross-agent plan (its
        ``compose(own, step)`` adds the shared-seed, per-edge and message components).
      memoize, consume: :class:`~edgedp.noise.NoiseSource`'s options.
      laplace_ahead: a stack: makes its bulk Laplace draws from the keys' words and the
        draw shape (:class:`edgedp.rng.LaplaceAhead`, or a simulator's compiled equivalent).
    """

    def __init__(
        self,
        params,
        keys,
        *,
        dim: int,
        message_dim: int,
        cross: Any | None = None,
        memoize: bool = False,
        consume: bool = False,
        laplace_ahead: Callable[[np.ndarray, tuple[int, ...]], rng.LaplaceAhead] = (
            rng.LaplaceAhead
        ),
    ) -> None:
        keys = np.array(keys, dtype=object) if isinstance(keys, rng.StreamKey) else keys
        self.std = float(params.noise_std)
        self.dim = dim
        self.source = NoiseSource(
            params.factor, keys, message_dim, params.noise_std, memoize=memoize, consume=consume
        )
        self.state: StreamState = self.source.init()
        self.cross = cross
        self._make_ahead = laplace_ahead
        self._ahead: rng.LaplaceAhead | None = None  # a stack's Laplace draws, rounds ahead

    def gaussian(self, t: int) -> np.ndarray | None:
        """Round ``t``'s Gaussian noise (with its cross-agent components), None without noise.

        Raises:
          RuntimeError: the stream is not at round ``t`` (noise is never drawn twice).
        """
        if self.std == 0:
            return None
        if self.state.step != t:
            raise RuntimeError("noise stream out of step with the round counter")
        out, self.state = self.source.next(self.state)
        return out if self.cross is None else self.cross.compose(out, t)

    def discard(self) -> None:
        """Draw and drop the current round's Gaussian noise (a skipped round)."""
        if self.std > 0:
            _, self.state = self.source.next(self.state)

    def rewind(self, t: int) -> None:
        """Put the stream at the start of round ``t``, regenerated from the key alone."""
        self.state = self.source.state_at(t)

    def laplace(self, t: int, scale: float) -> np.ndarray:
        """Laplace(0, scale) draws of round ``t``, model-sized: the same draws however often
        it is called in the round (one node: :func:`edgedp.noise.laplace_draw`; a stack in
        bulk, :class:`edgedp.rng.LaplaceAhead`, the same bits)."""
        keys = self.source.keys
        if keys.ndim == 0:
            return laplace_draw(keys, t, self.dim, scale)
        if self._ahead is None:
            self._ahead = self._make_ahead(rng.key_words(keys), (self.dim,))
        return self._ahead.draw(t, scale=scale)
