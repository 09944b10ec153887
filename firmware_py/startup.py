"""Everything ``edgedp-agent`` does before its first round, and the refusals it may end in.

:func:`start` loads and re-certifies the plan, checks the device's budget against the worst
adversary it faces (``run.max_epsilon``, :mod:`edgedp.accounting.budget`), derives every
stream key from (secret, plan hash, run id) (:mod:`edgedp.streams`), builds the
:class:`~edgedp.agent.Agent`, takes the locks (the state folder's, the noise secret's and
its release ledger's: one agent per folder and per secret), claims the run's stream in the
release ledger (:mod:`firmware_py.ledger`) and resumes from the newest usable checkpoint
(:mod:`firmware_py.recovery`) — only from a state that repeats the last round the ledger
recorded as released bit for bit, or is past it. A refusal is a :class:`RefusedError`
carrying the exit status (module docstring of :mod:`firmware_py.daemon`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zmq.auth

from edgedp import footprint, models, rng
from edgedp.accounting import budget
from edgedp.agent import Agent
from edgedp.errors import PlanError
from edgedp.plan import NodeShare, NoisePlan
from firmware_py import checkpoint, config, device_keys, ledger, logs, recovery, resources

__all__ = [
    "EXIT_CONFIG",
    "EXIT_DEGRADED",
    "EXIT_DIVERGED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_PLAN",
    "EXIT_UNSAFE",
    "RefusedError",
    "Started",
    "start",
]

EXIT_OK, EXIT_CONFIG, EXIT_PLAN, EXIT_UNSAFE = 0, 2, 3, 4
EXIT_DIVERGED = 5  # the round's message would be non-finite; nothing was sent
EXIT_IO = 6  # a file or the port could not be opened at start (later failures are retried)
EXIT_DEGRADED = 7  # done, but a neighbour never came or too many messages were missing

#: Attempts of each durable write at start (about 6 s of backoff) before exit 6.
START_TRIES = 8
#: What a refusal to resume names as the ways out (docs/DEVICES.md, "Resume").
NEW_RUN = "or deploy a new run (`edgedp deploy`: a new run id)"


class RefusedError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Inputs:
    """What node.toml points at, loaded and checked."""

    plan: NoisePlan
    share: NodeShare
    public: bytes
    secret: bytes
    noise_secret: bytes
    x: np.ndarray
    y: np.ndarray
    epsilon: float
    against: str


@dataclass(slots=True)
class Started:
    """A device ready for its first round: its agent resumed, its records open."""

    inputs: Inputs
    agent: Agent
    ledger: ledger.ReleaseLedger
    stream: bytes  # the run's stream id in the ledger
    resumed: recovery.Resumed
    kept: int  # freed memory kept for the next round (bytes)


def load_inputs(cfg: config.NodeConfig) -> Inputs:
    """The plan (re-certified, pinned, within budget), this node's share, its keys and data."""
    try:
        size = cfg.plan_file.stat().st_size
        footprint.check(2 * size, cfg.max_memory, f"a plan file of {size:,} bytes")
        plan = NoisePlan.from_bytes(
            cfg.plan_file.read_bytes(),
            trusted_key=cfg.plan_public_key or None,
            max_memory=cfg.max_memory,
        )
    except OSError as exc:
        raise config.ConfigError(f"plan.file {cfg.plan_file}: {exc.strerror}") from None
    except PlanError as exc:
        raise RefusedError(EXIT_PLAN, f"plan {cfg.plan_file}: {exc}") from None
    if cfg.plan_hash and plan.plan_hash != cfg.plan_hash:
        raise RefusedError(
            EXIT_PLAN,
            f"plan {cfg.plan_file} has hash {plan.plan_hash[:16]}… but node.toml pins "
            f"plan.hash {cfg.plan_hash[:16]}…: refusing a plan this device was not given",
        )
    if cfg.id >= plan.n:
        raise config.ConfigError(f"node.id = {cfg.id} but the plan has only {plan.n} nodes")
    planned = plan.task.model.partition("@")[0]  # onnx:PATH names the planner's file
    kinds = {planned, "onnx"} if planned.startswith("onnx:") else {planned}
    if cfg.model_kind and cfg.model_kind not in kinds:
        raise config.ConfigError(
            f"model.kind = {cfg.model_kind!r} but the plan was made for {plan.task.model!r}"
        )
    share = plan.share(cfg.id)
    want = set(share.neighbours) - {cfg.id}
    have = {n.id for n in cfg.neighbours}
    if want != have:
        raise config.ConfigError(
            f"[[neighbours]] lists {sorted(have)} but the plan's topology "
            f"gives node {cfg.id} the neighbours {sorted(want)}"
        )
    eps, against = budget.device_epsilon(plan, delta=cfg.delta, adversary=cfg.adversary)
    if eps > cfg.max_epsilon:
        raise RefusedError(
            EXIT_PLAN,
            f"the plan spends epsilon={eps:.4g} against {against}, "
            f"over this device's run.max_epsilon={cfg.max_epsilon:g}",
        )
    try:
        public, secret = zmq.auth.load_certificate(cfg.key_file)
    except (OSError, ValueError) as exc:
        raise config.ConfigError(f"node.key_file {cfg.key_file}: {exc}") from None
    if secret is None:
        raise config.ConfigError(f"node.key_file {cfg.key_file} holds no secret key")
    if cfg.reproducible:
        noise_secret = rng.seed_secret(plan.seed)
    else:
        try:
            noise_secret = cfg.noise_secret_file.read_bytes()
        except OSError as exc:
            raise config.ConfigError(f"node.noise_secret_file: {exc.strerror}") from None
        if len(noise_secret) < 32:
            raise config.ConfigError("node.noise_secret_file must hold at least 32 secret bytes")
    x, y = _shard(cfg)
    return Inputs(plan, share, public, secret, noise_secret, x, y, eps, against)


def _shard(cfg: config.NodeConfig) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(cfg.shard, allow_pickle=False) as shard:
            x, y = np.array(shard["x"], dtype=np.float64), np.array(shard["y"], dtype=np.float64)
    except (OSError, KeyError, ValueError) as exc:
        raise config.ConfigError(f"data.shard {cfg.shard}: {exc}") from None
    for name, arr in (("x", x), ("y", y)):  # NaN/inf data would reach the messages
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        if bad:
            flat = np.isfinite(arr).reshape(len(arr), -1) if arr.ndim else np.isfinite(arr)[None]
            rows = int(np.count_nonzero(~flat.all(axis=-1)))
            raise config.ConfigError(
                f"data.shard {cfg.shard}: {name} has {bad} NaN/Inf entries (in {rows} "
                "examples); repair or drop those examples and write the shard again"
            )
    return x, y


def _agent(cfg: config.NodeConfig, inputs: Inputs) -> Agent:
    plan, share = inputs.plan, inputs.share
    try:
        model = models.for_task(
            plan.task,
            inputs.x.shape[1],
            model_file=str(cfg.model_file) if cfg.model_file else None,
        )
    except ValueError as exc:
        raise config.ConfigError(f"model: {exc}") from None
    try:
        footprint.check(
            footprint.agent_bytes(
                model.dim, plan.factor.state_bytes(model.dim), len(share.neighbours)
            ),
            cfg.max_memory,
            f"model dimension d={model.dim:,}, {plan.factor.kind} factor state",
        )
    except PlanError as exc:
        raise RefusedError(EXIT_PLAN, f"plan {cfg.plan_file}: {exc}") from None
    key_arguments, fingerprint = device_keys.stream_keys(
        cfg, inputs.plan, inputs.share, inputs.noise_secret, inputs.secret
    )
    try:
        return Agent(
            share,
            model=model,
            x=inputs.x,
            y=inputs.y,
            dropout_rule=cfg.dropout_rule,
            stream_fingerprint=fingerprint,
            keep_gradient=False,
            **key_arguments,
        )
    except PlanError as exc:  # e.g. its (k, b) is not what this shard's size runs
        raise RefusedError(
            EXIT_PLAN,
            f"the plan does not fit data.shard {cfg.shard} ({len(inputs.y)} examples): {exc}",
        ) from None


def open_ledger(cfg: config.NodeConfig, inputs: Inputs) -> ledger.ReleaseLedger:
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
    if not isinstance(rnd, int) or (
        rnd > mark.round or rnd == mark.round >= 0 and message != mark.message.hex()
    ):
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


def start(cfg: config.NodeConfig, *, rollback: bool, logger: logging.Logger) -> Started:
    """Everything before the first round (module docstring); raises RefusedError or
    config.ConfigError, or OSError for a file or folder that cannot be opened."""
    kept = resources.keep_freed_memory()  # before the round's arrays are first allocated
    inputs = load_inputs(cfg)
    if cfg.reproducible:
        logs.event(
            logger, logging.WARNING, "not-private", "noise derived from the plan seed: NOT private"
        )
    agent = _agent(cfg, inputs)
    plan = inputs.plan
    logs.event(
        logger,
        logging.INFO,
        "start",
        f"plan {plan.plan_hash[:16]} ({plan.mechanism}, {plan.adjacency}) run {cfg.run_id}; "
        + (
            "no privacy (plan-seed noise)"
            if cfg.reproducible
            else f"epsilon={inputs.epsilon:.6g} against {inputs.against}; "
            f"budget run.max_epsilon={cfg.max_epsilon:g}"
        ),
        plan_hash=plan.plan_hash,
        run=cfg.run_id,
        epsilon=None if cfg.reproducible else inputs.epsilon,
        adversary=None if cfg.reproducible else inputs.against,
    )
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
    stream = ledger.stream_id(plan.plan_hash, cfg.run_id, cfg.id)
    mark = book.mark(stream)
    resumed = _resume(cfg, agent, rollback, mark)
    _check_marks(cfg, resumed, mark, book)
    # renames a killed predecessor made but did not fsync are durable before anything is
    # recorded as sent (checkpoint saves in place rely on it)
    checkpoint.sync_folder(cfg.checkpoint_dir)
    log = logs.TextAdapter(logger)
    if mark is None:  # durable before any noise of the stream leaves the device
        resources.retry("release ledger", lambda: book.claim(stream), log=log, attempts=START_TRIES)
    # the state the first round starts from, durable before it is sent: a state folder
    # that cannot be written (a full disk) is an exit 6 here, not a run that stalls later
    body = checkpoint_body(agent, cfg.run_id, book.mark(stream))
    path = cfg.checkpoint_dir / "checkpoint"
    resources.retry(
        "checkpoint", lambda: checkpoint.save(path, body), log=log, attempts=START_TRIES
    )
    if resumed.source != "fresh":
        logs.event(
            logger,
            logging.WARNING if resumed.source in ("rolled-back", "rollback") else logging.INFO,
            "resumed",
            f"{resumed.damage + '; ' if resumed.damage else ''}resumed at round {agent.round} "
            f"from {resumed.source}"
            + (f", sat out rounds {list(resumed.skipped)}" if resumed.skipped else "")
            + (f"; last round released {mark.round}" if mark is not None else ""),
            source=resumed.source,
            round=agent.round,
            skipped=list(resumed.skipped),
        )
    return Started(inputs, agent, book, stream, resumed, kept)
