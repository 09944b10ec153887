"""A node's round runtime: the local noisy step, the mixing, skipped rounds and the release.

:class:`NodeRound` computes the rounds of one node over the node's
:class:`~edgedp.node_state.NodeState` (it advances it) and :class:`~edgedp.mailbox.Mailbox`
(it reads the round's messages there and releases them): :meth:`NodeRound.begin` builds
the round's step context from the node runtime (:mod:`edgedp.runtime`: the clipped
gradient sum of the round's batch, the round's noise), runs the algorithm's ``send``,
checks every outgoing array and only then changes the node and encodes its frames
(:mod:`edgedp.outgoing`); :meth:`NodeRound.end` mixes in the padded-row order with the
dropout rule (:mod:`edgedp.dropout`) and adopts only a finite state; :meth:`NodeRound.skip`
sits a round out with its noise drawn and discarded; :meth:`NodeRound.final_release` is
the model to publish. :class:`edgedp.agent.Agent` puts the pieces together.

Device-safe: numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgedp import dropout, outgoing
from edgedp.errors import BudgetExhaustedError, NonFiniteMessageError, NonFiniteStateError
from edgedp.families.dome import sketch_adaptive
from edgedp.mailbox import Mailbox
from edgedp.node_metrics import RoundReport
from edgedp.node_state import NodeState
from edgedp.noise import noise_digest
from edgedp.outgoing import Outgoing
from edgedp.runtime import Runtime

__all__ = ["NodeRound"]


class NodeRound:
    """The rounds of one node (see the module docstring).

    Args:
      share: the node's :class:`~edgedp.plan.NodeShare` (its T, mixing row and weights,
        plan hash, Laplace schedule).
      rules: the algorithm's rules (``send``, ``receive``, ``model``).
      runtime: the node runtime (:class:`edgedp.runtime.Runtime`): step contexts on the
        node's batch schedule and noise streams (the ``noise`` of ``state``).
      state: the node's :class:`~edgedp.node_state.NodeState`, which the rounds advance.
      mailbox: the node's :class:`~edgedp.mailbox.Mailbox`: the round's messages
        (``messages``), released once mixed or sat out (``forget``, ``drop_before``).
      neighbours: the node's neighbours (sorted, without itself).
      dropout_rule: one of :data:`edgedp.dropout.DROPOUT_RULES`.
      aggregator: an adaptive DOME basis' spanning-tree aggregate, else None.
      keep_gradient: keep the round's clipped gradient sum as :attr:`last_gradient`
        (simulator probes read it); devices keep nothing of a round.
      noise_digests: fingerprint each round's noise for the outgoing frames' log
        (:attr:`edgedp.outgoing.Outgoing.noise_digest`: devices record it); simulators,
        which log nothing of it, pass False (the digest is then "").

    Attributes:
      message: this round's outgoing vector once the round has begun, else None.
      last_gradient: the last round's clipped gradient sum (``keep_gradient`` only).
    """

    def __init__(
        self,
        share,
        *,
        rules: Any,
        runtime: Runtime,
        state: NodeState,
        mailbox: Mailbox,
        neighbours: tuple[int, ...],
        dropout_rule: str,
        aggregator: sketch_adaptive.TreeAggregator | None = None,
        keep_gradient: bool = True,
        noise_digests: bool = True,
    ) -> None:
        self._share = share
        self._rules = rules
        self._runtime = runtime
        self._state = state
        self._mailbox = mailbox
        self._neighbours = neighbours
        self._dropout_rule = dropout_rule
        self._aggregator = aggregator
        self._keep_gradient = keep_gradient
        self._noise_digests = noise_digests
        self._plan_hash = bytes.fromhex(share.plan_hash)
        self.message: np.ndarray | None = None
        self.last_gradient: np.ndarray | None = None
        self._ctx: Any = None
        self._tally: Any = None

    @property
    def begun(self) -> bool:
        """Whether the current round has begun (and not ended)."""
        return self.message is not None

    def begin(self) -> Outgoing:
        """Local noisy step; returns the frames every neighbour must receive.

        Raises:
          BudgetExhaustedError: the plan's T rounds are done.
          NonFiniteMessageError: the round's message would hold NaN or ±inf (the model
            diverged); nothing is returned to send and the node stays at the start of the
            round (state and noise stream unchanged; counted in
            ``metrics.rejected["NonFiniteMessageError"]``).
        """
        node, share = self._state, self._share
        t = node.round
        if t >= share.steps:
            raise BudgetExhaustedError(
                f"node {share.node}: the plan's {share.steps} rounds are done."
            )
        if self.message is not None:
            raise RuntimeError(f"round {t} already begun")
        digest = ""
        self.last_gradient = None

        def keep(g: np.ndarray) -> None:  # read by simulator probes (ground truth), never sent
            self.last_gradient = g

        def record(out: np.ndarray) -> None:
            nonlocal digest
            digest = noise_digest(out)

        agg = self._aggregator
        self._ctx, self._tally = self._runtime.context(
            t,
            on_gradient=keep if self._keep_gradient else None,
            on_noise=record if self._noise_digests else None,
            basis=None if agg is None else agg.basis(t),
            mean=None if agg is None else agg.sketch.mean(t),
            release=None if agg is None else self._release,
        )
        try:  # nothing below changes the node until every outgoing array is checked
            state, message = self._rules.send(node.state, self._ctx)
            tree = None if agg is None else agg.frames_out(t)  # k floats per tree edge
            self._check_finite(message, *(() if tree is None else tree.values()))
        except BaseException:
            # the stream goes back to the round's start, regenerated from the key (the
            # factor's state is not kept twice for this rare path)
            self._ctx = None
            if node.noise.state.step != t:
                node.noise.rewind(t)
            raise
        node.state = state
        node.metrics.sent += len(self._neighbours)
        out, self.message = outgoing.encode(
            message,
            plan_hash=self._plan_hash,
            round=t,
            node=share.node,
            row=share.neighbours,
            neighbours=self._neighbours,
            noise_digest=digest,
            tree=tree,
        )
        return out

    def _check_finite(self, *arrays: np.ndarray) -> None:
        bad = outgoing.non_finite(*arrays)
        if bad:
            self._state.metrics.rejected["NonFiniteMessageError"] += 1
            raise NonFiniteMessageError(
                f"node {self._share.node}, round {self._state.round}: the outgoing message has "
                f"{bad} NaN/Inf entries (e.g. the model diverged); nothing was sent. Lower the "
                "learning rate or check the model and data."
            )

    def _release(self, coef: np.ndarray) -> None:
        assert self._aggregator is not None  # passed as the release of adaptive DOME only
        self._aggregator.release(self._state.round, coef)

    def end(self) -> RoundReport:
        """Mix (fixed order; dropout rule for missing neighbours) and advance the round.

        Raises:
          NonFiniteStateError: the mixed state would hold NaN or ±inf; nothing changes (the
            node stays inside the round, its messages kept; counted in
            ``metrics.rejected["NonFiniteStateError"]``).
          MissingAggregateError: an adaptive DOME basis misses a spanning-tree frame;
            nothing changes (the round can be retried if the frame still comes).
        """
        if self.message is None:
            raise RuntimeError("end_round() before begin_round()")
        node, share, rules, agg = self._state, self._share, self._rules, self._aggregator
        t, metrics = node.round, node.metrics
        got = self._mailbox.messages(t)
        missing = tuple(v for v in self._neighbours if v not in got)
        if agg is not None and any(
            agg.expects(v, t) for v in missing
        ):  # checked before any change: the round can be retried if the frame still comes
            metrics.rejected["MissingAggregateError"] += 1
            raise sketch_adaptive.MissingAggregateError(
                f"node {share.node}: a spanning-tree frame of round {t} did not "
                f"arrive (from {missing}); the adaptive basis needs every frame"
            )
        weights, vectors = dropout.mixing_terms(
            self._dropout_rule,
            node=share.node,
            row=share.neighbours,
            weights=share.weights,
            own=self.message,
            got=got,
            missing=set(missing),
            last_seen=node.last_seen,
        )
        before = rules.model(node.state)
        # one errstate for the mixing, its check and the diagnostic: non-finite results are
        # checked just below, and an overflow in the diagnostic reads inf
        with np.errstate(over="ignore", invalid="ignore"):
            state = rules.receive(
                node.state, np.asarray(weights, dtype=np.float64), vectors, self._ctx
            )
            del vectors  # the round's messages are not needed past the mixing
            bad = outgoing.count_non_finite(state.values())
            if bad:  # checked before any change: the node never adopts a non-finite state
                metrics.rejected["NonFiniteStateError"] += 1
                raise NonFiniteStateError(
                    f"node {share.node}, round {t}: mixing would leave {bad} NaN/Inf "
                    "entries in the state (the model diverged); the state was not changed."
                )
            self._mailbox.forget(t)
            node.state = state
            if self._dropout_rule == "reuse-last":  # the only rule that reads them again
                for v, vec in got.items():
                    node.last_seen[v] = vec
            del got
            self.message = None  # released before the diagnostic's temporary is allocated
            step = np.subtract(rules.model(node.state), before)
            # (np.add.reduce: what np.sum of an ndarray runs, without its wrapper)
            update_norm = float(np.sqrt(np.add.reduce(np.multiply(step, step, out=step), None)))
            del step, before
        if agg is not None:
            agg.end_round(t)
        tally = self._tally
        report = RoundReport(t, missing, tally.clipped, update_norm, tally.nonfinite)
        metrics.rounds += 1
        metrics.missing += len(missing)
        metrics.clipped += tally.clipped
        metrics.nonfinite += tally.nonfinite
        node.round = t + 1
        self._ctx = None
        self._mailbox.drop_before(node.round)
        return report

    def skip(self) -> None:
        """Sit out the current round (the node is offline): no step, no messages.

        The round's noise is drawn and discarded so the stream stays aligned with the round
        counter: noise is never reused, and what the node releases is a subset of what the
        plan certifies.
        """
        node, share = self._state, self._share
        if node.round >= share.steps:
            raise BudgetExhaustedError(
                f"node {share.node}: the plan's {share.steps} rounds are done."
            )
        if self.message is not None:
            raise RuntimeError(f"round {node.round} already begun; end it instead")
        node.noise.discard()
        self._mailbox.forget(node.round)
        node.round += 1
        node.metrics.rounds += 1
        node.metrics.skipped += 1

    def final_release(self) -> np.ndarray:
        """The model to publish once the plan's rounds are done, covered by its accountant.

        Gaussian plans: the model, a post-processing of released messages. sr-gt / DPOP: the
        last state x(K) carries one gradient step no message noised, so the release is
        x(K) + Lap(ν_{K+1}) from the node's stream at round K — a step no message uses
        (:func:`edgedp.families.laplace.accounting.epsilon_spent` with ``final_release=True``).
        """
        node, share = self._state, self._share
        if node.round < share.steps:
            raise RuntimeError(f"node {share.node}: final_release() before the last round")
        if share.laplace is None:
            return self._rules.model(node.state)
        steps = share.steps
        scale = share.laplace.noise_scale(steps)
        return self._rules.model(node.state) + node.noise.laplace(steps, scale)
