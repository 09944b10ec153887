"""Cross-agent noise: plans, generation, engine equivalence, dropouts and the CLI."""

import json
import subprocess
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest

import edgedp_topologies
from edgedp import rng, streams
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError
from edgedp.families.cross import accounting as acc
from edgedp.families.cross import noise as cross_agent
from edgedp.families.cross import planning as planner
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_sim import batch, datasets

GRAPH = edgedp_topologies.parse("er:8:0.5:2")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 8, seed=3)


@dataclass(frozen=True)
class Case:
    mechanism: str
    options: dict = field(default_factory=dict)


CASES = [
    Case("whisper"),
    Case("whisper", {"form": "lowrank", "rank": 3}),
    Case("whisper", {"form": "dense"}),
    Case("decor"),
    Case("zipdl", {"message_variance": 2.0}),
    Case("muffliato", {"gossip_rounds": 3}),
]


def _plan(case: Case, steps=6, **kw):
    return planner.plan_cross_agent(
        case.mechanism,
        GRAPH,
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        seed=9,
        task=TaskSpec(dataset="synthetic-logistic"),
        **{**case.options, **kw},
    ).plan


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.mechanism}-{c.options}")
def test_agents_equal_batch_engine_bitwise(case, make_agents, run_rounds):
    p = _plan(case)
    agents = make_agents(p, DATA)
    run_rounds(agents, p.steps, reverse=True)  # arrival order must not matter
    digest = batch.model_digest(np.stack([a.theta for a in agents]))
    assert digest == batch.run(p, DATA, trials=2).digests[0]


def test_plan_round_trip_and_tampering():
    p = _plan(CASES[0])
    again = NoisePlan.from_bytes(p.to_bytes())
    assert again.plan_hash == p.plan_hash and again.cross_agent.kind == "whisper"
    from edgedp import _codec

    outer = _codec.decode(p.to_bytes())
    outer["plan"]["cross_agent"]["diag"] = np.asarray(outer["plan"]["cross_agent"]["diag"]) * 0.5
    with pytest.raises(PlanError, match="hash"):
        NoisePlan.from_bytes(_codec.encode(outer))
    import hashlib

    outer["hash"] = hashlib.sha256(_codec.canonical_bytes(outer["plan"])).hexdigest()
    with pytest.raises(PlanError, match="sensitivity"):  # less noise than certified: refused
        NoisePlan.from_bytes(_codec.encode(outer))


def test_gaussian_plans_keep_their_encoding():
    p = make_plan(
        "dp-dsgd",
        GRAPH,
        steps=4,
        participation=Participation(4, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
    )
    assert "cross_agent" not in p.to_dict() and p.share(0).cross_agent is None
    with pytest.raises(ValueError, match="families.cross.planning"):
        make_plan(
            "whisper",
            GRAPH,
            steps=4,
            participation=Participation(4, 1),
            clip_norm=1.0,
            learning_rate=0.1,
            noise_multiplier=1.0,
        )


def test_noise_has_the_planned_covariance():
    p = _plan(CASES[0])
    d = 40_000
    noise = cross_agent.CrossNoise.for_plan(p, streams.RunKeys.simulation(p), [0])
    own = p.noise_std * rng.gaussian(rng.derive_key(b"t", "own"), 0, (1, p.n, d))
    v = noise.compose(own, 0)[0]
    want = p.noise_std**2 * p.cross_agent.covariance(p.edges)
    # sample covariance over d i.i.d. coordinates: entries within ~5 standard errors
    np.testing.assert_allclose(v @ v.T / d, want, atol=5 * np.sqrt(2 / d) * want.max())


def test_pairwise_terms_cancel_and_zipdl_messages_cancel():
    p = _plan(CASES[3])  # decor
    noise = cross_agent.CrossNoise.for_plan(p, streams.RunKeys.simulation(p), [0])
    zero = np.zeros((1, p.n, 5))
    assert np.abs(noise.compose(zero, 3).sum(axis=1)).max() < 1e-12
    z = _plan(CASES[4])
    zn = cross_agent.CrossNoise.for_plan(z, streams.RunKeys.simulation(z), [0])
    msgs = zn.compose(zero, 3)[0]  # (n, m, d) with zero common part
    weighted = np.einsum("um,umd->ud", zn.recipient_weights, msgs)
    assert np.abs(weighted).max() < 1e-12


def test_gaussian_draws_equal_per_key_calls():
    keys = np.array(
        [[rng.derive_key(b"k", i, j) for j in range(3)] for i in range(2)], dtype=object
    )
    out = cross_agent.gaussian_draws(keys, 7, (2, 4))
    for i in range(2):
        for j in range(3):
            assert np.array_equal(out[i, j], rng.gaussian(keys[i, j], 7, (2, 4)))


def test_muffliato_counts_gradient_rounds_only():
    p = _plan(CASES[5], steps=12)
    # K = 3 over 12 rounds with (12, 1): 4 gradient rounds -> sensitivity 2 (C = I)
    assert p.sensitivity == pytest.approx(2.0) and p.mu == 1.0
    spent = p.guarantee(steps_done=4)  # rounds 0 and 3 were gradient rounds
    assert spent.mu == pytest.approx(np.sqrt(2 / 4))


def test_trust_report_decor_neighbourhood_is_sigma_pair():
    p = _plan(CASES[3])
    delta = 1e-5
    report = acc.trust_report(p, delta=delta)
    P = acc.unit_precision(
        p.cross_agent, edges=p.edges, mixing_index=p.mixing_index, mixing_weight=p.mixing_weight
    )
    mu_hood = p.mu * np.sqrt((1 / p.cross_agent.diag[0]) / P.max())
    from edgedp.accounting import gdp

    assert report["neighbourhood"] == pytest.approx(gdp.epsilon(mu_hood, delta=delta))
    assert report["eavesdropper"] <= report["insider"] <= report["neighbourhood"]


def test_dropouts_never_weaken_privacy():
    p = _plan(CASES[0])
    spec, edges = p.cross_agent, p.edges
    full = acc.precision_diagonal(spec.covariance(edges))
    R = spec.covariance(edges)
    alive = [0, 1, 2, 4, 5, 7]
    # without mitigation the online nodes' releases are a subset of the planned ones
    sub = acc.precision_diagonal(R[np.ix_(alive, alive)])
    assert np.all(sub <= full[alive] + 1e-12)
    # re-planning on the online subgraph keeps every node within the unit bound
    _, RA = planner.replan_alive(GRAPH, alive)
    assert np.max(acc.precision_diagonal(RA)) <= 1 + 1e-9


def test_cli_plan_json(tmp_path):
    out = tmp_path / "w.plan"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgedp_cli",
            "plan",
            "cross",
            str(out),
            "--topology",
            "er:12:0.5:1",
            "--steps",
            "50",
            "--participation",
            "50,1",
            "--mechanism",
            "whisper",
            "--target-eps",
            "8",
            "--delta",
            "1e-5",
            "--clip-norm",
            "0.1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    for key in (
        "independent_variance",
        "noise_variance",
        "post_mixing_variance",
        "epsilon",
        "delta",
        "trust_model",
    ):
        assert key in r
    assert r["epsilon"] == pytest.approx(8.0, rel=1e-9) and r["clip_norm"] == 0.1
    assert r["post_mixing_variance"] < r["ldp_post_mixing_variance"]
    assert r["independent_variance"] < r["noise_variance"]
    assert NoisePlan.from_bytes(out.read_bytes()).plan_hash == r["plan_hash"]


@pytest.mark.parametrize("case", [CASES[0], CASES[4]], ids=["whisper", "zipdl"])
def test_event_engine_equals_batch_engine(case):
    from edgedp_sim import engine

    p = _plan(case)
    ev = engine.run(p, DATA)  # real wire frames, one per recipient for Zip-DL
    assert ev.model_digest == batch.run(p, DATA).digests[0]


@pytest.mark.parametrize(
    ("case", "private"),
    [(CASES[4], False), (CASES[3], True)],
    ids=["zipdl-plan-seed", "decor-x25519"],
)
def test_agent_processes(tmp_path, case, private):
    """Real ZeroMQ processes: with plan-seed keys Zip-DL's per-recipient frames give the batch
    engine's bits; DECOR with private per-edge keys (X25519 on the CURVE keys, never in the
    plan) runs to the end with other noise."""
    from edgedp.models import model_digest
    from firmware_py import deploy

    g = edgedp_topologies.parse("er:5:0.6:4")
    data = datasets.partition(datasets.load("synthetic-logistic", seed=21), 5, seed=21)
    p = planner.plan_cross_agent(
        case.mechanism,
        g,
        steps=5,
        participation=Participation(5, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.5,
        seed=21,
        topology_name="er:5:0.6:4",
        task=TaskSpec(dataset="synthetic-logistic"),
        **case.options,
    ).plan
    path = tmp_path / "run.plan"
    path.write_bytes(p.to_bytes())
    run = deploy.local_run(path, tmp_path / "run", private_noise=private)
    assert run.wait(timeout=120) == [0] * 5
    same = model_digest(run.final_models()) == batch.run(p, data).digests[0]
    assert same != private


def test_replanning_gives_the_same_plan_bytes():
    assert _plan(CASES[0]).to_bytes() == _plan(CASES[0]).to_bytes()
