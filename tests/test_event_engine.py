"""The SimPy event engine: equivalence with the batch engine, exact timing, faults, scenarios."""

import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine, provenance, runner, scenarios
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.links import Latency, Network

DATA10 = datasets.partition(datasets.load("synthetic-logistic", seed=2), 10, seed=2)


def _plan(mechanism="dp-dsgd", spec="er:10:0.4:1", steps=12, batch_size=0):
    g = edgedp_topologies.parse(spec)
    m = DATA10.local_size
    per_epoch = m // (batch_size or m)
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": 1.0}
    return make_plan(
        mechanism,
        g,
        steps=steps,
        participation=Participation(math.ceil(steps / per_epoch), per_epoch),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=3,
        **noise,
        task=TaskSpec(dataset="synthetic-logistic", batch_size=batch_size),
    )


@pytest.mark.parametrize("mechanism", ["dsgd", "dp-dsgd", "antipgd"])
@pytest.mark.parametrize("batch_size", [0, 8])
def test_ideal_network_equals_batch_engine_bitwise(mechanism, batch_size):
    p = _plan(mechanism, batch_size=batch_size)
    ev = engine.run(p, DATA10)
    assert ev.model_digest == batch.run(p, DATA10).digests[0]
    assert ev.dropped_messages == 0 and ev.missing == 0


@pytest.mark.parametrize("initial_state", ["model", "normal:0.5"])
def test_event_engine_trial_t_draws_the_batch_engines_trial_t(initial_state):
    """Every node stream of trial t (noise, batch order, initial state) is the plan's key
    for (t, node) in both engines: trials differ from each other and agree across engines."""
    p = _plan("dp-dsgd", batch_size=8)
    stacked = batch.run(p, DATA10, trials=3, initial_state=initial_state).digests
    events = [engine.run(p, DATA10, trial=t, initial_state=initial_state) for t in range(3)]
    assert [ev.model_digest for ev in events] == list(stacked)
    assert len(set(stacked)) == 3


def test_latency_and_bandwidth_give_the_exact_round_times():
    # two nodes, constant 10 ms latency, 1 Mbit/s: a round = serialization + latency
    p = _plan("dsgd", spec="complete:2", steps=4)
    data = datasets.partition(datasets.load("synthetic-logistic", seed=2), 2, seed=2)
    net = Network(
        latency=Latency.from_dict({"kind": "constant", "ms": 10}),
        bandwidth_mbps=1.0,
        round_timeout_s=5.0,
    )
    ev = engine.run(p, data, network=net)
    size = ev.bytes_sent / ev.messages
    per_round = size * 8 / 1e6 + 0.010  # hand-derived: one message each way per round
    np.testing.assert_allclose(ev.round_seconds, [per_round] * 4, rtol=1e-12)
    assert ev.messages == 2 * 4 and ev.simulated_seconds == pytest.approx(4 * per_round)
    assert ev.model_digest == batch.run(p, data).digests[0]  # timing does not change the maths


def test_uplink_serializes_messages_to_several_neighbours():
    # star with 3 leaves: the centre sends 3 messages one after another on its uplink
    p = _plan("dsgd", spec="star:4", steps=1)
    data = datasets.partition(datasets.load("synthetic-logistic", seed=2), 4, seed=2)
    ev = engine.run(p, data, network=Network(bandwidth_mbps=1.0, round_timeout_s=5.0))
    ser = ev.bytes_sent / ev.messages * 8 / 1e6
    assert ev.round_seconds[0] == pytest.approx(3 * ser, rel=1e-12)  # the last leaf waits longest


FAULTY = Network(
    latency=Latency.from_dict({"kind": "lognormal", "median_ms": 20, "sigma": 0.5}),
    bandwidth_mbps=10,
    loss=0.02,
    round_timeout_s=0.3,
)


def test_faulty_runs_are_deterministic_and_seed_dependent():
    p = _plan("antipgd", steps=20)
    f = Faults(dropout=0.1, crashes=(Crash(3, 0.4, 0.5),))
    a = engine.run(p, DATA10, network=FAULTY, faults=f, seed=1)
    b = engine.run(p, DATA10, network=FAULTY, faults=f, seed=1)
    c = engine.run(p, DATA10, network=FAULTY, faults=f, seed=2)
    assert a.model_digest == b.model_digest and a.events == b.events
    assert a.model_digest != c.model_digest
    assert a.lost_messages > 0 and a.skipped_rounds > 0 and a.crashes == 1


def test_dropouts_never_reduce_or_reuse_noise():
    p = _plan("antipgd", steps=20)
    sim = engine._Sim(p, DATA10, FAULTY, Faults(dropout=0.3), 4, 5, None)
    res = sim.run()
    assert res.skipped_rounds > 0
    for agent in sim.agents:  # every node's noise stream advanced once per round, skipped or not
        assert agent.noise_state.step == p.steps and agent.done


def test_crash_restart_and_departure():
    p = _plan("dp-dsgd", steps=20)
    f = Faults(crashes=(Crash(2, 0.5, 0.7), Crash(6, 0.2)))  # 6 leaves for good
    net = Network(latency=Latency.from_dict({"kind": "constant", "ms": 20}), round_timeout_s=0.2)
    ev = engine.run(p, DATA10, network=net, faults=f, seed=0)
    assert ev.crashes == 2 and ev.missing > 0
    ideal = engine.run(p, DATA10, network=net)
    assert np.isfinite(ev.test_loss[-1]) and ev.test_loss[-1] < ev.test_loss[0]
    assert ev.model_digest != ideal.model_digest


def _short(path, steps=6):
    raw = tomllib.loads(Path(path).read_text())
    raw["steps"] = steps
    raw.pop("eval_every", None)
    priv = raw.get("privacy", {})
    priv.pop("participation", None)
    return scenarios.parse(raw, base=Path(path).parent)


@pytest.mark.parametrize("name", ["lan_er100", "wan_smallworld300", "churn_er50"])
def test_example_scenarios_run(name):
    sc = _short(Path(scenarios.__file__).parent / f"{name}.toml")
    summary = runner.run_scenario(sc, engine_name="event")
    assert summary["rounds"] == 6 and math.isfinite(summary["final_test_loss"])
    assert summary["nodes"] >= 50


@pytest.mark.parametrize(
    "patch, needle",
    [
        ({"network": {"loss": 2}}, "network.loss"),
        ({"network": {"latency": {"kind": "gaussian"}}}, "network.latency.kind"),
        ({"network": {"latency": {"kind": "uniform", "low_ms": 5}}}, "missing ['high_ms']"),
        ({"faults": {"dropout_rule": "hope"}}, "faults.dropout_rule"),
        ({"faults": {"crashes": [{"node": 1}]}}, "faults.crashes[0]"),
        ({"privacy": ("replace", {"mechanism": "dp-dsgd"})}, "target_epsilon"),
        ({"topology": {"spec": "moon:3"}}, "topology.spec"),
        ({"colour": "blue"}, "unknown key colour (expected one of engine, eval_every, faults"),
        (
            {"privacy": {"clip_nrom": 0.1}},
            "unknown key privacy.clip_nrom (did you mean privacy.clip_norm?)",
        ),
    ],
)
def test_scenario_errors_name_the_field(patch, needle):
    raw = {
        "seed": 1,
        "steps": 5,
        "topology": {"spec": "ring:6"},
        "task": {"dataset": "synthetic-logistic"},
        "privacy": {"mechanism": "dp-dsgd", "noise_multiplier": 1.0},
    }
    for k, v in patch.items():
        if isinstance(v, tuple):  # ("replace", table)
            raw[k] = v[1]
        else:
            raw[k] = {**raw.get(k, {}), **v} if isinstance(v, dict) else v
    with pytest.raises(scenarios.ScenarioError, match=re.escape(needle)):
        scenarios.parse(raw)


def test_cli_run_and_sweep(tmp_path):
    base = tmp_path / "base.toml"
    base.write_text(
        'name = "tiny"\nseed = 1\nsteps = 5\n[topology]\nspec = "ring:6"\n'
        '[task]\ndataset = "synthetic-logistic"\n'
        '[privacy]\nmechanism = "dp-dsgd"\nnoise_multiplier = 1.0\n'
        '[network]\nlatency = { kind = "constant", ms = 3 }\n'
    )
    cmd = [sys.executable, "-m", "edgedp_cli", "sim"]
    out = subprocess.run(
        [*cmd, "run", str(base), "--out", str(tmp_path / "o"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = json.loads(out.stdout)
    assert summary["rounds"] == 5 and (tmp_path / "o" / "loss.png").exists()
    batch = subprocess.run(
        [*cmd, "run", str(base), "--engine", "batch", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the batch engine has no clock: it refuses latency instead of dropping it silently
    assert batch.returncode == 2 and batch.stdout == ""
    assert "batch engine cannot run this scenario: latency" in batch.stderr
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        'scenario = "base.toml"\nseeds = [1, 2]\n[grid]\n"network.loss" = [0.0, 0.2]\n'
    )
    out = subprocess.run(
        [*cmd, "sweep", str(sweep), "--out", str(tmp_path / "s"), "--json", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    runs = json.loads(out.stdout)["runs"]
    assert len(runs) == 4 and (tmp_path / "s" / "sweep.png").exists()
    assert "Traceback" not in out.stderr, out.stderr[-3000:]  # a successful sweep is quiet
    lossy = [r for r in runs if "network.loss=0.2" in r["scenario"]]
    assert all(r["lost_messages"] > 0 for r in lossy)
    # both results files record the package versions and the git revision (edgedp_sim.provenance)
    assert len(json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]) == 4
    for written in (tmp_path / "o" / "metrics.json", tmp_path / "s" / "sweep.json"):
        env = json.loads(written.read_text())["environment"]
        assert env["packages"]["numpy"] == np.__version__
        assert env["git_revision"] == provenance.environment()["git_revision"]
    bad = subprocess.run([*cmd, "run", str(tmp_path / "nope.toml")], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr


@pytest.mark.parametrize("model", ["logistic", "mlp:6-5-3:tanh", "softmax:3:blas"])
def test_evaluation_chunks_change_no_bit(model):
    from edgedp import models
    from edgedp_sim import evaluation

    gen = np.random.default_rng(7)
    x = gen.standard_normal((300, 6))
    y = gen.integers(0, 2 if model == "logistic" else 3, 300).astype(float)
    m = models.for_task(TaskSpec(model=model, loss="" if model == "logistic" else "ce"), 6)
    thetas = gen.standard_normal((2, 9, m.dim)) * 0.3
    whole = evaluation.evaluate(m, thetas, x, y, max_elements=1 << 30)  # one chunk
    for max_elements in (1, x.size * 4, 1 << 20):  # one model, four, the default
        parts = evaluation.evaluate(m, thetas, x, y, max_elements=max_elements)
        assert parts[0].tobytes() == whole[0].tobytes()
        assert parts[1].tobytes() == whole[1].tobytes()
