"""The audit's verdict has power and keeps its level: the μ test, the family-wise correction,
a self-consistent report, bounded memory and trials in keyed blocks.

Two kinds of repeated audits: draws of the attacker's statistic itself — S ~ N(∓μ²/2, μ²),
the exact law of the Gaussian likelihood ratio of a linear view (tests/test_audit.py checks
that the engines give it) — through the same verdict code, and whole audits (engines, views,
statistics) on disjoint blocks of trials of a small plan.
"""

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats

from edgedp.accounting import gdp
from edgedp_sim import adversary, audit, audit_plans, audit_stats, audit_verdict, scenarios

DELTA = 1e-6  # the δ people use
ATTACKERS = ("eavesdropper:all", "eavesdropper:0-1", "hbc:1,3")  # ring:4: all / link / pair
TINY = audit_plans.Setting(topology="ring:4", steps=4, dataset="synthetic-logistic:1:40")


def _certificate(mu: float) -> audit_verdict.Certificate:
    return audit_verdict.Certificate(mu=mu, epsilon=gdp.epsilon(mu, delta=DELTA))


def _simulated_audits(true_mu, certified_mu, *, trials, audits, attackers=3, seed=0):
    """Family verdicts of ``audits`` simulated audits: every attacker's statistic drawn for a
    view of GDP parameter ``true_mu`` against a certificate of ``certified_mu``."""
    present, pick = audit_verdict.layout(range(trials))
    g = np.random.default_rng(seed)
    out = []
    for _ in range(audits):
        scores = [audit_verdict.gaussian_statistic(true_mu, present, g) for _ in range(attackers)]
        out.append(
            audit_verdict.decide(
                scores,
                present,
                pick,
                certificates=[_certificate(certified_mu)] * attackers,
                alpha=0.05,
                delta=DELTA,
            )
        )
    return out


# ---------------------------------------------------------------- the μ bound
def test_mu_bound_is_the_gaussian_tradeoff_through_the_error_rates():
    # G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (Dong, Roth & Su): the point (α, G_μ(α)) gives μ back
    for mu in (0.3, 1.0, 2.5):
        for fpr in (1e-4, 0.05, 0.3):
            fnr = stats.norm.cdf(stats.norm.ppf(1 - fpr) - mu)
            assert audit_stats.mu_bound(fpr, fnr) == pytest.approx(mu, rel=1e-9)
    assert audit_stats.mu_bound(0.5, 0.5) == 0.0  # a coin flip shows nothing
    assert audit_stats.mu_bound(0.7, 0.6) == 0.0  # worse than a coin: clipped, never negative
    assert audit_stats.mu_bound(1.0, 0.0) == 0.0


def test_p_value_is_the_level_at_which_the_bound_crosses_the_certificate():
    bound = audit_stats.mu_bound
    fp, n0, fn, n1 = 40, 1000, 60, 1000
    p = audit_stats.p_value(fp, n0, fn, n1, bound=bound, certified=2.5)
    assert 0 < p < 0.05
    below, *_ = audit_stats.held_out_bound(fp, n0, fn, n1, alpha=0.9 * p, bound=bound)
    above, *_ = audit_stats.held_out_bound(fp, n0, fn, n1, alpha=1.1 * p, bound=bound)
    assert below <= 2.5 < above
    assert audit_stats.p_value(400, n0, 400, n1, bound=bound, certified=1.0) == 1.0
    # tiny p-values are resolved (Beta upper quantiles from the upper tail, not 1 − α)
    assert audit_stats.p_value(0, 5000, 0, 5000, bound=bound, certified=1.0) < 1e-100


def test_most_shown_is_a_ceiling_of_every_held_out_bound():
    eps = lambda fpr, fnr: audit_stats.epsilon_bound(fpr, fnr, DELTA)  # noqa: E731
    top = audit_stats.most_shown(250, 250, alpha=0.05, bound=eps)
    grid = np.arange(0, 251, 5)
    values = [
        audit_stats.held_out_bound(a, 250, b, 250, alpha=0.05, bound=eps)[0]
        for a in grid
        for b in grid
    ]
    assert max(values) == pytest.approx(top) and top == pytest.approx(
        math.log((1 - DELTA - (1 - 0.025 ** (1 / 250))) / (1 - 0.025 ** (1 / 250)))
    )


# ---------------------------------------------------------------- power and level (statistic)
def test_a_halved_noise_view_is_flagged_at_delta_1e_6():
    """Certified μ = 1, the view shows μ = 2 (half the noise): the μ test flags every audit
    of 1,000 trials; ε_lb alone (at δ = 1e-6) flags none — what the audit lacked."""
    verdicts = _simulated_audits(2.0, 1.0, trials=1000, audits=40)
    assert sum(v.violation for v in verdicts) >= 39
    assert all(any(t["mu"].rejected for t in v.tests) for v in verdicts)
    assert not any(t["epsilon"].rejected for v in verdicts for t in v.tests)
    mu_lb = np.array([t["mu"].bound for v in verdicts for t in v.tests])
    assert 1.3 < np.median(mu_lb) < 2.0 and np.mean(mu_lb > 2.0) <= 0.05  # a tight lower bound


def test_a_sound_view_is_flagged_at_most_at_the_level_family_wise():
    """A view exactly at its certificate (μ = 1), three attackers, six tests: over 200
    seeded audits the family flags at most ~5% (Bonferroni; measured 0 here)."""
    verdicts = _simulated_audits(1.0, 1.0, trials=400, audits=200, seed=1)
    flagged = sum(v.violation for v in verdicts)
    assert stats.binom.sf(flagged - 1, 200, 0.05) > 0.01  # consistent with a rate ≤ 5%
    assert verdicts[0].tests_in_family == 6 and verdicts[0].correction == "Bonferroni"
    assert verdicts[0].level == pytest.approx(0.05 / 6)
    # the uncorrected per-attacker tests at 5% flag more often than the corrected family
    lone = [
        audit_verdict.decide([s], present, pick, certificates=[_certificate(1.0)], alpha=0.05 * 6)
        for s, present, pick in _statistic_draws(1.0, trials=400, audits=200, seed=1)
    ]
    assert sum(v.violation for v in lone) >= flagged


def _statistic_draws(mu, *, trials, audits, seed):
    present, pick = audit_verdict.layout(range(trials))
    g = np.random.default_rng(seed)
    for _ in range(audits):
        yield audit_verdict.gaussian_statistic(mu, present, g), present, pick


def test_family_counts_only_attackers_with_a_statistic():
    present, pick = audit_verdict.layout(range(200))
    g = np.random.default_rng(3)
    dec = audit_verdict.decide(
        [audit_verdict.gaussian_statistic(1.0, present, g), None],
        present,
        pick,
        certificates=[_certificate(1.0), _certificate(1.0)],
        alpha=0.05,
        delta=DELTA,
    )
    assert dec.tests_in_family == 2 and dec.tests[1] == {}  # an encrypted tap: no test
    lap = audit_verdict.decide(
        [audit_verdict.gaussian_statistic(1.0, present, g)],
        present,
        pick,
        certificates=[audit_verdict.Certificate(mu=None, epsilon=3.0)],
        alpha=0.05,
        delta=0.0,
    )
    assert lap.tests_in_family == 1 and set(lap.tests[0]) == {"epsilon"}


# ---------------------------------------------------------------- whole audits
def _tiny_plans():
    sound = audit_plans.build("dp-dsgd", TINY)
    # μ = 1 (σ = 1) at δ = 1e-6, set by σ (no ε target to re-check on load)
    sound = dataclasses.replace(
        sound, noise_multiplier=1.0, sensitivity=2.0, target_epsilon=None, delta=DELTA
    )
    assert sound.guarantee().mu == 1.0 and sound.guarantee().sensitivity == 2.0  # √k, k = 4
    return sound, dataclasses.replace(sound, sensitivity=1.0)  # half the noise, same certificate


def test_whole_audits_flag_a_halved_noise_plan_and_spare_the_sound_one():
    """Ten audits each on disjoint keyed blocks of trials (1,000 trials, 3 attackers, δ = 1e-6):
    the plan adding half its certified noise is flagged by every audit, the sound plan by
    none; the μ the engines show is the view's (2 and 1)."""
    sound, halved = _tiny_plans()
    atts = [adversary.parse_attacker(a) for a in ATTACKERS]
    for plan, expect in ((halved, True), (sound, False)):
        sc = scenarios.from_plan(plan)
        flags = []
        for r in range(10):
            rep = audit.run(sc, atts, trials=1000, delta=DELTA, first_trial=1000 * r)
            flags.append(rep["verdict"]["violation"])
            tap = rep["attackers"][0]
            assert tap["mu"] == 1.0 and tap["delta"] == DELTA
            assert tap["mu_view"] == pytest.approx(2.0 if expect else 1.0)
        assert flags == [expect] * 10, (plan.sensitivity, flags)


def test_trials_are_keyed_blocks_whatever_the_chunks():
    """Trial i's statistic depends on i only: two blocks (or other chunk sizes) give the
    same scores as one run — how an audit shards over workers."""
    sound, _ = _tiny_plans()
    sc = scenarios.from_plan(sound)
    atts = [adversary.parse_attacker(a) for a in ATTACKERS]
    whole = audit.run(sc, atts, trials=96, delta=DELTA, chunk=96, keep_scores=True)
    parts = [
        audit.run(sc, atts, trials=48, delta=DELTA, first_trial=f, chunk=c, keep_scores=True)
        for f, c in ((0, 16), (48, 40))
    ]
    for j in range(len(atts)):
        joined = np.concatenate([p["attackers"][j]["scores"] for p in parts])
        np.testing.assert_array_equal(whole["attackers"][j]["scores"], joined)
    assert whole["trial_ids"] == [0, 96] and parts[1]["trial_ids"] == [48, 96]


def test_default_chunk_follows_a_memory_budget():
    plans = {m: audit_plans.build(m, audit_plans.Setting()) for m in ("dp-dsgd", "mafalda")}
    atts = [adversary.parse_attacker(a) for a in ("eavesdropper:all", "hbc:1,7")]
    small = audit.chunk_for(plans["dp-dsgd"], atts, dim=2, batch_size=10)
    assert small == audit.MAX_CHUNK  # a ring:8 plan with d = 2 fits whole chunks
    wide = audit.chunk_for(plans["mafalda"], atts, dim=650, batch_size=22)
    assert audit.MIN_CHUNK <= wide < small
    per_trial = audit.bytes_per_trial(plans["mafalda"], atts, dim=650, batch_size=22)
    assert wide * per_trial <= audit.CHUNK_BYTES
    rep = audit.run(scenarios.from_plan(plans["dp-dsgd"]), atts, trials=16, delta=DELTA)
    assert rep["chunk"] == min(16, small)


# ---------------------------------------------------------------- a self-consistent report
def test_report_names_delta_adjacency_and_attacker_and_stays_below_its_ceiling(capsys, tmp_path):
    from edgedp_cli import audit_cmd
    from edgedp_cli.main import main

    sound, halved = _tiny_plans()
    path = tmp_path / "sound.plan"
    path.write_bytes(sound.to_bytes())  # (a halved plan does not load: its sensitivity is wrong)
    png = tmp_path / "roc.png"
    args = ["audit", str(path), "--trials", "400", "--delta", "1e-6", "--plot", str(png)]
    for a in ATTACKERS:
        args += ["--attacker", a]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == DELTA and not out["verdict"]["violation"]
    assert out["verdict"]["correction"] == "Bonferroni" and out["verdict"]["tests"] == 6
    for e in out["attackers"]:
        assert e["delta"] == DELTA and e["adjacency"] == "zero-out" and e["attacker"]
        assert e["epsilon_lb"] <= e["epsilon_lb_max"] and e["mu_lb"] <= e["mu"]
        assert e["confidence"] == 0.95 and e["test_confidence"] == pytest.approx(1 - 0.05 / 6)
    caption = out["plot_caption"]
    assert "certified" in caption and "held-out" in caption and png.stat().st_size > 0
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "delta = 1e-06" in text and "zero-out" in text and "eps@1e-06" in text
    assert "Bonferroni" in text and "max:" in text and "typ:" in text
    assert "no certificate refuted" in text and "VIOLATION" not in text
    rep = audit.run(
        scenarios.from_plan(halved),
        [adversary.parse_attacker(a) for a in ATTACKERS],
        trials=1000,
        delta=DELTA,
    )
    text = audit_cmd.text_table(rep)
    assert "VIOLATION: mu lower bound" in text and "verdict: VIOLATION" in text
    for bad in ("0", "1", "2", "-1e-6", "nan"):
        assert main(["audit", str(path), "--trials", "16", f"--delta={bad}"]) == 2


def test_typical_epsilon_lb_is_a_median_not_a_ceiling():
    """The old "ceil" (ε_lb at expected error counts) was exceeded by about a third of the
    audits of a mechanism exactly at its μ; the typical value is their median, and only
    ``epsilon_lb_max`` bounds ε_lb."""
    present, pick = audit_verdict.layout(range(1000))
    level = 0.05 / 2
    typ = audit_verdict.typical_epsilon_lb(0.838, range(1000), delta=DELTA, level=level)
    g = np.random.default_rng(7)
    shown = []
    for _ in range(100):
        s = audit_verdict.gaussian_statistic(0.838, present, g)
        t = audit_verdict.run_test(
            "epsilon", s, present, pick, certified=math.inf, delta=DELTA, level=level
        )
        shown.append(t.bound)
    assert 0.25 < np.mean(np.array(shown) > typ) < 0.75
    top = audit_stats.most_shown(
        250, 250, alpha=level, bound=lambda a, b: audit_stats.epsilon_bound(a, b, DELTA)
    )
    assert max(shown) <= top


def test_delta_outside_the_unit_interval_is_refused():
    sound, _ = _tiny_plans()
    sc = scenarios.from_plan(sound)
    for bad in (0.0, 1.0, 2.0, -1e-6, math.nan):
        with pytest.raises(ValueError, match="delta"):
            audit.run(sc, [adversary.tap_all()], trials=16, delta=bad)
