"""The Agent's round: the local noisy step, the mixing, skipped rounds and the release.

:class:`RoundSide` is the round API of :class:`edgedp.agent.Agent` (which derives from it):
``begin_round`` builds the round's step context from the node runtime
(:mod:`edgedp.runtime`), runs the algorithm's ``send``, checks every outgoing array and only
then changes the node and encodes its frames (:mod:`edgedp.outgoing`); ``end_round`` mixes
in the padded-row order with the dropout rule (:mod:`edgedp.dropout`) and adopts only a
finite state; ``skip_round`` / ``rejoin`` sit rounds out with their noise drawn and
discarded; ``final_release`` is the model to publish.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgedp import dropout, outgoing, rejoin
from edgedp.errors import BudgetExhaustedError, NonFiniteMessageError, NonFiniteStateError
from edgedp.families.dome import sketch_adaptive
from edgedp.node_metrics import RoundReport
from edgedp.noise import noise_digest
from edgedp.outgoing import Outgoing

__all__ = ["RoundSide"]


class RoundSide:
    """The round API of :class:`edgedp.agent.Agent` over its state: ``share``, ``algo``
    (the rules), ``runtime`` (:class:`edgedp.runtime.Runtime`), ``state``, ``round``,
    ``message``, ``mailbox``, ``metrics``, ``last_seen`` and the adaptive DOME
    ``aggregator`` (or None)."""

    share: Any
    node: int
    algo: Any
    runtime: Any
    state: dict[str, np.ndarray]
    round: int
    message: np.ndarray | None
    neighbours: tuple[int, ...]
    last_seen: dict[int, np.ndarray]
    dropout_rule: str
    round_window: int
    keep_gradient: bool
    aggregator: Any
    metrics: Any
    mailbox: Any
    _ctx: Any
    _tally: Any

    def begin_round(self) -> Outgoing:
        """Local noisy step; returns the frames every neighbour must receive.

        Raises:
          BudgetExhaustedError: the plan's T rounds are done.
          NonFiniteMessageError: the round's message would hold NaN or ±inf (the model
            diverged); nothing is returned to send and the agent stays at the start of the
            round (state and noise stream unchanged; counted in
            ``metrics.rejected["NonFiniteMessageError"]``).
        """
        if self.round >= self.share.steps:
            raise BudgetExhaustedError(
                f"node {self.node}: the plan's {self.share.steps} rounds are done."
            )
        if self.message is not None:
            raise RuntimeError(f"round {self.round} already begun")
        digest = ""
        self.last_gradient: np.ndarray | None = None

        def keep(g: np.ndarray) -> None:  # read by simulator probes (ground truth), never sent
            self.last_gradient = g

        def record(out: np.ndarray) -> None:
            nonlocal digest
            digest = noise_digest(out)

        agg = self.aggregator
        self._ctx, self._tally = self.runtime.context(
            self.round,
            on_gradient=keep if self.keep_gradient else None,
            on_noise=record,
            basis=None if agg is None else agg.basis(self.round),
            mean=None if agg is None else agg.sketch.mean(self.round),
            release=None if agg is None else self._release,
        )
        try:  # nothing below changes the agent until every outgoing array is checked
            state, message = self.algo.send(self.state, self._ctx)
            tree = None if agg is None else agg.frames_out(self.round)  # k floats per tree edge
            self._check_finite(message, *(() if tree is None else tree.values()))
        except BaseException:
            # the stream goes back to the round's start, regenerated from the key (the
            # factor's state is not kept twice for this rare path)
            self._ctx = None
            if self.runtime.noise.state.step != self.round:
                self.runtime.noise.rewind(self.round)
            raise
        self.state = state
        self.metrics.sent += len(self.neighbours)
        out, self.message = outgoing.encode(
            message,
            plan_hash=self.mailbox.context.plan_hash,
            round=self.round,
            node=self.node,
            row=self.share.neighbours,
            neighbours=self.neighbours,
            noise_digest=digest,
            tree=tree,
        )
        return out

    def _check_finite(self, *arrays: np.ndarray) -> None:
        bad = outgoing.non_finite(*arrays)
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

    def end_round(self) -> RoundReport:
        """Mix (fixed order; dropout rule for missing neighbours) and advance the round.

        Raises:
          NonFiniteStateError: the mixed state would hold NaN or ±inf; nothing changes (the
            agent stays inside the round, its inbox intact; counted in
            ``metrics.rejected["NonFiniteStateError"]``).
        """
        if self.message is None:
            raise RuntimeError("end_round() before begin_round()")
        got = self.mailbox.inbox.get(self.round, {})
        missing = tuple(v for v in self.neighbours if v not in got)
        if self.aggregator is not None and any(
            self.aggregator.expects(v, self.round) for v in missing
        ):  # checked before any change: the round can be retried if the frame still comes
            self.metrics.rejected["MissingAggregateError"] += 1
            raise sketch_adaptive.MissingAggregateError(
                f"node {self.node}: a spanning-tree frame of round {self.round} did not "
                f"arrive (from {missing}); the adaptive basis needs every frame"
            )
        weights, vectors = dropout.mixing_terms(
            self.dropout_rule,
            node=self.node,
            row=self.share.neighbours,
            weights=self.share.weights,
            own=self.message,
            got=got,
            missing=set(missing),
            last_seen=self.last_seen,
        )
        before = self.algo.model(self.state)
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite results: just below
            state = self.algo.receive(
                self.state, np.asarray(weights, dtype=np.float64), vectors, self._ctx
            )
        del vectors  # the round's messages are not needed past the mixing
        bad = outgoing.non_finite(*state.values())
        if bad:  # checked before any change: the agent never adopts a non-finite state
            self.metrics.rejected["NonFiniteStateError"] += 1
            raise NonFiniteStateError(
                f"node {self.node}, round {self.round}: mixing would leave {bad} NaN/Inf "
                "entries in the state (the model diverged); the state was not changed."
            )
        self.mailbox.inbox.pop(self.round, None)
        self.state = state
        if self.dropout_rule == "reuse-last":  # the only rule that reads them again
            for v, vec in got.items():
                self.last_seen[v] = vec
        del got
        self.message = None  # released before the diagnostic's temporary is allocated
        with np.errstate(over="ignore", invalid="ignore"):  # a diagnostic: overflow reads inf
            step = np.subtract(self.algo.model(self.state), before)
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
        self.mailbox.drop_before(self.round)
        return report

    def skip_round(self) -> None:
        """Sit out the current round (the node is offline): no step, no messages.

        The round's noise is drawn and discarded so the stream stays aligned with the round
        counter: noise is never reused, and what the node releases is a subset of what the
        plan certifies.
        """
        if self.round >= self.share.steps:
            raise BudgetExhaustedError(
                f"node {self.node}: the plan's {self.share.steps} rounds are done."
            )
        if self.message is not None:
            raise RuntimeError(f"round {self.round} already begun; end it instead")
        self.runtime.noise.discard()
        self.mailbox.inbox.pop(self.round, None)
        self.round += 1
        self.metrics.rounds += 1
        self.metrics.skipped += 1

    def rejoin_target(self) -> int | None:
        """The round to skip to if this node fell more than the receive window behind, else
        None (also inside a round): :func:`edgedp.rejoin.target` on the rounds of the
        neighbours' messages past the window (rejected, their round noted) — only of those
        still missing at a deadline since (:meth:`edgedp.mailbox.Mailbox.rejoin_evidence`).
        Never with an adaptive dome basis: its spanning-tree aggregate needs every round.
        """
        if self.message is not None or self.aggregator is not None:
            return None
        return rejoin.target(
            self.round,
            window=self.round_window,
            steps=self.share.steps,
            seen=self.mailbox.rejoin_evidence(),
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

    def final_release(self) -> np.ndarray:
        """The model to publish once the plan's rounds are done, covered by its accountant.

        Gaussian plans: the model, a post-processing of released messages. sr-gt / DPOP: the
        last state x(K) carries one gradient step no message noised, so the release is
        x(K) + Lap(ν_{K+1}) from the node's stream at round K — a step no message uses
        (:func:`edgedp.families.laplace.accounting.epsilon_spent` with ``final_release=True``).
        """
        if self.round < self.share.steps:
            raise RuntimeError(f"node {self.node}: final_release() before the last round")
        if self.share.laplace is None:
            return self.algo.model(self.state)
        steps = self.share.steps
        scale = self.share.laplace.noise_scale(steps)
        return self.algo.model(self.state) + self.runtime.noise.laplace(steps, scale)
