"""Real ZeroMQ agents as separate processes on 127.0.0.1 (CURVE-encrypted links)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
import zmq.auth
from hostile import harness

import edgedp_topologies
from edgedp import wire
from edgedp.accounting.participation import Participation
from edgedp.families.dome.sketch import SketchSpec
from edgedp.models import model_digest
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets
from firmware_py import deploy


def _write_plan(path, mechanism="dp-dsgd", topology="er:8:0.5:4", steps=12, **kw):
    g = edgedp_topologies.parse(topology)
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": 1.5}
    p = make_plan(
        mechanism,
        g,
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=kw.pop("learning_rate", 0.3),
        seed=21,
        topology_name=topology,
        task=TaskSpec(dataset="synthetic-logistic"),
        **noise,
        **kw,
    )
    Path(path).write_bytes(p.to_bytes())
    return p


def _batch_digest(p):
    data = datasets.partition(datasets.load(p.task.dataset, seed=p.seed), p.n, seed=p.seed)
    return batch.run(p, data).digests[0]


@pytest.mark.parametrize(
    "mechanism, kw",
    [
        ("dp-dsgd", {}),
        ("antipgd", {}),
        ("dome", {"sketch": SketchSpec(dim=5, optimizer="adam", noise_aware=True)}),
        # paper 002 Alg. 2 bases from the spanning-tree aggregate (er:8:0.5:4: tree height 3)
        ("dome", {"sketch": SketchSpec(dim=4, basis="adaptive", lag=6)}),
    ],
    ids=["dp-dsgd", "antipgd", "dome-adam", "dome-adaptive"],
)
def test_eight_agent_processes_equal_the_batch_engine(tmp_path, mechanism, kw):
    p = _write_plan(tmp_path / "run.plan", mechanism, **kw)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run")
    assert run.wait(timeout=120) == [0] * 8
    assert model_digest(run.final_models()) == _batch_digest(p)
    done = [run.metrics(u)[-1] for u in range(8)]
    assert all(d["event"] == "done" and d["missing"] == 0 and not d["rejected"] for d in done)


def _wait_for_round(run, u, r, timeout=60):
    deadline = time.monotonic() + timeout
    path = run.directory / "configs" / "state" / f"node-{u}" / "metrics.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and any(
            json.loads(line).get("round", -1) >= r
            for line in path.read_text().splitlines()
            if '"round"' in line and '"event": "round"' in line
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"node {u} did not reach round {r}")


def test_kill_nine_and_restart_regenerates_the_same_noise(tmp_path):
    p = _write_plan(tmp_path / "run.plan", "antipgd", steps=40)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=1.0)
    victims = [2, 5]
    _wait_for_round(run, 2, 8)
    for u in victims:
        os.kill(run.processes[u].pid, signal.SIGKILL)
        run.processes[u].wait()
    time.sleep(0.5)
    for u in victims:
        run.start(u)
    # a restart slower than a deadline: the others stop waiting for the victim (its link is
    # down), it may rejoin by skipping rounds and end degraded (7)
    assert set(run.wait(timeout=180)) <= {0, 7}
    # expected noise: the uninterrupted stream of each node, a pure function of (key, round)
    for u in victims:
        expected = harness.plan_seed_digests(p, u)
        lines = run.metrics(u)
        assert sum(m["event"] == "start" for m in lines) == 2  # it really restarted
        seen = {}
        for m in lines:
            if m["event"] == "round":
                seen.setdefault(m["round"], set()).add(m["noise"])
        skipped = {r for m in lines if m["event"] == "rejoin" for r in range(m["from"], m["round"])}
        assert not skipped & set(seen) and sorted(skipped | set(seen)) == list(range(p.steps))
        assert all(seen[r] == {expected[r]} for r in seen)
    # the survivors kept going by the dropout rule while the victims were down
    assert sum(run.metrics(u)[-1]["missing"] for u in range(8) if u not in victims) > 0


def test_live_attack_frames_are_counted_and_change_nothing(tmp_path):
    p = _write_plan(tmp_path / "run.plan", "dp-dsgd", topology="complete:3", steps=6)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", startup_timeout=120)
    # hold nodes 1 and 2 back: node 0 waits in round 0 while it is attacked
    for u in (1, 2):
        run.processes[u].kill()
        run.processes[u].wait()
    cfg_text = (run.directory / "configs" / "node-0.toml").read_text()
    endpoint = cfg_text.split("bind = ")[1].split("\n")[0].strip('"')
    keys = run.directory / "keys"
    server_pub, _ = zmq.auth.load_certificate(str(keys / "node-0.key"))
    nb_pub, nb_sec = zmq.auth.load_certificate(str(keys / "node-1.key_secret"))
    ctx = zmq.Context()
    evil = ctx.socket(zmq.PUSH)  # a compromised neighbour: authenticated as node 1
    evil.curve_serverkey, evil.curve_publickey, evil.curve_secretkey = server_pub, nb_pub, nb_sec
    evil.setsockopt(zmq.SNDTIMEO, 10_000)
    evil.connect(endpoint)
    stranger = ctx.socket(zmq.PUSH)  # unknown key: refused at the CURVE handshake
    spub, ssec = zmq.curve_keypair()
    stranger.curve_serverkey, stranger.curve_publickey, stranger.curve_secretkey = (
        server_pub,
        spub,
        ssec,
    )
    stranger.setsockopt(zmq.LINGER, 0)
    stranger.connect(endpoint)
    h = bytes.fromhex(p.plan_hash)
    dim = 21
    good = np.zeros(dim)
    kinds = {
        "Malformed": [b"\x93\x01\x02"],
        # two frames under the transport's frame cap whose sum is over the message cap (a
        # single frame over the frame cap never reaches the agent: libzmq disconnects)
        "Oversized": [b"\x00" * 4000, b"\x00" * 4000],
        "BadPayload": wire.encode(wire.Message(h, 0, 1, "model", (np.full(dim, np.nan),))),
        "PlanHashMismatch": wire.encode(wire.Message(b"\x00" * 32, 0, 1, "model", (good,))),
        "RoundOutOfWindow": wire.encode(wire.Message(h, 10_000, 1, "model", (good,))),
        "UnknownSender": wire.encode(wire.Message(h, 0, 2, "model", (good,))),  # claims node 2
    }
    per_kind = 1700
    for frames in kinds.values():
        for _ in range(per_kind):
            evil.send_multipart([bytes(f) for f in frames])
    try:  # queued until its handshake is refused (no pipe between refusal and reconnect)
        stranger.send_multipart(kinds["BadPayload"], flags=zmq.NOBLOCK)
    except zmq.Again:
        pass
    time.sleep(3.0)
    evil.close(linger=0)
    stranger.close(linger=0)
    ctx.term()
    for u in (1, 2):
        run.start(u)
    assert run.wait(timeout=120) == [0, 0, 0]
    done = run.metrics(0)[-1]
    total = per_kind * len(kinds)
    assert total >= 10_000
    assert sum(done["rejected"].values()) == total  # every frame counted
    for name in kinds:
        assert done["rejected"][name] == per_kind, name
    assert done["refused_handshakes"] >= 1
    assert model_digest(run.final_models()) == _batch_digest(p)  # the model is untouched


def _agent(config, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "firmware_py.daemon", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_config_budget_and_unsafe_resume(tmp_path):
    p = _write_plan(tmp_path / "run.plan", "dp-dsgd", topology="complete:3", steps=4)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run")
    assert run.wait(timeout=60) == [0, 0, 0]
    cfg = run.directory / "configs" / "node-0.toml"
    text = cfg.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('dropout_rule = "renormalize"', 'dropout_rule = "pray"'))
    out = _agent(bad)
    assert (
        out.returncode == 2
        and "run.dropout_rule" in out.stderr
        and len(out.stderr.splitlines()) == 1
    )
    bad.write_text(text.replace("[data]", "[data]\n").replace("shard =", "shard_typo ="))
    out = _agent(bad)
    assert (
        out.returncode == 2
        and "unknown key data.shard_typo (did you mean data.shard?)" in out.stderr
    )
    eps = p.guarantee().epsilon(1e-6)
    budget = tmp_path / "budget.toml"
    budget.write_text(text.replace("[run]", f"[run]\nmax_epsilon = {eps / 2}"))
    out = _agent(budget)
    assert out.returncode == 3 and "max_epsilon" in out.stderr
    # a finished node restarted is done at once; without its checkpoints it must refuse
    assert _agent(cfg).returncode == 0
    state = run.directory / "configs" / "state" / "node-0"
    (state / "checkpoint").unlink()
    (state / "checkpoint.prev").unlink()
    out = _agent(cfg)
    assert out.returncode == 4 and "reuse noise" in out.stderr and "--rollback" in out.stderr
    # the documented way out: sit out every round sent from the lost states (noise discarded)
    out = subprocess.run(
        [sys.executable, "-m", "firmware_py.daemon", "--config", str(cfg), "--rollback"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "sat out rounds [0, 1, 2, 3]" in out.stderr


def test_a_node_with_another_plan_is_refused(tmp_path):
    p = _write_plan(tmp_path / "run.plan", "dp-dsgd", topology="complete:3", steps=5)
    run = deploy.local_run(
        tmp_path / "run.plan", tmp_path / "run", round_timeout=0.5, startup_timeout=20
    )
    for proc in run.processes:
        proc.kill()
        proc.wait()
    for u in range(3):  # fresh state
        shutil.rmtree(run.directory / "configs" / "state" / f"node-{u}", ignore_errors=True)
    other = _write_plan(
        tmp_path / "other.plan", "dp-dsgd", topology="complete:3", steps=5, learning_rate=0.31
    )
    assert other.plan_hash != p.plan_hash
    cfg0 = run.directory / "configs" / "node-0.toml"
    text = cfg0.read_text().replace(
        str((tmp_path / "run.plan").resolve()), str((tmp_path / "other.plan").resolve())
    )
    pinned = f'hash = "{p.plan_hash}"\n'
    assert pinned in text
    cfg0.write_text(text.replace(pinned, ""))  # unpinned: the neighbours must catch it
    for u in range(3):
        run.start(u)
    codes = run.wait(timeout=120)
    assert codes[0] == 3 and codes[1:] == [7, 7]  # done, degraded: node 0 never came
    log = (run.directory / "node-0.log").read_text()
    assert "different plan hash" in log
    assert run.metrics(1)[-1]["rejected"]["PlanHashMismatch"] >= 1


def test_sigterm_stops_at_a_round_boundary(tmp_path):
    _write_plan(tmp_path / "run.plan", "dp-dsgd", topology="complete:3", steps=5)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", startup_timeout=120)
    for u in (1, 2):
        run.processes[u].kill()
        run.processes[u].wait()
    sent = run.directory / "configs" / "state" / "node-0" / "sent"
    deadline = time.monotonic() + 30
    while not sent.exists() and time.monotonic() < deadline:  # node 0 is inside round 0
        time.sleep(0.05)
    run.processes[0].send_signal(signal.SIGTERM)
    assert run.processes[0].wait(timeout=10) == 128 + signal.SIGTERM
    # restarted with its neighbours, it resumes round 0 and the run completes
    for u in range(3):
        run.start(u)
    assert run.wait(timeout=60) == [0, 0, 0]


def test_local_run_cli_matches_sim_run_cli(tmp_path):
    _write_plan(tmp_path / "run.plan", "antipgd", topology="ring:8", steps=8)
    cmd = [sys.executable, "-m", "edgedp_cli"]
    real = subprocess.run(
        [
            *cmd,
            "local-run",
            "--n",
            "8",
            str(tmp_path / "run.plan"),
            "--dir",
            str(tmp_path / "lr"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    sim = subprocess.run(
        [*cmd, "sim", "run", str(tmp_path / "run.plan"), "--engine", "batch", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    a, b = json.loads(real.stdout), json.loads(sim.stdout)
    assert a["model_digest"] == b["model_digest"]
    assert a["messages"] == b["messages"] == 8 * 2 * 8
