"""sr-gt (paper 004 Alg. 1) and DPOP (Eq. 45): update rules, engines, plans, sensor fusion, CLI."""

import json
import math

import numpy as np
import pytest

import edgedp_topologies
from edgedp import models, noise, rng, streams
from edgedp.errors import PlanError
from edgedp.families.laplace import accounting as laplace
from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_cli.main import main as cli
from edgedp_sim import batch, datasets, engine, sensor_fusion

GRAPH = edgedp_topologies.parse("er:6:0.6:1")
SF = sensor_fusion.generate(6, seed=4)
SF_DATA = SF.federated()
SF_TASK = TaskSpec(model="least-squares", dataset="sensor-fusion", partition="per-node")
LOGISTIC = datasets.partition(datasets.load("synthetic-logistic", seed=3), 6, seed=3)
PARAMS = {"sr-gt": dict(gamma=0.001, beta=1000.0), "dpop": dict(gamma=0.001, beta=0.0)}


def _sf_plan(mechanism, steps=20, eps=1.0):
    sched = LaplaceSchedule(
        q1=0.97, q2=0.99, delta_grad=1.0, epsilon=eps, adjacency="problem", **PARAMS[mechanism]
    )
    return make_plan(
        mechanism, GRAPH, steps=steps, clip_norm=math.inf, laplace=sched, task=SF_TASK, seed=5
    )


def _logistic_plan(mechanism, steps=12):
    task = TaskSpec(dataset="synthetic-logistic")
    d = models.for_task(task, LOGISTIC.features).dim
    need = laplace.example_delta(clip_norm=1.0, dim=d, batch_size=LOGISTIC.local_size)
    params = dict(PARAMS[mechanism], gamma=0.3, beta=3.0 if mechanism == "sr-gt" else 0.0)
    sched = LaplaceSchedule(q1=0.9, q2=0.95, delta_grad=need, epsilon=5.0, **params)
    return make_plan(mechanism, GRAPH, steps=steps, clip_norm=1.0, laplace=sched, task=task)


# ---------------------------------------------------------------- noise
def test_laplace_draw_equals_one_generator_per_key():
    run_keys = streams.RunKeys(rng.seed_secret(11), "0" * 64, "test")
    keys = np.empty((3, 4), dtype=object)
    for i, u in np.ndindex(keys.shape):
        keys[i, u] = run_keys.noise(u, trial=i)
    for step, scale, dim in ((0, 1.0, 3), (7, 0.25, 1), (2**40, 3.0, 5), (5, 0.0, 2)):
        got = noise.laplace_draw(keys, step, dim, scale)
        want = [
            [rng.laplace(keys[i, u], step, (dim,), scale=scale) for u in range(4)] for i in range(3)
        ]
        assert got.tobytes() == np.array(want).tobytes()
    one = noise.laplace_draw(np.array(keys[1, 2], dtype=object), 9, 4, 0.5)
    assert one.tobytes() == rng.laplace(keys[1, 2], 9, (4,), scale=0.5).tobytes()


# ---------------------------------------------------------------- update rules
@pytest.mark.parametrize("mechanism", ["sr-gt", "dpop"])
def test_batch_engine_equals_a_direct_transcription(mechanism):
    p = _sf_plan(mechanism)
    s, n = p.laplace, p.n
    W = p.mixing_matrix()  # noqa: N806
    keys = [streams.RunKeys.simulation(p).noise(u) for u in range(n)]
    x, y = np.zeros((n, SF.dim)), np.zeros((n, SF.dim))
    for t in range(p.steps):  # paper 004 Alg. 1 with k = t + 1 / Eq. (45)
        alpha = 0.001 * 0.97**t
        # ν of the message that releases x(t): paper 004's Eq. (5) scale divided by q2
        # (families.laplace.accounting: x(k) goes out in z(k + 1), so Eq. 5 would spend ε/q2)
        nu = 0.001 * 1.0 / (1.0 * (0.99 - 0.97)) * 0.99**t
        z = x + np.stack([rng.laplace(keys[u], t, (SF.dim,), scale=nu) for u in range(n)])
        zbar = W @ z
        if mechanism == "sr-gt":
            y = y + s.beta * (z - zbar)
            x = zbar - alpha * (y + SF.gradient(z))
        else:
            x = zbar - alpha * SF.gradient(z)
    got = batch.run(p, SF_DATA).models[0]
    # tolerance: the engine's gradient goes through √B-scaled rows (module docstring)
    np.testing.assert_allclose(got, x, rtol=1e-9, atol=1e-12)


def test_y_is_never_sent_and_tracks_the_disagreement(make_agents, run_rounds):
    p = _sf_plan("sr-gt", steps=3)
    agents = make_agents(p, SF_DATA)
    run_rounds(agents, 3, reverse=True)
    # 1ᵀ y = 0 (W doubly stochastic, paper 004 §5.1 after Eq. 13): y sums to zero over nodes
    total = np.sum([a.state["y"] for a in agents], axis=0)
    np.testing.assert_allclose(total, 0, atol=1e-9)
    assert set(agents[0].snapshot()["state"]) == {"x", "y"}


# ---------------------------------------------------------------- engine equivalence
@pytest.mark.parametrize("mechanism", ["sr-gt", "dpop"])
@pytest.mark.parametrize("task", ["sensor-fusion", "logistic"])
def test_batch_agents_and_event_engine_are_bitwise_equal(mechanism, task, make_agents, run_rounds):
    if task == "sensor-fusion":
        p, data = _sf_plan(mechanism, steps=10), SF_DATA
    else:
        p, data = _logistic_plan(mechanism), LOGISTIC
    want = batch.run(p, data).digests[0]
    agents = make_agents(p, data)
    run_rounds(agents, p.steps, reverse=True)
    assert batch.model_digest(np.stack([a.theta for a in agents])) == want
    assert engine.run(p, data).model_digest == want


def test_sr_gt_agents_resume_from_a_snapshot(make_agents, run_rounds):
    p = _logistic_plan("sr-gt", steps=8)
    full = make_agents(p, LOGISTIC)
    run_rounds(full, 8, reverse=True)
    part = make_agents(p, LOGISTIC)
    run_rounds(part, 3, reverse=True)
    fresh = make_agents(p, LOGISTIC)
    for a, snap in zip(fresh, [a.snapshot() for a in part], strict=True):
        a.restore(snap)
    run_rounds(fresh, 5, reverse=True)
    assert [a.theta.tobytes() for a in fresh] == [a.theta.tobytes() for a in full]


def test_engines_refuse_a_delta_below_the_task_bound(make_agents):
    p = _logistic_plan("dpop")
    sched = LaplaceSchedule(**(p.laplace.to_dict() | {"delta_grad": 1e-3}))
    weak = make_plan("dpop", GRAPH, steps=3, clip_norm=1.0, laplace=sched, task=p.task)
    with pytest.raises(PlanError, match="re-plan with --delta-grad"):
        batch.run(weak, LOGISTIC)
    with pytest.raises(PlanError, match="delta_grad"):
        make_agents(weak, LOGISTIC)


# ---------------------------------------------------------------- plans
def test_laplace_section_is_hashed_only_when_present():
    p = _sf_plan("sr-gt")
    back = NoisePlan.from_bytes(p.to_bytes())
    assert back.plan_hash == p.plan_hash and back.laplace == p.laplace
    assert back.share(2).laplace == p.laplace
    g = make_plan(
        "dp-dsgd", GRAPH, steps=4, participation=p.participation, clip_norm=1.0,
        learning_rate=0.1, noise_multiplier=1.0,
    )  # fmt: skip
    assert "laplace" not in g.to_dict()


def test_tampered_or_mismatched_plans_are_refused():
    from edgedp import _codec

    p = _sf_plan("sr-gt")
    d = p.to_dict()
    d["laplace"]["epsilon"] = 10.0
    with pytest.raises(PlanError, match="hash mismatch"):
        NoisePlan.from_bytes(_codec.encode({"plan": d, "hash": p.plan_hash}))
    d["laplace"]["gamma"] = 0.01  # γβ = 10 > 1: refused while decoding, before any hash
    with pytest.raises(PlanError, match=r"gamma\*beta <= 1"):
        NoisePlan.from_bytes(_codec.encode({"plan": d, "hash": "0" * 64}))
    with pytest.raises(ValueError, match="needs laplace"):
        make_plan("sr-gt", GRAPH, steps=3, clip_norm=1.0)
    with pytest.raises(ValueError, match="Gaussian"):
        make_plan(
            "dp-dsgd", GRAPH, steps=3, participation=p.participation, clip_norm=1.0,
            learning_rate=0.1, noise_multiplier=1.0, laplace=p.laplace,
        )  # fmt: skip
    with pytest.raises(ValueError, match="beta=0"):
        make_plan("dpop", GRAPH, steps=3, clip_norm=math.inf, laplace=p.laplace, task=SF_TASK)
    example = LaplaceSchedule(**(p.laplace.to_dict() | {"adjacency": "zero-out"}))
    with pytest.raises(ValueError, match="finite"):
        make_plan("sr-gt", GRAPH, steps=3, clip_norm=math.inf, laplace=example)


# ---------------------------------------------------------------- sensor fusion (Eq. 42)
def test_sensor_fusion_optimum_is_the_least_squares_solution():
    M, v, w = SF.measurement, SF.observation, SF.regularization  # noqa: N806
    rows = np.concatenate([np.concatenate([M[i], math.sqrt(w[i]) * np.eye(2)]) for i in range(6)])
    targets = np.concatenate([np.concatenate([v[i], np.zeros(2)]) for i in range(6)])
    np.testing.assert_allclose(SF.optimum, np.linalg.lstsq(rows, targets)[0], rtol=1e-12)
    grad = SF.gradient(np.broadcast_to(SF.optimum, (6, 2))).sum(axis=0)
    np.testing.assert_allclose(grad, 0, atol=1e-10)
    assert SF.strong_convexity > 0 and SF.smoothness >= SF.strong_convexity


def test_sensor_fusion_data_gives_the_paper_gradient_and_residual():
    model = models.for_task(SF_TASK, SF_DATA.features)
    theta = np.random.default_rng(0).normal(size=(6, 2))
    per_example = model.per_example_gradients(theta, SF_DATA.x, SF_DATA.y)
    np.testing.assert_allclose(per_example.mean(axis=1), SF.gradient(theta), rtol=1e-12)
    loss = model.loss(theta, np.broadcast_to(SF_DATA.x_test, (6, 2, 2)), SF_DATA.y_test)
    np.testing.assert_allclose(loss.sum(), SF.residual(theta), rtol=1e-12)


# ---------------------------------------------------------------- command line
def _cli_json(capsys, *args):
    assert cli([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_plan_reports_spent_and_infinite_horizon_epsilon(tmp_path, capsys):
    path = str(tmp_path / "sr.plan")
    common = [path, "--topology", "er:20:0.3:1", "--steps", "50", "--target-eps", "1"]
    out = _cli_json(
        capsys, "plan", "laplace", *common, "--mechanism", "sr-gt", "--gamma", "0.001",
        "--beta", "1000", "--q1", "0.97", "--q2", "0.99", "--dataset", "digits",
        "--model", "softmax:10",
    )  # fmt: skip
    # 50 messages release x(1..49): ε(1 − (q1/q2)^49); the published final release one more
    assert out["epsilon_spent"] == pytest.approx(1 - (0.97 / 0.99) ** 49, rel=1e-12)
    assert out["epsilon_with_final_release"] == pytest.approx(1 - (0.97 / 0.99) ** 50, rel=1e-12)
    assert out["epsilon"] == 1.0 and out["delta"] == 0.0
    assert out["adjacency"] == "zero-out" and out["epsilon_replace_one"] == 2.0
    assert 0 < out["pld_epsilon"] < out["epsilon_with_final_release"]
    assert "not covered" in out["final_model"]
    # δ from the task: clip · √650 / ⌊1437/20⌋ (digits, softmax:10, whole local set, zero-out)
    assert out["delta_grad"] == pytest.approx(math.sqrt(650) / 71, rel=1e-12)
    acc = _cli_json(capsys, "account", path, "--steps-done", "10")
    assert acc["epsilon_spent"] == pytest.approx(1 - (0.97 / 0.99) ** 9, rel=1e-12)
    bad = ["plan", "laplace", *common, "--mechanism", "sr-gt", "--gamma", "0.01", "--beta", "1000"]
    assert cli([*bad, "--q1", "0.97", "--q2", "0.99"]) == 2
    assert "gamma*beta <= 1" in capsys.readouterr().err
    bad[bad.index("0.01")] = "0.001"
    assert cli([*bad, "--q1", "0.99", "--q2", "0.98"]) == 2
    assert "q1 < q2 < 1" in capsys.readouterr().err


def test_cli_tune(capsys):
    out = _cli_json(
        capsys, "tune", "sr-gt", "--target-eps", "1", "--delta-grad", "1", "--problem",
        "sensor-fusion:20", "--c1", "100", "--c2", "1e-3", "--restarts", "2", "--sweeps", "5",
    )  # fmt: skip
    assert 0 < out["q1"] < out["q2"] < 1 and out["gamma"] * out["beta"] <= 1 + 1e-12
    assert out["bound"] <= out["best_random_start_bound"]
