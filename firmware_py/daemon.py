"""``edgedp-agent --config node.toml``: run one device's side of a plan over ZeroMQ.

Before the first round (:mod:`firmware_py.startup`): load and re-certify the plan, check the
budget, derive the stream keys, take the locks (state folder, noise secret, release
ledger), claim the run's stream in the release ledger beside the secret
(:mod:`firmware_py.ledger`) and resume from the newest usable checkpoint
(:mod:`firmware_py.recovery`) — only from a state that repeats the last round the ledger
recorded as released bit for bit, or is past it. Then :class:`Device` carries out the
commands of :func:`edgedp.rounds.rounds` (the round loop the simulators share), one method
per command, with ZeroMQ, wall-clock deadlines and durable records:

* ``Rejoined`` / ``Skipped``: nothing sent; the checkpoint is saved;
* ``Send``: the state the round starts from is durable, then the round and the sha256 of
  its frames are recorded in the release ledger (durably, in place; a round recorded as
  released must repeat its message digest), then a ``sent`` metrics line, then the send;
* ``Wait``: one message delivered, or the deadline — at once when every missing neighbour is
  *absent* (it missed a deadline without sending anything while the node's link to it was
  down — its process is not running: the plan's dropout rule applies until it is heard
  from or the link is up again; a slow neighbour, whose link is up, is always waited
  for), or when every missing one is known to have moved on;
* ``Ended``: a ``round`` metrics line and the round's log events, then the checkpoint is
  written in a background thread while the next round is computed (waited for before that
  round is recorded).

At the end the model to publish is written (:meth:`edgedp.agent.Agent.final_release`: for
sr-gt/DPOP plans the last state plus one more Laplace draw, covered by the plan's ε). A
write that fails (EMFILE, ENOSPC, EIO, ...) during the run is logged and retried with
backoff (and logged again every minute); the agent does not go on — in particular does not
send the round — until it succeeded (a stop signal meanwhile exits with 128+N). Metrics
lines that cannot be written wait in memory. Every checkpoint records the last round
released when it was saved, so a ledger put back from an older copy is refused.

Exit status: 0 the plan's T rounds are done; 2 bad configuration (also: the state folder
belongs to another run); 3 plan refused (hash mismatch with the neighbours, tampered file,
no noise, or a budget the plan exceeds); 4 unsafe to start or resume (the state folder is
behind the last round the release ledger recorded — the message names ``--rollback``,
which sits those rounds out, and a new run; the release ledger is missing, cut, damaged,
another secret's or does not know a run the state folder holds; another agent holds the
state folder, the noise secret or the ledger; the checkpoint was made with another secret
or run; or a round recorded as released would be sent again with another message); 5 the
model diverged (the round's message, or the state after mixing, would be non-finite;
nothing was sent or adopted, the checkpoint stays at the start of that round;
``--rollback`` sits that round out); 6 a file or the port could not be opened or written at
start; 7 the plan's rounds are done and the model was written, but the run is degraded: a
neighbour never sent a valid message or more than ``run.max_missing`` of the neighbours'
messages were missing; 128+N stopped by signal N at a round boundary or while retrying a
write.

Log: Python ``logging`` on stderr, one line per event with a reason code
(:mod:`firmware_py.logs`): human text by default, ``--log-format json`` for one JSON object
per line. The process never dumps core (:func:`firmware_py.resources.no_core_dumps`: its
memory holds the noise secret and the CURVE key).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import logging
import signal
import sys
import time
from pathlib import Path

import numpy as np
import zmq

from edgedp import rounds
from edgedp.errors import NonFiniteMessageError, NonFiniteStateError
from edgedp.families.dome import sketch_adaptive
from edgedp.transport.zmq import Peer, ZmqTransport
from firmware_py import checkpoint, config, logs, observe, resources, trust
from firmware_py.claim import checkpoint_body
from firmware_py.exits import (
    EXIT_CONFIG,
    EXIT_DEGRADED,
    EXIT_DIVERGED,
    EXIT_IO,
    EXIT_OK,
    EXIT_PLAN,
    EXIT_UNSAFE,
    RefusedError,
)
from firmware_py.startup import Started, start

__all__ = [
    "EXIT_CONFIG",
    "EXIT_DEGRADED",
    "EXIT_DIVERGED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_PLAN",
    "EXIT_UNSAFE",
    "Device",
    "main",
    "run",
]

MISMATCH_LIMIT = 3


def _message_digest(out) -> bytes:
    """sha256 of the round's frames (every recipient's when each gets its own)."""
    digest = hashlib.sha256()
    for v in out.recipients if out.per_recipient is not None else out.recipients[:1]:
        for frame in out.frames_for(v):
            digest.update(frame)
    return digest.digest()


class Device(rounds.Interpreter):
    """One device's run after :func:`firmware_py.startup.start`: the round loop's commands
    carried out over ``transport`` (module docstring), ``metrics`` its JSON lines; one method
    per command (:class:`edgedp.rounds.Interpreter`)."""

    def __init__(
        self,
        cfg: config.NodeConfig,
        started: Started,
        *,
        transport: ZmqTransport,
        metrics: resources.MetricsLog,
        logger: logging.Logger,
        stop: dict,
    ) -> None:
        self.cfg, self.started, self.logger = cfg, started, logger
        self.agent, self.ledger, self.stream = started.agent, started.ledger, started.stream
        self.transport, self.metrics = transport, metrics
        self.log = logs.TextAdapter(logger)  # for the retry helper, which writes text
        self.stop = stop  # {"signal": N} once a stop signal came
        self.first_round = self.agent.round
        self.pending: checkpoint.Pending | None = None  # the last checkpoint, being written
        self.ckpt_path = cfg.checkpoint_dir / "checkpoint"
        self.absent: set[int] = set()  # missed a deadline unheard and unreachable
        self.heard: set[int] = set()  # neighbours that sent anything in the current round
        self.deadline = self.started_at = 0.0
        self.first = True
        self.out = None
        self.alive: set[int] = set()  # neighbours any authenticated frame came from
        self.watch = logs.RoundWatch(
            logger,
            self.agent.neighbours,
            {n.id: n.endpoint for n in cfg.neighbours},
            started.inputs.plan.plan_hash,
            alive=self.alive,
        )
        self.textfile = observe.Textfile(  # the metrics for fleet tools, beside the JSON lines
            cfg.metrics.with_suffix(".prom"),
            node=cfg.id,
            plan_hash=started.inputs.plan.plan_hash,
            steps=self.agent.share.steps,
        )

    @property
    def signal(self) -> int:
        return self.stop["signal"]

    # ------------------------------------------------------------------ durable records
    def durable(self, what: str, write) -> None:
        resources.retry(what, write, log=self.log, stop=lambda: bool(self.signal))

    def checkpointed(self) -> None:
        """Wait for the background checkpoint; a failed one is retried here until durable."""
        if self.pending is None:
            return
        write, self.pending = self.pending, None
        if write.wait() is not None:
            self.durable("checkpoint", functools.partial(checkpoint.save, write.path, write.body))

    def body(self) -> dict:
        """The checkpoint of the agent's state, with the last round released so far."""
        return checkpoint_body(self.agent, self.cfg.run_id, self.ledger.mark(self.stream))

    def save_now(self) -> None:
        self.checkpointed()  # one writer of the checkpoint at a time
        self.durable("checkpoint", functools.partial(checkpoint.save, self.ckpt_path, self.body()))

    # ------------------------------------------------------------------ the commands
    def rejoined(self, cmd: rounds.Rejoined) -> None:
        logs.event(
            self.logger,
            logging.WARNING,
            "rejoin",
            f"rejoining at round {cmd.target}; rounds {cmd.behind}..{cmd.target - 1} skipped "
            "(nothing sent, their noise drawn and discarded)",
            round=cmd.target,
            skipped=cmd.skipped,
        )
        self.line(
            {"event": "rejoin", "from": cmd.behind, "round": cmd.target, "skipped": cmd.skipped}
        )
        self.save_now()  # a resume must not start behind the rounds skipped

    def skipped(self, cmd: rounds.Skipped) -> None:
        self.line({"event": "skipped", "round": cmd.round})
        self.save_now()

    def send(self, cmd: rounds.Send) -> None:
        out = self.out = cmd.out
        message = _message_digest(out)  # while the checkpoint may still be written
        refusal = self.ledger.resend_refusal(self.stream, out.round, message)
        if refusal is not None:  # nothing sent; never happens unless the state was altered
            self.checkpointed()
            raise RefusedError(EXIT_UNSAFE, refusal)
        # the state this round starts from is durable before the round is recorded as
        # released, and the record before anything is sent (a stop here sends nothing)
        self.checkpointed()
        self.durable(
            "release ledger",
            functools.partial(self.ledger.advance, self.stream, out.round, message),
        )
        self.line(
            {
                "event": "sent",
                "round": out.round,
                "noise": out.noise_digest,
                "message": message.hex()[:16],
            }
        )
        if out.per_recipient is None:  # the same frames to every neighbour, in one call
            self.transport.send(out.recipients, out.frames)
        else:  # Zip-DL sends each neighbour its own
            for v in out.recipients:
                self.transport.send((v,), out.frames_for(v))
        self.started_at = time.monotonic()
        self.heard = set()
        self.first = out.round == self.first_round
        self.deadline = self.started_at + (
            self.cfg.startup_timeout if self.first else self.cfg.round_timeout
        )

    def wait(self, cmd: rounds.Wait) -> bool:
        """One message delivered to the agent (True), or the deadline or a stop (False)."""
        agent, transport = self.agent, self.transport
        if self.first and agent.behind():  # they are ahead, not starting up: a round's
            self.deadline = min(self.deadline, self.started_at + self.cfg.round_timeout)
        if self.absent:
            self.absent -= transport.links_up()  # reachable again: waited for again
        while not self.signal:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:  # missing, unheard all round and unreachable: absent
                self.absent |= set(agent.missing()) - self.heard - transport.links_up()
                return False
            if self.absent and set(agent.missing()) <= self.absent:
                remaining = 0  # only absent neighbours missing: what is queued, no waiting
            item = transport.recv(int(min(remaining, 0.25) * 1000) + 1 if remaining else 0)
            if item is None and not remaining:
                return False  # their dropout rule applies until they are heard from
            if item is None:
                continue
            frames, sender = item
            self.absent.discard(sender)  # it is alive, whatever it sent
            self.heard.add(sender)
            self.alive.add(sender)
            # the transport's frames are this agent's alone: kept, read-only, not copied
            agent.receive(frames, authenticated_sender=sender, owned=transport.OWNS_FRAMES)
            if agent.plan_rejected_by_all(MISMATCH_LIMIT):
                raise RefusedError(
                    EXIT_PLAN,
                    "every neighbour announces a different plan hash; "
                    "refusing to run a plan they do not share",
                )
            return True
        return False

    def ended(self, cmd: rounds.Ended) -> None:
        report, agent, transport = cmd.report, self.agent, self.transport
        fields = {
            "event": "round",
            "round": report.round,
            "missing": list(report.missing),
            "absent": sorted(self.absent),  # not waited for (missed deadlines unheard)
            "clipped": report.clipped,
            "nonfinite": report.nonfinite,
            "update_norm": report.update_norm,
            "noise": self.out.noise_digest if self.out is not None else "",
            "seconds": round(time.monotonic() - self.started_at, 4),
            # the CPU seconds of the agent and its listener process so far
            "cpu": round(time.process_time() + transport.listener_cpu(), 4),
            "rejected": dict(agent.metrics.rejected),
            "refused": dict(transport.refused),
            "refused_handshakes": transport.refused_handshakes,
            "dropped": transport.dropped,
        }
        self.line(dict(fields))
        self.textfile.update(fields)
        self.watch.round_end(report.round, report, agent, transport)
        # metrics first: a crash in between repeats a line instead of losing one; the
        # checkpoint is written while the next round is computed (joined before its send)
        self.pending = checkpoint.Pending(self.ckpt_path, checkpoint.copy_arrays(self.body()))

    # ------------------------------------------------------------------ the run
    def line(self, fields: dict) -> None:
        """One metrics line: ``event``, the time, the node, then ``fields``."""
        event = fields.pop("event")
        self.metrics.write({"event": event, "time": time.time(), "node": self.cfg.id, **fields})

    def run(self) -> int:
        """The rounds until the plan is done (or a stop signal: 128+N); then :meth:`finish`."""
        agent = self.agent
        try:
            driver = rounds.rounds(agent)  # the one round loop (edgedp.rounds)
            reply: bool | None = None
            while True:
                try:  # begin_round / end_round run inside the driver
                    cmd = driver.send(reply)
                except StopIteration:
                    break
                except NonFiniteMessageError as exc:  # nothing sent; the checkpoint is intact
                    self.checkpointed()
                    self.error_line(exc)
                    raise RefusedError(EXIT_DIVERGED, str(exc)) from None
                except sketch_adaptive.MissingAggregateError as exc:  # adaptive dome, faults
                    raise RefusedError(EXIT_UNSAFE, str(exc)) from None
                except NonFiniteStateError as exc:  # not adopted; the checkpoint is intact
                    self.error_line(exc)
                    raise RefusedError(EXIT_DIVERGED, str(exc)) from None
                if self.signal:  # nothing more is sent or recorded after a stop signal
                    return 128 + self.signal
                reply = self.step(cmd)
                if self.signal:  # a round left unmixed resumes from the checkpoint
                    return 128 + self.signal
            return self.finish()
        except resources.StoppedError:
            return 128 + self.signal
        finally:
            if self.pending is not None:  # any exit: the last checkpoint complete or not begun
                self.pending.wait()

    def error_line(self, exc: Exception) -> None:
        metrics = self.agent.metrics.to_dict()
        self.line({"event": "error", "round": self.agent.round, "error": str(exc), **metrics})

    def finish(self) -> int:
        """Write the model to publish, the ``done`` line; 0, or 7 when degraded."""
        agent, transport, cfg = self.agent, self.transport, self.cfg
        self.checkpointed()
        buf = io.BytesIO()
        model = agent.final_release()  # covered by the plan's guarantee
        np.save(buf, model)
        self.durable(
            "final model",
            functools.partial(checkpoint.atomic_write, cfg.final_model, buf.getvalue()),
        )
        degraded = self.watch.degraded(cfg.max_missing)
        held_out = observe.evaluate_held_out(agent.model, model, observe.held_out(cfg.shard))
        fields = {
            "event": "done",
            **agent.metrics.to_dict(),
            "refused": dict(transport.refused),
            "dropped": transport.dropped,
            "refused_handshakes": transport.refused_handshakes,
            "metrics_lines_lost": self.metrics.lost,
            "degraded": degraded,
            **held_out,
        }
        self.line(dict(fields))
        self.textfile.update(fields)
        self.durable("metrics", self.metrics.flush)
        if degraded is not None:
            logs.event(
                self.logger,
                logging.ERROR,
                "degraded",
                f"the plan's rounds are done but the run is degraded: {degraded}; the model "
                f"was written to {cfg.final_model}",
            )
            return EXIT_DEGRADED
        logs.event(
            self.logger,
            logging.INFO,
            "done",
            f"the plan's {agent.share.steps} rounds are done; missing {agent.metrics.missing}, "
            f"rejected {sum(agent.metrics.rejected.values())}; model {cfg.final_model}"
            + "".join(f"; {k.replace('_', ' ')} {v:.4f}" for k, v in held_out.items()),
        )
        return EXIT_OK


def run(
    cfg: config.NodeConfig,
    *,
    rollback: bool = False,
    logger=None,
    anchors: Path = trust.ANCHORS,
    lab: bool = False,
) -> int:
    """Run the node until its rounds are done; returns the exit status.

    ``rollback``: resume from the newest usable checkpoint and sit out the rounds already
    sent from it (:mod:`firmware_py.recovery`). ``logger``: default :func:`logs.setup`.
    ``anchors``, ``lab``: the trust anchors' file and the laboratory setting
    (:mod:`firmware_py.trust`)."""
    logger = logger or logs.setup(cfg.id)
    resources.no_core_dumps()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file-size limit: EFBIG, handled
    started = start(cfg, rollback=rollback, logger=logger, anchors=anchors, lab=lab)
    agent = started.agent
    stop = {"signal": 0}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    soft, hard = resources.reserve_descriptors()
    max_frame, max_parts = agent.wire_limits()
    logs.event(
        logger,
        logging.INFO,
        "limits",
        f"descriptors {soft} (hard {hard}; the rest kept for own files); "
        f"inbound frames <= {max_frame} bytes, <= {max_parts} per message; "
        + (
            f"freed memory kept up to {started.kept >> 20} MiB"
            if started.kept
            else "allocator settings left as they are"
        ),
    )
    checkpoint.private_folder(cfg.metrics.parent)
    metrics = resources.MetricsLog(cfg.metrics, log=logs.TextAdapter(logger))
    try:
        transport = ZmqTransport(
            node=cfg.id,
            bind=cfg.bind,
            public_key=started.inputs.public,
            secret_key=started.inputs.secret,
            peers=[Peer(n.id, n.endpoint, n.public_key) for n in cfg.neighbours],
            max_frame_bytes=max_frame,
            max_parts=max_parts,
            isolated=True,  # multipart floods end a capped listener process, not the agent
        )
    except BaseException:
        metrics.close()
        raise
    try:
        device = Device(
            cfg, started, transport=transport, metrics=metrics, logger=logger, stop=stop
        )
        device.line(
            {
                "event": "start",
                "round": agent.round,
                "plan_hash": started.inputs.plan.plan_hash,
                "resumed": started.resumed.source,
                "skipped": list(started.resumed.skipped),
            }
        )
        return device.run()
    finally:
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
        "--anchors",
        type=Path,
        default=trust.ANCHORS,
        help=f"the device's trust anchors, installed by root (default {trust.ANCHORS})",
    )
    ap.add_argument(
        "--lab",
        action="store_true",
        help="laboratory setting, logged: private plans run without trust anchors, and "
        "anchors this user could change are accepted",
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
        return run(cfg, rollback=args.rollback, logger=logger, anchors=args.anchors, lab=args.lab)
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
