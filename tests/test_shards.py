"""Trials in keyed blocks: merged bit for bit, in this process and on a real Dask cluster
whose worker is killed mid-run (for ``sim run --trials``, a sweep, an audit and a leakage
run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import edgedp
from edgedp import strict_json
from edgedp_sim import adversary, audit, batch, leak, runner, scenarios, shards, trials

# every mechanism family: plain, temporal factor, cross-agent, sketched, Laplace
PLANS = {
    "dp-dsgd": dict(noise_multiplier=1.0),
    "banded": dict(noise_multiplier=1.0, bandwidth=2),
    "decor": dict(target_epsilon=4.0, delta=1e-6),
    "dome": dict(noise_multiplier=1.0, sketch_dim=3),
    "sr-gt": dict(target_epsilon=2.0, gamma=0.05, beta=1.0, q1=0.9, q2=0.95, delta_grad=1.0),
}


@pytest.mark.parametrize("mechanism", sorted(PLANS))
def test_blocks_merge_into_the_single_run(mechanism):
    plan = edgedp.make_plan(mechanism, "er:10:0.4:1", steps=6, **PLANS[mechanism])
    sc = scenarios.from_plan(plan, eval_every=2)
    whole = batch.run(plan, sc.data(), trials=5, eval_every=2)  # one call, every trial
    merged = trials.run(sc, 5, block_trials=2)  # blocks of 2, 2 and 1
    assert [b.count for b in merged.blocks] == [2, 2, 1]
    assert merged.digests == whole.digests
    for name in ("test_loss", "consensus_distance"):
        got = getattr(merged, name)
        assert got.tobytes() == np.array(getattr(whole, name)).T.tobytes()


def test_event_trials_in_blocks():
    plan = edgedp.make_plan("dp-dsgd", "ring:6", steps=5, noise_multiplier=1.0)
    raw = {"seed": 2, "network": {"latency": {"kind": "uniform", "low_ms": 1, "high_ms": 9}}}
    sc = scenarios.parse(raw, plan=plan)
    one = trials.run(sc, 3)
    parts = trials.run(sc, 3, block_trials=1)
    assert one.engine == "event" and parts.digests == one.digests
    assert parts.test_loss.tobytes() == one.test_loss.tobytes()
    assert parts.counters["events"].tolist() == one.counters["events"].tolist()


LOSSY = """name = "lossy"
seed = 3
steps = 5
[topology]
spec = "er:8:0.5:1"
[task]
model = "logistic"
dataset = "digits-parity"
[privacy]
mechanism = "dp-dsgd"
noise_multiplier = 2.0
delta = 1e-5
[network]
loss = 0.1
round_timeout_s = 0.5
"""


def _leak_numbers(report: dict) -> str:
    """A leakage report without its seconds and block records, as JSON."""
    out = {k: v for k, v in report.items() if "seconds" not in k and k != "cost"}
    out.pop("blocks", None), out.pop("workers", None), out.pop("peak_worker_mb", None)
    out["attackers"] = [
        {k: v for k, v in e.items() if "seconds" not in k} for e in out["attackers"]
    ]
    if "audit" in out:
        out["audit"] = {k: v for k, v in out["audit"].items() if k != "seconds"}
    return strict_json.dumps(out)


@pytest.mark.parametrize("mechanism", sorted(PLANS))
def test_leak_trials_in_blocks_give_the_single_report(mechanism):
    plan = edgedp.make_plan(mechanism, "er:10:0.4:1", steps=4, **PLANS[mechanism])
    sc = scenarios.from_plan(plan)
    att = [adversary.parse_attacker("hbc:1,2"), adversary.tap_all()]
    kw = dict(trials=24, initial_state="normal", audit_trials=0)
    whole = leak.run(sc, att, **kw)  # one chunk of every trial
    parts = leak.run(sc, att, block_trials=7, chunk=3, **kw)  # blocks 7, 7, 7, 3 in chunks
    assert [b["trials"] for b in parts["blocks"]] == [7, 7, 7, 3]
    assert _leak_numbers(parts) == _leak_numbers(whole)


def test_lossy_leak_trials_in_blocks_on_the_event_engine(tmp_path):
    (tmp_path / "lossy.toml").write_text(LOSSY)
    sc = scenarios.load(tmp_path / "lossy.toml")
    att = [adversary.parse_attacker("hbc:1"), adversary.tap_all()]
    whole = leak.run(sc, att, trials=20, audit_trials=8)
    parts = leak.run(sc, att, trials=20, audit_trials=8, block_trials=6)
    assert whole["engine"] == parts["engine"] == "event"
    assert _leak_numbers(parts) == _leak_numbers(whole)


# ---------------------------------------------------------------- a real cluster
SCENARIO = """name = "kill"
seed = 1
steps = 40
[topology]
spec = "er:200:0.05:1"
[task]
dataset = "synthetic-logistic:30:4000"
[privacy]
mechanism = "dp-dsgd"
noise_multiplier = 1.0
"""
AUDIT = """name = "audit"
steps = 10
[topology]
spec = "ring:8"
[task]
dataset = "synthetic-logistic:10:400"
[privacy]
mechanism = "dp-dsgd"
noise_multiplier = 1.0
participation = "10,1"
"""
LEAK = AUDIT.replace(":10:", ":2:").replace('participation = "10,1"\n', "")
DASK = str(Path(sys.executable).with_name("dask"))  # the `dask` command of this environment


def _start(cmd, log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)


def _worker(address: str, name: str, tmp: Path) -> subprocess.Popen:
    cmd = [DASK, "worker", address, "--name", name]
    cmd += ["--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"]
    cmd += ["--local-directory", str(tmp / name)]
    return _start(cmd, tmp / f"{name}.log")


def _kill_when_busy(client, alive: dict[str, subprocess.Popen], deadline: float):
    """SIGKILL the first of the ``alive`` workers (name → process) seen running a task and
    drop it from ``alive``: (its address, the keys it was running)."""
    while time.monotonic() < deadline:
        names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
        for address, running in client.processing().items():
            name = names.get(address)
            keys = [k for k in running if not str(k).endswith("-payload")]  # a block, a point
            if name in alive and keys:
                proc = alive.pop(name)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                return address, [str(k) for k in keys]
        time.sleep(0.05)
    raise AssertionError(f"none of the workers {sorted(alive)} ran a task")


def _cli(*argv: str) -> subprocess.Popen:
    """``edgedp ARGV --json`` in a child process, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "edgedp_cli", *argv, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_workers(client, count: int) -> None:
    deadline = time.monotonic() + 120
    while len(client.scheduler_info()["workers"]) < count:
        assert time.monotonic() < deadline, "workers did not join"
        time.sleep(0.1)


def test_killed_worker_blocks_are_rerun_and_merged_bit_for_bit(tmp_path):
    from distributed import Client

    (tmp_path / "kill.toml").write_text(SCENARIO)
    sc = scenarios.load(tmp_path / "kill.toml")
    reference = trials.run(sc, 6)  # one process, every trial in one block
    info = tmp_path / "scheduler.json"
    procs = [
        _start(
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
            + ["--scheduler-file", str(info)],
            tmp_path / "scheduler.log",
        )
    ]
    try:
        deadline = time.monotonic() + 120
        while not info.exists() or not info.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        alive = {name: _worker(address, name, tmp_path) for name in ("w0", "w1")}
        procs += list(alive.values())
        with Client(address, set_as_default=False) as watch:
            _wait_workers(watch, 2)
            run = _cli(
                *("sim", "run", str(tmp_path / "kill.toml"), "--trials", "6"),
                *("--block-trials", "1", "--scheduler", address, "--out", str(tmp_path / "o")),
            )
            dead, killed = _kill_when_busy(watch, alive, time.monotonic() + 240)
            stdout, stderr = run.communicate(timeout=600)
            assert run.returncode == 0, stderr[-3000:]
            summary = json.loads(stdout)
            assert summary["model_digests"] == reference.digests
            per_trial = json.loads((tmp_path / "o" / "metrics.json").read_text())["per_trial"]
            assert np.array(per_trial["test_loss"]).tobytes() == reference.test_loss.tobytes()
            # the blocks the killed worker was running were run again on the other worker
            lost = {int(k.split("-")[-2]) for k in killed}
            assert lost and all(k.startswith("trials-") for k in killed)
            where = {b["first_trial"]: b["worker"] for b in summary["blocks"]}
            assert all(where[t] != dead for t in lost)
            assert summary["peak_worker_mb"] > 0
            # a sweep on the same cluster: a fresh worker joins, and a busy one is killed mid-sweep
            alive["w2"] = _worker(address, "w2", tmp_path)
            procs.append(alive["w2"])
            _wait_workers(watch, 2)
            (tmp_path / "sweep.toml").write_text(
                'scenario = "kill.toml"\nseeds = [1, 2]\n[grid]\n"faults.dropout" = [0.0, 0.1]\n'
            )
            run = _cli(
                *("sim", "sweep", str(tmp_path / "sweep.toml"), "--scheduler", address),
                *("--out", str(tmp_path / "s")),
            )
            _, killed = _kill_when_busy(watch, alive, time.monotonic() + 240)
            stdout, stderr = run.communicate(timeout=600)
            assert run.returncode == 0, stderr[-3000:]
            rows = json.loads(stdout)["runs"]
            assert killed and len(rows) == 4 and not any("error" in r for r in rows)
            for row in rows:
                dropout = float(row["scenario"].split(",")[0].split("=")[1])
                seed = int(row["scenario"].split("seed=")[1])
                raw = scenarios.read_toml(tmp_path / "kill.toml")
                raw.update(seed=seed, name=row["scenario"], faults={"dropout": dropout})
                alone = runner.run_scenario(scenarios.parse(raw, base=tmp_path))
                assert row["model_digest"] == alone["model_digest"]
                assert row["final_test_loss"] == alone["final_test_loss"]
            # an audit on the same cluster: a fresh worker joins, and a busy one is killed mid-audit
            alive["w3"] = _worker(address, "w3", tmp_path)
            procs.append(alive["w3"])
            _wait_workers(watch, 2)
            (tmp_path / "audit.toml").write_text(AUDIT)
            run = _cli(
                *("audit", str(tmp_path / "audit.toml"), "--attacker", "hbc:1"),
                *("--attacker", "eavesdropper:all", "--trials", "480", "--block-trials", "60"),
                *("--scheduler", address),
            )
            _, killed = _kill_when_busy(watch, alive, time.monotonic() + 240)
            stdout, stderr = run.communicate(timeout=600)
            assert run.returncode == 0, stderr[-3000:]
            merged = json.loads(stdout)
            assert killed and all(k.startswith("audit-trials-") for k in killed)
            alone = audit.run(
                scenarios.load(tmp_path / "audit.toml"),
                [adversary.parse_attacker("hbc:1"), adversary.tap_all()],
                trials=480,
            )
            assert len(merged["blocks"]) == 8 and merged["peak_worker_mb"] > 0
            for key in ("n_trials", "canary_rounds", "delta"):
                assert merged[key] == alone[key]
            assert merged["attackers"] == json.loads(strict_json.dumps(alone["attackers"]))
            # a leakage run on the same cluster: a fresh worker joins, and a busy one is killed
            alive["w4"] = _worker(address, "w4", tmp_path)
            procs.append(alive["w4"])
            _wait_workers(watch, 2)
            (tmp_path / "leak.toml").write_text(LEAK)
            run = _cli(
                *("leak", str(tmp_path / "leak.toml"), "--attacker", "hbc:1"),
                *("--attacker", "eavesdropper:all", "--trials", "480", "--block-trials", "60"),
                *("--audit-trials", "0", "--scheduler", address),
            )
            _, killed = _kill_when_busy(watch, alive, time.monotonic() + 240)
            stdout, stderr = run.communicate(timeout=600)
            assert run.returncode == 0, stderr[-3000:]
            merged = json.loads(stdout)
            assert killed and all(k.startswith("leak-trials-") for k in killed)
            alone = leak.run(
                scenarios.load(tmp_path / "leak.toml"),
                [adversary.parse_attacker("hbc:1"), adversary.tap_all()],
                trials=480,
            )
            assert len(merged["blocks"]) == 8 and merged["peak_worker_mb"] > 0
            for key in ("attackers", "n_trials", "iterations"):
                assert (
                    json.loads(_leak_numbers(merged))[key] == json.loads(_leak_numbers(alone))[key]
                )
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


def test_split_names_every_trial_once():
    blocks = shards.split(10, 4)
    assert [(b.index, b.first, b.count) for b in blocks] == [(0, 0, 4), (1, 4, 4), (2, 8, 2)]
    with pytest.raises(ValueError):
        shards.split(0, 4)


def test_blocks_spread_over_every_worker_of_a_local_cluster():
    # the payload every block needs sits on every worker before the blocks are placed; with
    # its only copy on one worker, Dask put all 16 blocks beside it and the other worker idled
    sc = scenarios.parse(
        {
            "name": "spread",
            "steps": 10,
            "topology": {"spec": "ring:8"},
            "task": {"dataset": "synthetic-logistic:10:400"},
            "privacy": {"mechanism": "dp-dsgd", "noise_multiplier": 1.0},
        }
    )
    attackers = [adversary.parse_attacker("hbc:1"), adversary.tap_all()]
    with shards.connect(None, 2) as client:
        report = audit.run(sc, attackers, trials=4000, client=client, block_trials=250)
        workers = set(client.scheduler_info()["workers"])
    counts = {w: sum(b["worker"] == w for b in report["blocks"]) for w in workers}
    assert len(report["blocks"]) == 16 and sum(counts.values()) == 16
    assert min(counts.values()) >= 4, counts
    alone = audit.run(sc, attackers, trials=4000)
    assert report["attackers"] == alone["attackers"]


def test_the_public_api_runs_trials_on_a_local_cluster():
    plan = edgedp.make_plan("dp-dsgd", "ring:6", steps=5, noise_multiplier=1.0)
    one = edgedp.leak(plan, trials=120)
    many = edgedp.leak(plan, trials=120, workers=2)
    assert len(many.report["blocks"]) > 1 and many.report["peak_worker_mb"] > 0
    assert many.attackers == one.attackers
    sim_one = edgedp.simulate(plan, trials=4)
    sim_many = edgedp.simulate(plan, trials=4, workers=2)
    assert sim_many.model_digests == sim_one.model_digests
