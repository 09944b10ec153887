"""Tests for edgedp.accounting: golden numbers, dp_accounting cross-checks, identities.

Tolerances are chosen on purpose:
- 1e-9 relative against dp_accounting and mpmath (both sides are exact formulas evaluated in
  double precision; measured disagreement is ~1e-12);
- exact (or 1e-12) for closed-form sensitivities of small integer matrices.
"""

# Paper letters C (strategy), B (decoder), X (Gram matrix); see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from dataclasses import dataclass

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedp import accounting
from edgedp.accounting import gdp, mf, rdp, sensitivity
from edgedp.accounting.participation import Participation

PROPS = settings(max_examples=40, deadline=None, derandomize=True, database=None)
MUS = [0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]
DELTAS = [1e-3, 1e-6, 1e-9, 1e-12]
GRID = list(itertools.product(MUS, DELTAS))


def _mp_delta(mu: float, eps: float) -> mpmath.mpf:
    """Closed form δ(ε) of μ-GDP in 60-digit arithmetic (independent of our log-space code)."""
    with mpmath.workdps(60):
        m, e = mpmath.mpf(mu), mpmath.mpf(eps)
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# ---------------------------------------------------------------- package surface


def test_public_modules():
    # the accounting several families share; each family's own accountant is in its package
    assert accounting.__all__ == [
        "gdp",
        "mf",
        "participation",
        "pndp",
        "pndp_muffliato",
        "rdp",
        "sensitivity",
    ]


def test_accounting_imports_without_scipy():
    # The device path must not pull scipy (DESIGN §3).
    code = "import sys, edgedp.accounting; assert 'scipy' not in sys.modules, 'scipy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- GDP golden numbers


def test_gdp_golden_numbers():
    # Hand: Φ(−0.5) − e·Φ(−1.5) = 0.3085375387 − 2.7182818285·0.0668072013 = 0.1269367375.
    assert gdp.delta(1.0, epsilon=1.0) == pytest.approx(0.1269367375, rel=1e-9)
    # dp_accounting.get_epsilon_gaussian(sigma=1.0, delta=1e-5) = 4.377178095681137.
    assert gdp.epsilon(1.0, delta=1e-5) == pytest.approx(4.377178095681137, rel=1e-12)
    # mpmath (30 digits): log(ncdf(−40)) = −804.608442013753788166606832919.
    assert gdp.log_ndtr(-40.0) == pytest.approx(-804.608442013753788, rel=1e-15)


@pytest.mark.parametrize("x", [-1e8, -1e3, -38.5, -20.5, -20.0, -7.0, -3.0, 0.0, 2.0, 8.0])
def test_log_ndtr_matches_mpmath(x):
    with mpmath.workdps(50):
        expected = float(mpmath.log(mpmath.ncdf(x)))
    assert gdp.log_ndtr(x) == pytest.approx(expected, rel=1e-14)


# ---------------------------------------------------------------- (a) GDP vs dp_accounting


@pytest.mark.parametrize(("mu", "delta"), GRID)
def test_gdp_epsilon_matches_dp_accounting(mu, delta):
    # A Gaussian mechanism with std σ and sensitivity 1 is (1/σ)-GDP.
    expected = dp_accounting.get_epsilon_gaussian(1.0 / mu, delta)
    assert gdp.epsilon(mu, delta=delta) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("mu", "delta"), GRID)
def test_gdp_delta_matches_dp_accounting_and_mpmath(mu, delta):
    eps = gdp.epsilon(mu, delta=delta)
    # dp_accounting has no public δ(ε) for the exact Gaussian mechanism; _get_log_delta is
    # the analytic formula its get_epsilon_gaussian inverts (Balle & Wang 2018, Eq. 6).
    theirs = math.exp(gaussian_mechanism._get_log_delta(1.0 / mu, eps))
    ours = gdp.delta(mu, epsilon=eps)
    assert ours == pytest.approx(theirs, rel=1e-9)
    assert ours == pytest.approx(float(_mp_delta(mu, eps)), rel=1e-9)
    assert ours == pytest.approx(delta, rel=1e-9)  # epsilon() hit its target
    assert float(_mp_delta(mu, eps)) <= delta * (1 + 1e-12)  # and on the private side


@pytest.mark.parametrize(("mu", "delta"), GRID)
def test_gdp_calibration_matches_dp_accounting(mu, delta):
    eps = dp_accounting.get_epsilon_gaussian(1.0 / mu, delta)
    expected_sigma = dp_accounting.get_sigma_gaussian(eps, delta)
    assert gdp.noise_multiplier(eps, delta=delta) == pytest.approx(expected_sigma, rel=1e-9)


@pytest.mark.parametrize("mu", [1e-4, 1e-2, 1.0, 30.0, 1e3])
@pytest.mark.parametrize("eps", [0.0, 1e-3, 0.5, 5.0, 100.0, 1e4])
def test_gdp_delta_extreme_range_matches_mpmath(mu, eps):
    expected = _mp_delta(mu, eps)
    if expected < 1e-300:  # below double range: we must report 0 (or denormal), not more
        assert gdp.delta(mu, epsilon=eps) < 1e-290
    else:
        assert gdp.delta(mu, epsilon=eps) == pytest.approx(float(expected), rel=1e-9)


# ---------------------------------------------------------------- (b) RDP vs dp_accounting


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("k", [1, 4, 100])
def test_rdp_conversion_matches_rdp_accountant(sigma, k):
    orders = list(rdp.DEFAULT_ORDERS)
    acc = rdp_privacy_accountant.RdpAccountant(orders)
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma), k)
    # k-fold Gaussian: RDP k·α/(2σ²) = RDP of (√k/σ)-GDP.
    curve = rdp.rdp_of_gdp(math.sqrt(k) / sigma, orders)
    np.testing.assert_allclose(curve, acc.rdp, rtol=1e-12)
    for delta in DELTAS:
        eps, order = rdp.epsilon(orders, curve, delta=delta)
        their_eps, their_order = acc.get_epsilon_and_optimal_order(delta)
        assert eps == pytest.approx(their_eps, rel=1e-9) and order == their_order
        d, d_order = rdp.delta(orders, curve, epsilon=eps)
        their_d, their_d_order = acc.get_delta_and_optimal_order(eps)
        assert d == pytest.approx(their_d, rel=1e-9) and d_order == their_d_order


@PROPS
@given(
    # ρ in (0, 1e-16) makes dp_accounting's own math.log1p(−exp(−ρ)) raise; we return 0.
    curve=st.lists(
        st.tuples(st.floats(1.0, 300.0), st.just(0.0) | st.floats(1e-12, 50.0)),
        min_size=1,
        max_size=12,
    ),
    # δ = 1 excluded: dp_accounting can round 1 + expm1(−ρ) to 0 and answer inf; we say 0.
    log10_delta=st.floats(-14.0, -0.01),
    eps=st.floats(0.0, 30.0),
)
def test_rdp_conversion_matches_dp_accounting_on_any_curve(curve, log10_delta, eps):
    # Includes orders <= 1.01 (TV bound only) and tiny ρ (the (0, δ) shortcut).
    orders, values = zip(*curve, strict=True)
    delta = 10.0**log10_delta
    ours = rdp.epsilon(orders, values, delta=delta)
    theirs = rdp_privacy_accountant.compute_epsilon(orders, values, delta)
    assert ours[0] == pytest.approx(theirs[0], rel=1e-9, abs=1e-300) and ours[1] == theirs[1]
    ours = rdp.delta(orders, values, epsilon=eps)
    theirs = rdp_privacy_accountant.compute_delta(orders, values, eps)
    assert ours[0] == pytest.approx(theirs[0], rel=1e-9, abs=1e-300) and ours[1] == theirs[1]


def test_rdp_upper_bounds_exact_gdp():
    # The RDP route is a valid but looser conversion of the same μ-GDP guarantee.
    for mu, delta in GRID:
        eps_rdp, _ = rdp.epsilon(rdp.DEFAULT_ORDERS, rdp.rdp_of_gdp(mu), delta=delta)
        assert eps_rdp >= gdp.epsilon(mu, delta=delta)


def test_rdp_rejects_negative_values():
    with pytest.raises(ValueError, match="RDP value"):
        rdp.epsilon([2.0], [-1e-3], delta=1e-5)
    with pytest.raises(ValueError, match="order"):
        rdp.delta([0.5], [1.0], epsilon=1.0)


# ---------------------------------------------------------------- (c) inverses


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 4.0, 16.0, 64.0])
@pytest.mark.parametrize("delta", DELTAS)
def test_gdp_inverses(eps, delta):
    m = gdp.mu(eps, delta=delta)
    assert gdp.epsilon(m, delta=delta) == pytest.approx(eps, rel=1e-9)
    assert gdp.delta(m, epsilon=eps) <= delta  # calibration is on the private side
    e = gdp.epsilon(m, delta=delta)
    assert gdp.delta(m, epsilon=e) == pytest.approx(delta, rel=1e-9)


# ---------------------------------------------------------------- (d) DP-SGD closed form


@pytest.mark.parametrize(("k", "b", "T"), [(1, 10, 10), (3, 2, 6), (5, 20, 100), (10, 1, 10)])
def test_identity_sensitivity_is_sqrt_k(k, b, T):
    # closed form: C = I, k participations -> X[π,π] = I_k -> sens = √k (exact).
    s = sensitivity.sensitivity(np.eye(T), Participation(k, b))
    assert s.value == pytest.approx(math.sqrt(k), rel=1e-15) and s.exact


@pytest.mark.parametrize(("k", "b"), [(1, 50), (2, 25), (10, 5)])
def test_dp_sgd_is_sqrt_k_over_sigma_gdp(k, b):
    # DP-SGD noise std σ_sgd·Δ equals σ_mf·sens·Δ with sens = √k, so μ = √k/σ_sgd.
    sigma_sgd = 1.7
    g = mf.ldp_guarantee(
        np.eye(50), participation=Participation(k, b), noise_multiplier=sigma_sgd / math.sqrt(k)
    )
    assert g.mu == pytest.approx(math.sqrt(k) / sigma_sgd, rel=1e-14)
    acc = rdp_privacy_accountant.RdpAccountant(list(rdp.DEFAULT_ORDERS))
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma_sgd), k)
    np.testing.assert_allclose(g.rdp(rdp.DEFAULT_ORDERS), acc.rdp, rtol=1e-12)


# ---------------------------------------------------------------- (e) prefix-sum closed form


@dataclass(frozen=True)
class PrefixCase:
    k: int
    b: int
    T: int
    squared: float  # hand-computed max_π Σ_{s,t∈π} (T − max(s, t))


PREFIX_CASES = [
    # X = CᵀC for C = ones lower triangle: X[s,t] = T − max(s,t) (0-based), all >= 0.
    # T=6, (3,2), π={0,2,4}: diag 6+4+2 = 12, pairs (0,2)=4,(0,4)=2,(2,4)=2 -> 2·8 = 16; 28.
    #   (π={1,3,5}: 5+3+1 + 2·(3+1+1) = 19 < 28.)
    PrefixCase(3, 2, 6, 28.0),
    # T=8, (2,4), π={0,4}: 8 + 4 + 2·4 = 20.
    PrefixCase(2, 4, 8, 20.0),
    # T=4 every step: rows [4,3,2,1],[3,3,2,1],[2,2,2,1],[1,1,1,1] sum 10+9+7+4 = 30.
    PrefixCase(4, 1, 4, 30.0),
    # T=5 single participation: max column norm² = X[0,0] = 5.
    PrefixCase(1, 5, 5, 5.0),
]


@pytest.mark.parametrize("case", PREFIX_CASES)
def test_prefix_sum_sensitivity_hand_computed(case):
    s = sensitivity.sensitivity(np.tril(np.ones((case.T, case.T))), Participation(case.k, case.b))
    assert s.value**2 == pytest.approx(case.squared, rel=1e-14) and s.exact


@pytest.mark.parametrize(("k", "b", "T"), [(3, 7, 21), (5, 40, 200), (2, 3, 11)])
def test_prefix_sum_sensitivity_explicit_sum(k, b, T):
    # Explicit sum for the first window (the largest, since X decreases with the index).
    idx = b * np.arange(min(k, -(-T // b)))
    expected = sum(T - max(s, t) for s in idx for t in idx)
    s = sensitivity.sensitivity(np.tril(np.ones((T, T))), Participation(k, b))
    assert s.value**2 == pytest.approx(expected, rel=1e-14)


# ---------------------------------------------------------------- (f) negative X entries


def _brute_force_scalar(X, patterns):
    best = 0.0
    for p in patterns:
        block = X[np.ix_(p, p)]
        for signs in itertools.product([-1.0, 1.0], repeat=len(p)):
            u = np.array(signs)
            best = max(best, float(u @ block @ u))
    return best


@pytest.mark.parametrize("seed", range(5))
def test_negative_gram_is_flagged_and_upper_bounds(seed):
    rng = np.random.default_rng(seed)
    C = np.tril(rng.standard_normal((8, 8)))
    part = Participation(3, 3)
    s = sensitivity.sensitivity(C, part)
    X = C.T @ C
    assert np.any(X < 0) and not s.exact
    assert s.value**2 >= _brute_force_scalar(X, part.patterns(8)) * (1 - 1e-12)


def test_anti_pgd_style_strategy():
    # C = first differences: X = [[2,−1,0],[−1,2,−1],[0,−1,1]]; Σ|X| = 5 + 2·2 = 9 -> 3.
    C = np.eye(3) - np.eye(3, k=-1)
    s = sensitivity.sensitivity(C, Participation.every_step(3))
    assert s.value == pytest.approx(3.0, rel=1e-15) and not s.exact


def test_participation_fast_path_equals_explicit_patterns():
    rng = np.random.default_rng(7)
    C = np.tril(rng.standard_normal((40, 40)))
    for k, b in [(1, 1), (3, 5), (4, 10), (40, 1), (2, 17), (7, 3)]:
        part = Participation(k, b)
        fast = sensitivity.sensitivity(C, part)
        slow = sensitivity.from_gram(C.T @ C, part.patterns(40))
        assert fast.value == pytest.approx(slow.value, rel=1e-13)
        assert fast.exact == slow.exact


# ---------------------------------------------------------------- (g) decoder


def test_rank_deficient_decoder_hand_computed():
    # C = prefix sum T=2, B = [1, 0] sees only the first output: B†B = diag(1, 0),
    # X = Cᵀ diag(1,0) C = e0 e0ᵀ -> every-step Σ|X| = 1 -> sens(C;B) = 1,
    # while sens(C) = sqrt(2 + 1 + 1 + 1) = √5.
    C = np.tril(np.ones((2, 2)))
    every = Participation.every_step(2)
    with_b = sensitivity.sensitivity(C, every, decoder=np.array([[1.0, 0.0]]))
    assert with_b.value == pytest.approx(1.0, rel=1e-14) and with_b.exact
    assert sensitivity.sensitivity(C, every).value == pytest.approx(math.sqrt(5.0), rel=1e-14)


def test_decoder_never_increases_sensitivity():
    # B = [1, 1] on C = I: B†B = ½·ones -> single participation: max X[i,i] = ½.
    s = sensitivity.sensitivity(np.eye(2), Participation.single(2), decoder=[[1.0, 1.0]])
    assert s.value == pytest.approx(math.sqrt(0.5), rel=1e-14)
    rng = np.random.default_rng(3)
    C = np.tril(rng.standard_normal((12, 12)))
    B = rng.standard_normal((5, 12))
    for part in [Participation(2, 6), Participation(1, 12), Participation.every_step(12)]:
        assert sensitivity.sensitivity(C, part, decoder=B).value <= (
            sensitivity.sensitivity(C, part).value * (1 + 1e-12)
        )
    # Square full-rank B: B†B = I, so the decoder does not matter.
    B = rng.standard_normal((12, 12))
    part = Participation(3, 4)
    assert sensitivity.sensitivity(C, part, decoder=B).value == pytest.approx(
        sensitivity.sensitivity(C, part).value, rel=1e-10
    )


# ---------------------------------------------------------------- participation


def test_participation_patterns_and_parsing():
    assert [p.tolist() for p in Participation(3, 2).patterns(6)] == [[0, 2, 4], [1, 3, 5]]
    assert [p.tolist() for p in Participation(2, 3).patterns(5)] == [[0, 3], [1, 4], [2]]
    # steps > k·b: windows anywhere (003 §2 definition), e.g. (1,1) is single participation.
    assert len(Participation(1, 1).patterns(4)) == 4
    assert Participation.every_step(4).count(4) == 4 and Participation.single(4).count(4) == 1
    assert Participation(2, 3).count(0) == 0 and Participation(2, 3).patterns(0) == []
    nodes = Participation(2, 2).node_patterns(4, n=3, node=2)
    assert [p.tolist() for p in nodes] == [[2, 8], [5, 11]]
    assert Participation.from_string(" 6 , 342 ") == Participation(6, 342)
    for bad in ["6", "6,0", "a,b", "1,2,3", "1.5,2"]:
        with pytest.raises(ValueError, match="'k,b'"):
            Participation.from_string(bad)
    with pytest.raises(ValueError, match="k=0"):
        Participation(0, 1)
    with pytest.raises(TypeError):
        Participation(1.5, 1)


# ---------------------------------------------------------------- mf accountant


def test_calibrate_hits_target():
    C = np.tril(np.ones((30, 30)))
    g = mf.calibrate(C, participation=Participation(3, 10), target_epsilon=2.0, delta=1e-6)
    assert g.epsilon(1e-6) <= 2.0
    assert g.epsilon(1e-6) == pytest.approx(2.0, rel=1e-9)
    assert g.mu == pytest.approx(1.0 / g.noise_multiplier, rel=1e-15)


def test_prefix_guarantee_identity():
    # C = I, (2,10) over T=20: after t steps count = min(2, ⌈t/10⌉) participations.
    full = mf.ldp_guarantee(np.eye(20), participation=Participation(2, 10), noise_multiplier=1.0)
    for t, count in [(0, 0), (1, 1), (10, 1), (11, 2), (20, 2)]:
        g = mf.ldp_guarantee(
            np.eye(20), participation=Participation(2, 10), noise_multiplier=1.0, steps_done=t
        )
        assert g.mu == pytest.approx(math.sqrt(count) / full.sensitivity, abs=1e-15)


def test_mf_validation():
    part = Participation(1, 4)
    with pytest.raises(ValueError, match="lower-triangular"):
        mf.ldp_guarantee(np.ones((4, 4)), participation=part, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="nonzero diagonal"):
        mf.ldp_guarantee(np.diag([1.0, 0.0, 1.0, 1.0]), participation=part, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="square"):
        mf.ldp_guarantee(np.ones((4, 3)), participation=part, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="NaN"):
        mf.ldp_guarantee(np.diag([1.0, np.nan, 1, 1]), participation=part, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="steps_done"):
        mf.ldp_guarantee(np.eye(4), participation=part, noise_multiplier=1.0, steps_done=5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        mf.ldp_guarantee(np.eye(4), participation=part, noise_multiplier=-1.0)
    with pytest.raises(ValueError, match="within"):
        mf.ldp_guarantee(np.eye(4), participation=[np.array([0, 4])], noise_multiplier=1.0)


# ---------------------------------------------------------------- (h) properties


@PROPS
@given(
    mu=st.floats(1e-3, 50.0),
    e1=st.floats(0.0, 200.0),
    e2=st.floats(0.0, 200.0),
)
def test_delta_decreasing_in_epsilon(mu, e1, e2):
    lo, hi = sorted((e1, e2))
    # 1e-12 slack: ε = 0 uses erf, ε > 0 the log-space formula; they differ by an ulp or so.
    assert gdp.delta(mu, epsilon=hi) <= gdp.delta(mu, epsilon=lo) * (1 + 1e-12)


@PROPS
@given(m1=st.floats(1e-3, 50.0), m2=st.floats(1e-3, 50.0), eps=st.floats(0.0, 200.0))
def test_delta_increasing_in_mu(m1, m2, eps):
    lo, hi = sorted((m1, m2))
    assert gdp.delta(lo, epsilon=eps) <= gdp.delta(hi, epsilon=eps) * (1 + 1e-12)


@PROPS
@given(mu=st.floats(1e-3, 100.0), log10_delta=st.floats(-15.0, -0.01))
def test_epsilon_nonnegative_and_private(mu, log10_delta):
    delta = 10.0**log10_delta
    eps = gdp.epsilon(mu, delta=delta)
    assert eps >= 0.0
    assert gdp.delta(mu, epsilon=eps) <= delta


@PROPS
@given(
    data=st.data(),
    T=st.integers(1, 24),
    k=st.integers(1, 6),
    b=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
)
def test_prefix_guarantee_monotone_in_steps(data, T, k, b, seed):
    # Non-negative C -> X >= 0: the exact case, where sens_t is non-decreasing in t.
    C = np.tril(np.random.default_rng(seed).uniform(0.1, 1.0, (T, T)))
    t1, t2 = sorted(data.draw(st.lists(st.integers(0, T), min_size=2, max_size=2)))

    def mu(t):
        return mf.ldp_guarantee(
            C, participation=Participation(k, b), noise_multiplier=0.8, steps_done=t
        ).mu

    assert mu(t1) <= mu(t2) * (1 + 1e-14) and mu(T) == pytest.approx(1 / 0.8, rel=1e-14)


# ---------------------------------------------------------------- (i) degenerate cases


def test_gdp_degenerate_cases():
    inf = math.inf
    assert gdp.epsilon(0.0, delta=1e-5) == 0.0
    assert gdp.epsilon(inf, delta=1e-5) == inf
    assert gdp.epsilon(1.0, delta=1.0) == 0.0 and gdp.epsilon(inf, delta=2.0) == 0.0
    assert gdp.epsilon(1.0, delta=0.0) == inf
    assert gdp.epsilon(1e-3, delta=0.5) == 0.0  # δ(0) = erf(μ/2√2) < 0.5 already
    assert gdp.delta(0.0, epsilon=0.0) == 0.0 and gdp.delta(inf, epsilon=5.0) == 1.0
    assert gdp.delta(3.0, epsilon=inf) == 0.0
    assert gdp.delta(2.0, epsilon=0.0) == pytest.approx(math.erf(1 / math.sqrt(2)), rel=1e-15)
    assert gdp.mu(1.0, delta=1.0) == inf and gdp.mu(inf, delta=1e-5) == inf
    assert gdp.mu(1.0, delta=0.0) == 0.0
    # calibration refuses targets that give no noise or no finite noise (--delta 1 typo)
    for eps, delta in [(1.0, 0.0), (inf, 1e-5), (4.0, 1.0), (4.0, 2.0), (0.0, 1e-6)]:
        with pytest.raises(ValueError, match="Expected 0 <"):
            gdp.noise_multiplier(eps, delta=delta)
    assert gdp.GaussianDPGuarantee(0.0).epsilon(1e-9) == 0.0
    # Beyond μ = 1e6 (ε > 5e11) rounding in −ε/μ + μ/2 is not trusted: ε = inf, μ capped.
    assert gdp.epsilon(2e6, delta=1e-5) == inf and gdp.mu(1e300, delta=1e-5) == 1e6
    assert gdp.delta(1e-300, epsilon=0.0) > 0.0  # tiny but never optimistic 0
    for bad in [{"mu": -1.0, "epsilon": 1.0}, {"mu": math.nan, "epsilon": 1.0}]:
        with pytest.raises(ValueError):
            gdp.delta(bad["mu"], epsilon=bad["epsilon"])
    with pytest.raises(ValueError, match="delta"):
        gdp.epsilon(1.0, delta=-1e-5)
    with pytest.raises(TypeError):
        gdp.epsilon(1.0, 1e-5)  # keyword-only: σ/δ cannot be swapped silently


def test_rdp_degenerate_cases():
    orders = [1.0, 2.0, 32.0]
    assert rdp.epsilon(orders, [0.0, 0.0, 0.0], delta=0.0)[0] == 0.0
    assert rdp.epsilon(orders, [0.1, 0.2, 3.2], delta=0.0)[0] == math.inf
    assert rdp.epsilon(orders, rdp.rdp_of_gdp(math.inf, orders), delta=1e-5)[0] == math.inf
    assert rdp.epsilon(orders, [0.1, 0.2, 3.2], delta=1.0)[0] == 0.0
    assert rdp.delta(orders, rdp.rdp_of_gdp(math.inf, orders), epsilon=3.0)[0] == 1.0
    assert rdp.delta(orders, [0.0, 0.0, 0.0], epsilon=0.0)[0] == 0.0
    assert rdp.delta(orders, [0.1, 0.2, 3.2], epsilon=math.inf)[0] == 0.0


def test_mf_degenerate_cases():
    C, part = np.eye(5), Participation(1, 5)
    assert mf.ldp_guarantee(C, participation=part, noise_multiplier=0.0).mu == math.inf
    assert mf.ldp_guarantee(C, participation=part, noise_multiplier=0.0).epsilon(1e-5) == (math.inf)
    assert mf.ldp_guarantee(C, participation=part, noise_multiplier=math.inf).mu == 0.0
    zero = mf.ldp_guarantee(C, participation=part, noise_multiplier=1.0, steps_done=0)
    assert zero.mu == 0.0 and zero.epsilon(1e-9) == 0.0 and zero.steps == 0
    with pytest.raises(ValueError, match="delta=1.0"):  # a noiseless "private" plan
        mf.calibrate(C, participation=part, target_epsilon=1.0, delta=1.0)
    assert sensitivity.from_gram(np.eye(3), []) == sensitivity.Sensitivity(0.0, True)


def test_search_fallback_is_conservative(monkeypatch):
    # Starve the root finder: it must warn and still return an ε with δ(ε) <= target.
    monkeypatch.setattr(gdp, "_MAX_ITER", 3)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        eps = gdp.epsilon(1.0, delta=1e-5)
    assert gdp.delta(1.0, epsilon=eps) <= 1e-5
    with pytest.warns(RuntimeWarning, match="did not converge"):
        m = gdp.mu(1.0, delta=1e-5)
    assert gdp.delta(m, epsilon=1.0) <= 1e-5


def test_sensitivity_runs_at_t_2000():
    # Efficiency: T = 2000 prefix-sum strategy under (5, 400) and every-step participation.
    C = np.tril(np.ones((2000, 2000)))
    s = sensitivity.sensitivity(C, Participation(5, 400))
    idx = 400 * np.arange(5)
    assert s.value**2 == pytest.approx(sum(2000 - max(a, b) for a in idx for b in idx))
    assert sensitivity.sensitivity(C, Participation.every_step(2000)).exact
