"""Noise streams are bound to (secret, plan, run): never reused, never silently restarted.

The attack this closes: a device that runs two plans (or the same plan twice) with one
noise secret drew bit-identical normals, and a neighbour who saw both runs' round-0
messages θ₀ − η(g + ν_i z)/B (two noise scales ν_1 ≠ ν_2) solves for the clipped gradient
sum g exactly. The tests run real agent processes on 127.0.0.1 with private noise secrets.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

import edgedp_topologies
from edgedp import streams
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.models.linear import LinearModel
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy, ledger

GRAPH = "ring:3"
STEPS = 3


def _plan(noise_multiplier=1.0, learning_rate=0.3):
    return make_plan(
        "dp-dsgd",
        edgedp_topologies.parse(GRAPH),
        steps=STEPS,
        participation=Participation(STEPS, 1),
        clip_norm=1.0,
        learning_rate=learning_rate,
        noise_multiplier=noise_multiplier,
        task=TaskSpec(dataset="synthetic-logistic"),
        seed=3,
        topology_name=GRAPH,
    )


def test_two_plans_with_one_secret_draw_different_noise():
    secret = b"one device secret, 32 bytes long"
    a, b = _plan(1.0), _plan(2.0)
    keys_a = streams.RunKeys(secret, a.plan_hash, "run-1")
    keys_b = streams.RunKeys(secret, b.plan_hash, "run-1")
    again = streams.RunKeys(secret, a.plan_hash, "run-2")
    for label in ("noise", "batch", "messages"):
        ka, kb, kc = (getattr(k, label)(0) for k in (keys_a, keys_b, again))
        assert len({ka, kb, kc}) == 3, label
    assert keys_a.pair(0, 1) == keys_a.pair(1, 0) != keys_b.pair(0, 1)
    assert keys_a.shared() != keys_b.shared() != again.shared()
    assert keys_a.fingerprint() != again.fingerprint()


def test_the_two_round_zero_messages_attack_recovers_nothing():
    # one device, one secret, two plans that differ only in σ: the attacker solves
    # (θ0 − m_i)·B/η = g + ν_i z_i for g, exact iff z_1 == z_2 (the unbound keys' flaw)
    secret = b"one device secret, 32 bytes long"
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 4)), (rng.random(6) > 0.5).astype(float)
    model = LinearModel("logistic", 4)
    theta0, eta, batch = model.init_params(), 0.3, 6
    for run_of_b in ("run-1", "run-2"):  # same run id, or a new one
        sums, scales, truth = [], [], None
        for sigma, run in ((1.0, "run-1"), (3.0, run_of_b)):
            p = _plan(sigma)
            keys = streams.RunKeys(secret, p.plan_hash, run)
            agent = Agent(p.share(0), model=model, x=x, y=y, **keys.agent(0))
            agent.begin_round()
            sums.append((theta0 - agent.message) * batch / eta)  # g + ν z
            scales.append(p.noise_std)
            truth = agent.last_gradient
        (s1, s2), (nu1, nu2) = sums, scales
        recovered = (nu2 * s1 - nu1 * s2) / (nu2 - nu1)
        assert not np.allclose(recovered, truth, atol=1e-3)
        # the attack itself is right: with equal draws it would be exact
        z = (s1 - truth) / nu1
        assert np.allclose((nu2 * s1 - nu1 * (truth + nu2 * z)) / (nu2 - nu1), truth)


# ---------------------------------------------------------------- real agent processes
def _deployment(tmp_path: Path, keys: dict, plan, run_id: str, name: str) -> deploy.LocalRun:
    """Configs for ``plan`` with the given device keys and run id, in a fresh folder."""
    directory = tmp_path / name
    plan_file = directory / "run.plan"
    directory.mkdir()
    plan_file.write_bytes(plan.to_bytes())
    ports = deploy.free_ports(plan.n)
    shards = deploy.write_shards(plan, directory / "shards")
    configs = deploy.write_configs(
        plan_file.resolve(),
        plan,
        endpoints={u: f"tcp://127.0.0.1:{ports[u]}" for u in range(plan.n)},
        public_keys={u: k["public_key"] for u, k in keys.items()},
        out=directory / "configs",
        key_files={u: k["secret_key_file"] for u, k in keys.items()},
        noise_files={u: k["noise_secret_file"] for u, k in keys.items()},
        shards={u: str(s.resolve()) for u, s in enumerate(shards)},
        round_timeout=10.0,
        startup_timeout=30.0,
        run_id=run_id,
    )
    # laboratory agents without trust anchors (--lab): this file tests the streams' binding
    return deploy.LocalRun(directory, configs, [None] * plan.n, plan, directory / "no-anchors")


def _start_all(run: deploy.LocalRun) -> list[int]:
    for u in range(len(run.configs)):
        run.start(u)
    return run.wait(timeout=120)


def _round_noise(run: deploy.LocalRun, u: int, r: int) -> str:
    lines = [m for m in run.metrics(u) if m.get("event") == "round" and m["round"] == r]
    return lines[0]["noise"]


def _sent(run: deploy.LocalRun, u: int) -> list[dict]:
    return [m for m in run.metrics(u) if m.get("event") == "sent"]


def _log(run, u):
    return (run.directory / f"node-{u}.log").read_text()


def test_agents_refuse_a_fresh_start_on_a_used_stream(tmp_path):
    keys = {u: deploy.generate_keys(tmp_path / "keys", f"node-{u}") for u in range(3)}
    plan_a, plan_b = _plan(1.0), _plan(1.0, learning_rate=0.2)

    first = _deployment(tmp_path, keys, plan_a, "run-a", "first")
    assert _start_all(first) == [0, 0, 0]
    book = Path(keys[0]["ledger_file"])
    marks = ledger.read(book, Path(keys[0]["noise_secret_file"]).read_bytes())
    ((stream, mark),), last = list(marks.items()), _sent(first, 0)[-1]
    assert [stream] == [ledger.stream_id(plan_a.plan_hash, "run-a", 0)]
    assert mark.round == STEPS - 1 and mark.message.hex()[:16] == last["message"]
    assert book.stat().st_mode & 0o777 == 0o600

    # same secrets, another plan, same run id: allowed, and every node's noise differs
    other = _deployment(tmp_path, keys, plan_b, "run-a", "other-plan")
    assert _start_all(other) == [0, 0, 0]
    for u in range(3):
        assert _round_noise(first, u, 0) != _round_noise(other, u, 0)

    # the state folder lost: a fresh start of plan A, run-a would reuse its noise -> exit 4
    again = _deployment(tmp_path, keys, plan_a, "run-a", "state-lost")
    assert _start_all(again) == [4, 4, 4]
    assert "would reuse noise" in _log(again, 0) and "a new run" in _log(again, 0)
    assert not (again.directory / "configs" / "state" / "node-0" / "metrics.jsonl").exists()

    # the documented way out: a new run id; the same plan then draws new noise
    fresh = _deployment(tmp_path, keys, plan_a, "run-a2", "new-run")
    assert _start_all(fresh) == [0, 0, 0]
    for u in range(3):
        assert _round_noise(first, u, 0) != _round_noise(fresh, u, 0)


def test_resume_with_another_noise_secret_is_refused(tmp_path):
    keys = {u: deploy.generate_keys(tmp_path / "keys", f"node-{u}") for u in range(3)}
    run = _deployment(tmp_path, keys, _plan(1.0), "run-x", "run")
    assert _start_all(run) == [0, 0, 0]
    # a restarted device whose noise secret changed must not continue the run's streams
    secret_file = Path(keys[1]["noise_secret_file"])
    secret_file.write_bytes(b"\x01" * 32)
    code = run.start(1).wait(timeout=60)
    assert code == 4
    assert "another noise secret" in _log(run, 1)
    # the state folder and checkpoint are the device's only (0700 / 0600)
    state = run.directory / "configs" / "state" / "node-1"
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "checkpoint").stat().st_mode & 0o777 == 0o600


def test_a_state_folder_of_another_run_is_a_config_error(tmp_path):
    keys = {u: deploy.generate_keys(tmp_path / "keys", f"node-{u}") for u in range(3)}
    run = _deployment(tmp_path, keys, _plan(1.0), "run-x", "run")
    assert _start_all(run) == [0, 0, 0]
    later = _deployment(tmp_path, keys, _plan(1.0), "run-y", "later")
    shutil.rmtree(later.directory / "configs")
    shutil.copytree(run.directory / "configs", later.directory / "configs")
    for cfg in later.configs:
        cfg.write_text(cfg.read_text().replace('id = "run-x"', 'id = "run-y"'))
    assert later.start(0).wait(timeout=60) == 2
    assert "holds run 'run-x'" in _log(later, 0)


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65])
def test_run_ids_are_validated(bad):
    with pytest.raises(ValueError, match="run id"):
        streams.validate_run_id(bad)
