"""Everything ``edgedp-agent`` does before its first round, and the refusals it may end in.

:func:`start` loads and re-certifies the plan, checks the device's budget against the worst
adversary it faces (``run.max_epsilon``, :mod:`edgedp.accounting.budget`), derives every
stream key from (secret, plan hash, run id) (:mod:`edgedp.streams`), builds the
:class:`~edgedp.agent.Agent`, takes the locks (the state folder's, the noise secret's and
its release ledger's: one agent per folder and per secret), claims the run's stream in the
release ledger (:mod:`firmware_py.ledger`) and resumes from the newest usable checkpoint
(:mod:`firmware_py.recovery`) — only from a state that repeats the last round the ledger
recorded as released bit for bit, or is past it (:mod:`firmware_py.claim`). A refusal is a
:class:`~firmware_py.exits.RefusedError` carrying the exit status (module docstring of
:mod:`firmware_py.daemon`).
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
from firmware_py import claim, config, device_keys, ledger, logs, recovery, resources, trust
from firmware_py.exits import EXIT_PLAN, RefusedError

__all__ = ["Inputs", "Started", "load_inputs", "start"]


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
    budget: trust.Budget


@dataclass(slots=True)
class Started:
    """A device ready for its first round: its agent resumed, its records open."""

    inputs: Inputs
    agent: Agent
    ledger: ledger.ReleaseLedger
    stream: bytes  # the run's stream id in the ledger
    resumed: recovery.Resumed
    kept: int  # freed memory kept for the next round (bytes)


def _keys(cfg: config.NodeConfig) -> tuple[bytes, bytes]:
    try:
        public, secret = zmq.auth.load_certificate(cfg.key_file)
    except (OSError, ValueError) as exc:
        raise config.ConfigError(f"node.key_file {cfg.key_file}: {exc}") from None
    if secret is None:
        raise config.ConfigError(f"node.key_file {cfg.key_file} holds no secret key")
    return public, secret


def _trusted_key(cfg: config.NodeConfig, anchors: trust.Anchors | None) -> str | None:
    """The planning key plans must be signed by: the anchors', else node.toml's (lab)."""
    if anchors is None:
        return cfg.plan_public_key or None
    if cfg.plan_public_key and cfg.plan_public_key != anchors.planner_key:
        raise config.ConfigError(
            f"plan.public_key in node.toml is not the planning key of the trust anchors "
            f"{anchors.path}: remove it (the anchors decide)"
        )
    return anchors.planner_key


def load_inputs(
    cfg: config.NodeConfig, *, anchors: trust.Anchors | None = None, lab: bool = False
) -> Inputs:
    """The plan (re-certified, pinned, signed by the anchored key, named by the signed run
    manifest, within budget), this node's share, its keys and data."""
    public, secret = _keys(cfg)
    try:
        size = cfg.plan_file.stat().st_size
        footprint.check(2 * size, cfg.max_memory, f"a plan file of {size:,} bytes")
        plan = NoisePlan.from_bytes(
            cfg.plan_file.read_bytes(),
            trusted_key=_trusted_key(cfg, anchors),
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
    try:
        limit = trust.run_budget(cfg, plan, public.decode(), anchors, lab=lab)
    except trust.TrustError as exc:
        raise RefusedError(EXIT_PLAN, str(exc)) from None
    eps, against = budget.device_epsilon(plan, delta=limit.delta, adversary=limit.adversary)
    if eps > limit.max_epsilon:
        raise RefusedError(
            EXIT_PLAN,
            f"the plan spends epsilon={eps:.4g} (delta={limit.delta:g}) against {against}, "
            f"over this device's budget {limit.max_epsilon:g} (set by {limit.source})",
        )
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
    return Inputs(plan, share, public, secret, noise_secret, x, y, eps, against, limit)


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


def start(
    cfg: config.NodeConfig,
    *,
    rollback: bool,
    logger: logging.Logger,
    anchors: Path = trust.ANCHORS,
    lab: bool = False,
) -> Started:
    """Everything before the first round (module docstring); raises RefusedError or
    config.ConfigError, or OSError for a file or folder that cannot be opened.
    ``anchors``: the trust anchors' file; ``lab``: the laboratory setting (no anchors
    needed, anchors the agent's user may change accepted; logged)."""
    kept = resources.keep_freed_memory()  # before the round's arrays are first allocated
    try:
        anchored = trust.load_anchors(anchors, lab=lab)
    except trust.TrustError as exc:
        raise RefusedError(EXIT_PLAN, str(exc)) from None
    if lab:
        logs.event(
            logger,
            logging.WARNING,
            "lab",
            "laboratory setting (--lab): "
            + (
                f"no trust anchors at {anchors}: plans and runs are not checked against an "
                "operator's key"
                if anchored is None
                else f"trust anchors {anchors} accepted even if this user could change them"
            ),
        )
    inputs = load_inputs(cfg, anchors=anchored, lab=lab)
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
            else f"epsilon={inputs.epsilon:.6g} (delta={inputs.budget.delta:g}) against "
            f"{inputs.against}; budget {inputs.budget.max_epsilon:g} "
            f"(set by {inputs.budget.source})"
        ),
        plan_hash=plan.plan_hash,
        run=cfg.run_id,
        epsilon=None if cfg.reproducible else inputs.epsilon,
        adversary=None if cfg.reproducible else inputs.against,
    )
    book, stream, mark, resumed = claim.claim_and_resume(cfg, inputs, agent, rollback, logger)
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
