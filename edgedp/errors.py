"""Exceptions raised by edgedp.

Every error edgedp raises on purpose derives from :class:`EdgeDPError`, so callers can
catch the library's errors without catching programming errors. Bad values still raise
``ValueError`` and wrong types ``TypeError`` (see :mod:`edgedp._validate`); the classes
here are for conditions specific to the protocol.
"""

from __future__ import annotations

__all__ = [
    "BudgetExhaustedError",
    "DamagedSnapshotError",
    "EdgeDPError",
    "NonFiniteMessageError",
    "NonFiniteStateError",
    "PlanError",
    "PlanMismatchError",
    "TopologyError",
    "WireError",
]


class EdgeDPError(Exception):
    """Base class of every edgedp-specific error."""


class TopologyError(EdgeDPError, ValueError):
    """A graph or gossip matrix violates a requirement (stochastic, connected, edges)."""


class PlanError(EdgeDPError, ValueError):
    """A NoisePlan is malformed, fails its hash check or its privacy re-certification."""


class PlanMismatchError(PlanError):
    """Two parties hold plans with different hashes."""


class DamagedSnapshotError(PlanError):
    """A snapshot of this plan, node and run whose content cannot be resumed (malformed,
    non-finite, or inconsistent with the plan): a damaged file, not someone else's."""


class BudgetExhaustedError(EdgeDPError):
    """An agent was asked to run past the planned number of steps."""


class WireError(EdgeDPError, ValueError):
    """A message failed decoding or validation."""


class NonFiniteMessageError(EdgeDPError, FloatingPointError):
    """A message a node was about to send holds NaN or ±inf (the model diverged).

    Raised before anything is sent: a non-finite message would reveal, by its NaN, whatever
    made it non-finite.
    """


class NonFiniteStateError(EdgeDPError, FloatingPointError):
    """Mixing would leave NaN or ±inf in a node's state (the model diverged).

    Raised before the state changes: a node never adopts, checkpoints or sends from a
    non-finite state.
    """
