"""kill -9 at random times against real agents with private noise (used by
tests/test_kill_nine.py and benchmarks/kill_nine.py).

A ring of four agents runs an AntiPGD plan (correlated noise: the factor keeps z_{t−1})
with private noise secrets and their release ledgers, as deployed. ``iterations`` times, a
node is killed with SIGKILL and restarted at once: 20% the node just restarted, at a random
time of its start-up; otherwise a random node once it has sent a round, 40% at a random
time of its next ~10 rounds, 40% the moment it starts a write of its state: a temporary
file of ``atomic_write`` (checkpoint or previous checkpoint) appears in its
state folder, or ``checkpoint.prev`` (the file a checkpoint save overwrites in place)
changes. Before a new victim is chosen the last one rejoins (writes a round line). Just
after each kill the victim's state folder is inspected: a leftover ``.NAME.tmp.PID`` file
means the kill landed inside ``atomic_write``, a ``checkpoint.prev`` that fails its checksum
or is newer than ``checkpoint`` that it landed inside an in-place save (before the names
were swapped); the last metrics line tells the phase of the round.

Checks, from every incarnation's ``sent`` metrics lines (written before each send): a
round's noise digest and message digest are the same in every incarnation (a re-sent
round is bit-identical), every noise digest is the node's own stream at that round
(regenerated here from its noise secret) — no noise reused or shifted — and every round
was sent or skipped by a rejoin, never both. A restart that
refuses (any exit status but 0) is recorded with its message.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import numpy as np

from edgedp import models, streams
from edgedp.noise import NoiseSource
from edgedp.plan import NoisePlan
from firmware_py import checkpoint, config, deploy, ledger
from hostile import harness


def _in_place_interrupted(folder: Path) -> bool:
    """Whether ``checkpoint.prev`` shows a save stopped inside its in-place write: damaged
    (a torn write), or newer than ``checkpoint`` (written, the names not swapped yet)."""
    prev = folder / "checkpoint.prev"
    try:
        old, new = checkpoint.load(prev), checkpoint.load(folder / "checkpoint")
    except checkpoint.CheckpointError as exc:
        return str(prev) in str(exc)
    return old is not None and new is not None and old["round"] > new["round"]


def _phase(cfg: config.NodeConfig, pid: int) -> tuple[str, list[str]]:
    """Where the kill of process ``pid`` landed: its leftover temporaries or an interrupted
    in-place save, else the last metrics event."""
    leftovers = sorted(p.name for p in cfg.checkpoint_dir.glob(f".*.tmp.{pid}"))
    if _in_place_interrupted(cfg.checkpoint_dir):
        leftovers.append("checkpoint.prev.in-place")
    lines = harness.lines(cfg.metrics)
    last = lines[-1]["event"] if lines else "none"
    phase = {
        "none": "start-up (before any line)",
        "start": "start-up / first begin_round",
        "sent": "sending / waiting / mixing",
        "round": "checkpoint save / next begin_round",
        "done": "after the last round",
    }.get(last, last)
    if leftovers:
        phase = "inside a checkpoint or record write"
    return phase, leftovers


def released(cfg: config.NodeConfig, plan: NoisePlan) -> int:
    """The last round the node's release ledger records as released (−1: none), read
    without its lock (also while the agent runs)."""
    secret = cfg.noise_secret_file.read_bytes()
    stream = ledger.stream_id(plan.plan_hash, cfg.run_id, cfg.id)
    mark = ledger.read(cfg.ledger_file, secret).get(stream)
    return -1 if mark is None else mark.round


def expected_noise(cfg: config.NodeConfig, plan: NoisePlan) -> list[str]:
    """The node's noise digest of every round, regenerated from its noise secret."""
    with np.load(cfg.shard, allow_pickle=False) as shard:
        dim = models.for_task(plan.task, shard["x"].shape[1]).dim
    secret = cfg.noise_secret_file.read_bytes()
    key = streams.RunKeys(secret, plan.plan_hash, cfg.run_id).noise(cfg.id)
    return harness.stream_digests(plan.factor, key, dim, plan.noise_std, plan.steps)


def run(
    directory: Path,
    *,
    iterations: int,
    seed: int = 0,
    steps: int | None = None,
    timeout: float = 1800.0,
) -> dict:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    steps = steps or 80 * iterations + 60
    plan = harness.write_plan(directory / "run.plan", topology="ring:4", steps=steps)
    gen = np.random.default_rng(seed)
    started = time.monotonic()
    lr = deploy.local_run(
        directory / "run.plan",
        directory / "run",
        private_noise=True,
        # longer than a restart takes: the ring waits for a killed node instead of running
        # ahead of it (a node further behind than the receive window is another matter)
        round_timeout=5.0,
        startup_timeout=5.0,
    )
    cfgs = [config.load(c) for c in lr.configs]
    kills, refusals, restarts = [], [], Counter()
    starts = [1] * plan.n  # start lines each node's current incarnation follows
    u = -1
    for i in range(iterations):
        aim = float(gen.random())
        if aim < 0.2 and u >= 0:  # the node just restarted, somewhere in its start-up
            aimed = "start-up"
            time.sleep(float(gen.uniform(0.0, 1.5)))
        else:
            aimed = "mid-run" if aim < 0.6 else "a write"
            if u >= 0:  # let the last victim rejoin before the next kill
                _wait_for(cfgs[u], lr.processes[u], "round", starts[u])
            u = int(gen.integers(0, plan.n))
            _wait_for(cfgs[u], lr.processes[u], "sent", starts[u])
            if aim < 0.6:  # anywhere in its next ~10 rounds
                time.sleep(float(gen.uniform(0.0, 0.3)))
            else:  # inside a write: the moment it starts
                _wait_for_write(cfgs[u], lr.processes[u])
        proc = lr.processes[u]
        code = proc.poll()
        if code == 0:
            raise AssertionError(f"the run finished after {i} kills; give it more steps")
        if code is not None:  # it stopped on its own: a refusal (never expected)
            refusals.append({"node": u, "code": code, "log": _tail(lr, u)})
            lr.start(u)
            continue
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        phase, leftovers = _phase(cfgs[u], proc.pid)
        lines = harness.lines(cfgs[u].metrics)
        if sum(m["event"] == "start" for m in lines) < starts[u]:
            phase = "start-up (before its start line)"
        last_round = max((m["round"] for m in lines if "round" in m), default=-1)
        kills.append(
            {"node": u, "aimed": aimed, "phase": phase, "leftovers": leftovers, "round": last_round}
        )
        restarts[u] += 1
        starts[u] = sum(m["event"] == "start" for m in lines) + 1
        lr.start(u)
    codes = lr.wait(timeout=timeout)
    for u, code in enumerate(codes):
        if code != 0:
            refusals.append({"node": u, "code": code, "log": _tail(lr, u)})
    # no noise reused: every round's digests agree across incarnations and with the stream
    resent, mismatched, wrong_stream, incarnations, waited = 0, [], [], {}, 0
    leaked = []
    for u, cfg in enumerate(cfgs):
        lines = harness.lines(cfg.metrics)
        incarnations[u] = sum(m["event"] == "start" for m in lines)
        waited += sum(m["event"] == "round" and bool(m["missing"]) for m in lines)
        expected = expected_noise(cfg, plan)
        by_round: dict[int, set] = {}
        for m in lines:
            if m["event"] == "sent":
                by_round.setdefault(m["round"], set()).add((m["noise"], m["message"]))
            if m["event"] == "round" and m["noise"] != expected[m["round"]]:
                wrong_stream.append((u, m["round"], "round line"))
        # every round sent, or skipped by a rejoin (a node whose neighbours moved on while it
        # was down: nothing sent, its noise drawn and discarded), never both
        skipped = {r for m in lines if m["event"] == "rejoin" for r in range(m["from"], m["round"])}
        if skipped & set(by_round) or sorted(skipped | set(by_round)) != list(range(plan.steps)):
            gaps = sorted(set(range(plan.steps)) - set(by_round) - skipped)
            mismatched.append((u, "rounds sent or skipped", gaps, sorted(skipped & set(by_round))))
        for r, seen in by_round.items():
            resent += len([m for m in lines if m["event"] == "sent" and m["round"] == r]) > 1
            if len(seen) != 1:
                mismatched.append((u, r, sorted(seen)))
            if {noise for noise, _ in seen} != {expected[r]}:
                wrong_stream.append((u, r, "sent line"))
        # the checkpoints hold no noise: not AntiPGD's buffer z_{T−1}, nor z_{T−2}
        blob = b"".join(
            p.read_bytes() for p in cfg.checkpoint_dir.glob("checkpoint*") if p.is_file()
        )
        key = streams.RunKeys(cfg.noise_secret_file.read_bytes(), plan.plan_hash, cfg.run_id)
        dim = checkpoint.load(cfg.checkpoint_dir / "checkpoint")["state"]["theta"].size
        src = NoiseSource(plan.factor, np.array(key.noise(cfg.id), dtype=object), dim, 1.0)
        for t in (plan.steps - 1, plan.steps - 2):
            for x in (src.draw(t), plan.noise_std * src.draw(t)):
                if x.tobytes()[:64] in blob:
                    leaked.append((u, t))
    return {
        "iterations": iterations,
        "steps": plan.steps,
        "kills": kills,
        "phases": dict(Counter(k["phase"] for k in kills)),
        "aimed": dict(Counter(k["aimed"] for k in kills)),
        "inside_writes": sum(bool(k["leftovers"]) for k in kills),
        "writes_interrupted": dict(
            Counter(name.split(".tmp.")[0].lstrip(".") for k in kills for name in k["leftovers"])
        ),
        "restarts": dict(restarts),
        "incarnations": incarnations,
        "refusals": refusals,
        "exit_codes": codes,
        "rounds_resent": resent,
        "rounds_with_dropouts": waited,
        "digest_mismatches": mismatched,
        "wrong_stream": wrong_stream,
        "noise_in_checkpoints": leaked,
        "seconds": round(time.monotonic() - started, 1),
    }


def _wait_for(
    cfg: config.NodeConfig, proc, event: str, incarnation: int, timeout: float = 120.0
) -> None:
    """Until the running incarnation (the ``incarnation``-th start line) has written an
    ``event`` line (or stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        lines = harness.lines(cfg.metrics)
        starts = [i for i, m in enumerate(lines) if m["event"] == "start"]
        if len(starts) >= incarnation and any(m["event"] == event for m in lines[starts[-1] :]):
            return
        time.sleep(0.02)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _wait_for_write(cfg: config.NodeConfig, proc, timeout: float = 60.0) -> None:
    """Spin until ``proc`` starts writing its state: a temporary file of ``atomic_write``
    in the state folder, or ``checkpoint.prev`` overwritten in place (its modification time
    or, after the swap, its file changes)."""
    deadline = time.monotonic() + timeout
    folder, tag = str(cfg.checkpoint_dir), f".tmp.{proc.pid}"
    prev = cfg.checkpoint_dir / "checkpoint.prev"
    before = _stamp(prev)
    while time.monotonic() < deadline and proc.poll() is None:
        if before is not None and _stamp(prev) != before:
            return
        with os.scandir(folder) as entries:
            if any(e.name.endswith(tag) for e in entries):
                return
        if before is None:
            before = _stamp(prev)


def _tail(lr: deploy.LocalRun, u: int) -> str:
    log = (lr.directory / f"node-{u}.log").read_text().strip().splitlines()
    return log[-1] if log else ""


def report(result: dict) -> str:
    rows = [(phase, n) for phase, n in sorted(result["phases"].items())]
    out = [harness.table(rows, ("where the kill landed", "kills"))]
    out.append(f"aimed at: {result['aimed']}")
    out.append(
        f"kills {result['iterations']} (inside a write {result['inside_writes']}: "
        f"{result['writes_interrupted']}), "
        f"steps {result['steps']}, incarnations {result['incarnations']}, rounds re-sent "
        f"{result['rounds_resent']} (digest mismatches {len(result['digest_mismatches'])}, "
        f"rounds ended with a neighbour missing {result['rounds_with_dropouts']}, "
        f"noise off its stream {len(result['wrong_stream'])}), refusals "
        f"{len(result['refusals'])}, final exit codes {result['exit_codes']}, noise found in "
        f"checkpoints {len(result['noise_in_checkpoints'])}; {result['seconds']} s"
    )
    return "\n\n".join(out)
