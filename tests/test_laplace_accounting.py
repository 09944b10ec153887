"""Laplace ε-DP accountant of sr-gt / DPOP (paper 004 Lemma 4.4, Thm 4.5) and the tuner."""

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgedp.families.laplace import accounting as laplace
from edgedp.families.laplace import sr_gt_tuning
from edgedp.families.laplace.accounting import LaplaceSchedule

# paper 004 §6.1 parameters for ε = 0.1 / 1 / 10
PAPER_61 = [
    (0.1, dict(gamma=0.001, beta=1000, q1=0.92, q2=0.99)),
    (1.0, dict(gamma=0.001, beta=1000, q1=0.97, q2=0.99)),
    (10.0, dict(gamma=0.002, beta=100, q1=0.97, q2=0.99)),
]


def _sched(eps=1.0, delta_grad=1.0, **kw):
    params = dict(gamma=0.001, beta=1000, q1=0.97, q2=0.99) | kw
    return LaplaceSchedule(delta_grad=delta_grad, epsilon=eps, **params)


# ---------------------------------------------------------------- schedules (Eq. 5)
def test_schedule_is_eq5_without_q2_with_k_from_one():
    s = _sched(eps=2.0, delta_grad=3.0)
    # round t = iteration k = t + 1: α_1 = γ; ν_1 = γδ/(ε(q₂ − q₁)) — paper 004's Eq. (5)
    # divided by q₂, because x(k) is released under ν_{k+1} (module docstring)
    assert s.stepsize(0) == 0.001
    assert s.noise_scale(0) == pytest.approx(0.001 * 3.0 / (2.0 * 0.02), rel=1e-15)
    assert s.stepsize(5) == pytest.approx(0.001 * 0.97**5, rel=1e-15)
    assert s.noise_scale(5) == pytest.approx(s.noise_scale(0) * 0.99**5, rel=1e-15)
    # the message of round t carries x(t), which moved by δα_t (α_t = stepsize(t − 1))
    assert laplace.sensitivity(s, 0) == 0.0
    assert laplace.sensitivity(s, 5) == pytest.approx(3.0 * s.stepsize(4), rel=1e-15)


@pytest.mark.parametrize(("eps", "params"), PAPER_61)
def test_closed_form_partial_sums(eps, params):
    s = LaplaceSchedule(delta_grad=1.0, epsilon=eps, **params)
    r = params["q1"] / params["q2"]
    assert laplace.epsilon_spent(s, 0) == 0.0
    for k in (1, 2, 10, 100, 1000):
        # closed form: K messages release x(1..K−1), ε_K = ε (1 − (q1/q2)^(K−1)); with the
        # final release x(K) as well, ε (1 − (q1/q2)^K)
        assert laplace.epsilon_spent(s, k) == pytest.approx(eps * (1 - r ** (k - 1)), abs=1e-15)
        final = laplace.epsilon_spent(s, k, final_release=True)
        assert final == pytest.approx(eps * (1 - r**k), rel=1e-12)
    assert laplace.epsilon_spent(s, 100_000) == pytest.approx(eps, rel=1e-12)
    assert laplace.epsilon(s) == eps


def test_degenerate_cases_first():
    s = _sched(eps=math.inf)  # no noise
    assert s.noise_scale(0) == 0.0
    assert laplace.epsilon_spent(s, 0) == 0.0
    assert laplace.epsilon_spent(s, 1) == 0.0  # round 0 sends the public x(0) + noise
    assert laplace.epsilon_spent(s, 2) == math.inf
    with pytest.raises(ValueError, match="rounds"):
        laplace.epsilon_spent(_sched(), -1)


@given(
    q1=st.floats(0.01, 0.98),
    gap=st.floats(0.001, 0.9),
    eps=st.floats(0.01, 100),
    k=st.integers(0, 3000),
)
def test_spent_is_monotone_and_below_the_infinite_horizon(q1, gap, eps, k):
    q2 = q1 + gap * (1 - q1)
    s = LaplaceSchedule(gamma=0.5, beta=1, q1=q1, q2=q2, delta_grad=2.0, epsilon=eps)
    a, b = laplace.epsilon_spent(s, k), laplace.epsilon_spent(s, k + 1)
    assert 0 <= a <= b <= laplace.epsilon(s) * (1 + 1e-12)
    expected = eps * (1 - (q1 / q2) ** (k - 1)) if k else 0.0
    assert a == pytest.approx(expected, rel=1e-9, abs=1e-300)


@given(budget_fraction=st.floats(0.0, 0.999), q1=st.floats(0.1, 0.9))
def test_rounds_within_inverts_epsilon_spent(budget_fraction, q1):
    s = LaplaceSchedule(gamma=1, beta=0, q1=q1, q2=(q1 + 1) / 2, delta_grad=1, epsilon=2)
    budget = 2 * budget_fraction
    k = laplace.rounds_within(s, budget)
    assert laplace.epsilon_spent(s, k) <= budget < laplace.epsilon_spent(s, k + 1)


def test_example_delta_is_the_l1_bound_of_one_clipped_row():
    # L2 clip Δ → zeroing one of B examples moves the mean by ≤ Δ/B in L2, ≤ Δ√d/B in L1;
    # replacing it by another by ≤ 2Δ/B, ≤ 2Δ√d/B
    assert laplace.example_delta(clip_norm=0.5, dim=9, batch_size=3) == pytest.approx(0.5)
    replace = laplace.example_delta(clip_norm=0.5, dim=9, batch_size=3, adjacency="replace-one")
    assert replace == pytest.approx(1.0)
    s = _sched(delta_grad=0.9, adjacency="replace-one")
    with pytest.raises(ValueError, match=r"below 2\*clip\*sqrt\(d\)/B = 1 .*--delta-grad 1"):
        laplace.check_task(s, clip_norm=0.5, dim=9, batch_size=3)
    laplace.check_task(_sched(delta_grad=0.5), clip_norm=0.5, dim=9, batch_size=3)
    with pytest.raises(ValueError, match=r"below clip\*sqrt\(d\)/B = 0.5"):
        laplace.check_task(_sched(delta_grad=0.4), clip_norm=0.5, dim=9, batch_size=3)
    assert laplace.replace_one_epsilon(_sched(), 0.7) == 1.4
    assert laplace.replace_one_epsilon(s, 0.7) == 0.7
    with pytest.raises(ValueError, match="finite"):
        laplace.check_task(s, clip_norm=math.inf)
    laplace.check_task(_sched(adjacency="problem"), clip_norm=math.inf)


# ---------------------------------------------------------------- Thm 4.5 conditions
@dataclass(frozen=True, slots=True)
class BadCase:
    params: dict
    needle: str


BAD = [
    BadCase(dict(gamma=0.01, beta=1000), r"gamma\*beta <= 1"),
    BadCase(dict(q1=0.99, q2=0.99), "q1 < q2 < 1"),
    BadCase(dict(q1=0.5, q2=1.0), "q1 < q2 < 1"),
    BadCase(dict(q1=0.0), "0 < q1 < 1"),
    BadCase(dict(gamma=0.0), "gamma > 0"),
    BadCase(dict(delta_grad=0.0), "delta_grad"),
    BadCase(dict(epsilon=0.0), "epsilon"),
    BadCase(dict(beta=-1.0), "beta"),
    BadCase(dict(adjacency="user"), "adjacency"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.needle)
def test_out_of_theorem_parameters_name_the_condition(case):
    params = dict(gamma=0.001, beta=1000, q1=0.97, q2=0.99, delta_grad=1.0, epsilon=1.0)
    with pytest.raises(ValueError, match=case.needle):
        LaplaceSchedule(**(params | case.params))


def test_schedule_round_trips_through_a_dict():
    s = _sched(adjacency="problem")
    assert LaplaceSchedule.from_dict(s.to_dict()) == s


# ---------------------------------------------------------------- Remark 5.20 search
def test_accuracy_bound_terms_by_hand():
    kw = dict(epsilon=1.0, delta_grad=1.0, smoothness=10.0, strong_convexity=1.0, nodes=100, dim=2)
    t = sr_gt_tuning.bound_terms(gamma=0.001, q1=0.97, q2=0.99, **kw)
    # Eq. (25) term by term with the engines' ν₁ = γδ/(ε(q2 − q1)) (paper 004 prints q2·ν₁):
    # S = γ/(1−q1) = 1/30, noise factor δ²/(ε²(q2−q1)²) = 2500
    s, noise = 0.001 / 0.03, 1 / 0.02**2
    assert t[0] == pytest.approx(math.exp(-s))
    assert t[1] == pytest.approx(s * 100 / 100)
    assert t[2] == pytest.approx(4 * noise * 1e-6 / (1 - 0.99**2))
    assert t[3] == pytest.approx((80 + 400) * noise * 1e-9 / (1 - 0.97 * 0.99**2))


def test_tuner_improves_on_its_starts_and_stays_feasible():
    r = sr_gt_tuning.tune(
        epsilon=1.0,
        delta_grad=1.0,
        smoothness=400.0,
        strong_convexity=4.0,
        nodes=100,
        dim=2,
        c1=100.0,
        c2=1e-3,
        restarts=3,
        sweeps=8,
    )
    assert 0 < r.q1 < r.q2 < 1 and r.gamma * r.beta <= 1 + 1e-12
    assert r.gamma <= 2 / 404 + 1e-15  # Lemma 5.15: α ≤ 2/(μ + L)
    assert r.bound <= r.start_bound
    LaplaceSchedule(gamma=r.gamma, beta=r.beta, q1=r.q1, q2=r.q2, delta_grad=1, epsilon=1)
    paper = sr_gt_tuning.accuracy_bound(
        gamma=0.001, q1=0.97, q2=0.99, epsilon=1.0, delta_grad=1.0, smoothness=400.0,
        strong_convexity=4.0, nodes=100, dim=2, c1=100.0, c2=1e-3,
    )  # fmt: skip
    assert r.bound <= paper
