"""Real ``edgedp-agent`` processes on 127.0.0.1 with one neighbour played by the harness.

:class:`Network` launches every node of a plan but one (``deploy.local_run(start=...)``);
:class:`HonestPeer` runs that node in-process exactly as ``edgedp-agent`` runs it in
plan-seed mode (same plan share, data shard, keys, Agent), so the harness holds the
neighbour's CURVE keypair and knows its honest frames. Its PUSH socket to the target — a
raw pyzmq socket, CURVE client with that neighbour's keys — carries attack frames before
and after each honest frame. One ZeroMQ connection delivers in order, and the target
cannot finish a round before the honest frame arrives, so every frame sent before it is
processed while the target waits in that round. :class:`Strangers` send from keys the
target does not know (refused at the CURVE handshake), from a NULL-security socket and
over raw TCP. :func:`classify` replays the same frames into an in-process copy of the
target's Agent (the oracle) to know the reason each one must be rejected for.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zmq
import zmq.auth

import edgedp_topologies
from edgedp import models, rng, streams
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.noise import NoiseSource, noise_digest
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp.transport.zmq import Peer, ZmqTransport
from edgedp_sim import batch, datasets
from firmware_py import checkpoint, config, deploy


def write_plan(path: Path, *, mechanism="antipgd", topology="ring:4", steps=6) -> NoisePlan:
    p = make_plan(
        mechanism,
        edgedp_topologies.parse(topology),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.5,
        seed=21,
        topology_name=topology,
        task=TaskSpec(dataset="synthetic-logistic"),
    )
    Path(path).write_bytes(p.to_bytes())
    return p


def clean_digest(plan: NoisePlan) -> str:
    """The model digest of the run without attackers (the batch engine)."""
    raw = datasets.load(plan.task.dataset, seed=plan.seed)
    data = datasets.partition(raw, plan.n, seed=plan.seed)
    return batch.run(plan, data).digests[0]


def stream_digests(factor, key, dim: int, std: float, steps: int) -> list[str]:
    """The noise digest of every round of one node's uninterrupted stream, regenerated from
    its key alone (what every ``sent`` metrics line of that node must carry)."""
    src = NoiseSource(factor, np.array(key, dtype=object), dim, std)
    state, out = src.init(), []
    for _ in range(steps):
        noise, state = src.next(state)
        out.append(noise_digest(noise))
    return out


def plan_seed_digests(plan: NoisePlan, u: int) -> list[str]:
    """:func:`stream_digests` of node ``u`` in a plan-seed run (``local-run``'s default)."""
    data = datasets.partition(
        datasets.load(plan.task.dataset, seed=plan.seed), plan.n, seed=plan.seed
    )
    dim = models.for_task(plan.task, data.features).dim
    key = streams.RunKeys.simulation(plan).noise(u)
    return stream_digests(plan.factor, key, dim, plan.noise_std, plan.steps)


def lines(path: Path) -> list[dict]:
    """The JSON lines of a metrics file (none if it does not exist; a line torn by a kill
    is skipped)."""
    path = Path(path)
    return deploy.json_lines(path) if path.exists() else []


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def node_agent(cfg: config.NodeConfig) -> tuple[Agent, NoisePlan]:
    """The Agent ``edgedp-agent`` builds for ``cfg`` in plan-seed mode."""
    plan = NoisePlan.from_bytes(cfg.plan_file.read_bytes())
    share = plan.share(cfg.id)
    with np.load(cfg.shard, allow_pickle=False) as shard:
        x, y = np.array(shard["x"]), np.array(shard["y"])
    keys = streams.RunKeys(rng.seed_secret(plan.seed), plan.plan_hash, cfg.run_id)
    agent = Agent(
        share,
        model=models.for_task(plan.task, x.shape[1]),
        x=x,
        y=y,
        dropout_rule=cfg.dropout_rule,
        stream_fingerprint=keys.fingerprint(),
        **keys.agent(cfg.id, share.neighbours),
    )
    return agent, plan


class HonestPeer:
    """One node run in-process, honest, with a hook to send extra frames on its link to
    the target (the socket authenticated with this node's key)."""

    def __init__(self, cfg_path: Path, *, target: int, timeout: float = 300.0) -> None:
        self.cfg = config.load(cfg_path)
        self.agent, self.plan = node_agent(self.cfg)
        public, secret = zmq.auth.load_certificate(self.cfg.key_file)
        max_frame, max_parts = self.agent.wire_limits()
        self.transport = ZmqTransport(
            node=self.cfg.id,
            bind=self.cfg.bind,
            public_key=public,
            secret_key=secret,
            peers=[Peer(n.id, n.endpoint, n.public_key) for n in self.cfg.neighbours],
            max_frame_bytes=max_frame,
            max_parts=max_parts,
        )
        self.target = target
        self.link = self.transport.push[target]  # raw PUSH, CURVE client with our keys
        self.link.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        self.timeout = timeout
        self.frames: list[list[bytes]] = []  # our honest frame to the target, per round
        self.sent_to_target = 0  # attack frames, not counting the honest ones

    def attack(self, frames: list[bytes]) -> None:
        self.link.send_multipart(frames)  # blocks while the target's queue is full
        self.sent_to_target += 1

    def play(self, *, before=None, after=None) -> None:
        """Run every round; ``before(r)`` / ``after(r)`` send frames on the target link
        around the honest frame of round r."""
        a = self.agent
        while not a.done:
            out = a.begin_round()
            r = out.round
            self.frames.append([bytes(f) for f in out.frames_for(self.target)])
            for v in out.recipients:
                if v != self.target:
                    self.transport.send((v,), out.frames_for(v))
            if before is not None:
                before(r)
            self.link.send_multipart(self.frames[r])
            if after is not None:
                after(r)
            deadline = time.monotonic() + self.timeout
            while not a.ready():
                if time.monotonic() > deadline:
                    raise AssertionError(f"honest peer: round {r} never completed")
                item = self.transport.recv(250)
                if item is not None:
                    a.receive(item[0], authenticated_sender=item[1])
            a.end_round()

    def close(self) -> None:
        self.transport.close()


@dataclass
class Network:
    """A local run of ``plan_file`` whose node ``peer`` the harness plays."""

    directory: Path
    plan_file: Path
    peer: int = 1
    target: int = 0
    round_timeout: float = 300.0
    run: deploy.LocalRun = field(init=False)
    honest: HonestPeer = field(init=False)

    def __post_init__(self) -> None:
        plan = NoisePlan.from_bytes(Path(self.plan_file).read_bytes())
        others = [u for u in range(plan.n) if u != self.peer]
        self.run = deploy.local_run(
            self.plan_file,
            self.directory,
            round_timeout=self.round_timeout,
            startup_timeout=self.round_timeout,
            start=others,
        )
        self.honest = HonestPeer(self.run.configs[self.peer], target=self.target)

    @property
    def plan(self) -> NoisePlan:
        return self.run.plan

    def config(self, u: int) -> config.NodeConfig:
        return config.load(self.run.configs[u])

    def endpoint(self, u: int) -> str:
        return self.config(u).bind

    def public_key(self, u: int) -> bytes:
        return zmq.auth.load_certificate(self.config(u).key_file)[0]

    def wait(self, timeout: float = 300.0) -> list[int | None]:
        return self.run.wait(timeout)

    def last_metrics(self, u: int) -> dict:
        return self.run.metrics(u)[-1]

    def final_digest(self) -> str:
        """Digest of every node's final model: processes from their checkpoints, the
        harness's node from its Agent (what the simulators' digest covers)."""
        rows = []
        for u in range(self.plan.n):
            if u == self.peer:
                rows.append(self.honest.agent.theta)
                continue
            body = checkpoint.load(self.config(u).checkpoint_dir / "checkpoint")
            rows.append(np.asarray(body["state"]["theta"], dtype=np.float64))
        return models.model_digest(np.stack(rows))

    def close(self) -> None:
        self.honest.close()


class Strangers:
    """Senders the target must refuse before any frame reaches the application."""

    def __init__(self, endpoint: str, server_key: bytes, *, keys: int = 8) -> None:
        self.context = zmq.Context()
        self.sockets = []
        for _ in range(keys):  # unknown CURVE keys: the ZAP handler refuses them
            s = self.context.socket(zmq.PUSH)
            pub, sec = zmq.curve_keypair()
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_key, pub, sec
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoint)
            self.sockets.append(s)
        plain = self.context.socket(zmq.PUSH)  # no CURVE at all (NULL mechanism)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(endpoint)
        self.sockets.append(plain)
        self.endpoint = endpoint
        self.attempted = 0

    def send(self, frames: list[bytes]) -> None:
        s = self.sockets[self.attempted % len(self.sockets)]
        self.attempted += 1
        try:
            s.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # never connected: the frame could not even be queued

    def raw_tcp(self, payloads: list[bytes]) -> None:
        """Bytes over a plain TCP connection (not even a ZeroMQ greeting)."""
        host, port = self.endpoint.removeprefix("tcp://").rsplit(":", 1)
        for data in payloads:
            self.attempted += 1
            try:
                with socket.create_connection((host, int(port)), timeout=5) as conn:
                    conn.sendall(data)
            except OSError:
                pass

    def close(self) -> None:
        for s in self.sockets:
            s.close(linger=0)
        self.context.term()


class Oracle:
    """An in-process copy of the target's Agent, behind a model of its transport's caps:
    the reason each frame must be rejected (``transport:REASON`` when the transport
    discards the message before the agent sees it)."""

    def __init__(self, cfg: config.NodeConfig) -> None:
        self.agent, _ = node_agent(cfg)
        largest, self.max_parts = self.agent.wire_limits()
        self.max_frame = max(largest, 4096)  # the daemon's transport: at least the handshake

    @property
    def bound(self) -> float:
        return float(self.agent.bounds[0])

    def classify(self, r: int, frames: list[list[bytes]], *, sender: int, first=None) -> Counter:
        """Rejection reasons of ``frames`` at round r (``first``: an honest frame received
        before them); 'accepted' counts frames the rule would take."""
        a = self.agent
        a.round, a.inbox, a.message = r, {}, None
        if first is not None:
            assert a.receive(first, authenticated_sender=sender)
        before = Counter(a.metrics.rejected)
        transport, passed = Counter(), []
        for f in frames:
            if any(len(part) > self.max_frame for part in f):
                raise ValueError("a forged frame is over the transport's frame cap")
            if len(f) > self.max_parts:
                transport["transport:TooManyParts"] += 1
            else:
                passed.append(f)
        accepted = sum(a.receive(f, authenticated_sender=sender) for f in passed)
        out = Counter(a.metrics.rejected) - before + transport
        if accepted:
            out["accepted"] = accepted
        return out


def table(rows: list[tuple], header: tuple) -> str:
    """A plain-text table (first column left-aligned)."""
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for k, r in enumerate(cells):
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(padded))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def dump(path: Path, result: dict) -> None:
    Path(path).write_text(json.dumps(result, indent=2, sort_keys=True, default=str))
