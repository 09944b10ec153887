"""Claiming a run's stream in the release ledger and resuming from the state folder.

:func:`claim_and_resume` takes the locks (the state folder's, the noise secret's and its
release ledger's: one agent per folder and per secret), opens the release ledger
(:mod:`firmware_py.ledger`; plan-seed runs keep theirs in the state folder), resumes from the
newest usable checkpoint (:mod:`firmware_py.recovery`) — only from a state that repeats the
last round the ledger recorded bit for bit, or is past it — refuses a state folder the
ledger does not account for, claims the stream durably and writes the checkpoint the first
round starts from (bounded retries: a full disk is exit 6).
"""

from __future__ import annotations

from pathlib import Path

from edgedp.agent import Agent
from edgedp.errors import PlanError
from firmware_py import checkpoint, config, ledger, logs, recovery, resources
from firmware_py.exits import EXIT_UNSAFE, START_TRIES, RefusedError

__all__ = ["NEW_RUN", "checkpoint_body", "claim_and_resume", "open_ledger"]

#: What a refusal to resume names as the ways out (docs/DEVICES.md, "Resume").
NEW_RUN = "or deploy a new run (`edgedp deploy`: a new run id)"


def open_ledger(cfg: config.NodeConfig, inputs) -> ledger.ReleaseLedger:
    """The release ledger of this device's noise secret, locked, with the secret file locked
    too; for plan-seed runs (no secret) one in the state folder, made at the first start."""
    if cfg.reproducible:
        path = cfg.checkpoint_dir / "releases"
        if not path.exists():
            ledger.create(path, inputs.noise_secret, slot=4096)
    else:
        assert cfg.noise_secret_file is not None and cfg.ledger_file is not None
        if resources.hold_lock(cfg.noise_secret_file, create=False) is None:
            raise RefusedError(
                EXIT_UNSAFE,
                f"another edgedp-agent uses the noise secret {cfg.noise_secret_file} (it holds "
                "the secret's lock): two agents with one secret would send one noise draw twice",
            )
        path = cfg.ledger_file
    try:
        return ledger.ReleaseLedger(path, inputs.noise_secret)
    except ledger.LedgerError as exc:
        raise RefusedError(EXIT_UNSAFE, f"{exc}. {_lost_ledger(cfg)}") from None


def _lost_ledger(cfg: config.NodeConfig) -> str:
    name = Path(cfg.noise_secret_file or "node.noise").name.removesuffix(".noise")
    return (
        "If it was lost or damaged, this noise secret can no longer be used safely: make a new "
        f"one (`edgedp keys gen --noise --force --out keys --name {name}`) and deploy a new run"
    )


def _resume(cfg: config.NodeConfig, agent: Agent, rollback: bool, mark) -> recovery.Resumed:
    try:
        return recovery.resume(
            agent,
            cfg.checkpoint_dir,
            sent=None if mark is None or mark.round < 0 else mark.round,
            rollback=rollback,
            command=f"edgedp-agent --config {cfg.path} --rollback",
        )
    except recovery.RecoveryError as exc:
        raise RefusedError(EXIT_UNSAFE, f"{exc} {NEW_RUN[0].upper() + NEW_RUN[1:]}.") from None
    except (PlanError, NotImplementedError) as exc:
        raise RefusedError(EXIT_UNSAFE, f"{cfg.checkpoint_dir / 'checkpoint'}: {exc}") from None


def _check_marks(cfg, resumed: recovery.Resumed, mark, book: ledger.ReleaseLedger) -> None:
    """Refuse a state folder the ledger does not account for: one of a run the ledger never
    claimed, or a checkpoint saved after a round the ledger does not record."""
    if mark is None and resumed.source != "fresh":
        raise RefusedError(
            EXIT_UNSAFE,
            f"the state folder {cfg.checkpoint_dir} holds this run's state but the release "
            f"ledger {book.path} has no record of the run: the ledger was replaced or put back "
            f"from an older copy. {_lost_ledger(cfg)}",
        )
    released = (resumed.snapshot or {}).get("released")
    if mark is None or not isinstance(released, dict):
        return
    rnd, message = released.get("round"), released.get("message")
    behind = isinstance(rnd, int) and rnd > mark.round  # the ledger is older than the state
    other = isinstance(rnd, int) and rnd == mark.round >= 0 and message != mark.message.hex()
    if not isinstance(rnd, int) or behind or other:
        raise RefusedError(
            EXIT_UNSAFE,
            f"the checkpoint was saved after round {rnd} was released but the release ledger "
            f"{book.path} records round {mark.round}: the ledger was put back from an older "
            f"copy. {_lost_ledger(cfg)}",
        )


def checkpoint_body(agent: Agent, run: str, mark: ledger.Mark | None) -> dict:
    """The checkpoint of ``agent`` (between rounds) of run ``run`` with the last round
    released so far (``mark``), against which a restart checks the release ledger."""
    released = {"round": -1, "message": ""}
    if mark is not None and mark.round >= 0:
        released = {"round": mark.round, "message": mark.message.hex()}
    return {**agent.snapshot(), "run": run, "released": released}


def _check_run(cfg: config.NodeConfig) -> None:
    """A state folder whose checkpoint belongs to another run is a configuration error."""
    for name in ("checkpoint", "checkpoint.prev"):
        try:
            body = checkpoint.load(cfg.checkpoint_dir / name)
        except checkpoint.CheckpointError:
            continue  # damaged: recovery decides
        run = (body or {}).get("run")
        if isinstance(run, str) and run != cfg.run_id:
            raise config.ConfigError(
                f"the state folder {cfg.checkpoint_dir} holds run {run!r} but this config is "
                f"for run {cfg.run_id!r}: give the new run an empty run.checkpoint_dir"
            )


def claim_and_resume(cfg: config.NodeConfig, inputs, agent: Agent, rollback: bool, logger):
    """(ledger, stream id, its mark before this start, how the agent resumed); raises
    RefusedError, config.ConfigError or OSError (module docstring)."""
    checkpoint.private_folder(cfg.checkpoint_dir)
    if resources.hold_lock(cfg.checkpoint_dir / "lock") is None:  # held until this exits
        raise RefusedError(
            EXIT_UNSAFE,
            f"another edgedp-agent runs on the state folder {cfg.checkpoint_dir} (it holds "
            "its lock): two agents on one folder would send rounds twice; stop it first",
        )
    checkpoint.remove_temporaries(cfg.checkpoint_dir)  # left by a writer killed mid-write
    _check_run(cfg)
    book = open_ledger(cfg, inputs)
    stream = ledger.stream_id(inputs.plan.plan_hash, cfg.run_id, cfg.id)
    mark = book.mark(stream)
    resumed = _resume(cfg, agent, rollback, mark)
    _check_marks(cfg, resumed, mark, book)
    # renames a killed predecessor made but did not fsync are durable before anything is
    # recorded as sent (checkpoint saves in place rely on it)
    checkpoint.sync_folder(cfg.checkpoint_dir)
    log = logs.TextAdapter(logger)
    if mark is None:  # durable before any noise of the stream leaves the device
        try:
            resources.retry(
                "release ledger", lambda: book.claim(stream), log=log, attempts=START_TRIES
            )
        except ledger.LedgerError as exc:  # full: the secret's runs are used up
            raise RefusedError(EXIT_UNSAFE, str(exc)) from None
    # the state the first round starts from, durable before it is sent: a state folder
    # that cannot be written (a full disk) is an exit 6 here, not a run that stalls later
    body = checkpoint_body(agent, cfg.run_id, book.mark(stream))
    path = cfg.checkpoint_dir / "checkpoint"
    resources.retry(
        "checkpoint", lambda: checkpoint.save(path, body), log=log, attempts=START_TRIES
    )
    return book, stream, mark, resumed
