"""A node's snapshot: everything needed to resume at the start of a round, and no noise.

:func:`take` writes the state a round starts from — the algorithm state, the round, where
the noise stream stands (its step only: the noise of every round is a pure function of
(key, round), so a resumed node regenerates it and the temporal factor's buffers), the last
message seen from each neighbour (public: received over the wire), the metrics — with the
plan hash, the node id and the fingerprint of the streams it was made with.
:func:`check` reads one back and checks all of it before the Agent changes anything:
another plan, node, secret or run is refused (:class:`~edgedp.errors.PlanError`), a
malformed, non-finite or inconsistent one is damaged
(:class:`~edgedp.errors.DamagedSnapshotError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp.errors import DamagedSnapshotError, PlanError
from edgedp.node_metrics import Metrics

__all__ = ["Resume", "check", "take"]


@dataclass(frozen=True, slots=True, eq=False)
class Resume:
    """A checked snapshot: the round to resume at and what the node holds there."""

    round: int
    state: dict[str, np.ndarray]
    last_seen: dict[int, np.ndarray]
    metrics: Metrics


def take(
    *,
    plan_hash: str,
    node: int,
    stream_fingerprint: str,
    round: int,
    state: dict[str, np.ndarray],
    noise_step: int,
    last_seen: dict[int, np.ndarray],
    metrics: Metrics,
) -> dict[str, Any]:
    """The snapshot of a node between rounds (no secrets, no noise)."""
    return {
        "plan_hash": plan_hash,
        "node": node,
        "stream_fingerprint": stream_fingerprint,
        "round": round,
        "state": dict(state),
        "noise_step": noise_step,
        "last_seen": {str(k): v for k, v in last_seen.items()},
        "metrics": metrics.to_dict(),
    }


def check(
    snap: dict[str, Any],
    share,
    *,
    stream_fingerprint: str,
    fresh_state: dict[str, np.ndarray],
    neighbours: tuple[int, ...],
    message_dim: int,
    adaptive: bool = False,
) -> Resume:
    """The :class:`Resume` of ``snap`` for the node of ``share``, or an error.

    ``fresh_state`` is the algorithm's ``init_state`` (its fields and shapes are the
    snapshot's); ``adaptive``: the node has an adaptive DOME basis, which cannot resume
    mid-run.

    Raises:
      PlanError: the snapshot belongs to another plan, node, secret or run.
      DamagedSnapshotError: its content is malformed, non-finite or inconsistent with the
        plan (a damaged or hand-edited file).
      NotImplementedError: an adaptive DOME basis past round 0.
    """
    if snap.get("plan_hash") != share.plan_hash or snap.get("node") != share.node:
        raise PlanError("Checkpoint belongs to another plan or node; refusing to resume.")
    if snap.get("stream_fingerprint", "") != stream_fingerprint:
        raise PlanError(
            "Checkpoint was made with another noise secret, pairwise key or run id: "
            "resuming would continue its streams with other noise; refusing to resume."
        )
    try:
        state = {k: np.asarray(v, dtype=np.float64) for k, v in dict(snap["state"]).items()}
        r, noise_step = int(snap["round"]), int(snap["noise_step"])
        last_seen = {int(k): np.asarray(v, dtype=np.float64) for k, v in snap["last_seen"].items()}
        metrics = Metrics.from_dict(snap["metrics"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DamagedSnapshotError(f"Checkpoint has missing or malformed fields ({exc}).") from None
    want = fresh_state
    if set(state) != set(want) or any(
        state[k].shape != want[k].shape or not np.all(np.isfinite(state[k])) for k in want
    ):
        raise DamagedSnapshotError(
            "Checkpoint model state has the wrong fields, shapes or non-finite values."
        )
    if any(
        v not in neighbours or x.shape != (message_dim,) or not np.all(np.isfinite(x))
        for v, x in last_seen.items()
    ):
        raise DamagedSnapshotError("Checkpoint holds a malformed last-seen message.")
    # without Gaussian noise (dsgd, Laplace plans) the Gaussian stream never advances
    stream_ok = share.noise_std == 0 or noise_step == r
    if not 0 <= r <= share.steps or not stream_ok:
        raise DamagedSnapshotError(
            f"Checkpoint round {r} is inconsistent with the plan or noise state."
        )
    if adaptive and r > 0:
        raise NotImplementedError(
            "Resuming an adaptive dome basis mid-run is not built: the spanning-tree "
            "frames in flight and the PCA state (U, Λ, bases) are not checkpointed."
        )
    return Resume(r, state, last_seen, metrics)
