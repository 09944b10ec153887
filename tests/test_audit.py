"""Privacy auditing: canaries, the linear view of every mechanism, statistics, soundness."""

import dataclasses
import functools
import json
import math

import numpy as np
import pytest
from scipy import stats

from edgedp import models, streams
from edgedp.accounting import gdp
from edgedp_sim import (
    adversary,
    audit,
    audit_plans,
    audit_stats,
    batch,
    linear_view,
    scenarios,
)
from edgedp_sim import canary as canary_mod
from edgedp_sim.churn import Faults
from edgedp_sim.links import Latency, Network

# small and fast: ring:6, 6 rounds, logistic regression with d = 2 (1 feature + bias)
SMALL = audit_plans.Setting(topology="ring:6", steps=6, dataset="synthetic-logistic:1:60")
ATTACKERS = ("eavesdropper:all", "eavesdropper:0-1", "hbc:1,5")  # all / one link / neighbours


@pytest.fixture(scope="module")
def plans():
    return {m: audit_plans.build(m, SMALL) for m in audit_plans.MECHANISMS}


# ---------------------------------------------------------------- statistics
def test_clopper_pearson_matches_closed_forms_and_scipy():
    # k = 0: the bound solves (1 − p)^n = α; k = n: 1; otherwise scipy's exact binomial test
    assert audit_stats.clopper_pearson_upper(0, 50, 0.05) == pytest.approx(1 - 0.05 ** (1 / 50))
    assert audit_stats.clopper_pearson_upper(50, 50, 0.05) == 1.0
    for k, n in [(3, 40), (17, 200), (199, 200)]:
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="exact")
        assert audit_stats.clopper_pearson_upper(k, n, 0.05) == pytest.approx(ci.high)


def test_epsilon_bound_is_the_dp_hypothesis_test_inequality():
    # (ε, δ)-DP: FPR + e^ε FNR ≥ 1 − δ and FNR + e^ε FPR ≥ 1 − δ; at the symmetric point of
    # the boundary both hold with equality and the bound returns ε
    eps, delta = 1.3, 1e-3
    rate = (1 - delta) / (1 + math.exp(eps))
    assert audit_stats.epsilon_bound(rate, rate, delta) == pytest.approx(eps)
    # elsewhere on one face, the other inequality binds: the larger of the two is returned
    fpr = 0.02
    fnr = (1 - delta - fpr) / math.exp(eps)
    assert audit_stats.epsilon_bound(fpr, fnr, delta) == pytest.approx(
        math.log((1 - delta - fnr) / fpr)
    )
    assert audit_stats.epsilon_bound(0.5, 0.5, 0.0) == 0.0  # a coin flip proves nothing


def test_threshold_comes_from_the_selection_half_only():
    g = np.random.default_rng(0)
    s = np.concatenate([g.normal(0, 1, 500), g.normal(3, 1, 500)])
    y = np.arange(1000) >= 500
    eps = functools.partial(audit_stats.epsilon_bound, delta=0.0)
    th = audit_stats.choose_threshold(s, y, alpha=0.05, bound=eps)
    assert 0 < th.tau < 6 and th.selection_bound > 2
    # separable worlds: the cut sits between them and the bound is Clopper–Pearson's limit
    sep = audit_stats.choose_threshold(
        np.r_[np.zeros(100), np.ones(100)], y[400:600], alpha=0.05, bound=eps
    )
    assert sep.tau == 0.5
    limit = math.log(
        (1 - audit_stats.clopper_pearson_upper(0, 100, 0.025))
        / audit_stats.clopper_pearson_upper(0, 100, 0.025)
    )
    assert sep.selection_bound == pytest.approx(limit)


def test_mu_fit_recovers_a_gaussian_shift_with_its_interval():
    g = np.random.default_rng(1)
    covered = 0
    for _ in range(40):
        s = np.r_[g.normal(0, 2, 800), g.normal(3, 2, 800)]  # μ = 1.5
        fit = audit_stats.mu_fit(s, np.arange(1600) >= 800, confidence=0.9)
        covered += fit.low <= 1.5 <= fit.high
    assert 32 <= covered <= 40  # 90% intervals: 36 expected, binomial spread


# ---------------------------------------------------------------- linear view = the engines
def _run_worlds(plan, trials, attacker, *, canary="gradient"):
    data = scenarios.from_plan(plan).data()
    model = models.for_task(plan.task, data.features)
    can = canary_mod.for_plan(
        plan,
        victim=0,
        local_size=data.local_size,
        dim=model.dim,
        kind=canary,
        model=model,
        data=data,
    )
    keys = streams.RunKeys.simulation(plan)
    present = np.arange(trials) % 2 == 1
    pos = np.array([can.position(keys, i, data.local_size) for i in range(trials)])
    probe = adversary.Probe(attacker, plan, trials=trials, dim=model.dim)
    batch.run(
        plan,
        data,
        trials=trials,
        eval_every=plan.steps,
        observers=[probe],
        gradient_transform=can.batch_transform(model, present, pos),
    )
    return data, model, can, keys, present, probe.log


def _lowrank_whisper(task, sketch=None):
    import edgedp_topologies
    from edgedp.accounting.participation import Participation
    from edgedp.families.cross import planning as cross_agent

    return cross_agent.plan_cross_agent(
        "whisper",
        edgedp_topologies.parse("ring:6"),
        steps=6,
        participation=Participation(6, 1),
        clip_norm=1.0,
        learning_rate=0.2,
        noise_multiplier=1.0,
        form="lowrank",
        rank=2,
        task=task,
        sketch=sketch,
    ).plan


@pytest.mark.parametrize(
    "mechanism", [*audit_plans.MECHANISMS, "whisper-lowrank", "dome-whisper-lowrank"]
)
def test_linear_view_reproduces_every_message_of_the_engine(mechanism, plans):
    """Impulse responses of the update rules × the regenerated noise sources + the canary
    = the batch engine's messages, to rounding, for every mechanism (and the shared seed of
    Whisper's low-rank form, also on DOME's sketched messages)."""
    if mechanism.endswith("whisper-lowrank"):
        from edgedp.families.dome.sketch import SketchSpec

        sketch = SketchSpec(dim=1, refresh=1) if mechanism.startswith("dome") else None
        plan = _lowrank_whisper(plans["dp-dsgd"].task, sketch)
        assert plan.cross_agent.rank == 2
    else:
        plan = plans[mechanism]
    trials = 4
    data, model, can, keys, present, log = _run_worlds(plan, trials, adversary.tap_all())
    d = model.dim
    tr = linear_view.trace(plan, batch_size=can.batch_size, dim=d, theta0=model.init_params())
    src = linear_view.sources(plan, slots=tr.slots)
    width = d if tr.isotropic else tr.ndim
    vals = linear_view.regenerate(
        plan, src, np.arange(len(src.what)), [(keys, i) for i in range(trials)], dim=width
    )
    noise = np.einsum("es,nsc->nec", src.coef, vals)  # every noise entry, every trial
    impulses = np.zeros((trials, tr.impulses, width if tr.isotropic else 1))
    cd = 1 if tr.isotropic else tr.ndim
    for c in range(cd):
        impulses[:, tr.noise_offset.reshape(-1) + c] = (
            noise if tr.isotropic else noise[:, :, c : c + 1]
        )
    for t in range(plan.steps):
        for c in range(1 if tr.isotropic else tr.gdim):
            col = tr.grad_offset[t, 0] + c
            value = np.where(present[:, None], can.shift[t], 0.0)
            impulses[:, col] = value if tr.isotropic else value[:, c : c + 1]
    impulses[:, 0] = model.init_params() if tr.isotropic else 1.0
    worst = 0.0
    for t in range(plan.steps):
        m = tr.messages[t].reshape(tr.impulses, -1)  # (I, nodes·slots·width)
        pred = np.einsum("ik,nic->nkc", m, impulses)
        if tr.isotropic:
            pred = pred.reshape((trials, *tr.messages[t].shape[1:-1], d))
        else:
            pred = pred[..., 0].reshape((trials, *tr.messages[t].shape[1:]))
        if tr.per_slot:
            slots = [int(np.flatnonzero(plan.mixing_index[u] == v)[0]) for u, v in log.links]
            seen = np.stack([pred[:, u, s] for (u, _), s in zip(log.links, slots, strict=True)], 1)
            worst = max(worst, float(np.max(np.abs(log.link_messages[:, t] - seen))))
        else:
            worst = max(worst, float(np.max(np.abs(log.messages[:, t] - pred))))
    assert worst < 1e-12  # measured: ≤ 3e-16


# ---------------------------------------------------------------- soundness per mechanism
@pytest.mark.parametrize("mechanism", audit_plans.MECHANISMS)
def test_epsilon_lb_never_exceeds_the_certified_epsilon(mechanism, plans):
    """Fixed seeds (the plan's): ε_lb ≤ ε for every attacker (a sound accountant fails this
    with probability ≤ 5%), and for Gaussian mechanisms the fitted μ agrees with the exact μ
    of the attacker's view, which never exceeds the certified μ."""
    plan = plans[mechanism]
    trials = {"dome": 400, "zipdl": 800}.get(mechanism, 1200)  # DOME's projections are slow
    rep = audit.run(
        scenarios.from_plan(plan), [adversary.parse_attacker(a) for a in ATTACKERS], trials=trials
    )
    assert not rep["verdict"]["violation"], rep["verdict"]
    for e in rep["attackers"]:
        assert e["epsilon_lb"] <= e["epsilon"], e
        assert not e["violation"]
        if plan.laplace is None:
            assert e["mu_lb"] <= e["mu"] and e["mu_view"] <= e["mu"] * (1 + 1e-9)
            # the interval (95%) widened by 0.05 for the statistic's finite-sample skew
            assert e["mu_low"] - 0.05 <= e["mu_view"] <= e["mu_high"] + 0.05, e
        elif e["attacker"] != "eavesdropper:0-1":  # the victim's whole row is seen
            assert e["epsilon_view"] == pytest.approx(e["epsilon"], rel=1e-9)


# ---------------------------------------------------------------- tightness
@pytest.mark.parametrize("mechanism", ["dp-dsgd", "antipgd"])
def test_tightness_of_the_gradient_canary_against_the_eavesdropper(mechanism, plans):
    """Every message seen, gradient canary, worst participation pattern: μ̂ within 10% of the
    certified μ (the exact view is μ itself: sens(C) is tight when CᵀC ≥ 0)."""
    plan = plans[mechanism]
    rep = audit.run(scenarios.from_plan(plan), [adversary.tap_all()], trials=4000)
    e = rep["attackers"][0]
    assert e["mu_view"] == pytest.approx(e["mu"], rel=1e-9)
    assert abs(e["mu_hat"] / e["mu"] - 1) < 0.10, e
    assert e["mu_low"] <= e["mu"] <= e["mu_high"]


# ---------------------------------------------------------------- a wrong accountant is caught
def test_an_under_scaled_plan_makes_epsilon_lb_exceed_the_printed_epsilon():
    """A plan whose stored sensitivity is halved (built here, bypassing certification: the
    engines add half the noise, the accountant still prints μ = 1/σ) is caught at a large δ
    by ε_lb > ε too (the μ test catches it at any δ: tests/test_audit_verdict.py). The same
    audit of the sound plan stays below."""
    setting = audit_plans.Setting(topology="ring:4", steps=4, dataset="synthetic-logistic:1:40")
    sound = audit_plans.build("dp-dsgd", setting)
    sound = dataclasses.replace(sound, noise_multiplier=1.0, sensitivity=2.0)  # μ = 1: σ = 1
    assert sound.guarantee().mu == 1.0 and sound.guarantee().sensitivity == 2.0  # √k, k = 4
    wrong = dataclasses.replace(sound, sensitivity=sound.sensitivity / 2)
    out = {}
    for name, plan in (("sound", sound), ("wrong", wrong)):
        rep = audit.run(scenarios.from_plan(plan), [adversary.tap_all()], trials=4000, delta=1e-2)
        out[name] = rep["attackers"][0]
    printed = gdp.epsilon(1.0, delta=1e-2)  # 2.318
    assert out["sound"]["epsilon"] == out["wrong"]["epsilon"] == pytest.approx(printed)
    assert out["wrong"]["epsilon_lb"] > printed and out["wrong"]["violation"]
    assert out["wrong"]["mu_low"] > 1.5  # the engines' noise gives μ = 2
    assert out["wrong"]["tests"]["mu"]["rejected"] and out["wrong"]["mu_lb"] > 1.5
    assert out["sound"]["epsilon_lb"] <= printed and not out["sound"]["violation"]


# ---------------------------------------------------------------- canaries and engines
def test_canary_follows_the_worst_participation_pattern_and_the_adjacency(plans):
    part_plan = plans["antipgd"]
    slot, steps, signs = canary_mod.worst_pattern(part_plan, per_epoch=1)
    assert steps == tuple(range(6)) and set(signs) == {1.0}  # X ≥ 0 for AntiPGD
    C = plans["dmf"].factor.strategy(6)
    _, steps, signs = canary_mod.worst_pattern(plans["dmf"], per_epoch=1)
    s = np.array(signs)
    assert s @ (C.T @ C) @ s == pytest.approx(np.abs(C.T @ C).sum(), rel=1e-6)
    data = scenarios.from_plan(plans["dp-dsgd"]).data()
    can = canary_mod.for_plan(plans["dp-dsgd"], victim=0, local_size=data.local_size, dim=2)
    assert np.linalg.norm(can.rows1, axis=1) == pytest.approx(np.ones(6))  # norm Δ, every round
    assert not can.rows0.any()  # zero-out: the absent example's gradient is zero
    lap = canary_mod.for_plan(plans["sr-gt"], victim=0, local_size=data.local_size, dim=2)
    # zero-out Laplace: L1 of the batch mean = δ (= Δ√d/B) in every round
    assert np.abs(lap.shift).sum(axis=1) / lap.batch_size == pytest.approx(
        np.full(6, plans["sr-gt"].laplace.delta_grad)
    )
    with pytest.raises(ValueError, match="example canary"):
        problem = dataclasses.replace(
            plans["sr-gt"],
            laplace=dataclasses.replace(plans["sr-gt"].laplace, adjacency="problem"),
            adjacency="problem",
        )
        canary_mod.for_plan(
            problem, victim=0, local_size=10, dim=2, kind="example", model=object(), data=data
        )


@pytest.mark.parametrize("mechanism", ["dp-dsgd", "sr-gt"])
def test_example_canary_is_a_crafted_input_and_stays_sound(mechanism, plans):
    plan = plans[mechanism]
    sc = scenarios.from_plan(plan)
    data = sc.data()
    model = models.for_task(plan.task, data.features)
    x, y = canary_mod.craft_example(model, data)
    g = model.per_example_gradients(model.init_params(), x[None], np.array([y]))[0]
    assert np.linalg.norm(g) >= plan.clip_norm  # its clipped gradient has the full norm Δ
    rep = audit.run(sc, [adversary.tap_all()], trials=800, canary="example")
    e = rep["attackers"][0]
    assert rep["canary"] == "example" and rep["background"] == "data"
    assert e["epsilon_lb"] <= e["epsilon"]


def test_event_engine_audit_with_latency_loss_and_dropouts(plans):
    """Fewer trials, one plan seed each; lost messages and skipped rounds leave holes the
    statistic fills with their expected value — still a valid test."""
    sc = dataclasses.replace(
        scenarios.from_plan(plans["dp-dsgd"]),
        network=Network(latency=Latency("uniform", {"low_ms": 1, "high_ms": 20}), loss=0.1),
        faults=Faults(dropout=0.1),
    )
    rep = audit.run(sc, [adversary.tap_all(), adversary.honest_but_curious(1, 5)], trials=32)
    assert rep["engine"] == "event" and rep["n_trials"] == 32
    for e in rep["attackers"]:
        assert np.isfinite(e["mu_hat"]) and e["epsilon_lb"] <= e["epsilon"]
    laplace = dataclasses.replace(sc, plan=plans["sr-gt"])
    e = audit.run(laplace, [adversary.tap_all()], trials=24)["attackers"][0]
    assert e["epsilon_lb"] <= e["epsilon"]  # rounds without the victim's message count 0


def test_encrypted_links_and_bad_requests(plans):
    sc = scenarios.from_plan(plans["dp-dsgd"])
    rep = audit.run(sc, [adversary.parse_attacker("eavesdropper:all:encrypted")], trials=16)
    assert rep["attackers"][0]["epsilon_lb"] == 0.0  # sizes and timing only
    with pytest.raises(ValueError, match="cannot be one of the attackers"):
        audit.run(sc, [adversary.honest_but_curious(0, 1)], trials=16)
    with pytest.raises(ValueError, match="trials"):
        audit.run(sc, [adversary.tap_all()], trials=4)


# ---------------------------------------------------------------- command line
def test_audit_cli_json_and_plot(tmp_path, capsys, plans):
    from edgedp_cli.main import main

    path = tmp_path / "p.plan"
    path.write_bytes(plans["dp-dsgd"].to_bytes())
    png = tmp_path / "roc.png"
    argv = [
        "audit",
        str(path),
        "--attacker",
        "eavesdropper:all",
        "--attacker",
        "hbc:1,5",
        "--trials",
        "200",
        "--json",
        "--plot",
        str(png),
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["attacker"] for e in out["attackers"]] == ["eavesdropper:all", "hbc:1,5"]
    for e in out["attackers"]:
        for key in (
            "epsilon",
            "epsilon_lb",
            "confidence",
            "ratio",
            "mu",
            "mu_hat",
            "mu_low",
            "mu_high",
            "mu_view",
            "n_trials",
            "adjacency",
            "test",
        ):
            assert key in e
        assert e["adjacency"] == "zero-out" and e["n_trials"] == 200
    # at the plan's own delta (audit_plans plan at 1e-5)
    assert out["delta"] == plans["dp-dsgd"].delta == 1e-5
    assert png.stat().st_size > 0 and out["trials_per_second"] > 0
    assert main(["audit", str(path), "--attacker", "spy:1", "--trials", "16"]) == 2
    assert main(["audit", str(path), "--trials", "3"]) == 2


# ---------------------------------------------------------------- random initial states
def test_random_initial_states_are_keyed_and_equal_in_both_engines(plans):
    from edgedp_sim import engine, initial

    plan = plans["dp-dsgd"]
    data = scenarios.from_plan(plan).data()
    keys = streams.RunKeys.simulation(plan)
    start = initial.states("normal", keys, nodes=plan.n, dim=2, trials=3)
    again = initial.states("normal", keys, nodes=plan.n, dim=2, trials=2, first_trial=1)
    assert np.array_equal(start[1:], again)  # trial i's states do not depend on the chunk
    assert initial.states("model", keys, nodes=plan.n, dim=2) is None
    half = initial.states("normal:0.5", keys, nodes=plan.n, dim=2, trials=3)
    np.testing.assert_allclose(half, 0.5 * start, rtol=0, atol=1e-15)
    res = batch.run(plan, data, trials=1, eval_every=plan.steps, initial_state="normal")
    plain = batch.run(plan, data, trials=1, eval_every=plan.steps)
    assert res.digests[0] != plain.digests[0]
    ev = engine.run(plan, data, eval_every=plan.steps, initial_state="normal")
    assert ev.model_digest == res.digests[0]  # the same x(0) and the same bits
    for bad in ("uniform", "normal:-1", "normal:x"):
        with pytest.raises(ValueError, match="initial_state"):
            initial.parse(bad)


def test_scenario_initial_state_reaches_leak_and_the_attackers(tmp_path):
    from pathlib import Path

    from edgedp_sim import leak

    text = (Path(scenarios.__file__).parent / "leakage_table4.toml").read_text()
    text = text.replace("steps = 1000", "steps = 8").replace("trials = 5000", "trials = 60")
    assert 'initial_state = "normal"' in text  # paper 004 §6.1: x_i(0) ~ N(0, I)
    path = tmp_path / "t4.toml"
    path.write_text(text)
    sc = scenarios.load(path)
    assert sc.initial_state == "normal"
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('initial_state = "normal"', 'initial_state = "zero"'))
    with pytest.raises(scenarios.ScenarioError, match="initial_state"):
        scenarios.load(bad)
    from edgedp_sim import sensor_fusion

    sf = sensor_fusion.generate(3, observations=1, dim=1, seed=0)
    rep = leak.run(
        sc,
        [adversary.tap_all()],
        trials=60,
        audit_trials=200,
        final=lambda models, first: sf.residual(models),
    )
    e = rep["attackers"][0]
    assert rep["initial_state"] == "normal" and rep["final_mean"] > 0 and e["m_nmi"] is not None
    # formal ε, empirical ε and M-NMI side by side
    assert 0 <= e["epsilon_lb"] <= e["epsilon"] and e["audit_trials"] == 200
    assert rep["audit"]["canary"] == "gradient"


@pytest.mark.parametrize("mechanism", ["dp-dsgd", "decor"])
def test_audit_blocks_merge_into_the_single_run(plans, mechanism):
    from edgedp_sim import scenario_bytes

    sc = scenarios.from_plan(plans[mechanism])
    attackers = (adversary.tap_all(), adversary.honest_but_curious(1))
    whole = audit.run(sc, attackers, trials=40, keep_scores=True)
    payload = scenario_bytes.dump(sc)
    options = (attackers, 0, "gradient", None, "batch", 7, 0)  # chunks of 7 in each block
    parts = [audit.block(payload, first, count, *options) for first, count in ((0, 13), (13, 27))]
    merged = audit.merge(parts)["scores"]
    for row, entry in zip(merged, whole["attackers"], strict=True):
        assert row.tobytes() == entry["scores"].tobytes()


def test_audit_statistics_do_not_depend_on_the_callers_blas_threads():
    """The every-link eavesdropper's statistic on the default DOME audit plan took other last
    bits under a two-thread BLAS than under one; an audit is a function of plan and trials."""
    from threadpoolctl import threadpool_limits

    sc = scenarios.from_plan(audit_plans.build("dome"))
    attackers = tuple(adversary.parse_attacker(a) for a in ("eavesdropper:all", "hbc:1,7"))
    digests = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            rep = audit.run(sc, attackers, trials=16, keep_scores=True)
        digests.append([e["scores"].tobytes() for e in rep["attackers"]])
    assert digests[0] == digests[1]
