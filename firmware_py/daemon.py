"""``edgedp-agent --config node.toml``: run one device's side of a plan over ZeroMQ.

Before the first round: load and re-certify the plan, check the device's budget against the
worst adversary it faces (``run.max_epsilon``, :mod:`edgedp.accounting.budget`), derive every
stream key from (secret, plan hash, run id) (:mod:`edgedp.streams`), and check the stream
ledger (:mod:`firmware_py.ledger`): a fresh start on a (plan, run) this noise secret already
drew noise for is refused; keep descriptors in reserve and freed memory in the heap for the
next round (:mod:`firmware_py.resources`) and
cap inbound frames and parts at the plan's (:meth:`edgedp.agent.Agent.wire_limits`); resume
from the newest usable checkpoint (:mod:`firmware_py.recovery`: a damaged latest one is
rolled back to ``checkpoint.prev`` when nothing sent is lost). The rounds are those of
:func:`edgedp.rounds.rounds` (the round loop the simulators share), carried out here with
ZeroMQ, wall-clock deadlines and durable records. Per round: if a majority of
the neighbours is past the receive window, skip to their round
(:meth:`edgedp.agent.Agent.rejoin`; nothing sent, the skipped rounds' noise drawn and
discarded) and checkpoint; ``begin_round`` (local noisy step), record the round as sent
(durably, before sending, in place: :mod:`firmware_py.sentrecord`; a round recorded as
sent must repeat its message digest; the first time then also in the ledger), send to every
neighbour, collect neighbours' messages until all arrived, the round deadline passed, or
every missing neighbour is known to have moved on; ``end_round`` (mixing with the dropout
rule; a non-finite state is never adopted); append a metrics line; write the checkpoint
atomically (in a background thread while the next round is computed; waited for before
that round is recorded as sent). At the end, write the model to publish
(:meth:`edgedp.agent.Agent.final_release`: for sr-gt/DPOP plans the last state plus one
more Laplace draw, covered by the plan's ε). A write that fails (EMFILE, ENOSPC, EIO, ...)
is logged and retried with backoff; the agent does not go on — in particular does not
send the round — until it succeeded (a stop signal meanwhile exits with 128+N). Metrics
lines that cannot be written wait in memory.

The state folder holds the checkpoint (the state at the start of the next round; the one it
replaced is kept as ``checkpoint.prev``) and the sent record. A restart resumes from the
checkpoint and re-sends a round already sent bit for bit; a damaged checkpoint is rolled
back to ``checkpoint.prev`` when nothing sent from the damaged one is lost, and otherwise
only on ``--rollback``, which sits out the rounds sent from states the device no longer has
(:mod:`firmware_py.recovery`). Metrics lines: ``start``, ``sent`` (the round's noise and
message digests, written before sending), ``round``, ``error``, ``done``.

Exit status: 0 the plan's T rounds are done; 2 bad configuration (also: the state folder
belongs to another run); 3 plan refused (hash mismatch with the neighbours, tampered file,
no noise, or a budget the plan exceeds); 4 unsafe to start or resume (messages were sent
but no usable checkpoint holds the state they were sent from — the message names
``--rollback`` when a checkpoint is usable; the checkpoint was made with another secret or
run; or the ledger shows this noise secret already drew noise for this plan and run —
starting over would reuse noise: deploy a new run id; or the sent record is damaged; or a
round recorded as sent would be sent again with another message); 5 the model diverged
(the round's message, or the state after mixing, would be non-finite; nothing was sent or
adopted, the checkpoint stays at the start of that round; ``--rollback`` sits that round
out); 6 a file or the port could not be opened at start; 7 the plan's rounds are done and
the model was written, but the run is degraded: a neighbour never sent a valid message
(wrong public key or endpoint, another plan, never started) or more than
``run.max_missing`` of the neighbours' messages were missing; 128+N stopped by signal N at
a round boundary or while retrying a write.

Log: Python ``logging`` on stderr, one line per event with a reason code
(:mod:`firmware_py.logs`): human text by default, ``--log-format json`` for one JSON object
per line (journald and log shippers). Each round's rejected frames, refused messages,
refused handshakes (with the key prefixes) and missing neighbours are logged with their
counts; a neighbour that has sent nothing valid after the first round is named with what
to check.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import functools
import hashlib
import io
import logging
import signal
import sys
import time

import numpy as np
import zmq
import zmq.auth

from edgedp import footprint, keys, models, rng, rounds, runtime, sketch_adaptive, streams
from edgedp.accounting import budget
from edgedp.agent import Agent
from edgedp.errors import NonFiniteMessageError, NonFiniteStateError, PlanError
from edgedp.plan import NoisePlan
from edgedp.transport.zmq import Peer, ZmqTransport
from firmware_py import checkpoint, config, ledger, logs, recovery, resources, sentrecord

__all__ = ["main", "run"]

EXIT_OK, EXIT_CONFIG, EXIT_PLAN, EXIT_UNSAFE = 0, 2, 3, 4
EXIT_DIVERGED = 5  # the round's message would be non-finite; nothing was sent
EXIT_IO = 6  # a file or the port could not be opened at start (later failures are retried)
EXIT_DEGRADED = 7  # done, but a neighbour never came or too many messages were missing
MISMATCH_LIMIT = 3


class RefusedError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _load_inputs(cfg: config.NodeConfig):
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
    return plan, share, public, secret, noise_secret, x, y, (eps, against)


def _stream_keys(cfg, plan, share, secret, noise_secret) -> tuple[dict, str]:
    """The Agent's key arguments and their fingerprint, all bound to (plan hash, run id).

    Own noise, batch order and message noise come from the device's noise secret; per-edge
    keys from X25519 with each neighbour's CURVE key (never in the plan); with noise_secret
    = "plan-seed" everything comes from the plan seed (reproducible runs, equal to the
    simulators')."""
    own = streams.RunKeys(noise_secret, plan.plan_hash, cfg.run_id)
    if cfg.reproducible:
        return runtime.node_keys(own, cfg.id, share.neighbours).arguments(), own.fingerprint()
    cross = share.cross_agent
    if cross is None:
        return runtime.device_keys(own, cfg.id).arguments(), own.fingerprint()
    shared = None
    if cross.factor_row:
        shared = streams.RunKeys(_open_seed(cfg, secret), plan.plan_hash, cfg.run_id).shared()
    public = {n.id: n.public_key for n in cfg.neighbours}
    pairs = {
        v: streams.edge_key(
            keys.pairwise_secret(secret, public[v], me=cfg.id, peer=v),
            plan_hash=plan.plan_hash,
            run=cfg.run_id,
            u=cfg.id,
            v=v,
        )
        for v, _ in cross.edge_terms
    }
    arguments = runtime.device_keys(own, cfg.id, edges=pairs, shared=shared).arguments()
    digest = hashlib.sha256(own.fingerprint().encode())
    if shared is not None:
        digest.update(hashlib.sha256(f"shared:{shared.hex()}".encode()).digest())
    for v in sorted(pairs):  # a changed edge secret must refuse a resume too
        digest.update(hashlib.sha256(f"{v}:{pairs[v].hex()}".encode()).digest())
    return arguments, digest.hexdigest()


def _open_seed(cfg, secret) -> bytes:
    """The run's shared seed, opened from the sealed box ``edgedp deploy`` wrote for this
    device (libsodium, this device's CURVE key); never stored in clear."""
    if not cfg.sealed_seed:
        raise config.ConfigError(
            "this plan's shared-seed noise (whisper --form lowrank/dense) needs node.sealed_seed: "
            "the run's seed sealed to this device's key (`edgedp deploy` writes it)"
        )
    try:
        seed = keys.open_sealed(base64.b64decode(cfg.sealed_seed, validate=True), secret)
    except (ValueError, binascii.Error) as exc:
        raise config.ConfigError(f"node.sealed_seed: {exc}") from None
    if len(seed) < 32:
        raise config.ConfigError("node.sealed_seed holds fewer than 32 seed bytes")
    return seed


def _check_streams(cfg, plan, agent, snap, sent, stream_ledger) -> None:
    """Refuse a start that could reuse noise: a fresh start on a stream this secret
    already used, or a checkpoint behind the last round sent (module docstring)."""
    fresh = snap is None and sent is None
    entry = (
        None if stream_ledger is None else stream_ledger.used(plan.plan_hash, cfg.run_id, cfg.id)
    )
    if fresh and entry is not None:
        raise RefusedError(
            EXIT_UNSAFE,
            f"this noise secret already drew noise for plan {plan.plan_hash[:16]} run "
            f"{cfg.run_id!r} (ledger {cfg.ledger_file}) but the state folder has no checkpoint "
            "of it: a fresh start would reuse that noise. Resume from the run's checkpoint, "
            "or start a new run (`edgedp deploy` writes a new run.id)",
        )
    if sent is not None and sent.round > agent.round:
        raise RefusedError(
            EXIT_UNSAFE,
            f"round {sent.round} was already sent but the checkpoint is at round "
            f"{agent.round}: resuming would reuse noise with a different model",
        )


def _error_line(node: int, agent: Agent, exc: Exception) -> dict:
    return {
        "event": "error",
        "time": time.time(),
        "node": node,
        "round": agent.round,
        "error": str(exc),
        **agent.metrics.to_dict(),
    }


def _message_digest(out) -> bytes:
    """sha256 of the round's frames (every recipient's when each gets its own)."""
    digest = hashlib.sha256()
    for v in out.recipients if out.per_recipient is not None else out.recipients[:1]:
        for frame in out.frames_for(v):
            digest.update(frame)
    return digest.digest()


def _sent_line(node: int, out, message: bytes) -> dict:
    """The round's noise and message digests: a re-sent round must repeat both exactly."""
    return {
        "event": "sent",
        "time": time.time(),
        "node": node,
        "round": out.round,
        "noise": out.noise_digest,
        "message": message.hex()[:16],
    }


def run(cfg: config.NodeConfig, *, rollback: bool = False, logger=None) -> int:
    """Run the node until its rounds are done; returns the exit status.

    ``rollback``: resume from the newest usable checkpoint and sit out the rounds already
    sent from it (:mod:`firmware_py.recovery`). ``logger``: default :func:`logs.setup`."""
    logger = logger or logs.setup(cfg.id)
    kept = resources.keep_freed_memory()  # before the round's arrays are first allocated
    log = logs.TextAdapter(logger)  # for the retry and metrics helpers, which write text
    plan, share, public, secret, noise_secret, x, y, (eps, against) = _load_inputs(cfg)
    if cfg.reproducible:
        logs.event(
            logger, logging.WARNING, "not-private", "noise derived from the plan seed: NOT private"
        )
    try:
        model = models.for_task(
            plan.task, x.shape[1], model_file=str(cfg.model_file) if cfg.model_file else None
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
    key_arguments, fingerprint = _stream_keys(cfg, plan, share, secret, noise_secret)
    try:
        agent = Agent(
            share,
            model=model,
            x=x,
            y=y,
            dropout_rule=cfg.dropout_rule,
            stream_fingerprint=fingerprint,
            keep_gradient=False,
            **key_arguments,
        )
    except PlanError as exc:  # e.g. its (k, b) is not what this shard's size runs
        raise RefusedError(
            EXIT_PLAN, f"the plan does not fit data.shard {cfg.shard} ({len(y)} examples): {exc}"
        ) from None
    logs.event(
        logger,
        logging.INFO,
        "start",
        f"plan {plan.plan_hash[:16]} ({plan.mechanism}, {plan.adjacency}) run {cfg.run_id}; "
        f"epsilon={eps:.6g} against {against}; budget run.max_epsilon={cfg.max_epsilon:g}",
        plan_hash=plan.plan_hash,
        run=cfg.run_id,
        epsilon=eps,
        adversary=against,
    )
    checkpoint.private_folder(cfg.checkpoint_dir)
    if resources.hold_lock(cfg.checkpoint_dir / "lock") is None:  # held until this exits
        raise RefusedError(
            EXIT_UNSAFE,
            f"another edgedp-agent runs on the state folder {cfg.checkpoint_dir} (it holds "
            "its lock): two agents on one folder would send rounds twice; stop it first",
        )
    checkpoint.remove_temporaries(cfg.checkpoint_dir)  # left by a writer killed mid-write
    ckpt_path = cfg.checkpoint_dir / "checkpoint"
    try:
        record = sentrecord.SentRecord(cfg.checkpoint_dir / "sent")
    except sentrecord.SentRecordError as exc:
        raise RefusedError(EXIT_UNSAFE, str(exc)) from None
    sent = record.last
    if sent is not None and sent.run != cfg.run_id:
        raise config.ConfigError(
            f"the state folder {cfg.checkpoint_dir} holds run {sent.run!r} but this config "
            f"is for run {cfg.run_id!r}: give the new run an empty run.checkpoint_dir"
        )
    try:
        resumed = recovery.resume(
            agent,
            cfg.checkpoint_dir,
            sent=None if sent is None else sent.round,
            rollback=rollback,
            command=f"edgedp-agent --config {cfg.path} --rollback",
        )
    except recovery.RecoveryError as exc:
        raise RefusedError(EXIT_UNSAFE, str(exc)) from None
    except (PlanError, NotImplementedError) as exc:
        raise RefusedError(EXIT_UNSAFE, f"{ckpt_path}: {exc}") from None
    # renames a killed predecessor made but did not fsync are durable before anything is
    # recorded as sent (checkpoint saves in place rely on it)
    checkpoint.sync_folder(cfg.checkpoint_dir)
    if resumed.source in ("rolled-back", "rollback") or resumed.damage:
        logs.event(
            logger,
            logging.WARNING if resumed.source != "checkpoint" else logging.INFO,
            "resumed",
            f"{resumed.damage or 'rollback'}; resumed at round {agent.round}"
            f"{f', sat out rounds {list(resumed.skipped)}' if resumed.skipped else ''}",
            source=resumed.source,
            skipped=list(resumed.skipped),
        )
    snap = resumed.snapshot
    stream_ledger = None if cfg.reproducible else ledger.StreamLedger(cfg.ledger_file)
    try:
        _check_streams(cfg, plan, agent, snap, sent, stream_ledger)
    except ledger.LedgerError as exc:
        raise RefusedError(EXIT_UNSAFE, str(exc)) from None
    stop = {"signal": 0}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file-size limit: EFBIG, retried
    soft, hard = resources.reserve_descriptors()
    max_frame, max_parts = agent.wire_limits()
    logs.event(
        logger,
        logging.INFO,
        "limits",
        f"descriptors {soft} (hard {hard}; the rest kept for own files); "
        f"inbound frames <= {max_frame} bytes, <= {max_parts} per message; "
        + (
            f"freed memory kept up to {kept >> 20} MiB"
            if kept
            else "allocator settings left as they are"
        ),
    )
    checkpoint.private_folder(cfg.metrics.parent)
    metrics = resources.MetricsLog(cfg.metrics, log=log)
    try:
        transport = ZmqTransport(
            node=cfg.id,
            bind=cfg.bind,
            public_key=public,
            secret_key=secret,
            peers=[Peer(n.id, n.endpoint, n.public_key) for n in cfg.neighbours],
            max_frame_bytes=max_frame,
            max_parts=max_parts,
        )
    except BaseException:
        metrics.close()
        raise

    def durable(what: str, write) -> None:
        resources.retry(what, write, log=log, stop=lambda: bool(stop["signal"]))

    metrics.write(
        {
            "event": "start",
            "node": cfg.id,
            "round": agent.round,
            "plan_hash": plan.plan_hash,
            "resumed": resumed.source,
            "skipped": list(resumed.skipped),
            "time": time.time(),
        }
    )
    first_round = agent.round
    pending: checkpoint.Pending | None = None  # the last round's checkpoint, being written

    def checkpointed() -> None:
        """Wait for the background checkpoint; a failed one is retried here until durable."""
        nonlocal pending
        if pending is None:
            return
        write, pending = pending, None
        if write.wait() is not None:
            durable("checkpoint", functools.partial(checkpoint.save, write.path, write.body))

    watch = logs.RoundWatch(
        logger, agent.neighbours, {n.id: n.endpoint for n in cfg.neighbours}, plan.plan_hash
    )

    def rejoined(cmd: rounds.Rejoined) -> None:
        logs.event(
            logger,
            logging.WARNING,
            "rejoin",
            f"rejoining at round {cmd.target}; rounds {cmd.behind}..{cmd.target - 1} skipped "
            "(nothing sent, their noise drawn and discarded)",
            round=cmd.target,
            skipped=cmd.skipped,
        )
        metrics.write(
            {
                "event": "rejoin",
                "time": time.time(),
                "node": cfg.id,
                "from": cmd.behind,
                "round": cmd.target,
                "skipped": cmd.skipped,
            }
        )
        # before the sent record of `target`: a resume must not start behind it
        checkpointed()  # one writer of the checkpoint at a time
        durable("checkpoint", functools.partial(checkpoint.save, ckpt_path, agent.snapshot()))

    def send(out) -> None:
        message = _message_digest(out)  # while the checkpoint may still be written
        resend = record.check_resend(out.round, message)
        if resend is not None:  # nothing sent; never happens unless the state was altered
            checkpointed()
            raise RefusedError(EXIT_UNSAFE, resend)
        # the state this round starts from is durable before the round is recorded as
        # sent, and the record before anything is sent (a stop here sends nothing)
        checkpointed()
        durable(
            "sent-round record",
            functools.partial(record.write, cfg.run_id, out.round, message),
        )
        if stream_ledger is not None and out.round == first_round:  # after the record:
            # a kill in between resumes from it instead of refusing a fresh start
            durable(
                "stream ledger",
                functools.partial(
                    stream_ledger.record, plan.plan_hash, cfg.run_id, cfg.id, fingerprint
                ),
            )
        metrics.write(_sent_line(cfg.id, out, message))
        if out.per_recipient is None:  # the same frames to every neighbour, in one call
            transport.send(out.recipients, out.frames)
        else:  # Zip-DL sends each neighbour its own
            for v in out.recipients:
                transport.send((v,), out.frames_for(v))

    def deliver(deadline: float) -> bool:
        """One message delivered to the agent (True), or the deadline or a stop (False)."""
        while not stop["signal"]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            item = transport.recv(int(min(remaining, 0.25) * 1000) + 1)
            if item is None:
                continue
            # the transport's frames are this agent's alone: kept, read-only, not copied
            agent.receive(item[0], authenticated_sender=item[1], owned=transport.OWNS_FRAMES)
            if agent.plan_rejected_by_all(MISMATCH_LIMIT):
                raise RefusedError(
                    EXIT_PLAN,
                    "every neighbour announces a different plan hash; "
                    "refusing to run a plan they do not share",
                )
            return True
        return False

    def ended(report, started: float, out) -> None:
        metrics.write(
            {
                "event": "round",
                "time": time.time(),
                "node": cfg.id,
                "round": report.round,
                "missing": list(report.missing),
                "clipped": report.clipped,
                "nonfinite": report.nonfinite,
                "update_norm": report.update_norm,
                "noise": out.noise_digest,
                "seconds": round(time.monotonic() - started, 4),
                "cpu": round(time.process_time(), 4),  # the process's CPU seconds so far
                "rejected": dict(agent.metrics.rejected),
                "refused": dict(transport.refused),
                "refused_handshakes": transport.refused_handshakes,
                "dropped": transport.dropped,
            }
        )
        watch.round_end(report.round, report, agent, transport)

    try:
        driver = rounds.rounds(agent)  # the one round loop (edgedp.rounds)
        reply: bool | None = None
        started, deadline, out = 0.0, 0.0, None
        while True:
            try:  # begin_round / end_round run inside the driver
                cmd = driver.send(reply)
            except StopIteration:
                break
            except NonFiniteMessageError as exc:  # nothing sent; the checkpoint is intact
                checkpointed()
                metrics.write(_error_line(cfg.id, agent, exc))
                raise RefusedError(EXIT_DIVERGED, str(exc)) from None
            except sketch_adaptive.MissingAggregateError as exc:  # adaptive dome, faults
                raise RefusedError(EXIT_UNSAFE, str(exc)) from None
            except NonFiniteStateError as exc:  # not adopted; the checkpoint is intact
                metrics.write(_error_line(cfg.id, agent, exc))
                raise RefusedError(EXIT_DIVERGED, str(exc)) from None
            reply = None
            if stop["signal"]:  # nothing more is sent or recorded after a stop signal
                return 128 + stop["signal"]
            if isinstance(cmd, rounds.Rejoined):
                rejoined(cmd)
            elif isinstance(cmd, rounds.Send):
                out = cmd.out
                send(out)
                started = time.monotonic()
                limit = cfg.startup_timeout if out.round == first_round else cfg.round_timeout
                deadline = started + limit
            elif isinstance(cmd, rounds.Wait):
                reply = deliver(deadline)
                if stop["signal"]:  # the round is left unmixed: it resumes from the checkpoint
                    return 128 + stop["signal"]
            elif isinstance(cmd, rounds.Ended):
                ended(cmd.report, started, out)
                # metrics first: a crash in between repeats a line instead of losing one; the
                # checkpoint is written while the next round is computed (joined before its send)
                pending = checkpoint.Pending(ckpt_path, checkpoint.copy_arrays(agent.snapshot()))
        checkpointed()
        buf = io.BytesIO()
        np.save(buf, agent.final_release())  # covered by the plan's guarantee
        durable(
            "final model",
            functools.partial(checkpoint.atomic_write, cfg.final_model, buf.getvalue()),
        )
        degraded = watch.degraded(cfg.max_missing)
        metrics.write(
            {
                "event": "done",
                "node": cfg.id,
                **agent.metrics.to_dict(),
                "refused": dict(transport.refused),
                "dropped": transport.dropped,
                "refused_handshakes": transport.refused_handshakes,
                "metrics_lines_lost": metrics.lost,
                "degraded": degraded,
            }
        )
        durable("metrics", metrics.flush)
        if degraded is not None:
            logs.event(
                logger,
                logging.ERROR,
                "degraded",
                f"the plan's rounds are done but the run is degraded: {degraded}; the model "
                f"was written to {cfg.final_model}",
            )
            return EXIT_DEGRADED
        logs.event(
            logger,
            logging.INFO,
            "done",
            f"the plan's {plan.steps} rounds are done; missing {agent.metrics.missing}, "
            f"rejected {sum(agent.metrics.rejected.values())}; model {cfg.final_model}",
        )
        return EXIT_OK
    except resources.StoppedError:
        return 128 + stop["signal"]
    finally:
        if pending is not None:  # any exit: the last checkpoint is complete or not begun
            pending.wait()
        metrics.close()
        transport.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="edgedp-agent", description="Run one edgedp device.")
    ap.add_argument("--config", required=True, help="path to node.toml")
    ap.add_argument(
        "--rollback",
        action="store_true",
        help="resume from the newest usable checkpoint, sitting out the rounds already sent "
        "from it (after exit 4 names this option)",
    )
    ap.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="text",
        help="log lines on stderr: human text (default) or one JSON object per line",
    )
    args = ap.parse_args(argv)
    logger = logs.setup(None, fmt=args.log_format)
    try:
        cfg = config.load(args.config)
        logger = logs.setup(cfg.id, fmt=args.log_format)
        return run(cfg, rollback=args.rollback, logger=logger)
    except config.ConfigError as exc:
        logs.event(logger, logging.ERROR, "config", f"config error: {exc}")
        return EXIT_CONFIG
    except RefusedError as exc:
        code = logs.EXIT_CODES.get(exc.code, "refused")
        logs.event(logger, logging.ERROR, code, f"refused: {exc}", exit=exc.code)
        return exc.code
    except (OSError, zmq.ZMQError) as exc:  # at start: the state folder, the port
        logs.event(logger, logging.ERROR, "io", f"I/O error at start: {exc}", exit=EXIT_IO)
        return EXIT_IO


if __name__ == "__main__":
    sys.exit(main())
