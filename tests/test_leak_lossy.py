"""Leakage on lossy event scenarios: measured on the rounds the attacker observed.

A curious node receives only the messages that arrive; the update inversion rebuilds the
victim's model only from the messages the victim mixed, so every estimate it makes is the
victim's noisy gradient exactly (checked against the engine's own record of gradient and
noise), and rounds it cannot rebuild are left out, not filled with wrong numbers. Too few
remaining trials are a clear error; plan files are accepted; the run states its cost.
"""

import json
import re

import numpy as np
import pytest

import edgedp
from edgedp import models
from edgedp.task import batch_schedule
from edgedp_cli import leak_cmd
from edgedp_cli import main as cli
from edgedp_sim import adversary, batch, engine, leak, scenarios

SCENARIO = """
name = "lossy-ring"
seed = 3
steps = 6

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
loss = {loss}
round_timeout_s = 0.5
"""


def _scenario(tmp_path, loss=0.2):
    path = tmp_path / "lossy.toml"
    path.write_text(SCENARIO.format(loss=loss))
    return path


def test_a_curious_node_sees_only_the_messages_that_arrive(tmp_path):
    sc = scenarios.load(_scenario(tmp_path, loss=0.3))
    plan, data = sc.plan, sc.data()
    dim = models.for_task(plan.task, data.features).dim
    member = int(plan.mixing_index[0][plan.mixing_index[0] != 0][0])
    probe = adversary.Probe(adversary.honest_but_curious(member), plan, trials=1, dim=dim)
    tap = adversary.Probe(adversary.tap_all(), plan, trials=1, dim=dim)
    res = engine.run(plan, data, network=sc.network, seed=sc.seed, observers=[probe, tap])
    assert res.lost_messages > 0
    others = [i for i, u in enumerate(probe.log.senders) if u != member]
    got = np.isfinite(probe.log.messages[0][:, others]).all(axis=-1)
    assert 0 < got.mean() < 1  # lost messages never reached the curious node
    mine = probe.log.senders.index(member)
    assert np.isfinite(probe.log.messages[0][:, mine]).all()  # it knows what it sent


def test_the_inversion_is_exact_on_the_rounds_it_observed(tmp_path):
    """Another way: the gradient the event engine's victim used, plus its noise — a pure
    function of (plan, trial, node, step), drawn by the batch engine for the same trial."""
    sc = scenarios.load(_scenario(tmp_path, loss=0.2))
    plan, data = sc.plan, sc.data()
    model = models.for_task(plan.task, data.features)
    noise = adversary.GroundTruth([0], trials=4, steps=plan.steps, dim=model.dim)
    batch.run(plan, data, trials=4, observers=[noise])
    kept = total = 0
    for trial in range(4):
        tap = adversary.Probe(adversary.tap_all(), plan, trials=1, dim=model.dim)
        truth = adversary.GroundTruth([0], trials=1, steps=plan.steps, dim=model.dim)
        engine.run(plan, data, network=sc.network, seed=sc.seed + trial, trial=trial,
                   observers=[tap, truth])  # fmt: skip
        info, point, name = leak.estimates(tap.log, plan, victim=0, theta0=model.init_params())
        assert name.startswith("update inversion")
        batch_size = batch_schedule(plan, data.local_size)[0]
        want = truth.of(0) + noise.noise[trial : trial + 1, :, 0] / batch_size
        ok = np.isfinite(point).all(axis=-1)
        np.testing.assert_allclose(point[ok], want[ok], rtol=1e-9, atol=1e-9)
        kept, total = kept + ok.sum(), total + ok.size
    assert 0 < kept < total  # some rounds were not observed, the others are exact


def test_lossy_leak_counts_agree_and_the_cost_is_stated(tmp_path, capsys):
    path = _scenario(tmp_path, loss=0.2)
    lines: list[str] = []
    sc = scenarios.load(path)
    rep = leak.run(sc, [adversary.tap_all()], trials=24, progress=lines.append)
    entry = rep["attackers"][0]
    counts = entry["n_trials_per_iteration"]
    assert len(counts) == 6 and min(counts) < 24 and entry["m_nmi"] is not None
    estimated = entry["observed_iterations"]
    assert estimated == 6 - len(entry["skipped_iterations"])
    said = [ln for ln in lines if "KSG estimates" in ln]
    assert f"over {estimated} of 6 iterations" in said[0]
    unestimated = set(entry["skipped_iterations"]) | set(entry["low_variance_iterations"])
    assert unestimated == {t for t in range(6) if entry["nmi_curve"][t] is None}
    assert all(counts[t] <= 7 for t in entry["skipped_iterations"])
    cost = rep["cost"]
    assert cost["total_seconds"] >= cost["simulation_seconds"] > 0
    assert cost["peak_memory_mb"] > 0 and cost["seconds_per_trial"] > 0
    text = leak_cmd.text_table(rep)
    assert f"{estimated} of 6 iterations" in text
    assert re.search(r"cost: [0-9.]+ s .* peak memory [0-9]+ MB", text)


def test_too_few_observed_trials_is_a_clear_error(tmp_path, capsys):
    path = _scenario(tmp_path, loss=0.9)
    argv = ["leak", str(path), "--attacker", "eavesdropper:all", "--trials", "8"]
    assert cli.main([*argv, "--audit-trials", "0", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "too few" in err and "--trials" in err


def test_leak_takes_a_plan_file(tmp_path, capsys):
    plan = edgedp.make_plan("dp-dsgd", "ring:6", steps=6, noise_multiplier=2.0)
    path = tmp_path / "p.plan"
    path.write_bytes(plan.to_bytes())
    argv = ["leak", str(path), "--attacker", "eavesdropper:all", "--trials", "16"]
    assert cli.main([*argv, "--audit-trials", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mechanism"] == "dp-dsgd" and out["delta"] == 1e-6 and out["cost"]
    assert cli.main(["leak", str(path), "--attacker", "hbc:1", "--target-eps", "2"]) == 2
    assert "plan file" in capsys.readouterr().err
    res = edgedp.leak(str(path), ["eavesdropper:all"], trials=16)
    assert res.attackers[0].m_nmi is not None
    with pytest.raises(ValueError, match="not a NoisePlan|Not a NoisePlan"):
        edgedp.leak(b"garbage", ["hbc:1"], trials=16)
