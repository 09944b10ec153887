"""Where a restarted device resumes, and when a damaged checkpoint may be rolled back.

Two durable records decide (DESIGN §6): the checkpoint — the state at the start of a round,
written after every round, the one it replaced kept as ``checkpoint.prev`` — and the release
ledger beside the noise secret (:mod:`firmware_py.ledger`), the last round S whose message
may have left the device (written before sending; not in the state folder, so a state
folder wiped or put back from an older copy cannot take it back).
A round's message is a pure function of the state at its start and of the round's noise,
so **a round may be sent again only from the state it was first sent from**; any other
model with the same noise would give the noise away.

The device resumes from the newest usable state among ``checkpoint``, ``checkpoint.prev``
and the initial state (round 0, rebuilt from the plan); a file is unusable when it is
missing, fails its checksum, or holds malformed or non-finite values. ``checkpoint.prev``
is newer than ``checkpoint`` when a kill came between a save's ``fdatasync`` and its swap of
the two names, or a power cut undid swaps not yet on disk
(:func:`firmware_py.checkpoint.save` does not force them): it is then used and the names are
put right. Let R be the chosen state's round.

* S ≤ R (or nothing sent): resume at R. A round already sent is re-sent bit for bit. When
  ``checkpoint`` itself was unusable this is an automatic rollback; the damaged file is
  kept as ``checkpoint.damaged``.
* S > R: rounds R..S were sent from states the device no longer has. Resuming is refused
  (exit 4) unless the operator runs ``edgedp-agent --config node.toml --rollback``: the
  device then resumes from R and **sits out rounds R..S** — it draws and discards their
  noise (``Agent.skip_round``) and continues at round S+1 with the older model, so no noise
  is reused and no round is sent twice with different content; its neighbours treat it as
  missing for those rounds. What the device releases stays a subset of what the plan
  certifies.
* ``--rollback`` with S = R (after exit 5: round R's mixing diverged) sits out round R.

A checkpoint of another plan, node, secret or run is never used (exit 4, as before).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from edgedp.errors import DamagedSnapshotError, PlanError
from firmware_py import checkpoint

__all__ = ["RecoveryError", "Resumed", "resume"]


class RecoveryError(Exception):
    """Resuming would reuse noise; the message names the way out."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """How the agent was resumed: ``source`` is ``fresh`` (nothing sent yet), ``initial``
    (no checkpoint yet; round 0 re-sent), ``checkpoint``, ``rolled-back`` (automatic,
    nothing skipped; ``damage`` says why) or ``rollback`` (the command; rounds ``skipped``
    sat out). ``damage`` also tells of a ``checkpoint`` found under the name
    ``checkpoint.prev`` (its swap of the two names was cut short or undone)."""

    source: str
    snapshot: dict | None = None
    skipped: tuple[int, ...] = ()
    damage: str = ""


def _load(agent, path: Path) -> tuple[dict | None, str]:
    """(snapshot restored into ``agent``, "") or (None, why it is unusable / "" if absent)."""
    try:
        snap = checkpoint.load(path)
    except checkpoint.CheckpointError as exc:
        return None, str(exc)
    if snap is None:
        return None, ""
    try:
        agent.restore(snap)  # checks everything before changing the agent
    except DamagedSnapshotError as exc:
        return None, f"{path}: {exc}"
    return snap, ""


def _newer(agent, prev: Path, *, than: int) -> dict | None:
    """``prev``'s snapshot, restored into ``agent``, if it is usable, of this plan, node and
    run, and of a later round than ``than``; else None, ``agent`` unchanged."""
    try:
        body = checkpoint.load(prev)
    except checkpoint.CheckpointError:
        return None  # e.g. the write a crash interrupted: the older file, not needed
    if body is None or not isinstance(body.get("round"), int) or body["round"] <= than:
        return None
    try:
        agent.restore(body)  # checks everything before changing the agent
    except (DamagedSnapshotError, PlanError, NotImplementedError):  # not usable, or not
        return None  # this run's: ignored, as before
    return body


def resume(agent, folder: Path, *, sent: int | None, rollback: bool, command: str) -> Resumed:
    """Restore ``agent`` from the state folder, or raise :class:`RecoveryError`.

    ``sent`` is the last round recorded as sent (None: none); ``command`` is what the
    operator runs to roll back (named in the error). Identity mismatches (another plan,
    secret or run: :class:`~edgedp.errors.PlanError`) propagate unchanged.
    """
    folder = Path(folder)
    latest, prev = folder / "checkpoint", checkpoint.previous(folder / "checkpoint")
    snap, damage = _load(agent, latest)
    if snap is None and not damage and sent is None:
        return Resumed("fresh")
    swapped = False
    if snap is not None:
        source, label = f"{latest} is at round {agent.round}", "checkpoint"
        newer = _newer(agent, prev, than=agent.round)
        swapped = newer is not None
        if swapped:  # the last swap of the two names was cut short or undone
            snap = newer
            source = f"{prev} (round {agent.round}) is newer than {latest}"
            if not checkpoint.swap(latest):  # a new file; prev keeps its (newer) state
                checkpoint.atomic_write(latest, checkpoint.encode(agent.snapshot()))
    else:  # the newest usable state: prev, else the initial one (round 0)
        snap, prev_damage = _load(agent, prev)
        lost = damage or f"{latest} is missing"
        if snap is not None:
            source, label = f"{lost}; {prev} is usable (round {agent.round})", "rolled-back"
        else:
            source = f"{lost}, {prev} is {prev_damage or 'missing'}; the initial state is usable"
            label = "rolled-back" if damage or prev_damage else "initial"
    if sent is None or sent < agent.round or (sent == agent.round and not rollback):
        if label == "rolled-back":
            if damage:
                os.replace(latest, folder / "checkpoint.damaged")  # kept for inspection
            checkpoint.save(latest, agent.snapshot())
        note = source if label == "rolled-back" or swapped else ""
        return Resumed(label, snap, damage=note)
    if not rollback:
        raise RecoveryError(
            f"round {sent} was already sent but {source}: resuming would reuse noise with a "
            f"different model. `{command}` resumes from round {agent.round} and sits out "
            f"rounds {agent.round}..{sent} (their noise is drawn and discarded, never reused)."
        )
    skipped = tuple(range(agent.round, min(sent, agent.share.steps - 1) + 1))
    for _ in skipped:
        agent.skip_round()
    if damage:
        os.replace(latest, folder / "checkpoint.damaged")  # kept for inspection
    checkpoint.save(latest, agent.snapshot())  # past the skipped rounds: durable
    return Resumed("rollback", snap, skipped=skipped, damage=source)
