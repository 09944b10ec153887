"""Agent: one node's round state machine, free of sockets, threads and clocks.

A round is ``begin_round() -> Outgoing`` (local noisy step; the frames to send to every
neighbour), any number of ``receive(frames)`` calls, then ``end_round()`` (fixed-order mixing,
with the dropout rule for neighbours whose message never came). The same object runs under
the ZeroMQ daemon (firmware_py), the event simulator and in-process tests; only who moves
the frames and who keeps time differs.

The Agent is put together from three parts, each built and tested on its own and given
what it needs as constructor arguments (CONVENTIONS C1: they hold state and call
functions):

* the node's state, :class:`edgedp.node_state.NodeState` — the round, the algorithm's state
  (θ), the noise streams, the last message seen from each neighbour, the counters; what a
  snapshot saves (:mod:`edgedp.snapshot`);
* its mailbox, :class:`edgedp.mailbox.Mailbox` — every check of a neighbour's message, the
  inbox by round, what the node knows of its neighbours' rounds (the rejoin evidence,
  equivocations); it counts what it receives and rejects into the state's counters;
* its round runtime, :class:`edgedp.node_round.NodeRound` — the local noisy step on the node
  runtime (:mod:`edgedp.runtime`: batch schedule, clipping, noise streams), the mixing with
  the dropout rule (:mod:`edgedp.dropout`), skipped rounds and the final release; it
  advances the state and takes the round's messages from the mailbox.

The Agent itself builds the parts from the node's share, keys and data, answers the round
loop (:mod:`edgedp.rounds`) and the transports with the node's current round, and decides
the rejoin (:mod:`edgedp.rejoin`).

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

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgedp import (
    _validate,
    dropout,
    families,
    rejoin,
    rng,
    runtime,
    snapshot,
    wire,
)
from edgedp.dropout import DROPOUT_RULES
from edgedp.errors import PlanError
from edgedp.factors import StreamState
from edgedp.families.cross import noise as cross_mod
from edgedp.families.dome import sketch_adaptive
from edgedp.mailbox import Mailbox, honest_bounds
from edgedp.node_metrics import Metrics, RoundReport
from edgedp.node_round import NodeRound
from edgedp.node_state import NodeState
from edgedp.noise import NoiseSource
from edgedp.outgoing import Outgoing
from edgedp.plan import NodeShare

__all__ = ["DROPOUT_RULES", "Agent", "Metrics", "Outgoing", "RoundReport"]

#: Per-example gradient entries held at once: batches are clipped and summed in chunks of
#: max(1, CHUNK_FLOATS // d) examples (same bits as the whole batch, :func:`clipping.add_clipped`).
CHUNK_FLOATS = runtime.CHUNK_FLOATS


class Agent:
    """One node. See the module docstring for the protocol and its parts.

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
        ``cross_agent`` section needs (:class:`edgedp.families.cross.noise.CrossKeys`; secret).
      stream_fingerprint: a one-way fingerprint of the secrets, plan and run the keys come
        from, stored in snapshots and checked on restore.
      gradient_transform: simulators only (privacy audits plant canaries with it, never on
        a device): ``(round, point, sel, rows) -> rows`` applied to the per-example gradients
        ``rows`` ``(B, d)`` of the batch ``sel`` (local indices) taken at ``point``, before
        projection and clipping.
      keep_gradient: keep the round's clipped gradient sum as ``last_gradient`` after the
        round (simulator probes read it); devices pass False and keep nothing of a round.
      noise_digests: fingerprint each round's noise for the log (``Outgoing.noise_digest``,
        what the daemon records); the event engine logs none and passes False ("").
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
        noise_digests: bool = True,
    ) -> None:
        dropout.check_rule(dropout_rule, share)
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.ndim != 2 or y.shape != (x.shape[0],):
            raise ValueError(f"Expected x (m, f) and y (m,), got {x.shape} and {y.shape}.")
        _validate.finite_array("x", x)  # NaN/inf data would reach the messages
        _validate.finite_array("y", y)
        self._share, self._model = share, model
        self._rules = families.for_mechanism(share.mechanism)
        self._dropout_rule, self._window = dropout_rule, round_window
        self._fingerprint = stream_fingerprint
        self._neighbours = tuple(sorted(set(share.neighbours) - {share.node}))
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
        node_runtime = runtime.Runtime(
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
        self._schedule = node_runtime.schedule
        # DOME plans send (and privatize) k floats instead of d
        self._message_dim = node_runtime.message_dim
        theta0 = np.asarray(model.init_params(), dtype=np.float64)
        if theta0.shape != (model.dim,):
            raise ValueError(
                f"Model init_params has shape {theta0.shape}, expected ({model.dim},)."
            )
        # adaptive DOME: the spanning-tree all-reduce and the bases
        self._aggregator: sketch_adaptive.TreeAggregator | None = None
        if share.sketch is not None and share.sketch.basis == "adaptive":
            if share.tree is None:
                raise PlanError(f"node {share.node}: an adaptive dome share needs its tree.")
            self._aggregator = sketch_adaptive.TreeAggregator(
                share.sketch,
                model.dim,
                tree=share.tree,
                node=share.node,
                batch_size=self._schedule.batch_size,
            )
        self._state = NodeState(self._rules, theta0, noise=node_runtime.noise)
        self._mailbox = Mailbox.for_node(
            share,
            bounds=self._honest_bounds(theta0),
            neighbours=self._neighbours,
            message_dim=self._message_dim,
            window=round_window,
            metrics=self._state.metrics,
            aggregator=self._aggregator,
        )
        self._round = NodeRound(
            share,
            rules=self._rules,
            runtime=node_runtime,
            state=self._state,
            mailbox=self._mailbox,
            neighbours=self._neighbours,
            dropout_rule=dropout_rule,
            aggregator=self._aggregator,
            keep_gradient=keep_gradient,
            noise_digests=noise_digests,
        )

    def _honest_bounds(self, theta0: np.ndarray) -> tuple[float, ...]:
        """The plan's bound on honest messages from the common θ₀ (:mod:`edgedp.bounds`)."""
        return honest_bounds(self._share, self._rules, dim=self._model.dim, theta0=theta0)

    # ------------------------------------------------------------------ what the node is
    @property
    def share(self) -> NodeShare:
        """The node's plan share."""
        return self._share

    @property
    def node(self) -> int:
        """The node's id."""
        return self._share.node

    @property
    def neighbours(self) -> tuple[int, ...]:
        """The node's neighbours (sorted, without itself)."""
        return self._neighbours

    @property
    def model(self):
        """The model backend."""
        return self._model

    @property
    def dropout_rule(self) -> str:
        """How a missing neighbour's message is replaced (:data:`DROPOUT_RULES`)."""
        return self._dropout_rule

    @property
    def round_window(self) -> int:
        """How many rounds ahead a message may be and still be buffered."""
        return self._window

    @property
    def message_dim(self) -> int:
        """The length of the node's messages (d, or k for a DOME sketch)."""
        return self._message_dim

    @property
    def schedule(self) -> runtime.BatchSchedule:
        """The node's batch schedule: its batch size, and the examples of each round."""
        return self._schedule

    # ------------------------------------------------------------------ state
    @property
    def round(self) -> int:
        """The round the node is in, or begins next."""
        return self._state.round

    @round.setter
    def round(self, value: int) -> None:
        self._state.round = value

    @property
    def done(self) -> bool:
        return self._state.round >= self._share.steps

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The algorithm's state (θ and whatever else the rules keep)."""
        return self._state.state

    @property
    def theta(self) -> np.ndarray:
        """The node's current model (the algorithm's ``model(state)``)."""
        return self._state.theta

    @theta.setter
    def theta(self, value: np.ndarray) -> None:
        """Start the node from the model ``value`` (its θ₀; every node must use the same):
        the algorithm's initial state, and the plan's bound on honest messages from it."""
        theta0 = np.asarray(value, dtype=np.float64)
        self._state.start_from(theta0)
        self._mailbox.bound_to(self._honest_bounds(theta0))

    @property
    def metrics(self) -> Metrics:
        """The node's counters (one object for the node's life)."""
        return self._state.metrics

    @property
    def noise(self) -> NoiseSource:
        """The node's Gaussian noise source (its temporal factor on its key)."""
        return self._state.noise.source

    @property
    def noise_state(self) -> StreamState:
        """Where the node's noise stream stands (its step is the next round to draw)."""
        return self._state.noise.state

    @property
    def message(self) -> np.ndarray | None:
        """This round's outgoing vector once the round has begun, else None."""
        return self._round.message

    @message.setter
    def message(self, value: np.ndarray | None) -> None:
        self._round.message = value

    @property
    def last_gradient(self) -> np.ndarray | None:
        """The last round's clipped gradient sum (``keep_gradient`` only; simulator probes)."""
        return self._round.last_gradient

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume at the start of the current round (no secrets)."""
        if self._round.begun:
            raise RuntimeError("snapshot() must be taken between rounds, not inside one.")
        return self._state.snapshot(
            plan_hash=self._share.plan_hash,
            node=self._share.node,
            stream_fingerprint=self._fingerprint,
        )

    def restore(self, snap: dict[str, Any]) -> None:
        """Resume from :meth:`snapshot` output; checks it belongs to this plan and node.

        Raises:
          PlanError: the snapshot belongs to another plan, node, secret or run.
          DamagedSnapshotError: its content is malformed, non-finite or inconsistent with
            the plan (a damaged or hand-edited file); nothing changed.
        """
        resume = snapshot.check(
            snap,
            self._share,
            stream_fingerprint=self._fingerprint,
            fresh_state=self._state.fresh(),
            neighbours=self._neighbours,
            message_dim=self._message_dim,
            adaptive=self._aggregator is not None,
        )
        self._state.resume(resume)
        self._mailbox.drop_before(resume.round)

    # ------------------------------------------------------------------ the round
    def begin_round(self) -> Outgoing:
        """Local noisy step; returns the frames every neighbour must receive
        (:meth:`edgedp.node_round.NodeRound.begin`).

        Raises:
          BudgetExhaustedError: the plan's T rounds are done.
          NonFiniteMessageError: the round's message would hold NaN or ±inf (the model
            diverged); nothing is returned to send and the agent stays at the start of the
            round (state and noise stream unchanged; counted in
            ``metrics.rejected["NonFiniteMessageError"]``).
        """
        return self._round.begin()

    def end_round(self) -> RoundReport:
        """Mix (fixed order; dropout rule for missing neighbours) and advance the round
        (:meth:`edgedp.node_round.NodeRound.end`).

        Raises:
          NonFiniteStateError: the mixed state would hold NaN or ±inf; nothing changes (the
            agent stays inside the round, its inbox intact; counted in
            ``metrics.rejected["NonFiniteStateError"]``).
        """
        return self._round.end()

    def skip_round(self) -> None:
        """Sit out the current round (the node is offline): no step, no messages; its noise
        is drawn and discarded (:meth:`edgedp.node_round.NodeRound.skip`)."""
        self._round.skip()

    def rejoin_target(self) -> int | None:
        """The round to skip to if this node fell more than the receive window behind, else
        None (also inside a round): :func:`edgedp.rejoin.target` on the rounds of the
        neighbours' messages past the window (rejected, their round noted) — only of those
        still missing at a deadline since (:meth:`edgedp.mailbox.Mailbox.rejoin_evidence`).
        Never with an adaptive dome basis: its spanning-tree aggregate needs every round.
        """
        if self._round.begun or self._aggregator is not None:
            return None
        seen = self._mailbox.rejoin_evidence()
        if not seen:  # (the rule needs at least one neighbour's evidence; asked every round)
            return None
        return rejoin.target(
            self._state.round,
            window=self._window,
            steps=self._share.steps,
            seen=seen,
            neighbours=self._neighbours,
        )

    def rejoin(self, target: int) -> int:
        """Skip every round before ``target`` (see :meth:`rejoin_target`); returns how many.

        Each skipped round is :meth:`skip_round`: no step and no message, its noise drawn and
        discarded, so the stream stays aligned with the round counter and never reused.
        """
        state, steps = self._state, self._share.steps
        if not state.round < target < steps:
            raise ValueError(f"Expected round {state.round} < target={target} < T={steps}.")
        skipped = target - state.round
        while state.round < target:
            self.skip_round()
        return skipped

    def final_release(self) -> np.ndarray:
        """The model to publish once the plan's rounds are done, covered by its accountant
        (:meth:`edgedp.node_round.NodeRound.final_release`)."""
        return self._round.final_release()

    # ------------------------------------------------------------------ receiving
    @property
    def mailbox(self) -> Mailbox:
        """The node's mailbox (its checks, inbox and what it knows of its neighbours)."""
        return self._mailbox

    @property
    def context(self) -> wire.Context:
        """What a neighbour's message is checked against (:func:`edgedp.mailbox.wire_context`)."""
        return self._mailbox.context

    @property
    def bounds(self) -> tuple[float, ...]:
        """The plan's bound on each array an honest message carries (:mod:`edgedp.bounds`)."""
        return self._mailbox.bounds

    @property
    def inbox(self) -> dict[int, dict[int, np.ndarray]]:
        """The accepted messages: round -> sender -> vector."""
        return self._mailbox.inbox

    @inbox.setter
    def inbox(self, value: dict[int, dict[int, np.ndarray]]) -> None:
        self._mailbox.inbox = value

    @property
    def ahead(self) -> dict[int, int]:
        """The latest round accepted from each neighbour."""
        return self._mailbox.ahead

    def wire_limits(self) -> tuple[int, int]:
        """``(largest frame in bytes, most frames)`` of any message this node accepts
        (:func:`edgedp.mailbox.wire_limits`). Transports cap inbound frames and parts."""
        return self._mailbox.limits()

    def receive(
        self,
        frames: Sequence[Any],
        *,
        authenticated_sender: int | None = None,
        owned: bool = False,
    ) -> bool:
        """Take a message; returns False (and counts why) if it is rejected. ``owned``: the
        frames' buffers belong to this node alone and nothing else writes them (a transport
        whose ``OWNS_FRAMES`` is true): the accepted vector is kept without a copy
        (:meth:`edgedp.mailbox.Mailbox.accept`)."""
        return self._mailbox.receive(frames, self._state.round, authenticated_sender, owned)

    def accept(
        self,
        msg: wire.Message,
        *,
        authenticated_sender: int | None = None,
        extremes: tuple | None = None,
        fingerprint: bytes | None = None,
        owned: bool = False,
        checked: wire.Context | None = None,
    ) -> bool:
        """:meth:`receive` for a message already decoded by :func:`edgedp.wire.decode`:
        every check against this node's plan, round window and bounds, then the inbox
        (``extremes``: :func:`edgedp.wire.extremes` of ``msg``, ``fingerprint``:
        :func:`edgedp.wire.fingerprint` of ``msg``, if already computed; ``checked``: a
        context the content of ``msg`` passed, :func:`edgedp.mailbox.content_checked`:
        only its sender and round are then checked, if this node's context holds the
        content to the same). ``owned``: nothing
        can write ``msg``'s arrays (views of immutable ``bytes`` frames, as the event
        engine decodes) or they belong to this node alone: the accepted vector is kept
        without a copy (:meth:`edgedp.mailbox.Mailbox.accept`)."""
        # positional: the event engine and the daemon call this for every message
        return self._mailbox.accept(
            msg, self._state.round, authenticated_sender, extremes, owned, fingerprint, checked
        )

    def missing(self) -> tuple[int, ...]:
        """Neighbours whose message for the current round has not arrived."""
        return self._mailbox.missing(self._state.round)

    def hopeless(self) -> tuple[int, ...]:
        """Missing neighbours with an accepted message of a later round: their message for
        this round will never come."""
        return self._mailbox.hopeless(self._state.round)

    def behind(self) -> bool:
        """Whether every missing neighbour's latest message was past the receive window:
        this node fell behind them (they are not late; a runtime need not wait for them
        as for a start-up)."""
        return self._mailbox.behind(self._state.round)

    def ready(self) -> bool:
        return self._round.begun and not self.missing()

    def waits(self) -> bool:
        """Whether waiting can still help: ``not ready()``, unless every missing neighbour
        is :meth:`hopeless` (one pass over the neighbours; the simulator asks at every
        message)."""
        return self._mailbox.waits(self._state.round, self._round.begun)

    def deadline_passed(self) -> None:
        """The current round's wait ended at its deadline
        (:meth:`edgedp.mailbox.Mailbox.deadline_passed`)."""
        self._mailbox.deadline_passed(self._state.round)

    def plan_rejected_by_all(self, limit: int) -> bool:
        """True when every neighbour sent at least ``limit`` messages for another plan and no
        valid one since: this node, not its neighbours, holds the wrong plan."""
        return self._mailbox.plan_rejected_by_all(limit)

    def take_equivocations(self) -> list[tuple[int, int, bytes, bytes]]:
        """The equivocations seen since the last call: (neighbour, round, fingerprint of the
        message kept, fingerprint of the other one)."""
        return self._mailbox.take_equivocations()
