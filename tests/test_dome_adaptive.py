"""DOME's adaptive basis (paper 002 Alg. 2) on gossip: tree aggregate, lag, engine equality."""

import numpy as np
import pytest

import edgedp_topologies
from edgedp import wire
from edgedp.accounting.participation import Participation
from edgedp.families.dome import sketch, sketch_adaptive
from edgedp.families.dome.sketch import SketchSpec
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine
from edgedp_sim.churn import Faults

GRAPH = edgedp_topologies.parse("er:8:0.5:2")  # BFS tree from node 0 has height 2
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 8, seed=3)
D = DATA.features + 1


def _plan(spec, *, steps=14, batch_size=0):
    m = DATA.local_size
    per_epoch = m // (batch_size or m)
    return make_plan(
        "dome",
        GRAPH,
        steps=steps,
        participation=Participation(-(-steps // per_epoch), per_epoch),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        seed=9,
        task=TaskSpec(dataset="synthetic-logistic", batch_size=batch_size),
        sketch=spec,
    )


# ---------------------------------------------------------------- the pure parts
def test_spanning_tree_sum_and_lag():
    tree = sketch_adaptive.spanning_tree([[1, 2], [0, 3], [0, 3], [1, 2]])
    assert tree.parent == (-1, 0, 0, 1) and tree.depth == (0, 1, 1, 2) and tree.height == 2
    vals = np.arange(12.0).reshape(4, 3)
    # order: c0 + (c1 + c3) + c2
    expect = vals[0] + (vals[1] + vals[3]) + vals[2]
    assert sketch_adaptive.tree_sum(tree, vals).tobytes() == expect.tobytes()
    # A(s) reaches every node at the start of round s + max(1, 2H)
    assert [sketch_adaptive.min_lag(h, 1) for h in (0, 1, 2)] == [1, 2, 4]
    assert sketch_adaptive.min_lag(2, 3) == 2
    with pytest.raises(ValueError, match="not connected"):
        sketch_adaptive.spanning_tree([[1], [0], [3], [2]])


@pytest.mark.parametrize("k, energy, probes", [(1, 0.9, 0), (4, 0.9, 1), (6, 0.5, 2), (6, 1.0, 0)])
def test_update_sketch_is_orthonormal_deterministic_and_tracks_the_aggregate(k, energy, probes):
    d = 30
    spec = SketchSpec(dim=k, basis="adaptive", lag=1, energy=energy, probes=probes, seed=4)
    S0 = sketch_adaptive.initial_basis(spec, d)  # noqa: N806
    r = np.random.default_rng(0)
    direction = r.standard_normal(d)
    U = lam = None  # noqa: N806
    S = S0  # noqa: N806
    for j in range(6):
        g = direction * (1 + 0.1 * j) + 0.05 * r.standard_normal(d)
        S, U, lam = sketch_adaptive.update_sketch(spec, S, U, lam, g, j)  # noqa: N806
        again = sketch_adaptive.update_sketch(spec, S, U, lam, g, j)
        assert (
            again[0].rows.tobytes()
            == sketch_adaptive.update_sketch(spec, S, U, lam, g, j)[0].rows.tobytes()
        )
        dense = S.dense()
        # tolerance: CGS2 restores orthogonality to a few ulps per column
        assert np.abs(dense.T @ dense - np.eye(k)).max() < 1e-12
        assert U.shape == (k, d) and lam.shape == (k,) and np.all(lam >= 0)
    if k - probes >= 1:  # the dominant direction of the aggregates is kept in span(S)
        unit = direction / np.linalg.norm(direction)
        assert np.linalg.norm(S.dense().T @ unit) > 0.99
    # a zero aggregate keeps no PCA column: all probes
    S_zero, _, _ = sketch_adaptive.update_sketch(spec, S0, None, None, np.zeros(d), 0)  # noqa: N806
    assert np.abs(S_zero.dense().T @ S_zero.dense() - np.eye(k)).max() < 1e-12


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"dim": 3, "basis": "adaptive"}, "lag=0 >= 1"),
        ({"dim": 3, "basis": "adaptive", "lag": 2, "refresh": 0}, "refresh=0 >= 1"),
        ({"dim": 3, "basis": "adaptive", "lag": 2, "energy": 0.0}, "energy=0.0"),
        ({"dim": 3, "basis": "adaptive", "lag": 2, "probes": 4}, "probes=4 <= dim=3"),
        ({"dim": 3, "lag": 2}, "'adaptive' only"),
        (
            {"dim": 3, "basis": "adaptive", "lag": 2, "mean_removal": True, "clip": "model"},
            "clip='sketch'",
        ),
    ],
)
def test_adaptive_spec_errors_name_the_value(bad, needle):
    with pytest.raises(ValueError, match=needle):
        SketchSpec(**bad)


def test_plan_checks_the_lag_and_round_trips():
    with pytest.raises(ValueError, match="height 2, so refresh=1 needs lag >= 4"):
        _plan(SketchSpec(dim=3, basis="adaptive", lag=3))
    p = _plan(SketchSpec(dim=3, basis="adaptive", lag=2, refresh=3, energy=0.8, probes=2))
    back = NoisePlan.from_bytes(p.to_bytes())
    assert back.sketch == p.sketch and back.plan_hash == p.plan_hash
    # the guarantee is the random basis' one: the basis is post-processing
    ref = _plan(SketchSpec(dim=3, basis="gaussian", refresh=3)).guarantee()
    g = p.guarantee()
    assert (g.mu, g.sensitivity) == (ref.mu, ref.sensitivity)
    # earlier (non-adaptive) plans keep their serialized sketch section and hash
    assert "lag" not in SketchSpec(dim=3).to_dict()
    with pytest.raises(ValueError, match="AdaptiveSketch"):
        sketch.basis(p.sketch, 0, D)


# ---------------------------------------------------------------- engines
CASES = {
    "every-round": (SketchSpec(dim=4, basis="adaptive", lag=4), 0),
    "windows-adam": (
        SketchSpec(dim=3, basis="adaptive", lag=2, refresh=3, optimizer="adam", noise_aware=True),
        8,
    ),
    "mean-removal": (
        SketchSpec(dim=4, basis="adaptive", lag=3, refresh=2, mean_removal=True, probes=2),
        0,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_adaptive_engines_agree_bitwise(case, make_agents):
    spec, bs = CASES[case]
    p = _plan(spec, batch_size=bs)
    res = batch.run(p, DATA, trials=2)
    digest = res.digests[0]
    assert batch.run(p, DATA).digests[0] == digest  # a trial's bases do not see the others
    # the adaptive bases moved away from the initial Gaussian sketch
    assert not np.array_equal(res.bases[0].dense(), sketch_adaptive.initial_basis(spec, D).dense())
    ev = engine.run(p, DATA)
    assert ev.model_digest == digest
    agents = make_agents(p, DATA)
    tree = p.share(0).tree
    for _ in range(p.steps):
        outs = [a.begin_round() for a in agents]
        for o, a in reversed(list(zip(outs, agents, strict=True))):  # any arrival order
            for dst in o.recipients:
                frames = [bytes(f) for f in o.frames_for(dst)]
                on_tree = dst in tree.neighbours(a.node)
                assert len(wire.decode(frames).arrays) <= 1 + on_tree
                assert agents[dst].receive(frames, authenticated_sender=a.node)
        for a in agents:
            a.end_round()
    assert batch.model_digest(np.stack([a.theta for a in agents])) == digest
    assert all(not a.metrics.rejected for a in agents)
    # bytes: + one k-float frame up and one down each of the n − 1 tree edges per round
    assert res.aggregate_bytes == 2 * 2 * (p.n - 1) * spec.dim * 8 * p.steps
    assert ev.bytes_sent - (res.bytes_sent - res.aggregate_bytes // 2) < ev.messages * 200


def test_the_basis_is_a_function_of_the_released_values_only():
    """Replaying only the releases c_u(t) (tree-summed) rebuilds the engine's bases."""
    spec = SketchSpec(dim=4, basis="adaptive", lag=4)
    p = _plan(spec)
    releases = []

    class Releases:
        def observe(self, view):  # clip="sketch": c_u = Σ clip(Sᵀg_b) + z_u, all in ℝᵏ
            releases.append(view.gradients[0] + view.noise[0])

    res = batch.run(p, DATA, observers=[Releases()])
    tree = p.share(0).tree
    batch_size = DATA.local_size
    replay = sketch_adaptive.AdaptiveSketch(spec, D, nodes=p.n, batch_size=batch_size)
    for t, c in enumerate(releases):
        if t + 1 == p.steps:
            assert replay.basis(t).dense().tobytes() == res.bases[0].dense().tobytes()
        replay.deliver(t, sketch_adaptive.tree_sum(tree, c))
    # other private data with the same releases would give the same bases: nothing but
    # the releases (and the public plan) enters AdaptiveSketch


def test_faults_are_refused_and_a_missing_tree_frame_changes_nothing(make_agents):
    p = _plan(SketchSpec(dim=4, basis="adaptive", lag=4), steps=6)
    with pytest.raises(ValueError, match="spanning-tree frame"):
        engine.run(p, DATA, faults=Faults(dropout=0.1))
    agents = make_agents(p, DATA)
    tree = p.share(0).tree
    for t in range(p.steps):
        outs = [a.begin_round() for a in agents]
        child = tree.children[0][0]
        for o, a in zip(outs, agents, strict=True):
            for dst in o.recipients:
                if t == 3 and (a.node, dst) == (child, 0):
                    continue  # the child's partial sum to the root is lost
                agents[dst].receive(
                    [bytes(f) for f in o.frames_for(dst)], authenticated_sender=a.node
                )
        if t == 3:
            before = agents[0].theta.copy()
            with pytest.raises(sketch_adaptive.MissingAggregateError, match="round 3"):
                agents[0].end_round()
            assert agents[0].metrics.rejected["MissingAggregateError"] == 1
            assert np.array_equal(agents[0].theta, before) and agents[0].round == 3
            break
        for a in agents:
            a.end_round()


def test_cli_plan_adaptive_picks_the_minimum_lag(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "dome.plan"
    cmd = [sys.executable, "-m", "edgedp_cli", "plan", "dome", str(out), "--topology", "er:8:0.5:2"]
    cmd += ["--steps", "10", "--participation", "10,1"]
    cmd += ["--sketch-dim", "3", "--sketch-basis", "adaptive", "--sketch-energy", "0.8"]
    cmd += ["--sketch-mean-removal"]
    cmd += ["--dataset", "synthetic-logistic", "--noise-multiplier", "1"]
    cmd += ["--json"]
    payload = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    # er:8:0.5:2: BFS tree of height 2 -> A(s) everywhere at round s + 4 -> lag 4
    assert payload["sketch_lag"] == 4 and payload["aggregate_floats_per_round"] == 2 * 7 * 3
    spec = NoisePlan.from_bytes(out.read_bytes()).sketch
    assert (spec.basis, spec.lag, spec.energy, spec.mean_removal) == ("adaptive", 4, 0.8, True)
    res = subprocess.run(cmd[:-1] + ["--sketch-lag", "2"], capture_output=True, text=True)
    assert res.returncode == 2 and "needs lag >= 4" in res.stderr


def test_adaptive_basis_is_refused_with_cross_agent_noise():
    """Tree frames (subtree sums of releases) are outside the insider views it certifies."""
    from edgedp.families.cross import planning as planner

    spec = SketchSpec(dim=4, basis="adaptive", lag=4)
    kw = {"steps": 10, "participation": Participation(10, 1), "clip_norm": 1.0}
    kw |= {"learning_rate": 0.3, "noise_multiplier": 1.5, "seed": 4}
    with pytest.raises(ValueError, match="insider and neighbourhood views"):
        planner.plan_cross_agent(
            "whisper", GRAPH, sketch=spec, task=TaskSpec(dataset="synthetic-logistic"), **kw
        )


def test_a_malformed_tree_frame_is_rejected_and_counted(make_agents):
    p = _plan(SketchSpec(dim=4, basis="adaptive", lag=4), steps=4)
    agents = make_agents(p, DATA)
    tree = p.share(0).tree
    child = tree.depth.index(tree.height)  # the deepest nodes send partial sums from round 0
    parent = tree.parent[child]
    outs = [a.begin_round() for a in agents]
    good = [bytes(f) for f in outs[child].frames_for(parent)]
    assert len(wire.decode(good).arrays) == 2  # model + the child's partial sum
    msg = wire.decode(good)
    bad = wire.encode(wire.Message(msg.plan_hash, 0, child, "model", (msg.arrays[0],)))
    assert not agents[parent].receive([bytes(f) for f in bad], authenticated_sender=child)
    nan = wire.encode(
        wire.Message(msg.plan_hash, 0, child, "model", (msg.arrays[0], msg.arrays[1] * np.nan))
    )
    assert not agents[parent].receive([bytes(f) for f in nan], authenticated_sender=child)
    assert agents[parent].metrics.rejected["BadPayload"] == 2 and child in agents[parent].missing()
    assert agents[parent].receive(good, authenticated_sender=child)
