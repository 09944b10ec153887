"""The node runtime: what a node uses in round t, written once for one node or a stack.

Besides the update rules (:mod:`edgedp.families`), three things decide a node's bits, and
the engines must agree on each of them exactly (DESIGN §2):

* **keys** — which streams the node draws from: :func:`node_keys` (one secret for every
  stream: simulations and reproducible device runs; :func:`node_key`: one of them),
  :func:`device_keys` (a device's own noise secret, the per-edge keys agreed with its
  neighbours, the shared seed opened from its sealed box) and :func:`stack_keys` (every
  (trial, node) at once). The derivation of a key from a secret is :class:`~edgedp.streams.RunKeys`;
* **the batch schedule** (:class:`BatchSchedule`) — round t uses batch ``t mod b`` of a fixed
  keyed permutation of the node's m examples;
* **the step context** (:class:`Runtime`, :func:`step_context`) — the callables ``send`` and
  ``receive`` may use in a round: the clipped gradient sum of the round's batch, the round's
  noise (:class:`edgedp.noise.NoiseStreams`: the temporal factor's stream, cross-agent components,
  Laplace draws) and the plan's per-family extras.

:class:`Runtime` holds one node (``x`` of shape ``(m, f)``, keys of shape ``()``: the Agent,
hence devices, the event engine and in-process tests) or a ``(trials, nodes)`` stack
(``x`` of shape ``(nodes, m, f)`` or, other data in every trial, ``(trials, nodes, m, f)``:
the batch engine). Both shapes run the same arithmetic element by element; only how the
work is cut differs — a node clips its batch in chunks of about one model (bounded memory),
a stack clips groups of nodes whose per-example gradients fit in cache — and neither changes
a bit (:func:`edgedp.clipping.add_clipped` sums rows in the same order).

Device-safe: numpy only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp import footprint, gradient_sums, rng, streams
from edgedp import gossip as _gossip
from edgedp.families.cross import noise as cross_mod
from edgedp.gossip import StepContext
from edgedp.noise import NoiseStreams
from edgedp.task import batch_schedule

__all__ = [
    "CHUNK_FLOATS",
    "BatchSchedule",
    "NodeKeys",
    "Runtime",
    "Tally",
    "batch_order",
    "device_keys",
    "initial_keys",
    "node_key",
    "node_keys",
    "simulation_keys",
    "stack_keys",
    "step_context",
]

#: Per-example gradient entries one node holds at once: its batch is clipped and summed in
#: chunks of max(1, CHUNK_FLOATS // d) examples (same bits as the whole batch).
CHUNK_FLOATS = footprint.CHUNK_FLOATS

#: Bytes of per-example gradients a stack computes and clips at once (nodes per model call).
GROUP_BYTES = 1 << 22


# ---------------------------------------------------------------------------- keys
def simulation_keys(plan) -> streams.RunKeys:
    """A simulation's keys: every stream from the plan's public seed (no privacy)."""
    return streams.RunKeys.simulation(plan)


@dataclass(frozen=True, slots=True)
class NodeKeys:
    """The keys of one node (``StreamKey``) or of a stack (``(trials, nodes)`` object arrays).

    ``noise`` keys the node's own noise (the temporal factor's input and the Laplace draws),
    ``batch`` its data-order permutation, ``cross`` the cross-agent streams of one node
    (shared seed, per-edge keys, message noise; a stack's are derived by
    :meth:`edgedp.families.cross.noise.CrossNoise.for_plan`).
    """

    noise: Any
    batch: Any
    cross: cross_mod.CrossKeys | None = None

    def arguments(self) -> dict[str, Any]:
        """The ``noise_key``, ``batch_key`` and ``cross_keys`` arguments of an Agent."""
        return {"noise_key": self.noise, "batch_key": self.batch, "cross_keys": self.cross}


def node_key(keys, stream: str, node: int, *, trial: int = 0, peer: Any = None):
    """One key of ``node`` as :func:`node_keys` derives it (what an attacker or audit regenerates):
    ``stream`` noise, batch, initial, messages, shared or pair (the edge {node, peer})."""
    if stream in ("noise", "batch", "initial", "messages"):
        return getattr(keys, stream)(node, trial=trial)
    if stream not in ("shared", "pair"):
        raise ValueError(f"Unknown stream={stream!r}.")
    return keys.shared(trial=trial) if stream == "shared" else keys.pair(node, peer, trial=trial)


def node_keys(keys, node: int, neighbours=(), *, trial: int = 0) -> NodeKeys:
    """One node's keys when one secret keys every stream (``keys``: its
    :class:`~edgedp.streams.RunKeys`): simulations, and device runs reproducible from the
    plan seed."""
    return NodeKeys(
        noise=keys.noise(node, trial=trial),
        batch=keys.batch(node, trial=trial),
        cross=keys.cross(node, neighbours, trial=trial),
    )


def device_keys(
    own,
    node: int,
    *,
    edges: Mapping[int, rng.StreamKey] | None = None,
    shared: rng.StreamKey | None = None,
) -> NodeKeys:
    """A device's keys: own noise, batch order and message noise from its noise secret
    (``own``: its :class:`~edgedp.streams.RunKeys`); ``edges`` the per-edge keys it agreed
    with each neighbour (:func:`edgedp.streams.edge_key`) and ``shared`` the shared-seed key,
    for a plan with a cross-agent section (``edges=None``: the plan has none)."""
    cross = (
        None
        if edges is None
        else cross_mod.CrossKeys(shared=shared, pairs=dict(edges), messages=own.messages(node))
    )
    return NodeKeys(noise=own.noise(node), batch=own.batch(node), cross=cross)


def stack_keys(keys, *, nodes: int, trials: int, first_trial: int = 0) -> NodeKeys:
    """Every (trial, node)'s noise and batch key of a simulation, ``(trials, nodes)`` each:
    ``keys.noise(u, trial=first_trial + i)`` at ``[i, u]``, derived in bulk."""
    shape = dict(nodes=nodes, trials=trials, first_trial=first_trial)
    return NodeKeys(noise=keys.per_trial("noise", **shape), batch=keys.per_trial("batch", **shape))


def initial_keys(keys, *, nodes: int, trials: int, first_trial: int = 0) -> np.ndarray:
    """``node_key(keys, "initial", u, trial=first_trial + i)`` at ``[i, u]``, in bulk."""
    return keys.per_trial("initial-state", nodes=nodes, trials=trials, first_trial=first_trial)


# ---------------------------------------------------------------------------- batches
def batch_order(key, size: int) -> np.ndarray:
    """The keyed permutation of a node's ``size`` examples (``key`` a StreamKey: ``(size,)``),
    or of every node of a stack (an object array of keys: ``keys.shape + (size,)``)."""
    if isinstance(key, rng.StreamKey):
        return rng.permutation(key, size)
    keys = np.asarray(key, dtype=object)
    return rng.stacked(keys, 0, (size,), lambda g: g.permutation(size)).astype(np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class BatchSchedule:
    """Which examples a node (or every node of a stack) uses in each round.

    Round t uses batch ``t mod per_epoch`` of ``order`` (``(m,)`` or ``(trials, nodes, m)``):
    every example takes part exactly every ``per_epoch`` rounds, the participation (k, b)
    the plan certifies (:func:`edgedp.task.batch_schedule` checks it).
    """

    batch_size: int
    per_epoch: int
    order: np.ndarray

    @classmethod
    def build(cls, params, local_size: int, *, dim: int, key) -> BatchSchedule:
        """The schedule of ``params`` (a plan or a node's share) for ``local_size`` examples
        with the permutation of ``key`` (one key or a stack of keys)."""
        batch, per_epoch = batch_schedule(params, local_size, dim=dim)
        return cls(batch, per_epoch, batch_order(key, local_size))

    def select(self, t: int) -> np.ndarray:
        """The local indices of round ``t``'s batch, ``(B,)`` or ``(trials, nodes, B)``."""
        lo = (t % self.per_epoch) * self.batch_size
        return self.order[..., lo : lo + self.batch_size]

    @staticmethod
    def rounds(slot: int, *, per_epoch: int, steps: int) -> range:
        """The rounds of ``steps`` that use batch ``slot``."""
        return range(slot, steps, per_epoch)


# ---------------------------------------------------------------------------- context
def step_context(
    params,
    t: int,
    *,
    batch_size: int,
    gradient: Callable[[np.ndarray], np.ndarray],
    noise: Callable[[], np.ndarray | None],
    laplace: Callable[[float], np.ndarray] | None = None,
    sketch_gradient: Callable | None = None,
    basis: Any = None,
    mean: np.ndarray | None = None,
    release: Callable[[np.ndarray], None] | None = None,
) -> StepContext:
    """The :class:`~edgedp.families.StepContext` of round ``t`` for ``params`` (a plan or a
    node's share): the common fields and the one extra of the plan's family — its Laplace
    schedule (with ``laplace``), its sketch (with ``sketch_gradient``, ``basis``, ``mean``,
    ``release``; DOME, also with cross-agent noise) or its cross-agent section."""
    extra: _gossip.Extra | None = None
    if params.laplace is not None:
        assert laplace is not None  # every engine draws Laplace noise for Laplace plans
        extra = _gossip.LaplaceExtra(laplace, params.laplace)
    elif params.sketch is not None:
        assert sketch_gradient is not None  # every engine clips in the sketch for DOME
        extra = _gossip.SketchExtra(
            params.sketch, params.noise_std, sketch_gradient, basis, mean, release
        )
    elif params.cross_agent is not None:
        extra = _gossip.CrossExtra(params.cross_agent)
    return StepContext(
        t, params.learning_rate, params.clip_norm, batch_size, gradient, noise, extra
    )


@dataclass(slots=True)
class Tally:
    """One round's counts: examples whose gradient was clipped / left out as non-finite."""

    clipped: int = 0
    nonfinite: int = 0


class Runtime:
    """The streams, schedule and step contexts of one node or of a ``(trials, nodes)`` stack.

    Args:
      params: the node's share (one node) or the plan (a stack).
      model: the model backend (``dim``, ``per_example_gradients``; ``clipped_gradient_sum``
        for models that clip inside, ``clips_fused``).
      x, y: local data, ``(m, f)`` / ``(m,)`` for one node; ``(nodes, m, f)`` or, other
        data in every trial, ``(all trials, nodes, m, f)`` for a stack.
      keys: :class:`NodeKeys` (one node's, or :func:`stack_keys`).
      cross: the cross-agent noise (:class:`~edgedp.families.cross.noise.CrossNoise`) if the plan
      has it. memoize, consume: :class:`~edgedp.noise.NoiseSource`'s options.
      gradient_transform: simulators only (audit canaries): ``(round, point, sel, rows) ->
        rows`` on the per-example gradients of the batch ``sel`` before projection/clipping.
      first_trial: a stack with per-trial data: the trial of its first row.
      chunk_floats: one node: per-example gradient entries held at once.
      laplace_ahead: a stack: how its Laplace draws are made in bulk
        (:class:`~edgedp.rng.LaplaceAhead` or a simulator's compiled one, the same bits).
    """

    def __init__(
        self,
        params,
        *,
        model,
        x: np.ndarray,
        y: np.ndarray,
        keys: NodeKeys,
        cross: cross_mod.CrossNoise | None = None,
        memoize: bool = False,
        consume: bool = False,
        gradient_transform: Callable | None = None,
        first_trial: int = 0,
        chunk_floats: int = CHUNK_FLOATS,
        laplace_ahead: Callable[[np.ndarray, tuple[int, ...]], rng.LaplaceAhead] = (
            rng.LaplaceAhead
        ),
    ) -> None:
        self.params = params
        self.model = model
        self.x, self.y = x, y
        self.single = x.ndim == 2
        self.schedule = BatchSchedule.build(params, x.shape[-2], dim=model.dim, key=keys.batch)
        self.message_dim = model.dim if params.sketch is None else params.sketch.dim
        self.noise = NoiseStreams(
            params,
            keys.noise,
            dim=model.dim,
            message_dim=self.message_dim,
            cross=cross,
            memoize=memoize,
            consume=consume,
            laplace_ahead=laplace_ahead,
        )
        self.transform = gradient_transform
        self.fused = getattr(model, "clips_fused", False)  # clipped sum inside the model
        batch = self.schedule.batch_size
        # one node: examples whose per-example gradients are held at once (about one model)
        self.chunk = max(1, chunk_floats // max(1, model.dim))
        # a stack: nodes per model call, ~4 MiB of per-example gradients kept in cache
        trials = 1 if self.single else int(np.shape(keys.noise)[0])
        self.nodes = 1 if self.single else int(np.shape(keys.noise)[1])
        self.group = max(1, GROUP_BYTES // (trials * batch * model.dim * 8))
        if not self.single:
            self._node_idx = np.arange(self.nodes)[None, :, None]
            self._rows = np.arange(first_trial, first_trial + trials)[:, None, None]

    def context(
        self,
        t: int,
        *,
        on_gradient: Callable[[np.ndarray], None] | None = None,
        on_sketch_gradient: Callable[[np.ndarray], None] | None = None,
        on_noise: Callable[[np.ndarray], None] | None = None,
        basis: Any = None,
        mean: np.ndarray | None = None,
        release: Callable[[np.ndarray], None] | None = None,
    ) -> tuple[StepContext, Tally]:
        """Round ``t``'s step context and the tally its gradient calls fill.

        ``on_gradient`` / ``on_sketch_gradient`` see what ``gradient`` / ``sketch_gradient``
        return, ``on_noise`` what ``noise`` / ``laplace`` return (simulator probes, noise
        digests); ``basis``, ``mean`` and ``release`` are an adaptive DOME sketch's.
        """
        tally = Tally()
        sel = self.schedule.select(t)
        model, fused, transform = self.model, self.fused, self.transform
        clip_norm = self.params.clip_norm
        if self.single:  # one node's examples, ``chunk`` at a time
            summer = functools.partial(
                gradient_sums.node_sum, model, self.x, self.y, chunk=self.chunk
            )
        else:  # every (trial, node) of the stack, ``group`` nodes per model call
            if self.x.ndim == 4:  # other local data in every trial
                xb = self.x[self._rows, self._node_idx, sel]
                yb = self.y[self._rows, self._node_idx, sel]
            else:
                xb, yb = self.x[self._node_idx, sel], self.y[self._node_idx, sel]
            summer = functools.partial(gradient_sums.stack_sum, model, xb, yb, group=self.group)

        def gradient_sum(point: np.ndarray, project) -> np.ndarray:
            g, hit, bad = summer(
                sel,
                point,
                clip_norm=clip_norm,
                fused=fused,
                project=project,
                transform=transform,
                step=t,
            )
            tally.clipped += hit
            tally.nonfinite += bad
            return g

        def gradient(point: np.ndarray) -> np.ndarray:
            g = gradient_sum(point, None)
            if on_gradient is not None:
                on_gradient(g)
            return g

        def sketch_gradient(point: np.ndarray, project) -> np.ndarray:
            g = gradient_sum(point, project)
            if on_sketch_gradient is not None:
                on_sketch_gradient(g)
            return g

        streams = self.noise

        def noise() -> np.ndarray | None:
            out = streams.gaussian(t)
            if out is not None and on_noise is not None:
                on_noise(out)
            return out

        def laplace(scale: float) -> np.ndarray:
            out = streams.laplace(t, scale)
            if on_noise is not None:
                on_noise(out)
            return out

        params = self.params  # only the extra of the plan's family is built (step_context)
        ctx = step_context(
            params,
            t,
            batch_size=self.schedule.batch_size,
            gradient=gradient,
            noise=noise,
            laplace=None if params.laplace is None else laplace,
            sketch_gradient=None if params.sketch is None else sketch_gradient,
            basis=basis,
            mean=mean,
            release=release,
        )
        return ctx, tally
