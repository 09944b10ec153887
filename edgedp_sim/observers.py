"""What the engines hand to observers (adversary probes, ground-truth recorders).

* batch engine: after every round, ``observer.observe(RoundView)`` — one call for all
  trials and nodes;
* event engine: ``observer.on_message(sender=, recipient=, round=, frames=, time=)`` for
  every message put on a link; for observers that define them,
  ``observer.on_delivery(sender=, recipient=, round=, frames=)`` when it reaches a recipient
  that is up (lost messages never do), and ``observer.on_round(node=, round=, gradient=,
  batch_size=, missing=)`` when a node ends a round (the clipped-gradient sum its update
  used, None when it computed none; ``missing`` the neighbours whose message of the round
  it did not mix: the dropout rule stood in for them).

Kept free of engine imports so both engines can import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["LinkObserver", "RoundObserver", "RoundView"]


@dataclass(frozen=True, slots=True, eq=False)
class RoundView:
    """One round of the batch engine, every trial and node: arrays ``(trials, nodes, d)``.

    ``messages`` is what each node sent every neighbour; ``gradients`` the clipped-gradient
    sum its update used (the round's last ``ctx.gradient`` call, in ``send`` or ``receive``);
    ``noise`` the noise it drew (``ctx.noise()`` or ``ctx.extra.laplace(scale)``; None without
    noise); ``state`` the algorithm state at the start of the round; ``batch_size`` B.
    """

    round: int
    messages: np.ndarray
    gradients: np.ndarray | None
    noise: np.ndarray | None
    state: Mapping[str, np.ndarray]
    batch_size: int


class RoundObserver(Protocol):
    """What the batch engine calls after round ``view.round`` (every node sent and mixed)."""

    def observe(self, view: RoundView) -> None: ...


class LinkObserver(Protocol):
    """What the event engine calls when ``sender`` puts a message for ``recipient`` on a link."""

    def on_message(
        self, *, sender: int, recipient: int, round: int, frames: Sequence[bytes], time: float
    ) -> None: ...
