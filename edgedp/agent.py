"""Agent: one node's round state machine, free of sockets, threads and clocks.

A round is ``begin_round() -> Outgoing`` (local noisy step; the frames to send to every
neighbour), any number of ``receive(frames)`` calls, then ``end_round()`` (fixed-order mixing,
with the dropout rule for neighbours whose message never came). The same object runs under
the ZeroMQ daemon (firmware_py), the event simulator and in-process tests; only who moves
the frames and who keeps time differs.

Guarantees (DESIGN §6, §8):
* the only way to obtain outgoing frames is :meth:`begin_round`, which always adds the
  round's noise; no round past the plan's T is ever started (BudgetExhaustedError);
* a received message is decoded and fully checked before anything changes — structure,
  plan, sender, round (never past the plan's T), shape, finite values within the plan's
  bound on honest messages (:mod:`edgedp.bounds`); a rejected one only increments
  ``metrics.rejected[reason]``;
* the agent never adopts a non-finite state: :meth:`end_round` raises
  :class:`~edgedp.errors.NonFiniteStateError` before changing anything;
* nothing non-finite is ever sent: a per-example gradient with a NaN or ±inf entry adds
  zero to the clipped sum (counted in ``metrics.nonfinite``), and a round whose outgoing
  message would still be non-finite (the model diverged) raises
  :class:`~edgedp.errors.NonFiniteMessageError` and leaves the agent at the start of that
  round, with nothing sent;
* :meth:`snapshot` / :meth:`restore` carry everything needed to resume at the start of a
  round, and no noise: the noise of every round is a pure function of (key, round), so a
  restarted agent regenerates the same noise and the temporal factor's buffers
  (``NoiseSource.state_at``) — a snapshot that leaked would not reveal them. A snapshot
  records the fingerprint of the streams it was made with
  (:meth:`edgedp.streams.RunKeys.fingerprint`): resuming with another secret, plan or run
  is refused;
* :meth:`final_release` is the model to publish at the end, covered by the plan's
  accountant (for sr-gt/DPOP the last state plus one more Laplace draw);
* a node that fell more than the receive window behind rejoins by skipping rounds
  (:meth:`rejoin_target`, :meth:`rejoin`): only on evidence from a majority of its
  neighbours, never past a round one of that majority reached, and every skipped round
  releases nothing and draws and discards its noise (:meth:`skip_round`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from edgedp import (
    _validate,
    algorithms,
    rejoin,
    rng,
    runtime,
    sketch_adaptive,
    wire,
)
from edgedp import cross_agent as cross_mod
from edgedp.algorithms import StepContext
from edgedp.errors import (
    BudgetExhaustedError,
    DamagedSnapshotError,
    NonFiniteMessageError,
    NonFiniteStateError,
    PlanError,
)
from edgedp.factors import StreamState
from edgedp.noise import NoiseSource, noise_digest
from edgedp.plan import NodeShare

__all__ = ["DROPOUT_RULES", "Agent", "Metrics", "Outgoing", "RoundReport"]

#: Per-example gradient entries held at once: batches are clipped and summed in chunks of
#: max(1, CHUNK_FLOATS // d) examples (same bits as the whole batch, :func:`clipping.add_clipped`).
CHUNK_FLOATS = runtime.CHUNK_FLOATS

#: How an agent mixes when some neighbours' messages did not arrive in time.
DROPOUT_RULES = MappingProxyType(
    {
        "renormalize": "drop the missing neighbours' weights and rescale the rest to sum to 1",
        "reuse-last": "use the last model received from that neighbour (renormalize if none)",
        "self": "give the missing neighbours' weight to the agent's own model",
    }
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """Frames for one round, to be sent to each recipient.

    ``per_recipient`` is set when the algorithm sends each neighbour its own message
    (Zip-DL): then use :meth:`frames_for`; ``frames`` holds the first recipient's.
    """

    round: int
    recipients: tuple[int, ...]
    frames: list[Any]
    noise_digest: str
    per_recipient: dict[int, list[Any]] | None = None

    def frames_for(self, recipient: int) -> list[Any]:
        """The frames to send to ``recipient``."""
        if self.per_recipient is None:
            return self.frames
        return self.per_recipient[recipient]


@dataclass(frozen=True, slots=True)
class RoundReport:
    round: int
    missing: tuple[int, ...]
    clipped: int
    update_norm: float
    nonfinite: int = 0  # examples whose non-finite gradient was left out of the sum


@dataclass(slots=True)
class Metrics:
    rounds: int = 0
    sent: int = 0
    received: int = 0
    missing: int = 0
    clipped: int = 0
    skipped: int = 0
    nonfinite: int = 0  # examples left out of a clipped sum: their gradient was not finite
    rejected: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "sent": self.sent,
            "received": self.received,
            "missing": self.missing,
            "clipped": self.clipped,
            "skipped": self.skipped,
            "nonfinite": self.nonfinite,
            "rejected": dict(self.rejected),
        }


class Agent:
    """One node. See the module docstring for the protocol.

    Args:
      share: the node's :class:`~edgedp.plan.NodeShare`.
      model: a model backend with ``dim``, ``init_params()`` and ``per_example_gradients``.
      x, y: the node's local data.
      noise_key: the key of the node's Gaussian stream (secret on devices).
      batch_key: the key of the node's data-order permutation.
      dropout_rule: one of :data:`DROPOUT_RULES`.
      round_window: how many rounds ahead a message may be and still be buffered.
      memoize_noise: simulators only — see :class:`edgedp.noise.NoiseSource`.
      cross_keys: the shared-seed, per-edge and message stream keys a plan with a
        ``cross_agent`` section needs (:class:`edgedp.cross_agent.CrossKeys`; secret).
      stream_fingerprint: a one-way fingerprint of the secrets, plan and run the keys come
        from, stored in snapshots and checked on restore.
      gradient_transform: simulators only (privacy audits plant canaries with it, never on
        a device): ``(round, point, sel, rows) -> rows`` applied to the per-example gradients
        ``rows`` ``(B, d)`` of the batch ``sel`` (local indices) taken at ``point``, before
        projection and clipping.
      keep_gradient: keep the round's clipped gradient sum as ``last_gradient`` after the
        round (simulator probes read it); devices pass False and keep nothing of a round.
    """

    def __init__(
        self,
        share: NodeShare,
        *,
        model,
        x: np.ndarray,
        y: np.ndarray,
        noise_key: rng.StreamKey,
        batch_key: rng.StreamKey,
        dropout_rule: str = "renormalize",
        round_window: int = 8,
        memoize_noise: bool = False,
        cross_keys: cross_mod.CrossKeys | None = None,
        stream_fingerprint: str = "",
        gradient_transform=None,
        keep_gradient: bool = True,
    ) -> None:
        if dropout_rule not in DROPOUT_RULES:
            raise ValueError(
                f"Unknown dropout_rule={dropout_rule!r}; expected one of {sorted(DROPOUT_RULES)}."
            )
        if dropout_rule == "reuse-last" and share.sketch is not None and share.sketch.refresh:
            raise ValueError(
                "dropout_rule='reuse-last' would mix a dome message from an earlier round, "
                "whose coordinates are in another sketch basis; use 'renormalize' or 'self' "
                "(or a plan with refresh=0)."
            )
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.ndim != 2 or y.shape != (x.shape[0],):
            raise ValueError(f"Expected x (m, f) and y (m,), got {x.shape} and {y.shape}.")
        _validate.finite_array("x", x)  # NaN/inf data would reach the messages
        _validate.finite_array("y", y)
        self.share = share
        self.node = share.node
        # simulators only (audits plant canaries): (round, point, sel, rows) -> rows
        self.gradient_transform = gradient_transform
        self.keep_gradient = keep_gradient
        self.stream_fingerprint = stream_fingerprint
        self.model = model
        self.algo = algorithms.for_mechanism(share.mechanism)
        self.x, self.y = x, y
        cross = None
        if share.cross_agent is not None:
            if cross_keys is None:
                raise PlanError(
                    f"node {share.node}: a {share.mechanism} plan needs cross_keys "
                    "(shared seed / pairwise keys)."
                )
            cross = cross_mod.CrossNoise.for_node(
                share.cross_agent, cross_keys, scale=share.noise_std
            )
        # the node runtime: batch schedule, noise streams and step contexts (edgedp.runtime)
        self.runtime = runtime.Runtime(
            share,
            model=model,
            x=x,
            y=y,
            keys=runtime.NodeKeys(noise=noise_key, batch=batch_key),
            cross=cross,
            memoize=memoize_noise,
            consume=True,  # the agent reads a stream state once (a refused round regenerates it)
            gradient_transform=gradient_transform,
            chunk_floats=CHUNK_FLOATS,
        )
        self.batch = self.runtime.schedule.batch_size
        self.per_epoch = self.runtime.schedule.per_epoch
        self.dropout_rule = dropout_rule
        self.round_window = round_window
        # DOME plans send (and privatize) k floats instead of d
        self.message_dim = self.runtime.message_dim
        theta0 = np.asarray(model.init_params(), dtype=np.float64)
        if theta0.shape != (model.dim,):
            raise ValueError(
                f"Model init_params has shape {theta0.shape}, expected ({model.dim},)."
            )
        self.state: dict[str, np.ndarray] = self.algo.init_state(theta0)
        # adaptive DOME: the spanning-tree all-reduce and the bases
        self.aggregator: sketch_adaptive.TreeAggregator | None = None
        if share.sketch is not None and share.sketch.basis == "adaptive":
            if share.tree is None:
                raise PlanError(f"node {share.node}: an adaptive dome share needs its tree.")
            self.aggregator = sketch_adaptive.TreeAggregator(
                share.sketch, model.dim, tree=share.tree, node=share.node, batch_size=self.batch
            )
        self.round = 0
        self.message: np.ndarray | None = None  # this round's outgoing vector, once begun
        self._ctx: StepContext | None = None
        self._tally = runtime.Tally()
        self.neighbours = tuple(sorted(set(share.neighbours) - {self.node}))
        self.inbox: dict[int, dict[int, np.ndarray]] = {}
        self.last_seen: dict[int, np.ndarray] = {}
        self.ahead: dict[int, int] = {}
        self.metrics = Metrics()
        self._set_bounds(theta0)
        self.announced: dict[int, int] = {}  # neighbour -> consecutive wrong-plan messages

    # ------------------------------------------------------------------ state
    @property
    def share(self) -> NodeShare:
        """The node's plan share (what the node runtime computes with)."""
        return self._share

    @share.setter
    def share(self, value: NodeShare) -> None:
        self._share = value
        if hasattr(self, "runtime"):
            self.runtime.params = value

    @property
    def model(self):
        """The model backend."""
        return self._model

    @model.setter
    def model(self, value) -> None:
        self._model = value
        if hasattr(self, "runtime"):
            self.runtime.model = value

    @property
    def theta(self) -> np.ndarray:
        """The node's current model (the algorithm's ``model(state)``)."""
        return self.algo.model(self.state)

    @theta.setter
    def theta(self, value: np.ndarray) -> None:
        """Start the node from the model ``value`` (its θ₀; every node must use the same)."""
        theta0 = np.asarray(value, dtype=np.float64)
        self.state = self.algo.init_state(theta0)
        self._set_bounds(theta0)

    def _set_bounds(self, theta0: np.ndarray) -> None:
        """The plan's bound on honest messages from the common θ₀ (:mod:`edgedp.bounds`)."""
        share = self.share
        self.bounds: tuple[float, ...] = (
            ()
            if share.network is None
            else tuple(self.algo.message_bound(share, dim=self.model.dim, theta0=theta0))
        )
        self.context = wire.Context(
            plan_hash=bytes.fromhex(share.plan_hash),
            neighbours=frozenset(self.neighbours),
            shapes=((self.message_dim,),),
            max_bytes=wire.MAX_HEADER_BYTES + 16 * self.message_dim + 1024,
            bounds=self.bounds[:1],
        )

    @property
    def noise(self) -> NoiseSource:
        """The node's Gaussian noise source (its temporal factor on its key)."""
        return self.runtime.noise.source

    @property
    def noise_state(self) -> StreamState:
        """Where the node's noise stream stands (its step is the next round to draw)."""
        return self.runtime.noise.state

    @noise_state.setter
    def noise_state(self, value: StreamState) -> None:
        self.runtime.noise.state = value

    @property
    def done(self) -> bool:
        return self.round >= self.share.steps

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume at the start of the current round (no secrets)."""
        if self.message is not None:
            raise RuntimeError("snapshot() must be taken between rounds, not inside one.")
        return {
            "plan_hash": self.share.plan_hash,
            "node": self.node,
            "stream_fingerprint": self.stream_fingerprint,
            "round": self.round,
            "state": dict(self.state),
            "noise_step": self.noise_state.step,
            "last_seen": {str(k): v for k, v in self.last_seen.items()},
            "metrics": self.metrics.to_dict(),
        }

    def restore(self, snap: dict[str, Any]) -> None:
        """Resume from :meth:`snapshot` output; checks it belongs to this plan and node.

        Raises:
          PlanError: the snapshot belongs to another plan, node, secret or run.
          DamagedSnapshotError: its content is malformed, non-finite or inconsistent with
            the plan (a damaged or hand-edited file); nothing changed.
        """
        if snap.get("plan_hash") != self.share.plan_hash or snap.get("node") != self.node:
            raise PlanError("Checkpoint belongs to another plan or node; refusing to resume.")
        if snap.get("stream_fingerprint", "") != self.stream_fingerprint:
            raise PlanError(
                "Checkpoint was made with another noise secret, pairwise key or run id: "
                "resuming would continue its streams with other noise; refusing to resume."
            )
        try:
            state = {k: np.asarray(v, dtype=np.float64) for k, v in dict(snap["state"]).items()}
            r, noise_step = int(snap["round"]), int(snap["noise_step"])
            last_seen = {
                int(k): np.asarray(v, dtype=np.float64) for k, v in snap["last_seen"].items()
            }
            m = snap["metrics"]
            metrics = Metrics(
                rounds=int(m["rounds"]),
                sent=int(m["sent"]),
                received=int(m["received"]),
                missing=int(m["missing"]),
                clipped=int(m["clipped"]),
                skipped=int(m.get("skipped", 0)),
                nonfinite=int(m.get("nonfinite", 0)),
                rejected=Counter({str(k): int(v) for k, v in m["rejected"].items()}),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DamagedSnapshotError(
                f"Checkpoint has missing or malformed fields ({exc})."
            ) from None
        want = self.algo.init_state(self.theta)
        if set(state) != set(want) or any(
            state[k].shape != want[k].shape or not np.all(np.isfinite(state[k])) for k in want
        ):
            raise DamagedSnapshotError(
                "Checkpoint model state has the wrong fields, shapes or non-finite values."
            )
        if any(
            v not in self.neighbours or x.shape != (self.message_dim,) or not np.all(np.isfinite(x))
            for v, x in last_seen.items()
        ):
            raise DamagedSnapshotError("Checkpoint holds a malformed last-seen message.")
        # without Gaussian noise (dsgd, Laplace plans) the Gaussian stream never advances
        stream_ok = self.share.noise_std == 0 or noise_step == r
        if not 0 <= r <= self.share.steps or not stream_ok:
            raise DamagedSnapshotError(
                f"Checkpoint round {r} is inconsistent with the plan or noise state."
            )
        if self.aggregator is not None and r > 0:
            raise NotImplementedError(
                "Resuming an adaptive dome basis mid-run is not built: the spanning-tree "
                "frames in flight and the PCA state (U, Λ, bases) are not checkpointed."
            )
        self.state, self.round = state, r
        # regenerated from the key: a checkpoint holds no noise (module docstring)
        self.runtime.noise.rewind(r)
        self.last_seen = last_seen
        self.metrics = metrics
        self.inbox = {k: v for k, v in self.inbox.items() if k >= r}

    # ------------------------------------------------------------------ round
    def begin_round(self) -> Outgoing:
        """Local noisy step; returns the frames every neighbour must receive.

        Raises:
          BudgetExhaustedError: the plan's T rounds are done.
          NonFiniteMessageError: the round's message would hold NaN or ±inf (the model
            diverged); nothing is returned to send and the agent stays at the start of the
            round (state and noise stream unchanged; counted in
            ``metrics.rejected["NonFiniteMessageError"]``).
        """
        if self.done:
            raise BudgetExhaustedError(
                f"node {self.node}: the plan's {self.share.steps} rounds are done."
            )
        if self.message is not None:
            raise RuntimeError(f"round {self.round} already begun")
        self._noise_digest = ""
        self.last_gradient: np.ndarray | None = None

        def keep(g: np.ndarray) -> None:  # read by simulator probes (ground truth), never sent
            self.last_gradient = g

        def digest(out: np.ndarray) -> None:
            self._noise_digest = noise_digest(out)

        agg = self.aggregator
        self._ctx, self._tally = self.runtime.context(
            self.round,
            on_gradient=keep if self.keep_gradient else None,
            on_noise=digest,
            basis=None if agg is None else agg.basis(self.round),
            mean=None if agg is None else agg.sketch.mean(self.round),
            release=None if agg is None else self._release,
        )
        try:  # nothing below changes the agent until every outgoing array is checked
            state, message = self.algo.send(self.state, self._ctx)
            tree = {}
            if self.aggregator is not None:  # + a k-float frame on each tree edge
                tree = self.aggregator.frames_out(self.round)
            self._check_finite(message, *tree.values())
        except BaseException:
            # the stream goes back to the round's start, regenerated from the key (the
            # factor's state is not kept twice for this rare path)
            self._ctx = None
            if self.noise_state.step != self.round:
                self.runtime.noise.rewind(self.round)
            raise
        self.state, self.message = state, message
        self.metrics.sent += len(self.neighbours)
        if self.message.ndim == 2:  # one message per padded-row slot (Zip-DL)
            return self._per_recipient(self.message)
        msg = wire.Message(self.context.plan_hash, self.round, self.node, "model", (self.message,))
        plain = wire.encode(msg)
        if self.aggregator is None:
            return Outgoing(self.round, self.neighbours, plain, self._noise_digest)
        frames = {
            v: wire.encode(replace(msg, arrays=(self.message, tree[v]))) if v in tree else plain
            for v in self.neighbours
        }
        first = frames[self.neighbours[0]] if self.neighbours else []
        return Outgoing(self.round, self.neighbours, first, self._noise_digest, frames)

    def _check_finite(self, *arrays: np.ndarray) -> None:
        bad = sum(int(a.size - np.count_nonzero(np.isfinite(a))) for a in arrays)
        if bad:
            self.metrics.rejected["NonFiniteMessageError"] += 1
            raise NonFiniteMessageError(
                f"node {self.node}, round {self.round}: the outgoing message has {bad} NaN/Inf "
                "entries (e.g. the model diverged); nothing was sent. Lower the learning rate or "
                "check the model and data."
            )

    def _release(self, coef: np.ndarray) -> None:
        assert self.aggregator is not None  # passed as the release of adaptive DOME only
        self.aggregator.release(self.round, coef)

    def _per_recipient(self, slots: np.ndarray) -> Outgoing:
        """Encode slot j's message for the j-th entry of the row; keep the own slot."""
        row = self.share.neighbours
        frames = {}
        for j, v in enumerate(row):
            if v != self.node and v not in frames:
                msg = (self.context.plan_hash, self.round, self.node, "model", (slots[j],))
                frames[v] = wire.encode(wire.Message(*msg))
        self.message = slots[row.index(self.node)]
        first = frames[self.neighbours[0]] if self.neighbours else []
        return Outgoing(self.round, self.neighbours, first, self._noise_digest, frames)

    def final_release(self) -> np.ndarray:
        """The model to publish once the plan's rounds are done, covered by its accountant.

        Gaussian plans: the model, a post-processing of released messages. sr-gt / DPOP: the
        last state x(K) carries one gradient step no message noised, so the release is
        x(K) + Lap(ν_{K+1}) from the node's stream at round K — a step no message uses
        (:func:`edgedp.accounting.laplace.epsilon_spent` with ``final_release=True``).
        """
        if not self.done:
            raise RuntimeError(f"node {self.node}: final_release() before the last round")
        if self.share.laplace is None:
            return self.theta
        steps = self.share.steps
        scale = self.share.laplace.noise_scale(steps)
        return self.theta + self.runtime.noise.laplace(steps, scale)

    def wire_limits(self) -> tuple[int, int]:
        """``(largest frame in bytes, most frames)`` of any message this node accepts: a
        header of at most ``wire.MAX_HEADER_BYTES`` and one array per expected shape (two
        with an adaptive dome basis). Transports cap inbound frames and parts with these."""
        shapes = self.context.shapes * (2 if self.aggregator is not None else 1)
        itemsize = np.dtype(self.context.dtype).itemsize
        largest = max(int(np.prod(shape, dtype=np.int64)) * itemsize for shape in shapes)
        return max(wire.MAX_HEADER_BYTES, largest), 1 + len(shapes)

    def rejoin_target(self) -> int | None:
        """The round to skip to if this node fell more than the receive window behind, else
        None (also inside a round): :func:`edgedp.rejoin.target` on the rounds seen from
        the neighbours, including messages past the window (rejected, their round noted).
        Never with an adaptive dome basis: its spanning-tree aggregate needs every round.
        """
        if self.message is not None or self.aggregator is not None:
            return None
        return rejoin.target(
            self.round,
            window=self.round_window,
            steps=self.share.steps,
            seen=self.ahead,
            neighbours=self.neighbours,
        )

    def rejoin(self, target: int) -> int:
        """Skip every round before ``target`` (see :meth:`rejoin_target`); returns how many.

        Each skipped round is :meth:`skip_round`: no step and no message, its noise drawn and
        discarded, so the stream stays aligned with the round counter and never reused.
        """
        if not self.round < target < self.share.steps:
            raise ValueError(
                f"Expected round {self.round} < target={target} < T={self.share.steps}."
            )
        skipped = target - self.round
        while self.round < target:
            self.skip_round()
        return skipped

    def skip_round(self) -> None:
        """Sit out the current round (the node is offline): no step, no messages.

        The round's noise is drawn and discarded so the stream stays aligned with the round
        counter: noise is never reused, and what the node releases is a subset of what the
        plan certifies.
        """
        if self.done:
            raise BudgetExhaustedError(
                f"node {self.node}: the plan's {self.share.steps} rounds are done."
            )
        if self.message is not None:
            raise RuntimeError(f"round {self.round} already begun; end it instead")
        self.runtime.noise.discard()
        self.inbox.pop(self.round, None)
        self.round += 1
        self.metrics.rounds += 1
        self.metrics.skipped += 1

    def receive(self, frames: Sequence[Any], *, authenticated_sender: int | None = None) -> bool:
        """Take a message; returns False (and counts why) if it is rejected."""
        try:
            msg = wire.decode(frames, max_bytes=self.context.max_bytes)
        except wire.WireError as exc:
            self.metrics.rejected[type(exc).__name__] += 1
            return False
        return self.accept(msg, authenticated_sender=authenticated_sender)

    def accept(
        self,
        msg: wire.Message,
        *,
        authenticated_sender: int | None = None,
        extremes: tuple | None = None,
    ) -> bool:
        """:meth:`receive` for a message already decoded by :func:`edgedp.wire.decode`:
        every check against this node's plan, round window and bounds, then the inbox
        (``extremes``: :func:`edgedp.wire.extremes` of ``msg``, if already computed)."""
        try:
            context = self.context
            if self.aggregator is not None and self.aggregator.expects(msg.sender, msg.round):
                # model + tree frame
                context = replace(context, shapes=context.shapes * 2, bounds=self.bounds)
            wire.check(
                msg,
                context,
                round_lo=self.round,
                round_hi=min(self.round + self.round_window, self.share.steps - 1),
                authenticated_sender=authenticated_sender,
                extremes=extremes,
            )
        except wire.WireError as exc:
            self.metrics.rejected[type(exc).__name__] += 1
            if isinstance(exc, wire.RoundOutOfWindow):
                self._note_far_round(msg, context, authenticated_sender)
            if isinstance(exc, wire.PlanHashMismatch) and authenticated_sender is not None:
                self.announced[authenticated_sender] = (
                    self.announced.get(authenticated_sender, 0) + 1
                )
            return False
        slot = self.inbox.setdefault(msg.round, {})
        if msg.sender in slot:
            self.metrics.rejected["Replayed"] += 1
            return False
        slot[msg.sender] = np.array(msg.arrays[0], dtype=np.float64)  # own copy
        if len(msg.arrays) == 2:
            assert self.aggregator is not None  # wire.check allows a second array only then
            self.aggregator.take(msg.sender, msg.round, np.array(msg.arrays[1], dtype=np.float64))
        self.announced[msg.sender] = 0
        self.ahead[msg.sender] = max(self.ahead.get(msg.sender, -1), msg.round)
        self.metrics.received += 1
        return True

    def _note_far_round(self, msg, context, authenticated_sender: int | None) -> None:
        """Note the round of an authenticated neighbour's message past the receive window if
        the message is valid in every other way (round < T); it stays rejected."""
        if authenticated_sender is None or msg.round <= self.round + self.round_window:
            return
        try:
            wire.check(
                msg,
                context,
                round_lo=0,
                round_hi=self.share.steps - 1,
                authenticated_sender=authenticated_sender,
            )
        except wire.WireError:
            return
        self.ahead[msg.sender] = max(self.ahead.get(msg.sender, -1), msg.round)

    def missing(self) -> tuple[int, ...]:
        """Neighbours whose message for the current round has not arrived."""
        got = self.inbox.get(self.round, {})
        return tuple(v for v in self.neighbours if v not in got)

    def hopeless(self) -> tuple[int, ...]:
        """Missing neighbours already seen in a later round (also past the receive window):
        their message for this round will never come."""
        return tuple(v for v in self.missing() if self.ahead.get(v, -1) > self.round)

    def plan_rejected_by_all(self, limit: int) -> bool:
        """True when every neighbour sent at least ``limit`` messages for another plan and no
        valid one since: this node, not its neighbours, holds the wrong plan."""
        return all(self.announced.get(v, 0) >= limit for v in self.neighbours)

    def ready(self) -> bool:
        return self.message is not None and not self.missing()

    def waits(self) -> bool:
        """Whether waiting can still help: ``not ready()``, unless every missing neighbour
        is :meth:`hopeless` (one pass over the neighbours; the simulator asks at every
        message)."""
        got, r = self.inbox.get(self.round, {}), self.round
        missing = [v for v in self.neighbours if v not in got]
        if not missing:
            return self.message is None
        return any(self.ahead.get(v, -1) <= r for v in missing)

    def end_round(self) -> RoundReport:
        """Mix (fixed order; dropout rule for missing neighbours) and advance the round.

        Raises:
          NonFiniteStateError: the mixed state would hold NaN or ±inf; nothing changes (the
            agent stays inside the round, its inbox intact; counted in
            ``metrics.rejected["NonFiniteStateError"]``).
        """
        if self.message is None:
            raise RuntimeError("end_round() before begin_round()")
        got = self.inbox.get(self.round, {})
        missing = tuple(v for v in self.neighbours if v not in got)
        if self.aggregator is not None and any(
            self.aggregator.expects(v, self.round) for v in missing
        ):  # checked before any change: the round can be retried if the frame still comes
            self.metrics.rejected["MissingAggregateError"] += 1
            raise sketch_adaptive.MissingAggregateError(
                f"node {self.node}: a spanning-tree frame of round {self.round} did not "
                f"arrive (from {missing}); the adaptive basis needs every frame"
            )
        weights, vectors = self._mixing_terms(got, set(missing))
        before = self.theta
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite results: just below
            state = self.algo.receive(
                self.state, np.asarray(weights, dtype=np.float64), vectors, self._ctx
            )
        del vectors  # the round's messages are not needed past the mixing
        bad = sum(int(a.size - np.count_nonzero(np.isfinite(a))) for a in state.values())
        if bad:  # checked before any change: the agent never adopts a non-finite state
            self.metrics.rejected["NonFiniteStateError"] += 1
            raise NonFiniteStateError(
                f"node {self.node}, round {self.round}: mixing would leave {bad} NaN/Inf "
                "entries in the state (the model diverged); the state was not changed."
            )
        self.inbox.pop(self.round, None)
        self.state = state
        if self.dropout_rule == "reuse-last":  # the only rule that reads them again
            for v, vec in got.items():
                self.last_seen[v] = vec
        del got
        self.message = None  # released before the diagnostic's temporary is allocated
        with np.errstate(over="ignore", invalid="ignore"):  # a diagnostic: overflow reads inf
            step = np.subtract(self.theta, before)
            update_norm = float(np.sqrt(np.sum(np.multiply(step, step, out=step))))
            del step, before
        if self.aggregator is not None:
            self.aggregator.end_round(self.round)
        tally = self._tally
        report = RoundReport(self.round, missing, tally.clipped, update_norm, tally.nonfinite)
        self.metrics.rounds += 1
        self.metrics.missing += len(missing)
        self.metrics.clipped += tally.clipped
        self.metrics.nonfinite += tally.nonfinite
        self.round += 1
        self._ctx = None
        self.inbox = {k: v for k, v in self.inbox.items() if k >= self.round}
        return report

    def _mixing_terms(self, got: dict[int, np.ndarray], missing: set[int]):
        row_ids, row_w = self.share.neighbours, self.share.weights
        vecs = [self.message if v == self.node else got.get(v) for v in row_ids]
        if not missing:
            return row_w, vecs
        weights = list(row_w)
        for j, v in enumerate(row_ids):
            if v not in missing:
                continue
            if self.dropout_rule == "reuse-last" and v in self.last_seen:
                vecs[j] = self.last_seen[v]
            elif self.dropout_rule == "self":
                vecs[j] = self.message
            else:
                vecs[j], weights[j] = self.message, 0.0
        total = sum(weights)
        if self.dropout_rule in ("renormalize", "reuse-last") and total != 1.0:
            weights = [w / total for w in weights]
        return tuple(weights), vecs
