"""One noise draw goes out with one message, once — whatever happens to the device's disk.

Real ``edgedp-agent`` processes on 127.0.0.1 with private noise secrets. Each test does to a
device what an operator, a backup tool or a second process can do — put an older copy of
the state folder back, lose or cut the ledger, start a twin of a node — and checks from the
agents' own ``sent`` metrics lines (the round's noise digest and message digest, written
before the send) that no round was released twice with two different messages.
"""

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from hostile import harness

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy

STEPS = 14


def _plan_file(tmp_path: Path, steps: int = STEPS) -> Path:
    plan = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("ring:3"),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        task=TaskSpec(dataset="synthetic-logistic"),
        seed=5,
        topology_name="ring:3",
    )
    path = tmp_path / "run.plan"
    path.write_bytes(plan.to_bytes())
    return path


def _run(
    tmp_path: Path, startup_timeout: float = 20.0, steps: int = STEPS, **kw
) -> deploy.LocalRun:
    return deploy.local_run(
        _plan_file(tmp_path, steps),
        tmp_path / "run",
        private_noise=True,
        round_timeout=0.3,
        startup_timeout=startup_timeout,
        **kw,
    )


def _state(run: deploy.LocalRun, u: int) -> Path:
    return run.directory / "configs" / "state" / f"node-{u}"


def _sent(lines) -> dict[int, set]:
    out: dict[int, set] = {}
    for m in lines:
        if m.get("event") == "sent":
            out.setdefault(m["round"], set()).add((m["noise"], m["message"]))
    return out


def _reused(*incarnations) -> list[int]:
    """Rounds released with one noise digest and two different messages."""
    seen: dict[int, set] = {}
    for lines in incarnations:
        for r, pairs in _sent(lines).items():
            seen.setdefault(r, set()).update(pairs)
    return sorted(r for r, pairs in seen.items() if len({m for _, m in pairs}) > 1)


def _wait_round(run: deploy.LocalRun, u: int, r: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(m.get("event") == "round" and m["round"] >= r for m in run.metrics(u)):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"node {u} did not reach round {r}")


def _log(run: deploy.LocalRun, u: int) -> str:
    return (run.directory / f"node-{u}.log").read_text()


def _ledger(run: deploy.LocalRun, u: int) -> Path:
    return run.directory / "keys" / f"node-{u}.noise.ledger"


def test_an_older_copy_of_the_state_folder_put_back_is_refused(tmp_path):
    # long enough that the copy taken at round >= 4 is older than the end on a loaded machine
    # (unpaced rounds: with 14 a node once ran to its last round before the SIGSTOP landed)
    run = _run(tmp_path, steps=80)
    _wait_round(run, 0, 4)
    os.kill(run.processes[0].pid, signal.SIGSTOP)  # a consistent copy, as a backup takes it
    backup = tmp_path / "backup"
    shutil.copytree(_state(run, 0), backup)
    os.kill(run.processes[0].pid, signal.SIGCONT)
    assert set(run.wait(timeout=120)) <= {0, 7}
    first = run.metrics(0)
    backed_up = max(
        m["round"] for m in harness.lines(backup / "metrics.jsonl") if m["event"] == "sent"
    )
    assert max(_sent(first)) > backed_up  # rounds were released after the copy was taken
    shutil.rmtree(_state(run, 0))
    shutil.copytree(backup, _state(run, 0))  # the backup restored
    code = run.start(0).wait(timeout=60)
    after = [m for m in run.metrics(0) if m not in first]
    assert _reused(first, after) == []
    assert code == 4, _log(run, 0)
    assert not _sent(after[1:]) or min(_sent(after)) > max(_sent(first))
    last = _log(run, 0).strip().splitlines()[-1]
    assert "[unsafe]" in last and "new run" in last and "--rollback" in last


@pytest.mark.parametrize("damage", ["deleted", "last-line-cut"])
def test_a_lost_or_cut_ledger_with_a_wiped_state_folder_is_refused(tmp_path, damage):
    run = _run(tmp_path)
    assert set(run.wait(timeout=120)) <= {0, 7}
    first = run.metrics(0)
    shutil.rmtree(_state(run, 0))
    ledger = _ledger(run, 0)
    if damage == "deleted":
        ledger.unlink()
    else:
        data = ledger.read_bytes()
        ledger.write_bytes(data[:-2])  # a JSON-lines ledger: its last line loses its "}"
    code = run.start(0).wait(timeout=60)
    assert code == 4, _log(run, 0)
    after = harness.lines(_state(run, 0) / "metrics.jsonl")
    assert _reused(first, after) == [] and not _sent(after)
    assert "ledger" in _log(run, 0).strip().splitlines()[-1]


def test_a_twin_of_a_node_is_refused(tmp_path):
    # the same secret, node id and run, another state folder and port, started together
    run = _run(tmp_path, startup_timeout=4.0, start=())  # the refused one's neighbours wait
    twin_cfg = run.configs[0].with_name("node-0-twin.toml")
    port = deploy.free_ports(1)[0]
    text = run.configs[0].read_text()
    bind = [line for line in text.splitlines() if line.startswith("bind = ")][0]
    text = text.replace(bind, f'bind = "tcp://127.0.0.1:{port}"')
    text = text.replace('checkpoint_dir = "state/node-0"', 'checkpoint_dir = "state/twin"')
    twin_cfg.write_text(text)
    run.configs.append(twin_cfg)
    run.processes.append(None)
    for u in range(4):
        run.start(u)
    codes = run.wait(timeout=120)
    twin_lines = harness.lines(run.directory / "configs" / "state" / "twin" / "metrics.jsonl")
    assert _reused(harness.lines(_state(run, 0) / "metrics.jsonl"), twin_lines) == []
    assert sorted([codes[0], codes[3]]) in ([0, 4], [4, 7]), codes
    refused = 0 if codes[0] == 4 else 3
    assert "another edgedp-agent" in _log(run, refused).strip().splitlines()[-1]
