"""Leakage estimation and adversary probes: KSG vs NPEET, vs exact Gaussian MI, probes, attacks."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy.special import digamma

import edgedp_topologies
from edgedp import models
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import adversary, attacks, batch, datasets, engine, leakage, linear_attack

npeet = pytest.importorskip("npeet_plus.estimators")


@pytest.fixture
def npeet_mi(monkeypatch):
    """NPEET's ``mi`` on the samples as given: its global-RNG tie noise switched off."""
    monkeypatch.setattr(npeet, "add_noise", lambda x, intens=1e-10: x)
    return npeet.mi


# ---------------------------------------------------------------- KSG = NPEET
@dataclass(frozen=True)
class Case:
    n: int
    dx: int
    dy: int
    rho: float
    scale: float = 1.0


CASES = [
    Case(n, dx, dy, rho)
    for n in (20, 400, 3000)
    for dx, dy in ((1, 1), (1, 3), (2, 2), (3, 1))
    for rho in (0.0, 0.6, 0.99)
] + [Case(1000, 1, 1, 0.9, scale) for scale in (1e-6, 1e3, 1e6)]


def _pair(g, c: Case):
    x = c.scale * g.standard_normal((c.n, c.dx))
    noise = c.scale * g.standard_normal((c.n, c.dy))
    y = c.rho * x[:, :1].repeat(c.dy, 1) + math.sqrt(1 - c.rho**2) * noise
    return leakage.add_tie_noise(x, g), leakage.add_tie_noise(y, g)


def test_ksg_equals_npeet_on_identical_noised_samples(npeet_mi):
    g = np.random.default_rng(7)
    worst = 0.0
    for c in CASES:
        x, y = _pair(g, c)
        ours = float(leakage.ksg_mi(x, y, prenoised=True))
        worst = max(worst, abs(ours - npeet_mi(x, y)))
    assert worst == 0.0  # bit-identical: same distances, same counts, same summation


def test_ksg_equals_npeet_with_ties_and_batches(npeet_mi):
    g = np.random.default_rng(8)
    x = np.round(g.standard_normal((4, 500, 1)))  # discrete values: ties broken by the noise
    y = x + np.round(g.standard_normal((4, 500, 2)))
    xn, yn = leakage.add_tie_noise(x, g), leakage.add_tie_noise(y, g)
    batched = leakage.ksg_mi(xn, yn, prenoised=True)
    assert batched.shape == (4,)
    np.testing.assert_array_equal(batched, [npeet_mi(a, b) for a, b in zip(xn, yn, strict=True)])


def test_ksg_noise_comes_from_the_generator_only():
    x = np.random.default_rng(0).standard_normal((300, 1))
    a = leakage.ksg_mi(x, x**3, rng=np.random.default_rng(1))
    assert a == leakage.ksg_mi(x, x**3, rng=np.random.default_rng(1))
    with pytest.raises(TypeError, match="Generator"):
        leakage.ksg_mi(x, x)
    with pytest.raises(ValueError, match="more than k"):
        leakage.ksg_mi(x[:3], x[:3], rng=np.random.default_rng(0))


# ---------------------------------------------------------------- KSG vs exact Gaussian MI
@pytest.mark.parametrize("snr", [0.01, 0.1, 1.0, 10.0, 100.0])
def test_ksg_matches_exact_gaussian_mi(snr):
    # I = V + E: exact ½ log2(1 + SNR). Tolerance 0.05 bits + 2 %: KSG's bias (k = 3) grows
    # with MI; experiments/ksg_vs_gaussian.py measures ≤ 0.03 bits for scalars at N = 5,000
    # over SNR 0.01–100, and a larger negative bias for 3-dim variables at high MI.
    g = np.random.default_rng(11)
    v = g.standard_normal((4, 2000, 1))
    obs = v + g.standard_normal((4, 2000, 1)) / math.sqrt(snr)
    exact = leakage.gaussian_mi([[1.0, 1.0], [1.0, 1.0 + 1.0 / snr]], 1)
    assert exact == pytest.approx(0.5 * math.log2(1 + snr), rel=1e-12)
    est = leakage.ksg_mi(v, obs, rng=g).mean()
    assert abs(est - exact) <= 0.05 + 0.02 * exact


def test_gaussian_mi_of_correlated_vectors():
    # two independent coordinate pairs with correlations r1, r2: −½ Σ log2(1 − r²)
    r1, r2 = 0.3, 0.9
    cov = np.eye(4)
    cov[0, 2] = cov[2, 0] = r1
    cov[1, 3] = cov[3, 1] = r2
    expected = -0.5 * (math.log2(1 - r1**2) + math.log2(1 - r2**2))
    assert leakage.gaussian_mi(cov, 2) == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- the normalizer I(V; V)
def test_self_mi_reference_is_10_4754_bits_at_5000_samples():
    # issue 9 / paper 004 §6.3 setting: (ψ(5000) − ψ(4)) / ln 2 with k = 3
    assert leakage.self_mi_reference(5000, 3) == pytest.approx(10.4754, abs=5e-5)
    assert leakage.self_mi_reference(5000, 3) == (digamma(5000) - digamma(4)) / math.log(2)


@pytest.mark.parametrize("draw", ["normal", "exponential", "uniform-1e3"])
def test_ksg_self_mi_equals_the_reference_for_moderate_scales(draw):
    g = np.random.default_rng(5)
    v = {
        "normal": g.standard_normal(5000),
        "exponential": g.exponential(size=5000),
        "uniform-1e3": 1e3 * g.random(5000),
    }[draw]
    # equal up to rare exact ties of the two tie noises (|dx| = |dy| to 1e-15), each moving
    # the estimate by (ψ(4) − ψ(3)) / (N ln 2) ≈ 1e-4 bits
    assert float(leakage.ksg_mi(v, v, rng=g)) == pytest.approx(10.4754, abs=5e-4)


def test_leakage_curve_flags_iterations_where_v_barely_varies():
    g = np.random.default_rng(2)
    v = g.standard_normal((4, 600))
    v[1] = 0.25  # constant across trials
    v[2] = 0.25 + 1e-12 * g.standard_normal(600)  # variation below the tie noise
    v[3] = np.round(v[3])  # a handful of values
    c = leakage.leakage_curve(v, v + 0.5 * g.standard_normal((4, 600)), rng=g)
    assert c.degenerate.tolist() == [False, True, True, True]
    assert c.argmax_iteration == 0 and np.isnan(c.nmi[1:]).all()
    d = c.to_dict()
    assert (
        d["n_trials"] == 600 and d["k_neighbors"] == 3 and d["degenerate_iterations"] == [1, 2, 3]
    )


# ---------------------------------------------------------------- probes on a tiny DP-D-SGD run
DATA = datasets.partition(datasets.load("synthetic-linear:3:600", seed=1), 3, seed=1)
BATCH = 8
TRIALS = 300


def _plan(mechanism="dp-dsgd", sigma=1.0, steps=5):
    per_epoch = DATA.local_size // BATCH
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": sigma}
    return make_plan(
        mechanism,
        edgedp_topologies.parse("complete:3"),  # the 3 agents of paper 004 Fig. 11
        steps=steps,
        participation=Participation(math.ceil(steps / per_epoch), per_epoch),
        clip_norm=1.0,
        learning_rate=0.3,
        task=TaskSpec(model="linear", dataset="synthetic-linear", batch_size=BATCH),
        seed=4,
        **noise,
    )


def _observe(plan, attackers, trials=TRIALS):
    model = models.for_task(plan.task, DATA.features)
    probes = [adversary.Probe(a, plan, trials=trials, dim=model.dim) for a in attackers]
    truth = adversary.GroundTruth([0], trials=trials, steps=plan.steps, dim=model.dim)
    final = batch.run(plan, DATA, trials=trials, observers=[*probes, truth]).models
    return final, probes, truth, model.init_params()


def _invert(plan, log, theta0):
    return attacks.dsgd_inversion(
        log,
        victim=0,
        mixing_index=plan.mixing_index,
        mixing_weight=plan.mixing_weight,
        theta0=theta0,
        learning_rate=plan.learning_rate,
    )


@pytest.mark.parametrize("mechanism", ["dp-dsgd", "antipgd"])
def test_driver_runs_the_batch_engine_bit_for_bit(mechanism):
    p = _plan(mechanism)
    final, *_ = _observe(p, [], trials=3)
    assert [models.model_digest(m) for m in final] == batch.run(p, DATA, trials=3).digests


def test_hbc_error_shrinks_and_mi_grows_as_noise_vanishes():
    mse, m_nmi = [], []
    for sigma in (4.0, 1.0, 0.25, 1e-4):
        p = _plan(sigma=sigma)
        _, (probe,), truth, theta0 = _observe(p, [adversary.honest_but_curious(1, 2)])
        est, v = _invert(p, probe.log, theta0), truth.of(0)
        # what the colluders recover is exactly the victim's gradient plus its noise / B
        np.testing.assert_allclose(est - v, truth.noise[:, :, 0] / BATCH, atol=1e-12)
        mse.append(attacks.reconstruction_error(est, v).mse_mean)
        curve = leakage.leakage_curve(
            v[..., :1].swapaxes(0, 1), est[..., :1].swapaxes(0, 1), rng=np.random.default_rng(0)
        )
        assert not curve.degenerate.any()  # batches differ across trials: V varies
        m_nmi.append(curve.m_nmi)
    assert mse == sorted(mse, reverse=True) and mse[-1] < 1e-8 * mse[0]
    assert m_nmi == sorted(m_nmi) and m_nmi[0] < 0.3 and m_nmi[-1] > 0.9


def test_encrypted_eavesdropper_learns_nothing():
    p = _plan(sigma=1e-4)  # messages in the clear would reveal everything
    _, (plain, enc), truth, theta0 = _observe(
        p, [adversary.tap_node(0), adversary.tap_all(encrypted=True)]
    )
    assert enc.log.messages is None and enc.log.sizes.min() > 0
    v = truth.of(0)[..., :1].swapaxes(0, 1)
    curve = leakage.leakage_curve(
        v, attacks.traffic_features(enc.log).swapaxes(0, 1), rng=np.random.default_rng(0)
    )
    assert np.abs(curve.mi).max() < 1e-9 and curve.m_nmi == pytest.approx(0.0, abs=1e-9)
    clear = leakage.leakage_curve(
        v, _invert(p, plain.log, theta0)[..., :1].swapaxes(0, 1), rng=np.random.default_rng(0)
    )
    assert clear.m_nmi > 0.9
    with pytest.raises(ValueError, match="sees no message"):
        linear_attack.dsgd_linear_view(
            enc.log,
            mixing_matrix=p.mixing_matrix(),
            learning_rate=0.3,
            noise_std=p.noise_std,
            batch_size=BATCH,
            noise_factor=np.eye(p.steps),
        )


def test_probes_and_estimates_are_deterministic():
    p = _plan()
    runs = [_observe(p, [adversary.honest_but_curious(1, 2)], trials=40) for _ in range(2)]
    (_, (a,), ta, th), (_, (b,), _, _) = runs
    np.testing.assert_array_equal(a.log.messages, b.log.messages)
    for name in a.log.own:
        np.testing.assert_array_equal(a.log.own[name], b.log.own[name])
    v, est = ta.of(0).swapaxes(0, 1), _invert(p, a.log, th).swapaxes(0, 1)
    curves = [leakage.leakage_curve(v, est, rng=np.random.default_rng(3)) for _ in range(2)]
    np.testing.assert_array_equal(curves[0].mi, curves[1].mi)


@pytest.mark.parametrize("mechanism", ["dp-dsgd", "antipgd"])
def test_linear_estimators_agree_with_the_inversion(mechanism):
    p = _plan(mechanism)
    attackers = [
        adversary.honest_but_curious(1, 2),
        adversary.tap_all(),
        adversary.tap_links((0, 1)),
    ]
    _, probes, truth, theta0 = _observe(p, attackers, trials=60)
    v = truth.of(0)
    kw = dict(
        mixing_matrix=p.mixing_matrix(),
        learning_rate=p.learning_rate,
        noise_std=p.noise_std,
        batch_size=BATCH,
        noise_factor=p.factor.materialize(p.steps),
    )
    errors = {}
    for probe in probes:
        view = linear_attack.dsgd_linear_view(probe.log, **kw)
        y = linear_attack.dsgd_linear_observations(
            probe.log, view, mixing_matrix=p.mixing_matrix(), theta0=theta0
        )
        for method in ("ls", "gls"):
            est = view.of(linear_attack.solve(view, y, method=method), 0)
            errors[probe.log.attacker.label, method] = attacks.reconstruction_error(est, v).mse_mean
            if probe.log.attacker.kind != "links":  # enough equations: the exact inversion
                np.testing.assert_allclose(est, _invert(p, probe.log, theta0), atol=1e-10)
        prior = dict(prior_mean=float(v.mean()), prior_var=float(v.var()))
        mmse = view.of(linear_attack.solve(view, y, method="mmse", **prior), 0)
        errors[probe.log.attacker.label, "mmse"] = attacks.reconstruction_error(mmse, v).mse_mean
    for label in ("hbc:1,2", "eavesdropper:all"):  # a prior never hurts the Bayes risk
        assert errors[label, "mmse"] < errors[label, "gls"]
    with pytest.raises(ValueError, match="does not see the messages"):
        _invert(p, probes[2].log, theta0)  # tap on 0-1 misses node 2's messages


def test_gls_is_the_classical_formula_for_a_regular_noise_covariance():
    g = np.random.default_rng(4)
    A, B = g.standard_normal((7, 3)), g.standard_normal((7, 7))
    S = B @ B.T
    classical = np.linalg.solve(A.T @ np.linalg.solve(S, A), A.T @ np.linalg.inv(S))
    np.testing.assert_allclose(
        linear_attack.linear_estimator(A, B, method="gls"), classical, atol=1e-9
    )
    np.testing.assert_allclose(
        linear_attack.linear_estimator(A, None), np.linalg.pinv(A), atol=1e-12
    )


# ---------------------------------------------------------------- event engine, specs, slots
def test_event_engine_taps_see_the_batch_engine_messages():
    p = _plan()
    attackers = [adversary.honest_but_curious(1, 2), adversary.tap_all(encrypted=True)]
    _, batch_probes, _, _ = _observe(p, attackers, trials=1)
    model = models.for_task(p.task, DATA.features)
    taps = [adversary.Probe(a, p, trials=1, dim=model.dim) for a in attackers]
    res = engine.run(p, DATA, observers=taps)
    assert res.model_digest == engine.run(p, DATA).model_digest
    np.testing.assert_array_equal(taps[0].log.messages, batch_probes[0].log.messages)
    np.testing.assert_array_equal(taps[1].log.sizes, batch_probes[1].log.sizes)
    assert taps[1].log.messages is None and np.isfinite(taps[1].log.times).all()


def test_attacker_specs_parse_and_resolve():
    for text in (
        "hbc:1,2",
        "eavesdropper:0-1",
        "eavesdropper:node:0:encrypted",
        "eavesdropper:all",
    ):
        assert adversary.parse_attacker(text).label == text
    edges = np.array([(0, 1), (0, 2), (1, 2)])
    links, senders, members = adversary.tap_links((1, 2)).resolve(edges, 3)
    assert links == ((1, 2), (2, 1)) and senders == (1, 2) and members == ()
    _, senders, members = adversary.honest_but_curious(2).resolve(edges, 3)
    assert senders == (0, 1, 2) and members == (2,)
    for bad in ("hbc:1:encrypted", "eavesdropper:0", "spy:all"):
        with pytest.raises(ValueError, match="Cannot parse"):
            adversary.parse_attacker(bad)
    with pytest.raises(ValueError, match="not links"):
        adversary.tap_links((1, 3)).resolve(np.array([(0, 1), (0, 3)]), 4)


# ---------------------------------------------------------------- observers on every mechanism
def _cross_plan(mechanism, **options):
    from edgedp.families.cross import planning as planner

    return planner.plan_cross_agent(
        mechanism,
        edgedp_topologies.parse("complete:3"),
        steps=4,
        participation=Participation(1, DATA.local_size // BATCH),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        seed=9,
        task=TaskSpec(model="linear", dataset="synthetic-linear", batch_size=BATCH),
        **options,
    ).plan


def _sr_gt_plan(eps=1.0, steps=6, mechanism="sr-gt"):
    from edgedp.families.laplace.accounting import LaplaceSchedule

    sched = LaplaceSchedule(
        gamma=0.002,
        beta=100.0 if mechanism == "sr-gt" else 0.0,
        q1=0.97,
        q2=0.99,
        delta_grad=1.0,
        epsilon=eps,
        adjacency="problem",
    )
    task = TaskSpec(model="least-squares", dataset="sensor-fusion", partition="per-node")
    return make_plan(
        mechanism,
        edgedp_topologies.parse("complete:3"),
        steps=steps,
        clip_norm=math.inf,
        laplace=sched,
        task=task,
        seed=5,
    )


SF3 = None


def _sf3():
    global SF3
    if SF3 is None:
        from edgedp_sim import sensor_fusion

        SF3 = sensor_fusion.generate(3, observations=1, dim=1, seed=0)
    return SF3


def _mechanism_case(name):
    if name in ("sr-gt", "dpop"):
        return _sr_gt_plan(mechanism=name), _sf3().federated()
    if name == "whisper":
        return _cross_plan("whisper", form="lowrank", rank=2), DATA
    if name == "zipdl":
        return _cross_plan("zipdl", message_variance=2.0), DATA
    if name == "muffliato":
        return _cross_plan("muffliato", gossip_rounds=2), DATA
    if name == "decor":
        return _cross_plan("decor"), DATA
    if name == "dome":  # k = 2 floats per message, noise and clipping in the sketch space
        from edgedp.families.dome.sketch import SketchSpec

        p = _plan("dp-dsgd", steps=4)
        return make_plan(
            "dome",
            edgedp_topologies.parse("complete:3"),
            steps=4,
            participation=p.participation,
            clip_norm=1.0,
            learning_rate=0.3,
            noise_multiplier=1.0,
            seed=4,
            task=p.task,
            sketch=SketchSpec(dim=2, seed=1),
        ), DATA
    return _plan(name, steps=4), DATA


@pytest.mark.parametrize(
    "name",
    [
        "dsgd",
        "dp-dsgd",
        "antipgd",
        "whisper",
        "decor",
        "zipdl",
        "muffliato",
        "sr-gt",
        "dpop",
        "dome",
    ],
)
def test_observers_see_every_mechanism_without_changing_a_bit(name):
    p, data = _mechanism_case(name)
    dim = models.for_task(p.task, data.features).dim
    probes = [
        adversary.Probe(a, p, trials=3, dim=dim)
        for a in (adversary.honest_but_curious(1), adversary.tap_all())
    ]
    truth = adversary.GroundTruth([0], trials=3, steps=p.steps, dim=dim)
    watched = batch.run(p, data, trials=3, observers=[*probes, truth])
    assert watched.digests == batch.run(p, data, trials=3).digests
    hbc, tap = probes[0].log, probes[1].log
    seen = tap.messages if tap.link_messages is None else tap.link_messages
    assert np.isfinite(seen).all()
    assert (tap.link_messages is not None) == (name == "zipdl")
    if name != "dsgd":  # the member's own noise, as drawn (Laplace or correlated Gaussian)
        assert np.isfinite(hbc.own["noise"]).all() and np.abs(hbc.own["noise"]).max() > 0
        assert np.abs(truth.noise).max() > 0
    grad_rounds = range(0, p.steps, 2) if name == "muffliato" else range(p.steps)
    assert np.isfinite(truth.gradient[:, list(grad_rounds)]).all()
    # the event engine's taps see the same frames (one trial), also per recipient (Zip-DL)
    taps = [adversary.Probe(adversary.tap_all(), p, trials=1, dim=dim)]
    res = engine.run(p, data, observers=taps)
    assert res.model_digest == watched.digests[0]
    ev = taps[0].log
    got = ev.messages if ev.link_messages is None else ev.link_messages
    np.testing.assert_array_equal(got, seen[:1])
    np.testing.assert_array_equal(ev.sizes, tap.sizes[:1])  # wire bytes (k floats for dome)


def test_sr_gt_eq44_inverts_alg1_exactly():
    p = _sr_gt_plan(eps=1.0, steps=8)
    data = _sf3().federated()
    probes = [
        adversary.Probe(a, p, trials=50, dim=1)
        for a in (adversary.honest_but_curious(1, 2), adversary.tap_all())
    ]
    truth = adversary.GroundTruth([0], trials=50, steps=p.steps, dim=1)
    batch.run(p, data, trials=50, observers=[*probes, truth])
    for probe in probes:
        paper = attacks.sr_gt_estimate(probe.log, victim=0, plan=p)
        z = probe.log.sent_by(0)
        assert paper.shape == (50, p.steps, 3)
        np.testing.assert_array_equal(paper[..., 0], z[..., 0])
        est = attacks.sr_gt_estimate(probe.log, victim=0, plan=p, form="inversion")
        alpha = np.array([p.laplace.stepsize(t) for t in range(p.steps)])
        # (z̄(k) − z(k+1))/α_k − y(k) = ∇f(z(k)) − ξ(k+1)/α_k, ξ the victim's Laplace draw
        expect = truth.of(0)[:, :-1] - truth.noise[:, 1:, 0] / alpha[:-1, None]
        np.testing.assert_allclose(est[:, :-1], expect, rtol=1e-9, atol=1e-9)
        assert np.isnan(est[:, -1]).all()
    # Eq. 44's y for a colluder (victim=1) equals the y the engine tracked for it
    y_true = probes[0].log.own["y"][:, 1:, 0, 0]  # y at the start of round t+1 = y after t
    np.testing.assert_allclose(
        attacks.sr_gt_estimate(probes[0].log, victim=1, plan=p)[:, :-1, 1], y_true, atol=1e-9
    )


def test_sr_gt_eq44_tracks_y_in_the_order_of_the_update_rule():
    # y(k) = y(k−1) + β (z − z̄) from y(0) = 0, one round after the other: the same bits as
    # that loop, signs of zeros included (messages that give β (z − z̄) = −0.0 on purpose)
    p = _sr_gt_plan(eps=1.0, steps=8)
    probe = adversary.Probe(adversary.tap_all(), p, trials=3, dim=1)
    g = np.random.default_rng(8)
    m = g.standard_normal(probe.log.messages.shape)
    m[0] = 0.0  # trial 0: every message 0, so z − z̄ = 0 (and −0.0 through the weights)
    m[1, :, :] = -0.0
    probe.log.messages[...] = m
    got = attacks.sr_gt_estimate(probe.log, victim=0, plan=p)[..., 1]
    z = m[:, :, probe.log.senders.index(0), 0]
    zbar = attacks.mix_gathered(
        np.asarray(p.mixing_weight[0], dtype=np.float64),
        m[:, :, [probe.log.senders.index(int(j)) for j in p.mixing_index[0]]],
    )[..., 0]
    acc, want = np.zeros(3), np.empty((3, p.steps))
    for t in range(p.steps):
        acc = acc + p.laplace.beta * (z[:, t] - zbar[:, t])
        want[:, t] = acc
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("mechanism", ["decor", "whisper"])
def test_cross_agent_estimators_subtract_exactly_what_the_attacker_knows(mechanism):
    p = _cross_plan(mechanism, **({"form": "lowrank", "rank": 2} if mechanism == "whisper" else {}))
    dim = models.for_task(p.task, DATA.features).dim
    attackers = (adversary.honest_but_curious(1, 2), adversary.tap_all())
    probes = [adversary.Probe(a, p, trials=400, dim=dim) for a in attackers]
    truth = adversary.GroundTruth([0], trials=400, steps=p.steps, dim=dim)
    batch.run(p, DATA, trials=400, observers=[*probes, truth])
    theta0 = models.for_task(p.task, DATA.features).init_params()
    estimate = {"decor": attacks.decor_estimate, "whisper": attacks.whisper_estimate}[mechanism]
    resid = {}
    for probe in probes:
        est = estimate(probe.log, victim=0, plan=p, theta0=theta0)
        resid[probe.log.attacker.kind] = (est - truth.of(0)) * BATCH / p.noise_std
    spec = p.cross_agent
    R = spec.covariance(p.edges)
    # eavesdropper: the victim's whole noise (variance R̃_00); colluding neighbours 1, 2
    # remove their pairwise terms (and, for Whisper insiders, the shared-seed part): √D_0 z
    assert resid["all"].var() == pytest.approx(R[0, 0], rel=0.1)
    assert resid["hbc"].var() == pytest.approx(spec.diag[0], rel=0.1)
    assert resid["hbc"].var() < 0.9 * resid["all"].var()
    # what the eavesdropper is left with is exactly the noise the engine drew
    assert np.abs(resid["all"] - truth.noise[:, :, 0] / p.noise_std).max() < 1e-9


# ---------------------------------------------------------------- edgedp leak, Table 4 setting
def _small_table4(tmp_path, steps=30, extra=""):
    from edgedp_sim import scenarios

    text = (Path(scenarios.__file__).parent / "leakage_table4.toml").read_text()
    text = text.replace("steps = 1000", f"steps = {steps}").replace("trials = 5000", "trials = 200")
    # x(0) = 0 in every trial (these tests pin the estimators, not the initial states)
    text = text.replace('initial_state = "normal"', 'initial_state = "model"')
    path = tmp_path / "t4.toml"
    path.write_text(text + extra)
    return path


def test_leak_cli_json_reports_the_table4_keys(tmp_path, capsys):
    from edgedp_cli.main import main

    path = _small_table4(tmp_path)
    png = tmp_path / "nmi.png"
    argv = ["leak", str(path), "--attacker", "hbc:1,2", "--json", "--plot", str(png)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_trials"] == 200 and out["k_neighbors"] == 3 and out["iterations"] == 30
    assert len(out["nmi_curve"]) == 30 and 0 < out["m_nmi"] < 1
    spent = 1 - (0.97 / 0.99) ** 29  # ε (1 − (q1/q2)^(K−1)): 30 messages release x(1..29)
    assert out["epsilon"] == pytest.approx(spent, rel=1e-6) and out["delta"] == 0
    assert out["estimator"].startswith("paper 004 Eq. 44") and out["mse"] > 0
    assert "LDP" in out["trust_model"] and png.stat().st_size > 0
    # re-planned for another budget; the encrypted eavesdropper learns nothing
    argv = ["leak", str(path), "--attacker", "eavesdropper:all", "--encrypted", "--json"]
    assert main([*argv, "--target-eps", "10"]) == 0
    enc = json.loads(capsys.readouterr().out)
    assert enc["epsilon"] == pytest.approx(10 * spent, rel=1e-6)
    assert enc["attacker"] == "eavesdropper:all:encrypted"
    assert abs(enc["m_nmi"]) < 1e-9 and enc["mse"] is None
    assert main(["leak", str(path), "--attacker", "spy:1"]) == 2


def test_leak_uses_the_event_engine_for_network_effects(tmp_path):
    from edgedp_sim import adversary, leak, probing, scenarios

    path = _small_table4(tmp_path, steps=6, extra="\n[network]\nloss = 0.2\n")
    sc = scenarios.load(path)
    assert probing.has_network_effects(sc)
    assert not probing.has_network_effects(scenarios.load(_small_table4(tmp_path, steps=6)))
    lan = Path(scenarios.__file__).parent / "lan_er100.toml"  # latency only
    assert probing.has_network_effects(scenarios.load(lan))
    # a finite bandwidth: timing matters, as for sim run's engine choice (was run unclocked)
    slow = _small_table4(tmp_path, steps=6, extra="\n[network]\nbandwidth_mbps = 5.0\n")
    assert probing.has_network_effects(scenarios.load(slow))
    rep = leak.run(sc, [adversary.tap_all()], trials=12, victim=0)
    assert rep["engine"] == "event" and rep["n_trials"] == 12
    # a lost message leaves a hole: the attack then falls back to the messages it saw
    entry = rep["attackers"][0]
    assert len(entry["nmi_curve"]) == 6 and entry["estimator"]
    with pytest.raises(ValueError, match="network effects"):
        leak.run(sc, [adversary.tap_all()], trials=12, engine_name="batch")
    # dropouts: the victim skips rounds in some trials; those iterations are estimated on
    # the trials that have a value, and say how many
    sc = scenarios.load(_small_table4(tmp_path, steps=4, extra="\n[faults]\ndropout = 0.04\n"))
    entry = leak.run(sc, [adversary.tap_all()], trials=40)["attackers"][0]
    counts = entry["n_trials_per_iteration"]
    assert min(counts) < 40 and entry["m_nmi"] is not None
    assert all(entry["nmi_curve"][t] is not None for t in range(4) if counts[t] > 7)


@pytest.mark.parametrize("initial_state", ["model", "normal"])
def test_leak_event_trials_are_the_batch_trials(tmp_path, initial_state):
    """Without network effects the event engine's trial t is the batch engine's trial t
    (same keys, same plan): the leakage reports agree to the bit."""
    from edgedp_sim import adversary, leak, scenarios

    sc = scenarios.load(_small_table4(tmp_path, steps=5))
    att = [adversary.parse_attacker(a) for a in ("hbc:1,2", "eavesdropper:all")]
    kw = dict(trials=16, initial_state=initial_state)
    ev = leak.run(sc, att, engine_name="event", **kw)
    ba = leak.run(sc, att, engine_name="batch", **kw)
    assert ev["engine"] == "event" and ba["engine"] == "batch"
    for e, b in zip(ev["attackers"], ba["attackers"], strict=True):
        assert (e["m_nmi"], e["nmi_curve"], e["mse"]) == (b["m_nmi"], b["nmi_curve"], b["mse"])


def test_zero_sum_masking_is_transparent_to_the_eavesdropper():
    from edgedp_sim import sensor_fusion, zero_sum

    sf = sensor_fusion.generate(3, observations=1, dim=1, seed=0)
    run = zero_sum.simulate(sf, np.full((3, 3), 1 / 3), trials=400, iterations=20, stepsize=0.002)
    # the masks cancel in the victim's weighted outgoing sum: the gradient comes out exactly
    np.testing.assert_allclose(run.eavesdropper, run.private, rtol=0, atol=1e-9)
    g = np.random.default_rng(0)
    eav = leakage.leakage_curve(run.private.swapaxes(0, 1), run.eavesdropper.swapaxes(0, 1), rng=g)
    hbc = leakage.leakage_curve(run.private.swapaxes(0, 1), run.hbc.swapaxes(0, 1), rng=g)
    assert eav.degenerate[0]  # x(0) = 0 in every trial: V does not vary at k = 1
    assert eav.m_nmi == pytest.approx(1.0, abs=1e-3) and hbc.m_nmi < 0.5


def test_table4_attackers_share_eq44_and_standardizing_only_rescales(tmp_path):
    from edgedp_sim import leak, scenarios

    sc = scenarios.load(_small_table4(tmp_path, steps=20))
    rep = leak.run(
        sc,
        [adversary.honest_but_curious(1, 2), adversary.tap_all()],
        trials=300,
        standardized=True,
        point_curve=True,
    )
    hbc, eav = rep["attackers"]
    # paper 004 §6.3: ℐ_e(k) = ℐ_2(k) — the same estimates, the same KSG noise stream order
    # differs, so equal up to the estimator's tie noise
    assert hbc["m_nmi"] == pytest.approx(eav["m_nmi"], abs=1e-6)
    for e in (hbc, eav):
        assert 0 < e["m_nmi"] < e["m_nmi_standardized"] <= 1.05
        assert e["m_nmi_point"] is not None and len(e["nmi_curve_standardized"]) == 20


@pytest.mark.parametrize("mechanism", ["decor", "whisper"])
def test_gls_under_the_cross_agent_covariance(mechanism):
    from edgedp_sim import leak

    p = _cross_plan(mechanism, **({"form": "lowrank", "rank": 2} if mechanism == "whisper" else {}))
    model = models.for_task(p.task, DATA.features)
    attackers = (
        adversary.honest_but_curious(1, 2),
        adversary.tap_all(),
        adversary.tap_links((0, 1)),
    )
    probes = [adversary.Probe(a, p, trials=300, dim=model.dim) for a in attackers]
    truth = adversary.GroundTruth([0], trials=300, steps=p.steps, dim=model.dim)
    batch.run(p, DATA, trials=300, observers=[*probes, truth])
    theta0 = model.init_params()
    estimate = {"decor": attacks.decor_estimate, "whisper": attacks.whisper_estimate}[mechanism]
    mse = {}
    for probe in probes:
        view = linear_attack.cross_linear_view(probe.log, p, batch_size=BATCH)
        y = linear_attack.cross_linear_observations(probe.log, view, p, theta0=theta0)
        gls = view.of(linear_attack.solve(view, y, method="gls"), 0)
        kind = probe.log.attacker.kind
        mse[kind] = attacks.reconstruction_error(gls, truth.of(0)).mse_mean
        if kind != "links":  # every message of the round seen: as many equations as unknowns,
            # so the BLUE is the inversion minus what the attacker regenerates
            np.testing.assert_allclose(
                gls, estimate(probe.log, victim=0, plan=p, theta0=theta0), atol=1e-9
            )
    assert mse["hbc"] < mse["all"] < mse["links"]
    info, point, name = leak.estimates(probes[2].log, p, victim=0, theta0=theta0)
    assert name.startswith("generic linear-Gaussian") and point is info


def test_scenarios_plan_sr_gt_and_name_bad_laplace_fields(tmp_path):
    from edgedp_sim import scenarios

    sc = scenarios.load(_small_table4(tmp_path, steps=5))
    assert sc.plan.mechanism == "sr-gt" and sc.plan.laplace.beta == 1000.0
    assert sc.data().x.shape == (3, 2, 1)  # m + p = 2 rows per sensor, p = 1
    assert sc.leakage["attackers"] == ["hbc:1,2", "eavesdropper:all"]
    raw = {"steps": 5, "topology": {"spec": "ring:4"}, "privacy": {"gamma": 0.1}}
    with pytest.raises(scenarios.ScenarioError, match="gamma"):
        scenarios.parse({**raw, "privacy": {"mechanism": "dp-dsgd", "gamma": 0.1}})
    with pytest.raises(scenarios.ScenarioError, match="q1 is required"):
        scenarios.parse({**raw, "privacy": {"mechanism": "sr-gt", "gamma": 0.1}})


def test_per_trial_data_is_each_trial_run_on_its_own_instance():
    from edgedp_sim import sensor_fusion

    p = _sr_gt_plan(steps=5)
    inst = [sensor_fusion.generate(3, observations=1, dim=1, seed=s) for s in range(4)]
    together = batch.run(p, sensor_fusion.per_trial(inst), trials=3, first_trial=1)
    alone = [
        batch.run(p, inst[i].federated(), trials=1, first_trial=i).digests[0] for i in (1, 2, 3)
    ]
    assert together.digests == alone
    with pytest.raises(ValueError, match="trials up to"):
        batch.run(p, sensor_fusion.per_trial(inst), trials=4, first_trial=1)


def test_every_registered_mechanism_names_an_attack_the_simulator_defines() -> None:
    from edgedp import mechanisms

    for name in mechanisms.names():
        attack = attacks.algorithm_attack(name)
        assert attack in attacks.ATTACKS.values()
    assert attacks.algorithm_attack("sr-gt").description == "paper 004 Eq. 44 (sr-gt)"
    assert attacks.algorithm_attack("dp-dsgd") is attacks.ATTACKS["update-inversion"]
    with pytest.raises(ValueError, match="expected one of"):
        attacks.algorithm_attack("no-such-mechanism")


def test_observation_logs_leave_numpy_huge_page_advice_as_it_was():
    # the logs are allocated without huge-page advice (fragmented hosts compact memory for
    # it); the process-wide setting is restored, whichever it was
    switch = adversary._hugepage_switch()
    if switch is None:
        pytest.skip("this numpy has no _set_madvise_hugepage")
    before = switch(True)
    try:
        log = adversary._by_round((3, 700, 2, 500))  # 8.4 MB: past numpy's 4 MiB threshold
        assert log.shape == (3, 700, 2, 500) and np.isnan(log).all()
        assert switch(False) is True
        assert adversary._by_round((2, 3), 0.0).tolist() == [[0.0] * 3] * 2
        assert switch(True) is False
    finally:
        switch(before)
