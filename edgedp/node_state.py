"""What one node carries from round to round, and what its snapshot saves.

:class:`NodeState` holds the round the node is in, the algorithm's state (θ and whatever
else the rules keep), the node's noise streams (where they stand), the last message
accepted from each neighbour and the node's counters. It computes nothing: the round
runtime (:class:`edgedp.node_round.NodeRound`) advances it, the mailbox
(:class:`edgedp.mailbox.Mailbox`) adds to its counters, the Agent
(:class:`edgedp.agent.Agent`) puts the three together.

:meth:`NodeState.snapshot` writes it between rounds (:func:`edgedp.snapshot.take`: the
noise stream's step only, never its noise); :meth:`NodeState.resume` puts back a snapshot
that :func:`edgedp.snapshot.check` has checked, and regenerates the noise stream from its
key.

Device-safe: numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgedp.node_metrics import Metrics
from edgedp.noise import NoiseStreams
from edgedp.snapshot import Resume, take

__all__ = ["NodeState"]


class NodeState:
    """One node's state.

    Args:
      rules: the algorithm's rules (``init_state``, ``model``).
      theta0: the model the node starts from (θ₀; every node of a run uses the same).
      noise: the node's noise streams (:class:`edgedp.noise.NoiseStreams`); the round
        runtime draws from them, the state says where they stand.

    Attributes:
      round: the round the node is in, or begins next.
      state: the algorithm's state (``rules.model(state)`` is θ).
      noise: the noise streams (their ``state.step`` is the next round to draw).
      last_seen: the last message accepted from each neighbour (the ``reuse-last``
        dropout rule's; public, received over the wire).
      metrics: the node's counters (:class:`~edgedp.node_metrics.Metrics`), one object for
        the node's whole life: the mailbox and the round runtime count into it.
    """

    __slots__ = ("last_seen", "metrics", "noise", "round", "rules", "state")

    def __init__(self, rules: Any, theta0: np.ndarray, *, noise: NoiseStreams) -> None:
        self.rules = rules
        self.noise = noise
        self.round = 0
        self.state: dict[str, np.ndarray] = rules.init_state(theta0)
        self.last_seen: dict[int, np.ndarray] = {}
        self.metrics = Metrics()

    @property
    def theta(self) -> np.ndarray:
        """The node's current model (the rules' ``model(state)``)."""
        return self.rules.model(self.state)

    def start_from(self, theta0: np.ndarray) -> None:
        """The algorithm's initial state for the model ``theta0``."""
        self.state = self.rules.init_state(theta0)

    def fresh(self) -> dict[str, np.ndarray]:
        """An initial state of the current model: the fields and shapes a snapshot's state
        must have."""
        return self.rules.init_state(self.theta)

    def snapshot(self, *, plan_hash: str, node: int, stream_fingerprint: str) -> dict[str, Any]:
        """The snapshot of the node between rounds (:func:`edgedp.snapshot.take`)."""
        return take(
            plan_hash=plan_hash,
            node=node,
            stream_fingerprint=stream_fingerprint,
            round=self.round,
            state=self.state,
            noise_step=self.noise.state.step,
            last_seen=self.last_seen,
            metrics=self.metrics,
        )

    def resume(self, resume: Resume) -> None:
        """Put back a checked snapshot (:func:`edgedp.snapshot.check`); the noise stream is
        regenerated from its key at the snapshot's round (a snapshot holds no noise)."""
        self.state, self.round = resume.state, resume.round
        self.noise.rewind(resume.round)
        self.last_seen = resume.last_seen
        self.metrics.assign(resume.metrics)  # in place: the mailbox counts into this object
