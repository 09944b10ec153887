"""Bad input never ends or silently disables privacy.

A NaN or inf gradient adds exactly zero to the clipped sum (a NaN message would itself show
that the example took part), non-finite data is refused where it is loaded, no engine sends
a non-finite message, a BLT whose noise stream would explode is refused, a misspelled config
key is an error rather than a default, and `edgedp plan` refuses a participation the task
does not run.
"""

import json
import math
import subprocess
import sys
import tomllib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import edgedp_topologies
from edgedp import clipping, factors, models, streams, wire
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.errors import NonFiniteMessageError, PlanError
from edgedp.families.mf import compact_blt
from edgedp.plan import NoisePlan, TaskSpec, batch_schedule, make_plan
from edgedp.planning import mf_optimal
from edgedp_sim import batch, datasets, engine, scenarios, sweep
from firmware_py import checkpoint, config, daemon, deploy

# ---------------------------------------------------------------- clipping

POISON = st.sampled_from([np.nan, np.inf, -np.inf])


@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 6), st.integers(1, 5)),
        elements=st.floats(-1e6, 1e6),
    ),
    st.floats(0.01, 100),
    st.data(),
)
def test_nonfinite_examples_add_exactly_zero(g, clip, data):
    mask = data.draw(hnp.arrays(np.bool_, g.shape[:-1]))
    bad = g.copy()
    rows = np.argwhere(mask)
    for idx in rows:
        col = data.draw(st.integers(0, g.shape[-1] - 1))
        bad[tuple(idx)][col] = data.draw(POISON)
    total, hit, count = clipping.clipped_sum(bad, clip)
    assert np.all(np.isfinite(total))
    np.testing.assert_array_equal(count, mask.sum(axis=-1))
    # a poisoned example adds +0.0: the same bits as a zero gradient in its place ...
    zeroed = g.copy()
    zeroed[mask] = 0.0
    ref, ref_hit, ref_count = clipping.clipped_sum(zeroed, clip)
    assert total.tobytes() == ref.tobytes()
    np.testing.assert_array_equal(hit, ref_hit)
    assert not ref_count.any()
    # ... and as leaving it out; one node alone has the bits it has in the batch
    for i, j in np.ndindex(*g.shape[:2]):
        alone, _, n_bad = clipping.clipped_sum(bad[i, j], clip)
        kept, _, _ = clipping.clipped_sum(g[i, j][~mask[i, j]], clip)
        assert alone.tobytes() == total[i, j].tobytes() == kept.tobytes()
        assert int(n_bad) == int(mask[i, j].sum())


@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 5)), elements=st.floats()),
    st.floats(0.01, 100),
)
def test_per_update_clipping_never_passes_a_nonfinite_vector(x, clip):
    # st.floats() draws NaN, ±inf and values near the float range (squared norms overflow)
    out, hit = clipping.clip_l2(x, clip)
    bad = clipping.nonfinite(x)
    np.testing.assert_array_equal(bad, ~np.all(np.isfinite(x), axis=-1))
    assert np.all(np.isfinite(out)) and not np.any(out[bad]) and not np.any(hit[bad])
    norms = np.array([math.hypot(*row) if row.size else 0.0 for row in out])
    assert np.all(norms <= clip * (1 + 1e-12))


def test_a_finite_vector_whose_squared_norm_overflows_keeps_its_direction():
    out, hit = clipping.clip_l2(np.array([[1e300, -1e300], [3e200, 4e200]]), 2.0)
    np.testing.assert_allclose(out, [[math.sqrt(2), -math.sqrt(2)], [1.2, 1.6]], rtol=1e-15)
    assert hit.tolist() == [True, True]


# ---------------------------------------------------------------- engines

GRAPH = edgedp_topologies.parse("ring:4")
TASK = TaskSpec(model="linear", dataset="synthetic-linear:2:40")  # 8 examples per node


def _plan(steps=3, **kw):
    return make_plan(
        "dp-dsgd",
        GRAPH,
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=kw.pop("learning_rate", 0.3),
        seed=9,
        noise_multiplier=kw.pop("noise_multiplier", 1.0),
        task=TASK,
        **kw,
    )


def _data(x_fix=None, y_fix=None):
    """The task's partition; node 0's example 3 replaced (default: finite data whose
    squared-error gradient overflows to ±inf/NaN: x = (1e308, 1e308), y = 1e308)."""
    fed = datasets.partition(datasets.load(TASK.dataset, seed=9), 4, seed=9)
    x, y = fed.x.copy(), fed.y.copy()
    x[0, 3] = 1e308 if x_fix is None else x_fix
    y[0, 3] = 1e308 if y_fix is None else y_fix
    return datasets.FederatedData(x, y, fed.x_test, fed.y_test, fed.task)


def test_an_overflowing_example_is_left_out_of_an_agent_round(make_agents):
    p = _plan()
    with np.errstate(over="ignore", invalid="ignore"):  # the model's own overflow
        agent = make_agents(p, _data())[0]
        out = agent.begin_round()
    message = wire.decode([bytes(f) for f in out.frames]).arrays[0]
    assert np.all(np.isfinite(message))
    # θ₀ = 0: an all-zero example has gradient 0, so the round is the same bits
    clean = make_agents(p, _data(x_fix=0.0, y_fix=0.0))[0]
    clean_out = clean.begin_round()
    assert agent.last_gradient.tobytes() == clean.last_gradient.tobytes()
    assert bytes(out.frames[1]) == bytes(clean_out.frames[1])
    report = agent.end_round()
    assert report.nonfinite == 1 and agent.metrics.nonfinite == 1
    assert agent.metrics.to_dict()["nonfinite"] == 1
    assert clean.metrics.nonfinite == 0


def test_engines_agree_on_data_with_an_overflowing_example(make_agents, run_rounds):
    p, data = _plan(steps=6), _data()
    with np.errstate(over="ignore", invalid="ignore"):
        agents = make_agents(p, data)
        run_rounds(agents, p.steps)
        res = batch.run(p, data)
        ev = engine.run(p, data)
    digest = batch.model_digest(np.stack([a.theta for a in agents]))
    assert np.all(np.isfinite(res.models))
    assert res.digests[0] == digest == ev.model_digest
    # node 0 holds the example and uses its whole local set every step
    assert res.nonfinite == ev.nonfinite == sum(a.metrics.nonfinite for a in agents) == 6


def test_no_engine_sends_a_nonfinite_message(make_agents):
    # η = 1e308 with σ = 100: the half step θ − η(Σ clip(g) + noise)/B overflows in round 0
    p = _plan(learning_rate=1e308, noise_multiplier=100.0)
    agents = make_agents(p, _data(x_fix=0.0, y_fix=0.0))
    first = None
    for a in agents:
        theta, noise_state = a.theta.copy(), a.noise_state
        try:
            with np.errstate(over="ignore"):  # the overflow itself is expected here
                a.begin_round()
        except NonFiniteMessageError as exc:
            first = a.node if first is None else first
            assert f"node {a.node}, round 0" in str(exc) and "nothing was sent" in str(exc)
            # the agent is still at the start of round 0: nothing changed, a snapshot works
            assert a.round == 0 and a.message is None
            assert a.noise_state.step == noise_state.step == 0  # regenerated from the key
            assert all(
                x.tobytes() == y.tobytes()
                for x, y in zip(a.noise_state.buffers, noise_state.buffers, strict=True)
            )
            assert a.theta.tobytes() == theta.tobytes() and a.metrics.sent == 0
            assert a.metrics.rejected["NonFiniteMessageError"] == 1
            assert a.snapshot()["round"] == 0
    assert first is not None
    with np.errstate(over="ignore"):
        with pytest.raises(NonFiniteMessageError, match=rf"node {first} \(trial 0\), round 0"):
            batch.run(p, _data(x_fix=0.0, y_fix=0.0))
        with pytest.raises(NonFiniteMessageError, match=rf"node {first}, round 0"):
            engine.run(p, _data(x_fix=0.0, y_fix=0.0))


# ---------------------------------------------------------------- data loading


def test_agent_and_simulators_refuse_nonfinite_data():
    p = _plan()
    fed = datasets.partition(datasets.load(TASK.dataset, seed=9), 4, seed=9)
    x, y = fed.x.copy(), fed.y.copy()
    x[1, 2, 0], y[2, 5] = np.nan, np.inf
    model = models.for_task(TASK, 2)
    run_keys = streams.RunKeys.simulation(p)
    keys = {"noise_key": run_keys.noise(1), "batch_key": run_keys.batch(1)}
    with pytest.raises(ValueError, match="Expected x to be finite; it has 1 NaN/Inf"):
        Agent(p.share(1), model=model, x=x[1], y=y[1], **keys)
    with pytest.raises(ValueError, match="Expected y to be finite; it has 1 NaN/Inf"):
        Agent(p.share(2), model=model, x=x[2], y=y[2], **keys)
    with pytest.raises(ValueError, match="Expected x to be finite; it has 1 NaN/Inf"):
        datasets.FederatedData(x, fed.y, fed.x_test, fed.y_test, fed.task)
    with pytest.raises(ValueError, match="Expected y to be finite"):
        datasets.PerTrialData(fed.x[None], y[None], fed.x_test, fed.y_test, fed.task)


def _deployment(tmp_path, p, *, shard_edit=None):
    """Plan, keys, shards and node.toml files for a 2-node run; returns node 0's config."""
    (tmp_path / "run.plan").write_bytes(p.to_bytes())
    keys = [deploy.generate_keys(tmp_path / "keys", f"node-{u}") for u in range(p.n)]
    shards = deploy.write_shards(p, tmp_path / "shards")
    if shard_edit is not None:
        with np.load(shards[0]) as s:
            x, y = s["x"].copy(), s["y"].copy()
        shard_edit(x, y)
        np.savez(shards[0], x=x, y=y)
    ports = deploy.free_ports(p.n)
    return deploy.write_configs(
        tmp_path / "run.plan",
        p,
        endpoints={u: f"tcp://127.0.0.1:{ports[u]}" for u in range(p.n)},
        public_keys={u: k["public_key"] for u, k in enumerate(keys)},
        out=tmp_path / "configs",
        key_files={u: k["secret_key_file"] for u, k in enumerate(keys)},
        noise_files=None,
        shards={u: str(s) for u, s in enumerate(shards)},
        round_timeout=0.1,
        startup_timeout=0.1,
    )[0]


def _two_node_plan(**kw):
    steps = 2
    return make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("complete:2"),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=kw.pop("learning_rate", 0.3),
        seed=1,
        noise_multiplier=kw.pop("noise_multiplier", 1.0),
        task=TaskSpec(dataset="synthetic-logistic"),
    )


def test_daemon_refuses_a_shard_with_nonfinite_values(tmp_path, capsys):
    def poison(x, y):
        x[5, 2], x[7, 0], x[7, 1] = np.nan, np.inf, -np.inf

    cfg = _deployment(tmp_path, _two_node_plan(), shard_edit=poison)
    assert daemon.main(["--config", str(cfg)]) == daemon.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "config error: data.shard" in err and "node-0.npz" in err
    assert "x has 3 NaN/Inf entries (in 2 examples)" in err
    assert not (tmp_path / "configs" / "state" / "node-0" / "sent").exists()  # nothing sent


def test_daemon_stops_before_sending_a_nonfinite_message(tmp_path, capsys):
    # η = 1e308, σ = 1e5: the noise over B = 1,600 examples is ~100, the half step overflows
    cfg = _deployment(tmp_path, _two_node_plan(learning_rate=1e308, noise_multiplier=1e5))
    with np.errstate(over="ignore"):
        assert daemon.main(["--config", str(cfg)]) == daemon.EXIT_DIVERGED
    assert "node 0, round 0" in capsys.readouterr().err
    state = tmp_path / "configs" / "state" / "node-0"
    # nothing recorded as released or sent; the checkpoint stays at the start of round 0
    assert checkpoint.load(state / "checkpoint")["round"] == 0
    lines = [json.loads(s) for s in (state / "metrics.jsonl").read_text().splitlines()]
    assert not any(m["event"] == "sent" for m in lines)
    assert lines[-1]["event"] == "error" and lines[-1]["round"] == 0
    assert lines[-1]["rejected"] == {"NonFiniteMessageError": 1} and lines[-1]["sent"] == 0


# ---------------------------------------------------------------- BLT stability


@pytest.mark.parametrize("theta, omega", [(0.5, 0.1), (0.5, 1.49), (0.9, -0.09), (0.2, -0.3)])
def test_one_buffer_blt_radius_is_the_decay_minus_the_weight(theta, omega):
    # closed form, one buffer: s ← (θ − ω)s + z, so C⁻¹'s column is 1, −ω, −ω(θ−ω), ...
    f = factors.BLT((theta,), (omega,))
    assert factors.blt_inverse_radius((theta,), (omega,)) == pytest.approx(abs(theta - omega))
    expected = [1.0] + [-omega * (theta - omega) ** (t - 1) for t in range(1, 8)]
    np.testing.assert_allclose(f.inverse_coefficients(8), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "decays, weights, radius",
    [
        ((0.5,), (2.0,), 1.5),  # ω >= 0 does not make it stable
        ((0.5,), (1.5,), 1.0),  # on the unit circle: the noise does not decay
        ((0.5,), (-0.6,), 1.1),  # a negative weight above the decay
        ((0.9, 0.3), (-0.4, 0.2), None),  # two buffers: the largest |eigenvalue|
    ],
)
def test_blt_with_an_unstable_inverse_is_refused(decays, weights, radius):
    rho = factors.blt_inverse_radius(decays, weights)
    if radius is not None:
        assert rho == pytest.approx(radius)
    assert rho >= 1
    with pytest.raises(ValueError, match=f"spectral radius .* = {rho:.6g} < 1"):
        factors.BLT(decays, weights)
    # the same factor inside a plan file is refused when the plan is loaded
    unchecked = object.__new__(factors.BLT)
    object.__setattr__(unchecked, "decays", tuple(decays))
    object.__setattr__(unchecked, "weights", tuple(weights))
    object.__setattr__(unchecked, "kind", "blt")
    data = make_plan(
        "blt",
        GRAPH,
        steps=4,
        participation=Participation(4, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
        factor=unchecked,
        task=TASK,
    ).to_bytes()
    with pytest.raises(PlanError, match="spectral radius"):
        NoisePlan.from_bytes(data)


@given(st.integers(1, 4), st.integers(0, 10_000))
def test_blt_radius_decides_whether_the_noise_stays_bounded(buffers, seed):
    r = np.random.default_rng(seed)
    decays, weights = r.uniform(0.01, 0.99, buffers), r.normal(0, 0.6, buffers)
    rho = factors.blt_inverse_radius(decays, weights)
    if rho >= 1:
        with pytest.raises(ValueError, match="spectral radius"):
            factors.BLT(tuple(decays), tuple(weights))
        return
    column = factors.BLT(tuple(decays), tuple(weights)).inverse_coefficients(400)
    # s_t is a sum of rho^t-decaying modes; 1e-3 leaves room for transient growth
    if rho < 0.9:
        assert np.abs(column[-50:]).max() < 1e-3


def test_planner_blts_are_accepted():
    steps = 64
    H = mf_optimal.prefix_sum_gram(steps)
    for signed in (False, True):
        fit = compact_blt.fit_blt(
            H, participation=Participation(4, 16), buffers=2, signed=signed, restarts=2
        )
        assert factors.blt_inverse_radius(fit.factor.decays, fit.factor.weights) < 1
        assert factors.BLT(fit.factor.decays, fit.factor.weights) == fit.factor


# ---------------------------------------------------------------- config files

NODE_TOML = """\
[node]
id = 0
bind = "tcp://127.0.0.1:5600"
key_file = "node-0.key_secret"
noise_secret = "plan-seed"

[plan]
file = "run.plan"

[data]
shard = "node-0.npz"

[model]
kind = "logistic"

[run]
checkpoint_dir = "state"
max_epsilon = 4.0

[[neighbours]]
id = 1
endpoint = "tcp://127.0.0.1:5601"
public_key = "0123456789012345678901234567890123456789"
"""


@pytest.mark.parametrize(
    "old, new, needle",
    [
        ("max_epsilon = 4.0", "max_epsilonn = 1", "unknown key run.max_epsilonn"),
        ("[run]", "[runn]", "unknown section [runn] (did you mean [run]?)"),
        ("[plan]", "[plan]\nfiel = 1", "unknown key plan.fiel (did you mean plan.file?)"),
        ("id = 1", "id = 1\npublickey = 1", "neighbours[0].publickey (did you mean neighbours"),
        ("[node]", "delta = 1e-5\n[node]", "unknown key delta (did you mean run.delta?)"),
        ("[model]", "[modle]", "unknown section [modle] (did you mean [model]?)"),
    ],
)
def test_node_toml_refuses_unknown_keys_with_the_closest_one(tmp_path, old, new, needle):
    path = tmp_path / "node.toml"
    path.write_text(NODE_TOML)
    assert config.load(path).max_epsilon == 4.0
    assert NODE_TOML.count(old) == 1
    path.write_text(NODE_TOML.replace(old, new))
    with pytest.raises(config.ConfigError) as info:
        config.load(path)
    assert needle in str(info.value)
    if "max_epsilonn" in new:
        assert str(info.value) == "unknown key run.max_epsilonn (did you mean run.max_epsilon?)"


def test_node_toml_sections_allow_every_key_the_loader_reads(tmp_path):
    full = NODE_TOML.replace(
        "max_epsilon = 4.0",
        'max_epsilon = 4.0\nmetrics = "m.jsonl"\nfinal_model = "f.npy"\nround_timeout = 1.0\n'
        'startup_timeout = 2.0\ndropout_rule = "self"\ndelta = 1e-5',
    ).replace('kind = "logistic"', 'kind = "logistic"\nfile = "model.onnx"')
    path = tmp_path / "node.toml"
    path.write_text(full)
    cfg = config.load(path)
    assert (cfg.delta, cfg.dropout_rule, cfg.model_file.name) == (1e-5, "self", "model.onnx")
    # every key the loader reads is allowed (SECTIONS may grow: new keys need no change here)
    raw = tomllib.loads(full)
    written = {(s, k) for s, t in raw.items() for k in (t[0] if isinstance(t, list) else t)}
    allowed = {(s, k) for s, keys in config.SECTIONS.items() for k in keys}
    assert written <= allowed and len(written) == 19  # all but noise_secret_file


SCENARIO = {
    "seed": 1,
    "steps": 5,
    "topology": {"spec": "ring:6"},
    "task": {"dataset": "synthetic-logistic"},
    "privacy": {"mechanism": "dp-dsgd", "noise_multiplier": 1.0},
}


@pytest.mark.parametrize(
    "table, key, needle",
    [
        ("privacy", "clip_nrom", "unknown key privacy.clip_nrom (did you mean privacy.clip_norm?)"),
        ("task", "batchsize", "unknown key task.batchsize (did you mean task.batch_size?)"),
        ("leakage", "trails", "unknown key leakage.trails (did you mean leakage.trials?)"),
        ("faults", "dropuot", "unknown key faults.dropuot (did you mean faults.dropout?)"),
        (None, "seeed", "unknown key seeed (did you mean seed?)"),
    ],
)
def test_scenario_refuses_unknown_keys_with_the_closest_one(table, key, needle):
    raw = json.loads(json.dumps(SCENARIO))
    (raw.setdefault(table, {}) if table else raw)[key] = 1
    with pytest.raises(scenarios.ScenarioError) as info:
        scenarios.parse(raw)
    assert needle in str(info.value)


def test_scenario_file_latency_and_sweep_keys_are_checked(tmp_path):
    base = tmp_path / "base.toml"
    base.write_text(
        'seed = 1\nsteps = 5\n[topology]\nspec = "ring:6"\n[task]\n'
        'dataset = "synthetic-logistic"\n[privacy]\nmechanism = "dp-dsgd"\n'
        'noise_multiplier = 1.0\n[network]\nlatency = { kind = "lognormal", median_ms = 4, '
        "sigmaa = 0.6 }\n"
    )
    with pytest.raises(scenarios.ScenarioError) as info:
        scenarios.load(base)
    assert str(info.value).startswith("base.toml: ")
    assert "network.latency.sigmaa (did you mean network.latency.sigma?)" in str(info.value)
    base.write_text(base.read_text().replace("sigmaa", "sigma"))
    assert scenarios.load(base).network.latency.params["sigma"] == 0.6
    with pytest.raises(scenarios.ScenarioError, match=r"unknown key seedz \(did you mean seeds"):
        sweep.points({"scenario": "base.toml", "seedz": [1]}, tmp_path)
    grid = {"scenario": "base.toml", "grid": {"faults.dropuot": [0.1]}}
    with pytest.raises(scenarios.ScenarioError, match=r"did you mean faults\.dropout\?"):
        sweep.points(grid, tmp_path)
    with pytest.raises(scenarios.ScenarioError, match="engine = 'fast'"):
        sweep.points({"scenario": "base.toml", "engine": "fast"}, tmp_path)


# ---------------------------------------------------------------- participation


def test_plan_refuses_a_participation_the_task_cannot_run(tmp_path):
    # digits-parity: 1,437 training examples, 359 per node on ring:4; batch 0 = all 359,
    # so every example is in every step: (k, b) = (10, 1) over 10 steps
    args = ["--topology", "ring:4", "--mechanism", "dp-dsgd", "--steps", "10", "--batch-size"]
    args += ["0", "--target-eps", "2", "--delta", "1e-6", str(tmp_path / "x.plan")]
    cmd = [sys.executable, "-m", "edgedp_cli", "plan", "sgd", *args]
    proc = subprocess.run([*cmd, "--participation", "3,4"], capture_output=True, text=True)
    assert proc.returncode == 2 and not (tmp_path / "x.plan").exists()
    assert "--participation 3,4 does not cover this task" in proc.stderr
    assert proc.stderr.strip().endswith("re-plan with --participation 10,1")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2 and "(this task runs --participation 10,1)" in proc.stderr
    proc = subprocess.run([*cmd[:5], "--help"], capture_output=True, text=True)
    text = " ".join(proc.stdout.split())
    assert "k,b: each example participates at most k times, exactly b steps apart" in text
    assert "(b = batches per epoch of the local data)" in text


def test_participation_helper_matches_the_engines():
    task = TaskSpec(dataset="digits-parity", batch_size=32)
    run = datasets.task_participation(task, nodes=4, steps=1000)
    assert run == Participation(91, 11)  # 359 // 32 = 11 batches per epoch, ⌈1000/11⌉ = 91
    p = make_plan(
        "dp-dsgd",
        GRAPH,
        steps=1000,
        participation=run,
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
        task=task,
    )
    assert batch_schedule(p, 359, dim=65) == (32, 11)
    for wrong in (Participation(90, 11), Participation(91, 10)):
        with pytest.raises(ValueError, match="re-plan with --participation 91,11"):
            datasets.check_participation(wrong, task, nodes=4, steps=1000)
    raw = json.loads(json.dumps(SCENARIO))
    raw["privacy"]["participation"] = "2,1"
    with pytest.raises(scenarios.ScenarioError, match='privacy.participation = "5,1"'):
        scenarios.parse(raw)
    raw["privacy"]["participation"] = "5,1"
    assert scenarios.parse(raw).plan.participation == Participation(5, 1)
