"""DOME on gossip (paper 002): shared sketches, plans, accountant, and engine equivalence."""

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import edgedp_topologies
from edgedp import factors, families, rng, streams, wire
from edgedp.accounting import mf
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.errors import PlanError
from edgedp.families.dome import accounting as dome_acc
from edgedp.families.dome import rules as dome
from edgedp.families.dome import sketch
from edgedp.families.dome.sketch import SketchSpec
from edgedp.gossip import SketchExtra, StepContext
from edgedp.models.linear import LinearModel
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine

GRAPH = edgedp_topologies.parse("er:8:0.5:2")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 8, seed=3)
D = DATA.features + 1  # logistic: weights + bias


def _plan(spec, *, steps=12, factor=None, batch_size=0, noise_multiplier=1.0):
    m = DATA.local_size
    per_epoch = m // (batch_size or m)
    return make_plan(
        "dome",
        GRAPH,
        steps=steps,
        participation=Participation(-(-steps // per_epoch), per_epoch),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=noise_multiplier,
        factor=factor,
        seed=9,
        task=TaskSpec(dataset="synthetic-logistic", batch_size=batch_size),
        sketch=spec,
    )


# ---------------------------------------------------------------- shared bases
@given(
    d=st.integers(1, 60),
    frac=st.floats(0.0, 1.0),
    kind=st.sampled_from(sketch.BASES),
    seed=st.integers(0, 2**32),
    t=st.integers(0, 50),
)
def test_bases_are_orthonormal_deterministic_and_contract(d, frac, kind, seed, t):
    k = max(1, round(frac * d))
    spec = SketchSpec(dim=k, basis=kind, seed=seed)
    B = sketch.basis(spec, t, d)  # noqa: N806
    S = B.dense()  # noqa: N806
    assert S.shape == (d, k)
    # tolerance: a few ulps per column from normalization / CGS2
    assert np.abs(S.T @ S - np.eye(k)).max() < 1e-12
    again = sketch.basis(spec, t, d)
    assert again.dense().tobytes() == S.tobytes()  # every node gets the same bits
    x = np.random.default_rng(seed % 1000).standard_normal((3, d))
    c = B.project(x)
    np.testing.assert_allclose(c, x @ S, atol=1e-12)
    assert np.all(np.linalg.norm(c, axis=-1) <= np.linalg.norm(x, axis=-1) * (1 + 1e-12))
    np.testing.assert_allclose(B.project(B.lift(c)), c, atol=1e-12)  # SᵀS c = c
    np.testing.assert_allclose(B.row_energy(), np.sum(S * S, axis=1), atol=1e-12)
    # a node's projection has the same bits alone or in a stack
    assert B.project(x[1]).tobytes() == c[1].tobytes()
    assert B.lift(c[2]).tobytes() == B.lift(c)[2].tobytes()


def test_refresh_schedule_and_seed():
    d, k = 40, 6
    every2 = SketchSpec(dim=k, refresh=2, seed=1)
    b = [sketch.basis(every2, t, d).dense() for t in range(4)]
    assert np.array_equal(b[0], b[1]) and np.array_equal(b[2], b[3])
    assert not np.array_equal(b[1], b[2])
    fixed = SketchSpec(dim=k, refresh=0, seed=1)
    assert np.array_equal(sketch.basis(fixed, 0, d).dense(), sketch.basis(fixed, 99, d).dense())
    other = SketchSpec(dim=k, refresh=2, seed=2)
    assert not np.array_equal(sketch.basis(other, 0, d).dense(), b[0])
    with pytest.raises(ValueError, match="dim=41 <= model dimension d=40"):
        sketch.basis(SketchSpec(dim=41), 0, d)


def test_block_groups_cover_every_coordinate_once():
    B = sketch.basis(SketchSpec(dim=7, seed=3), 0, 50)  # noqa: N806
    real = B.index[B.index < 50]
    assert sorted(real.tolist()) == list(range(50))
    sizes = np.sum(B.index < 50, axis=1)
    assert sizes.min() >= 50 // 7 and sizes.max() <= -(-50 // 7)


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"dim": 0}, "dim=0"),
        ({"dim": 3, "basis": "fft"}, "basis='fft'"),
        ({"dim": 3, "optimizer": "lion"}, "optimizer='lion'"),
        ({"dim": 3, "clip": "both"}, "clip='both'"),
        ({"dim": 3, "beta1": 1.0}, "beta1=1.0"),
        ({"dim": 3, "noise_aware": True}, "optimizer='adam'"),
        ({"dim": 3, "refresh": -1}, "refresh=-1"),
    ],
)
def test_sketch_spec_errors_name_the_value(bad, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        SketchSpec(**bad)


# ---------------------------------------------------------------- privacy
@given(seed=st.integers(0, 2**31), kind=st.sampled_from(sketch.BASES), k=st.integers(1, 30))
def test_one_example_moves_the_sketched_query_by_at_most_the_clip_norm(seed, kind, k):
    """Sensitivity in ℝᵏ: ‖Sᵀ(Σ clip(g) − Σ' clip(g))‖ ≤ Δ (add/remove one example)."""
    from edgedp import clipping

    r = np.random.default_rng(seed)
    g = r.standard_normal((5, 30)) * r.uniform(0.1, 10)
    B = sketch.basis(SketchSpec(dim=k, basis=kind, seed=seed), seed % 7, 30)  # noqa: N806
    full, _, _ = clipping.clipped_sum(g, 1.0)
    minus, _, _ = clipping.clipped_sum(g[:-1], 1.0)
    assert np.linalg.norm(B.project(full) - B.project(minus)) <= 1.0 + 1e-12  # clip="model"
    full, _, _ = clipping.clipped_sum(B.project(g), 1.0)
    minus, _, _ = clipping.clipped_sum(B.project(g[:-1]), 1.0)
    assert np.linalg.norm(full - minus) <= 1.0 + 1e-12  # clip="sketch"


def test_guarantee_equals_dp_dsgd_and_mf_for_the_same_sigma():
    p = _plan(SketchSpec(dim=4), steps=20, noise_multiplier=2.0)
    ref = mf.ldp_guarantee(np.eye(20), participation=Participation(20, 1), noise_multiplier=2.0)
    g = p.guarantee()
    assert (g.mu, g.sensitivity) == (ref.mu, ref.sensitivity)
    # closed form: C = I, 20 participations -> sens = √20; μ = 1/σ
    assert g.sensitivity == pytest.approx(np.sqrt(20)) and g.mu == 0.5
    anti = _plan(SketchSpec(dim=4, refresh=0), steps=20, factor=factors.AntiPGD())
    ref = mf.ldp_guarantee(
        factors.AntiPGD().strategy(20), participation=Participation(20, 1), noise_multiplier=1.0
    )
    assert anti.guarantee().sensitivity == ref.sensitivity
    assert dome_acc.noise_energy(p, model_dim=D)["ratio"] == 4 / D
    assert p.noise_std == pytest.approx(2.0 * np.sqrt(20))


def test_plan_round_trip_and_refusals():
    spec = SketchSpec(dim=5, basis="gaussian", optimizer="adam", noise_aware=True, seed=4)
    p = _plan(spec)
    back = NoisePlan.from_bytes(p.to_bytes())
    assert back.plan_hash == p.plan_hash and back.sketch == spec
    assert p.share(3).sketch == spec
    assert families.for_mechanism("dome") is dome.RULES
    assert _plan(SketchSpec(dim=6)).plan_hash != _plan(SketchSpec(dim=5)).plan_hash
    with pytest.raises(PlanError, match="needs a sketch section"):
        _plan(None)
    with pytest.raises(PlanError, match="sketch section belongs exactly to 'dome'"):
        make_plan(
            "dp-dsgd",
            GRAPH,
            steps=4,
            participation=Participation(4, 1),
            clip_norm=1.0,
            learning_rate=0.1,
            noise_multiplier=1.0,
            sketch=SketchSpec(dim=3),
        )
    with pytest.raises(PlanError, match="not derived for the temporal factor 'antipgd'"):
        _plan(
            SketchSpec(dim=3, optimizer="adam", noise_aware=True),
            factor=factors.AntiPGD(),
        )


# ---------------------------------------------------------------- the update rule
def _ctx(t, grad, noise=None, spec=None, batch_size=1, noise_std=0.0):
    sketched = SketchExtra(
        spec,
        noise_std,
        lambda th, project: project(grad),  # one unclipped "example"
    )
    return StepContext(
        t, 0.5, 1.0, batch_size, lambda th: grad, lambda: noise, None if spec is None else sketched
    )


def test_full_rank_sketch_without_noise_is_dsgd():
    """k = d: S is orthogonal, so DOME's rule reduces to D-SGD's (up to rounding)."""
    from edgedp import gossip as _gossip

    r = np.random.default_rng(0)
    d, n = 9, 4
    W = np.full((n, n), 1 / n)  # noqa: N806
    theta = r.standard_normal((n, d))
    spec = SketchSpec(dim=d, basis="gaussian", seed=5)
    grad = r.standard_normal((n, d))
    st_d, msg = dome.send(dome.init_state(theta), _ctx(0, grad, spec=spec))
    st_d = dome.receive(st_d, W, np.broadcast_to(msg, (n, n, d)), _ctx(0, grad, spec=spec))
    st_r, half = _gossip.send(_gossip.init_state(theta), _ctx(0, grad))
    st_r = _gossip.receive(st_r, W, np.broadcast_to(half, (n, n, d)), _ctx(0, grad))
    np.testing.assert_allclose(dome.model(st_d), _gossip.model(st_r), atol=1e-12)


def test_message_is_k_floats_and_only_span_is_mixed():
    r = np.random.default_rng(1)
    d, k = 20, 3
    spec = SketchSpec(dim=k, seed=2)
    S = sketch.basis(spec, 0, d).dense()  # noqa: N806
    theta = r.standard_normal((2, d))
    grad = r.standard_normal((2, d))
    noise = r.standard_normal((2, k))
    state, msg = dome.send(dome.init_state(theta), _ctx(0, grad, noise, spec))
    assert msg.shape == (2, k)
    # the half step moves θ only inside span(S), by the decoded private gradient
    np.testing.assert_allclose(state["theta"], theta - 0.5 * (grad @ S + noise) @ S.T)
    W = np.array([[0.5, 0.5], [0.5, 0.5]])  # noqa: N806
    out = dome.receive(state, W, np.broadcast_to(msg, (2, 2, k)), _ctx(0, grad, noise, spec))
    new = out["theta"]
    proj = np.eye(d) - S @ S.T
    np.testing.assert_allclose(new @ proj, state["theta"] @ proj, atol=1e-12)  # ⊥ part local
    np.testing.assert_allclose(new[0] @ S, new[1] @ S, atol=1e-12)  # consensus inside span


def test_noise_aware_second_moment_is_unbiased():
    """Paper 002 Lemma 3.2: E[(S(Sᵀg + z))²] − a² Diag(SSᵀ) = (SSᵀg)² (Monte Carlo)."""
    d, k, a, trials = 30, 6, 0.7, 40_000
    B = sketch.basis(SketchSpec(dim=k, seed=8), 0, d)  # noqa: N806
    g = np.random.default_rng(3).standard_normal(d)
    z = a * np.random.default_rng(4).standard_normal((trials, k))
    noisy = B.lift(B.project(g) + z)
    corrected = np.mean(noisy**2, axis=0) - a * a * B.row_energy()
    exact = B.lift(B.project(g)) ** 2
    # 5 standard errors of the Monte Carlo mean, coordinate by coordinate
    se = np.std(noisy**2, axis=0) / np.sqrt(trials)
    assert np.all(np.abs(corrected - exact) <= 5 * se + 1e-12)


# ---------------------------------------------------------------- engines
CASES = {
    "block-sgd": (SketchSpec(dim=4), None, 0),
    "block-clip-model": (SketchSpec(dim=6, clip="model", refresh=3), None, 8),
    "gaussian-adam-noise-aware": (
        SketchSpec(dim=3, basis="gaussian", optimizer="adam", noise_aware=True),
        None,
        8,
    ),
    "fixed-basis-antipgd": (SketchSpec(dim=5, refresh=0, seed=3), factors.AntiPGD(), 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_engines_agree_bitwise(case, make_agents):
    spec, factor, bs = CASES[case]
    p = _plan(spec, factor=factor, batch_size=bs)
    res = batch.run(p, DATA)
    digest = res.digests[0]
    ev = engine.run(p, DATA)
    assert ev.model_digest == digest
    agents = make_agents(p, DATA)
    for _ in range(p.steps):
        outs = [a.begin_round() for a in agents]
        for o, a in reversed(list(zip(outs, agents, strict=True))):  # any arrival order
            assert wire.decode(o.frames).arrays[0].shape == (spec.dim,)
            for dst in o.recipients:
                assert agents[dst].receive(
                    [bytes(f) for f in o.frames], authenticated_sender=a.node
                )
        for a in agents:
            a.end_round()
    assert batch.model_digest(np.stack([a.theta for a in agents])) == digest
    # bytes: k float64 per message (batch: payload; event: payload + the wire header)
    assert res.bytes_sent == res.messages * 8 * spec.dim
    assert ev.messages == res.messages
    assert ev.bytes_sent - res.bytes_sent < ev.messages * 200


def test_snapshot_restore_with_adam_state(make_agents, run_rounds):
    p = _plan(SketchSpec(dim=4, optimizer="adam", noise_aware=True), steps=8)
    full = make_agents(p, DATA)
    part = make_agents(p, DATA)
    run_rounds(full, 8)
    run_rounds(part, 3)
    fresh = make_agents(p, DATA)
    for a, s in zip(fresh, [a.snapshot() for a in part], strict=True):
        a.restore(s)
    run_rounds(fresh, 5)
    assert [a.theta.tobytes() for a in fresh] == [a.theta.tobytes() for a in full]


def test_agent_rejects_a_d_float_message(make_agents):
    p = _plan(SketchSpec(dim=4))
    a = make_agents(p, DATA)[0]
    sender = a.neighbours[0]
    msg = wire.Message(bytes.fromhex(p.plan_hash), 0, sender, "model", (np.zeros(D),))
    assert not a.receive(wire.encode(msg), authenticated_sender=sender)
    assert sum(a.metrics.rejected.values()) == 1


def test_cli_plan_dome(tmp_path):
    out = tmp_path / "dome.plan"
    cmd = [sys.executable, "-m", "edgedp_cli", "plan", "dome", str(out), "--topology", "er:8:0.5:2"]
    cmd += ["--steps", "10", "--participation", "10,1"]
    cmd += ["--sketch-dim", "3", "--dataset", "synthetic-logistic", "--target-eps", "4"]
    cmd += ["--delta", "1e-5", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    payload = json.loads(res.stdout)
    assert payload["mechanism"] == "dome" and payload["sketch_dim"] == 3
    assert payload["payload_bytes_per_message"] == 24
    assert payload["epsilon"] == pytest.approx(4.0)
    assert NoisePlan.from_bytes(out.read_bytes()).sketch.dim == 3
    too_big = [c if c != "3" else "99" for c in cmd]
    res = subprocess.run(too_big, capture_output=True, text=True)
    assert res.returncode == 2 and "exceeds the model dimension d=21" in res.stderr


def test_dome_without_a_sketch_in_the_context_raises():
    with pytest.raises(ValueError, match="sketch section"):
        dome.send(dome.init_state(np.zeros(3)), _ctx(0, np.zeros(3)))


def test_pndp_refuses_dome_plans(tmp_path):
    from edgedp.accounting import pndp

    p = _plan(SketchSpec(dim=4))
    with pytest.raises(ValueError, match="certified under LDP only"):
        pndp.PNDPSetting.from_plan(p)
    path = tmp_path / "d.plan"
    path.write_bytes(p.to_bytes())
    cmd = [sys.executable, "-m", "edgedp_cli", "account", str(path), "--trust", "pndp"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 2 and "not available for dome plans" in res.stderr


def test_reuse_last_dropout_rule_is_refused_when_the_basis_changes():
    keys = streams.RunKeys(rng.seed_secret(0), "0" * 64, "test")
    model = LinearModel("logistic", DATA.features)
    kw = {
        "model": model,
        "x": DATA.x[0],
        "y": DATA.y[0],
        "noise_key": keys.noise(0),
        "batch_key": keys.batch(0),
        "dropout_rule": "reuse-last",
    }
    with pytest.raises(ValueError, match="another sketch basis"):
        Agent(_plan(SketchSpec(dim=4)).share(0), **kw)
    Agent(_plan(SketchSpec(dim=4, refresh=0)).share(0), **kw)  # one basis: allowed


def test_faulty_network_with_dropouts_and_a_crash():
    """Lossy links, per-round dropouts and a crash/restart: deterministic, finite, every
    node's k-dim noise stream advanced once per round (never reused or skipped)."""
    from edgedp_sim.churn import Crash, Faults
    from edgedp_sim.links import Latency, Network

    p = _plan(SketchSpec(dim=4, optimizer="adam"), steps=16)
    net = Network(
        latency=Latency.from_dict({"kind": "lognormal", "median_ms": 20, "sigma": 0.5}),
        bandwidth_mbps=10,
        loss=0.05,
        round_timeout_s=0.3,
    )
    faults = Faults(dropout=0.2, crashes=(Crash(3, 0.4, 0.5),))
    a = engine.run(p, DATA, network=net, faults=faults, seed=1)
    b = engine.run(p, DATA, network=net, faults=faults, seed=1)
    assert a.model_digest == b.model_digest
    assert a.lost_messages > 0 and a.skipped_rounds > 0 and a.crashes == 1
    assert np.all(np.isfinite(a.test_loss))
    sim = engine._Sim(p, DATA, net, Faults(dropout=0.3), 4, 5, None)
    sim.run()
    for agent in sim.agents:
        assert agent.noise_state.step == p.steps and agent.done
        assert agent.noise.dim == 4


@pytest.mark.parametrize("kind", ["whisper", "decor"])
def test_cross_agent_noise_in_the_sketched_space(kind):
    """dome + Whisper/DECOR: same guarantee as the unsketched plan, k-dim correlated noise,
    batch engine == event engine (agents with their cross keys)."""
    from edgedp.families.cross import planning as planner

    kw = {
        "steps": 8,
        "participation": Participation(8, 1),
        "clip_norm": 1.0,
        "learning_rate": 0.3,
        "noise_multiplier": 1.5,
        "seed": 4,
        "task": TaskSpec(dataset="synthetic-logistic"),
    }
    plain = planner.plan_cross_agent(kind, GRAPH, **kw).plan
    p = planner.plan_cross_agent(kind, GRAPH, sketch=SketchSpec(dim=5), **kw).plan
    assert p.mechanism == "dome" and p.cross_agent.kind == kind
    assert NoisePlan.from_bytes(p.to_bytes()).plan_hash == p.plan_hash
    assert p.guarantee().mu == plain.guarantee().mu == 1 / 1.5
    assert p.sensitivity == plain.sensitivity
    assert dome_acc.guarantee(p).mu == p.guarantee().mu
    res = batch.run(p, DATA)
    assert res.bytes_sent == res.messages * 8 * 5
    assert engine.run(p, DATA).model_digest == res.digests[0]
    with pytest.raises(ValueError, match="combines with"):
        planner.plan_cross_agent("zipdl", GRAPH, sketch=SketchSpec(dim=5), **kw)
    with pytest.raises(ValueError, match="not derived"):
        planner.plan_cross_agent(
            kind, GRAPH, sketch=SketchSpec(dim=5, optimizer="adam", noise_aware=True), **kw
        )


def test_cli_plan_whisper_with_sketch(tmp_path):
    out = tmp_path / "w.plan"
    cmd = [
        sys.executable,
        "-m",
        "edgedp_cli",
        "plan",
        "cross",
        str(out),
        "--topology",
        "er:8:0.5:2",
    ]
    cmd += ["--steps", "10", "--participation", "10,1", "--mechanism", "whisper"]
    cmd += ["--sketch-dim", "5", "--dataset", "synthetic-logistic", "--target-eps", "4"]
    cmd += ["--delta", "1e-5", "--json"]
    payload = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert payload["mechanism"] == "dome" and payload["sketch_dim"] == 5
    assert payload["epsilon"] == pytest.approx(4.0)
    p = NoisePlan.from_bytes(out.read_bytes())
    assert p.cross_agent.kind == "whisper" and p.sketch.dim == 5
    zipdl = [c if c != "whisper" else "zipdl" for c in cmd]
    res = subprocess.run(zipdl, capture_output=True, text=True)
    assert res.returncode == 2 and "only for --mechanism dome, whisper or decor" in res.stderr


def test_block_projection_of_a_stack_equals_each_node_alone():
    rs = np.random.default_rng(1)
    for d, k, length in [(2, 1, 2), (65, 8, 9), (300, 37, 30), (50, 3, 17)]:
        index = rs.integers(0, d + 1, (k, length))
        weight = rs.standard_normal((k, length))
        basis = sketch.Basis("block", d, k, index=index, weight=weight)
        x = rs.standard_normal((13, 5, d)) * 10 ** rs.uniform(-3, 3, (13, 5, d))
        want = np.empty((13, 5, k))
        for lead in np.ndindex(13, 5):  # S^T x of one node: its products summed per column
            ext = np.concatenate([x[lead], [0.0]])
            want[lead] = [np.sum(ext[index[j]] * weight[j]) for j in range(k)]
        assert np.array_equal(basis.project(x), want)
        assert np.array_equal(basis.project(x[2, 3]), want[2, 3])
        assert basis.project(x[:0]).shape == (0, 5, k)  # no node: an empty stack
    # rows longer than a chunk's share and a stack cut into many chunks
    d, k, length = 400, 5, 160
    index = rs.integers(0, d + 1, (k, length))
    weight = rs.standard_normal((k, length))
    basis = sketch.Basis("block", d, k, index=index, weight=weight)
    x = rs.standard_normal((40, d))
    ext = np.concatenate([x, np.zeros((40, 1))], axis=1)
    want = np.array([[np.sum(row[index[j]] * weight[j]) for j in range(k)] for row in ext])
    old_chunk = sketch._CHUNK
    try:
        sketch._CHUNK = 3 * k * length  # three nodes per chunk
        assert np.array_equal(basis.project(x), want)
    finally:
        sketch._CHUNK = old_chunk
