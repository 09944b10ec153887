"""A node's mailbox: every check of an incoming message, then its inbox by round.

:class:`Mailbox` is the receive side of :class:`edgedp.agent.Agent`, built and tested on its
own: it holds no round of its own (each call that depends on it gets the node's round) and
counts what it stores and rejects into the node's :class:`~edgedp.node_metrics.Metrics`.
:meth:`Mailbox.receive` decodes frames (:func:`edgedp.wire.decode`);
:meth:`Mailbox.accept` checks a decoded message against the node's plan (hash, shapes, the
bound on honest messages: :func:`wire_context`), its neighbours and the receive window
[round, min(round + window, T − 1)] before it stores a private copy; a rejected message
changes nothing but a counter (CONVENTIONS C7) — and, when it is authenticated and valid in
every way but its round, the node's record of where that neighbour stands (below). The
copy is skipped when the caller hands over frames the node owns alone (ZeroMQ messages, the
loopback's fresh bytes) or that nothing can write (the event engine's ``bytes``): the
accepted vector is then the received buffer itself, made read-only after the checks.

What the round loop asks about the neighbours, and the evidence each answer rests on:

* ``ahead`` — the latest round *accepted* from each neighbour. A neighbour with an accepted
  message of a later round will never send the current one (one link delivers in order),
  so :meth:`Mailbox.hopeless` stops waiting for it;
* ``far`` — the latest round of a neighbour's authenticated, otherwise valid messages past
  the window (rejected). It says the node fell behind, but one such frame costs a holder of
  the neighbour's key nothing, so it counts for a rejoin (:func:`edgedp.rejoin.target`) only
  for neighbours whose message was still missing when a round's wait ended at its deadline
  (``expired``, :meth:`Mailbox.deadline_passed`), and an accepted message of the neighbour
  clears both: a rejected frame cannot cut a wait short or move a node that hears from that
  neighbour;
* a fingerprint (:func:`edgedp.wire.fingerprint`) of each neighbour's message of the last
  :data:`HISTORY` rounds: a second, different message of one round (also one arriving after
  the round was mixed) is rejected as ``Equivocation`` and kept in ``equivocations`` for the
  log; the first one stays;
* whether every neighbour announces another plan (:meth:`Mailbox.plan_rejected_by_all`).

The round runtime (:class:`edgedp.node_round.NodeRound`) reads a round's messages
(:meth:`Mailbox.messages`) and releases them once mixed (:meth:`Mailbox.forget`,
:meth:`Mailbox.drop_before`).

Device-safe: numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from edgedp import wire
from edgedp.node_metrics import Metrics

__all__ = [
    "HISTORY",
    "Mailbox",
    "content_checked",
    "honest_bounds",
    "wire_context",
    "wire_limits",
]

#: Rounds of each neighbour's message fingerprints a node keeps to catch equivocation.
HISTORY = 64
#: Equivocations kept for the log (the oldest are dropped; the counter counts them all).
_EVENTS = 64
_EMPTY: dict = {}  # (never written)


def honest_bounds(share, rules, *, dim: int, theta0: np.ndarray) -> tuple[float, ...]:
    """The plan's bound on the entries of every array an honest message carries, from the
    common θ₀ (the algorithm's ``message_bound``, :mod:`edgedp.bounds`); none for a share
    without network facts."""
    if share.network is None:
        return ()
    return tuple(rules.message_bound(share, dim=dim, theta0=theta0))


def wire_context(
    share, *, neighbours: tuple[int, ...], message_dim: int, bounds: tuple[float, ...]
) -> wire.Context:
    """What :func:`edgedp.wire.check` holds a neighbour's model message to: the plan hash,
    the sender set, the ``(message_dim,)`` shape, the size cap and the first bound."""
    return wire.Context(
        plan_hash=bytes.fromhex(share.plan_hash),
        neighbours=frozenset(neighbours),
        shapes=((message_dim,),),
        max_bytes=wire.MAX_HEADER_BYTES + 16 * message_dim + 1024,
        bounds=bounds[:1],
    )


def wire_limits(context: wire.Context, *, tree: bool) -> tuple[int, int]:
    """``(largest frame in bytes, most frames)`` of any message ``context`` accepts: a
    header of at most ``wire.MAX_HEADER_BYTES`` and one array per expected shape (two with
    an adaptive dome basis' tree frame). Transports cap inbound frames and parts with these."""
    shapes = context.shapes * (2 if tree else 1)
    itemsize = np.dtype(context.dtype).itemsize
    largest = max(int(np.prod(shape, dtype=np.int64)) * itemsize for shape in shapes)
    return max(wire.MAX_HEADER_BYTES, largest), 1 + len(shapes)


def content_checked(
    msg: wire.Message, context: wire.Context, extremes: tuple | None = None
) -> wire.Context | None:
    """``context`` if ``msg`` passes :func:`edgedp.wire.check` against it in the message's
    own round — then every check of its content passes (plan hash, arrays, shapes, dtype,
    finite values within the bounds) — else None. A simulator that hands one decoded
    message to several nodes checks its content once, with a recipient's context, and
    passes the result to :meth:`Mailbox.accept` (``checked``)."""
    try:
        wire.check(msg, context, round_lo=msg.round, round_hi=msg.round, extremes=extremes)
    except wire.WireError:
        return None
    return context


def _same_content_checks(a: wire.Context, b: wire.Context) -> bool:
    """Whether :func:`edgedp.wire.check` holds a message's content to the same with ``a``
    as with ``b`` (what it reads of a context besides the sender set)."""
    return (
        a is b
        or a.plan_hash == b.plan_hash
        and a.shapes == b.shapes
        and a.dtype == b.dtype
        and a.bounds == b.bounds
    )


def _kept(arr: np.ndarray, owned: bool) -> np.ndarray:
    """The vector a node stores for an accepted message: ``arr`` itself when its buffer is
    ``owned`` by this node and already a native, aligned float64 vector (made read-only, so
    nothing the node runs can change a neighbour's message after the checks), else a copy."""
    if owned and arr.dtype == np.float64:
        flags = arr.flags
        if flags.aligned and flags.c_contiguous:
            if flags.writeable:  # (views of bytes are read-only already)
                arr.setflags(write=False)
            return arr
    return np.array(arr, dtype=np.float64)  # own copy


class Mailbox:
    """The messages a node accepted, by round, and what it knows of its neighbours' rounds.

    Every method that depends on the node's round takes it as an argument: the mailbox
    holds no round of its own (the node's :class:`~edgedp.node_state.NodeState` does).

    Args:
      context: the :func:`wire_context` of the node's plan.
      bounds: the plan's bound for each array a message carries (:mod:`edgedp.bounds`).
      neighbours: the node's neighbours (sorted, without itself).
      window: how many rounds ahead a message may be and still be buffered.
      steps: the plan's T (no message for a round ≥ T is ever accepted).
      metrics: the node's counters (:class:`~edgedp.node_metrics.Metrics`): the mailbox
        counts every message it stores in ``received`` and every one it rejects in
        ``rejected[reason]``.
      aggregator: an adaptive DOME basis' spanning-tree aggregate (its tree frames ride on
        the model messages of tree edges), else None.
    """

    __slots__ = (
        "aggregator",
        "ahead",
        "announced",
        "bounds",
        "context",
        "equivocations",
        "expired",
        "far",
        "history",
        "inbox",
        "metrics",
        "neighbours",
        "steps",
        "window",
    )

    def __init__(
        self,
        context: wire.Context,
        bounds: tuple[float, ...],
        *,
        neighbours: tuple[int, ...],
        window: int,
        steps: int,
        metrics: Metrics,
        aggregator=None,
    ) -> None:
        self.context, self.bounds = context, bounds
        self.neighbours, self.window, self.steps = neighbours, window, steps
        self.metrics = metrics
        self.aggregator = aggregator
        self.inbox: dict[int, dict[int, np.ndarray]] = {}
        self.ahead: dict[int, int] = {}  # neighbour -> latest round accepted
        self.far: dict[int, int] = {}  # neighbour -> latest round seen past the window
        self.expired: set[int] = set()  # missing at a deadline, nothing accepted since
        self.history: dict[int, dict[int, bytes]] = {}  # neighbour -> round -> fingerprint
        self.equivocations: list[tuple[int, int, bytes, bytes]] = []  # (v, round, first, new)
        self.announced: dict[int, int] = {}  # neighbour -> consecutive wrong-plan messages

    @classmethod
    def for_node(
        cls,
        share,
        *,
        bounds: tuple[float, ...],
        neighbours: tuple[int, ...],
        message_dim: int,
        window: int,
        metrics: Metrics,
        aggregator=None,
    ) -> Mailbox:
        """The mailbox of the node of ``share`` (its :func:`wire_context`)."""
        context = wire_context(share, neighbours=neighbours, message_dim=message_dim, bounds=bounds)
        return cls(
            context,
            bounds,
            neighbours=neighbours,
            window=window,
            steps=share.steps,
            metrics=metrics,
            aggregator=aggregator,
        )

    def bound_to(self, bounds: tuple[float, ...]) -> None:
        """Hold every later message to ``bounds`` (the node's θ₀ changed); what the mailbox
        holds stays."""
        self.context = replace(self.context, bounds=bounds[:1])
        self.bounds = bounds

    def limits(self) -> tuple[int, int]:
        """``(largest frame in bytes, most frames)`` of any message this mailbox accepts
        (:func:`wire_limits`). Transports cap inbound frames and parts with these."""
        return wire_limits(self.context, tree=self.aggregator is not None)

    def receive(
        self,
        frames: Sequence[Any],
        round: int,
        authenticated_sender: int | None = None,
        owned: bool = False,
    ) -> bool:
        """Decode ``frames`` (:func:`edgedp.wire.decode`, at most the context's size), then
        :meth:`accept` the message; False (counted) if it is rejected."""
        try:
            msg = wire.decode(frames, max_bytes=self.context.max_bytes)
        except wire.WireError as exc:
            self.metrics.rejected[type(exc).__name__] += 1
            return False
        return self.accept(msg, round, authenticated_sender, None, owned)

    def accept(
        self,
        msg: wire.Message,
        round: int,
        authenticated_sender: int | None = None,
        extremes: tuple | None = None,
        owned: bool = False,
        fingerprint: bytes | None = None,
        checked: wire.Context | None = None,
    ) -> bool:
        """Check ``msg`` against the plan, the neighbours, the window of the node's current
        ``round`` and the bounds, then store it; False (counted in ``metrics.rejected``)
        if it is rejected or a replay, True (counted in ``metrics.received``) if stored
        (``extremes``: :func:`edgedp.wire.extremes` of ``msg``, ``fingerprint``:
        :func:`edgedp.wire.fingerprint` of ``msg``, if already computed — a simulator
        hands one decoded message to several nodes and takes both once). ``checked``: a
        context ``msg``'s content is known to pass (:func:`content_checked`); when this
        node's context holds the content to the same (plan hash, shapes, dtype, bounds),
        only the sender and the round are checked here — what :func:`edgedp.wire.check`
        would decide, without deciding the content again.

        ``owned``: the message's buffers belong to this node alone (a transport handed over
        frames nothing else references, :attr:`edgedp.transport.zmq.ZmqTransport.OWNS_FRAMES`),
        or nothing can write them (the event engine decodes immutable ``bytes`` frames into
        read-only views and hands one message to several agents); its model array is then
        kept as it is, made read-only, instead of copied (:func:`_kept`). Without it the
        node keeps a copy."""
        metrics = self.metrics
        try:
            context, passed = self.context, False
            if self.aggregator is not None and self.aggregator.expects(msg.sender, msg.round):
                # model + tree frame
                context = replace(context, shapes=context.shapes * 2, bounds=self.bounds)
            elif checked is not None:  # every check of wire.check but sender and round passed
                passed = (
                    msg.sender in context.neighbours
                    and (authenticated_sender is None or authenticated_sender == msg.sender)
                    and round <= msg.round <= min(round + self.window, self.steps - 1)
                    and _same_content_checks(checked, context)
                )
            if not passed:  # (the first check that fails says why)
                wire.check(
                    msg,
                    context,
                    round_lo=round,
                    round_hi=min(round + self.window, self.steps - 1),
                    authenticated_sender=authenticated_sender,
                    extremes=extremes,
                )
        except wire.RoundOutOfWindow:
            reason = self._out_of_window(msg, context, round, authenticated_sender)
            metrics.rejected[reason] += 1
            return False
        except wire.WireError as exc:
            metrics.rejected[type(exc).__name__] += 1
            if isinstance(exc, wire.PlanHashMismatch) and authenticated_sender is not None:
                self.announced[authenticated_sender] = (
                    self.announced.get(authenticated_sender, 0) + 1
                )
            return False
        seen = self._seen(msg, fingerprint)
        if seen is not None:
            metrics.rejected[seen] += 1
            return False
        self.inbox.setdefault(msg.round, {})[msg.sender] = _kept(msg.arrays[0], owned)
        if len(msg.arrays) == 2:
            assert self.aggregator is not None  # wire.check allows a second array only then
            self.aggregator.take(msg.sender, msg.round, np.array(msg.arrays[1], dtype=np.float64))
        v = msg.sender
        self.announced[v] = 0
        self.ahead[v] = max(self.ahead.get(v, -1), msg.round)
        self.far.pop(v, None)  # it sends within the window: not past it
        self.expired.discard(v)
        metrics.received += 1
        return True

    def _seen(self, msg: wire.Message, fp: bytes | None = None) -> str | None:
        """``"Replayed"`` or ``"Equivocation"`` if the sender's message of this round was
        seen before (the same, or another); else None, and its fingerprint is kept
        (``fp``: :func:`edgedp.wire.fingerprint` of ``msg``, if already computed)."""
        rounds = self.history.setdefault(msg.sender, {})
        first = rounds.get(msg.round)
        if fp is None:
            fp = wire.fingerprint(msg)
        if first is None:
            rounds[msg.round] = fp
            return None
        if first == fp:
            return "Replayed"
        self.equivocations.append((msg.sender, msg.round, first, fp))
        del self.equivocations[:-_EVENTS]
        return "Equivocation"

    def _out_of_window(self, msg, context, round: int, authenticated_sender: int | None) -> str:
        """Why a message outside the window is rejected. One that is authenticated and valid
        in every other way (round < T) is noted: past the window in ``far``; before it, as
        an equivocation if it differs from the message of that round seen earlier."""
        if authenticated_sender is None:
            return "RoundOutOfWindow"
        try:
            wire.check(
                msg,
                context,
                round_lo=0,
                round_hi=self.steps - 1,
                authenticated_sender=authenticated_sender,
            )
        except wire.WireError:
            return "RoundOutOfWindow"
        if msg.round > round + self.window:
            self.far[msg.sender] = max(self.far.get(msg.sender, -1), msg.round)
            return "RoundOutOfWindow"
        if msg.round in self.history.get(msg.sender, {}) and self._seen(msg) == "Equivocation":
            return "Equivocation"
        return "RoundOutOfWindow"

    def messages(self, round: int) -> dict[int, np.ndarray]:
        """The messages accepted for ``round``: sender -> vector (read-only; empty if none)."""
        return self.inbox.get(round, {})

    def forget(self, round: int) -> None:
        """Drop the messages of ``round`` (it was mixed or sat out)."""
        self.inbox.pop(round, None)

    def deadline_passed(self, round: int) -> None:
        """The wait of ``round`` ended at its deadline: the neighbours still missing are
        ``expired`` until a message of theirs is accepted (their ``far`` rounds then count
        for a rejoin)."""
        self.expired.update(self.missing(round))

    def rejoin_evidence(self) -> dict[int, int]:
        """The rounds past the window a rejoin may rest on: ``far`` of expired neighbours."""
        return {v: r for v, r in self.far.items() if v in self.expired}

    def missing(self, round: int) -> tuple[int, ...]:
        """Neighbours whose message for ``round`` has not arrived."""
        got = self.inbox.get(round, {})
        return tuple(v for v in self.neighbours if v not in got)

    def behind(self, round: int) -> bool:
        """Whether every neighbour still missing in ``round`` last sent a message past the
        receive window: the node fell behind them (they are not late)."""
        missing = self.missing(round)
        return bool(missing) and all(v in self.far for v in missing)

    def take_equivocations(self) -> list[tuple[int, int, bytes, bytes]]:
        """The equivocations seen since the last call: (neighbour, round, fingerprint of the
        message kept, fingerprint of the other one)."""
        seen, self.equivocations = self.equivocations, []
        return seen

    def hopeless(self, round: int) -> tuple[int, ...]:
        """Missing neighbours with an accepted message of a later round: their message for
        ``round`` will never come (one link delivers in order)."""
        return tuple(v for v in self.missing(round) if self.ahead.get(v, -1) > round)

    def waits(self, round: int, begun: bool) -> bool:
        """Whether waiting can still help the node in ``round``: a message is missing and
        not every missing neighbour is :meth:`hopeless`, or (none missing) the round has
        not ``begun`` (one pass over the neighbours)."""
        got = self.inbox.get(round, _EMPTY)
        ahead = self.ahead
        missing = False
        for v in self.neighbours:
            if v not in got:
                if ahead.get(v, -1) <= round:
                    return True  # missing, and may still come
                missing = True
        return not (missing or begun)

    def plan_rejected_by_all(self, limit: int) -> bool:
        """True when every neighbour sent at least ``limit`` messages for another plan and no
        valid one since: this node, not its neighbours, holds the wrong plan."""
        return all(self.announced.get(v, 0) >= limit for v in self.neighbours)

    def drop_before(self, round: int) -> None:
        """Forget the messages of rounds before ``round`` (their fingerprints after
        :data:`HISTORY` rounds)."""
        self.inbox = {k: v for k, v in self.inbox.items() if k >= round}
        oldest = round - HISTORY
        for rounds in self.history.values():
            while rounds:
                first = next(iter(rounds))
                if first >= oldest:
                    break
                del rounds[first]
