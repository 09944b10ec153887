"""Agent: one node's round state machine, free of sockets, threads and clocks.

A round is ``begin_round() -> Outgoing`` (local noisy step; the frames to send to every
neighbour), any number of ``receive(frames)`` calls, then ``end_round()`` (fixed-order mixing,
with the dropout rule for neighbours whose message never came). The same object runs under
the ZeroMQ daemon (firmware_py), the event simulator and in-process tests; only who moves
the frames and who keeps time differs.

The class holds the node's state — θ (the algorithm's state), the round, the noise stream
(in its node runtime), the inbox (in its mailbox), the metrics — and calls functions
(CONVENTIONS C1): the node runtime (:mod:`edgedp.runtime`: batch schedule, noise streams,
step contexts), the algorithm's rules, the outgoing frames (:mod:`edgedp.outgoing`), the
dropout rules (:mod:`edgedp.dropout`), snapshots (:mod:`edgedp.snapshot`), the rejoin rule
(:mod:`edgedp.rejoin`). Its round API is :class:`edgedp.node_round.RoundSide`, its receive
API :class:`edgedp.mailbox.ReceiveSide` (the checks and the inbox:
:class:`edgedp.mailbox.Mailbox`); both are bases of :class:`Agent`, the one public class.

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

from typing import Any

import numpy as np

from edgedp import (
    _validate,
    dropout,
    families,
    mailbox,
    node_round,
    rng,
    runtime,
    snapshot,
)
from edgedp.dropout import DROPOUT_RULES
from edgedp.errors import PlanError
from edgedp.factors import StreamState
from edgedp.families.cross import noise as cross_mod
from edgedp.families.dome import sketch_adaptive
from edgedp.gossip import StepContext
from edgedp.node_metrics import Metrics, RoundReport
from edgedp.noise import NoiseSource
from edgedp.outgoing import Outgoing
from edgedp.plan import NodeShare

__all__ = ["DROPOUT_RULES", "Agent", "Metrics", "Outgoing", "RoundReport"]

#: Per-example gradient entries held at once: batches are clipped and summed in chunks of
#: max(1, CHUNK_FLOATS // d) examples (same bits as the whole batch, :func:`clipping.add_clipped`).
CHUNK_FLOATS = runtime.CHUNK_FLOATS


class Agent(node_round.RoundSide, mailbox.ReceiveSide):
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
        ``cross_agent`` section needs (:class:`edgedp.families.cross.noise.CrossKeys`; secret).
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
        dropout.check_rule(dropout_rule, share)
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
        self.algo = families.for_mechanism(share.mechanism)
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
        self.last_seen: dict[int, np.ndarray] = {}
        self.metrics = Metrics()
        self._set_bounds(theta0)

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
        """The plan's bound on honest messages from the common θ₀ (:mod:`edgedp.bounds`),
        and a receive side that holds neighbours' messages to it (keeping what it holds)."""
        self.mailbox = mailbox.Mailbox.for_node(
            self.share,
            bounds=mailbox.honest_bounds(self.share, self.algo, dim=self.model.dim, theta0=theta0),
            neighbours=self.neighbours,
            message_dim=self.message_dim,
            window=self.round_window,
            aggregator=self.aggregator,
            keep=getattr(self, "mailbox", None),
        )
        self.bounds = self.mailbox.bounds

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
        return snapshot.take(
            plan_hash=self.share.plan_hash,
            node=self.node,
            stream_fingerprint=self.stream_fingerprint,
            round=self.round,
            state=self.state,
            noise_step=self.noise_state.step,
            last_seen=self.last_seen,
            metrics=self.metrics,
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
            self.share,
            stream_fingerprint=self.stream_fingerprint,
            fresh_state=self.algo.init_state(self.theta),
            neighbours=self.neighbours,
            message_dim=self.message_dim,
            adaptive=self.aggregator is not None,
        )
        self.state, self.round = resume.state, resume.round
        # regenerated from the key: a checkpoint holds no noise (module docstring)
        self.runtime.noise.rewind(resume.round)
        self.last_seen = resume.last_seen
        self.metrics = resume.metrics
        self.mailbox.drop_before(resume.round)
