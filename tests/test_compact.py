# ruff: noqa: N803, N806  (paper letters H, C, T, W: see docs/NOTATION.md)
"""Tests for edgedp.families.mf.compact (banded and BLT fits) and the BLT factor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import edgedp_topologies
from edgedp import factors, topology
from edgedp.accounting import sensitivity as sens_mod
from edgedp.accounting.participation import Participation
from edgedp.families.mf import compact, compact_banded, compact_blt, mafalda
from edgedp.planning import mf_optimal

T = 256
PART = Participation(4, 64)


@pytest.fixture(scope="module")
def prefix():
    H = mf_optimal.prefix_sum_gram(T)
    return H, mf_optimal.optimize(H, participation=PART).loss


@pytest.fixture(scope="module")
def blt_fits(prefix):
    H, dense = prefix
    fits, previous = [], None
    for n in range(1, 5):
        fits.append(
            compact_blt.fit_blt(
                H, participation=PART, buffers=n, initial=previous, dense_loss=dense, restarts=4
            )
        )
        previous = fits[-1].factor
    return fits


def _mafalda_gram(steps: int) -> np.ndarray:
    W = topology.metropolis_hastings(edgedp_topologies.parse("er:12:0.4:1"))
    return mafalda.workload_gram(W, steps=steps)


def _check_valid(fit, H, part):
    """The factor streams C⁻¹z, and the reported loss and sensitivity are the certified ones."""
    steps = H.shape[0]
    Z = np.random.default_rng(0).standard_normal((steps, 2))
    # tolerance: forward substitution vs a matrix product differ by rounding only
    np.testing.assert_allclose(
        factors.noise_matrix_product(fit.factor, Z),
        fit.factor.materialize(steps) @ Z,
        rtol=1e-9,
        atol=1e-9,
    )
    C = fit.factor.strategy(steps)
    s = sens_mod.sensitivity(C, part)
    assert s.value == pytest.approx(fit.sensitivity, rel=1e-12) and s.exact == fit.exact
    assert fit.loss == pytest.approx(mf_optimal.loss(C, H, part), rel=1e-12)
    assert fit.loss_ratio == pytest.approx(fit.loss / fit.dense_loss, rel=1e-12)
    back = factors.from_dict(fit.factor.to_dict())
    np.testing.assert_array_equal(back.strategy(steps), C)


# --- Toeplitz objective ------------------------------------------------------------------


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize(
    ("steps", "k", "b", "workload"),
    [
        (24, 3, 8, "prefix"),
        (30, 4, 7, "prefix"),
        (20, 1, 20, "prefix"),
        (16, 16, 1, "prefix"),
        (25, 2, 10, "mafalda"),
    ],
)
def test_toeplitz_loss_matches_dense_loss(steps, k, b, workload, signed):
    H = mf_optimal.prefix_sum_gram(steps) if workload == "prefix" else _mafalda_gram(steps)
    r = np.random.default_rng(steps + k)
    c = np.concatenate([[1.0], r.random(steps - 1) * 0.6 ** np.arange(1, steps)])
    if signed:
        c[1:] *= r.choice([-1.0, 1.0], steps - 1)
    C = factors._lower_toeplitz(c)
    part = Participation(k, b)
    # tolerance: two O(T²) summation orders of the same trace, condition ~1e3
    assert compact.toeplitz_loss(c, H, participation=part) == pytest.approx(
        mf_optimal.loss(C, H, part), rel=1e-9
    )


@pytest.mark.parametrize("workload", ["prefix", "mafalda"])
def test_toeplitz_gradient_matches_finite_differences(workload):
    steps = 40
    H = mf_optimal.prefix_sum_gram(steps) if workload == "prefix" else _mafalda_gram(steps)
    toe = compact._Toeplitz(H, Participation(3, 13))
    c = np.concatenate([[1.0], np.linspace(0.5, -0.2, steps - 1)])

    def f(c):
        return toe(c, compact._impulse(np.ones(1), c, steps))

    value, grad = f(c)
    for i in (1, 5, 13, 26, 39):
        e = np.zeros(steps)
        e[i] = 1e-6
        # tolerance: central differences, step 1e-6, O(h²) truncation
        assert grad[i] == pytest.approx((f(c + e)[0] - f(c - e)[0]) / 2e-6, rel=1e-5, abs=1e-6)


def test_banded_objective_gradient_matches_finite_differences():
    steps, p = 50, 5
    obj = compact_banded._BandedObjective(_mafalda_gram(steps), p, 2)
    x = np.random.default_rng(1).random(int(obj.valid.sum())) + 0.5
    value, grad = obj(x)
    for i in (0, 7, 100, x.size - 2):
        e = np.zeros_like(x)
        e[i] = 1e-6
        num = (obj(x + e)[0] - obj(x - e)[0]) / 2e-6
        assert grad[i] == pytest.approx(num, rel=1e-5, abs=1e-8)  # central differences


def test_blt_closed_form_geometric():
    # closed form: ω = θ gives c_t = θ^t and C⁻¹ = I − θS, so ‖AC⁻¹‖²_F = T + (1−θ)²T(T−1)/2;
    # single participation: sens² = ‖c‖² = (1 − θ^{2T})/(1 − θ²)
    steps, theta = 10, 0.5
    f = factors.BLT((theta,), (theta,))
    np.testing.assert_allclose(f.inverse_coefficients(steps)[:3], [1.0, -theta, 0.0], atol=1e-15)
    expected = (steps + (1 - theta) ** 2 * steps * (steps - 1) / 2) * (
        (1 - theta ** (2 * steps)) / (1 - theta**2)
    )
    H = mf_optimal.prefix_sum_gram(steps)
    part = Participation.single(steps)
    assert compact.toeplitz_loss(f.coefficients(steps), H, participation=part) == pytest.approx(
        expected, rel=1e-12
    )
    assert mf_optimal.loss(f.strategy(steps), H, part) == pytest.approx(expected, rel=1e-12)


# --- BLT ---------------------------------------------------------------------------------


def test_blt_fits_are_valid_and_improve_with_buffers(prefix, blt_fits):
    H, dense = prefix
    ratios = [fit.loss_ratio for fit in blt_fits]
    for fit in blt_fits:
        _check_valid(fit, H, PART)
        assert fit.exact and all(w > 0 for w in fit.factor.weights)  # C >= 0: exact sens
        assert fit.factor.state_bytes(10**6) == 8 * 10**6 * fit.factor.buffers
    # the dense optimum is certified within its gap (1e-4): nothing beats it by more
    assert min(ratios) >= 1 - 1e-4
    # warm starts from the previous fit: non-increasing up to the optimizer's tolerance
    assert all(b <= a * (1 + 1e-9) for a, b in zip(ratios, ratios[1:], strict=False))
    assert ratios[1] < ratios[0] - 0.02  # a second buffer helps (1.27 → 1.23 measured)
    assert ratios[-1] < 1.25


def test_blt_signed_fit_is_certified_with_the_upper_bound(prefix, blt_fits):
    H, dense = prefix
    fit = compact_blt.fit_blt(
        H,
        participation=PART,
        buffers=3,
        signed=True,
        restarts=3,
        dense_loss=dense,
        initial=blt_fits[1].factor,
    )
    _check_valid(fit, H, PART)
    assert fit.method == "blt-signed"
    assert 1 - 1e-4 <= fit.loss_ratio <= blt_fits[2].loss_ratio * (1 + 1e-9)


def test_blt_fit_on_mafalda_workload():
    H = _mafalda_gram(48)
    part = Participation(3, 16)
    fit = compact_blt.fit_blt(H, participation=part, buffers=2, restarts=3)
    _check_valid(fit, H, part)
    assert fit.loss_ratio >= 1 - 1e-4
    identity = mf_optimal.loss(np.eye(48), H, part)
    assert fit.loss < identity  # correlated noise beats DP-D-SGD on this workload


def test_blt_fit_reports_progress_and_unpacks(prefix):
    H, dense = prefix
    calls = []
    fit = compact_blt.fit_blt(
        H,
        participation=PART,
        buffers=1,
        restarts=2,
        dense_loss=dense,
        progress=lambda n, loss: calls.append((n, loss)),
    )
    factor, loss = fit
    assert factor is fit.factor and loss == fit.loss
    assert len(calls) == 2 and calls[-1][0] == fit.evaluations
    assert calls[-1][1] == pytest.approx(fit.loss, rel=1e-9)


@given(st.integers(1, 4), st.integers(0, 10_000))
def test_blt_streaming_and_inverse_property(buffers, seed):
    r = np.random.default_rng(seed)
    decays, weights = r.uniform(0.01, 0.99, buffers), r.normal(0, 0.5, buffers)
    assume(factors.blt_inverse_radius(decays, weights) < 1)  # BLT refuses unstable inverses
    f = factors.BLT(tuple(decays), tuple(weights))
    steps = 30
    C, C_inv = f.strategy(steps), f.materialize(steps)
    np.testing.assert_allclose(C @ C_inv, np.eye(steps), atol=1e-8 * np.abs(C_inv).max())
    theta, omega = np.array(f.decays), np.array(f.weights)
    _, _, P, Q = compact_blt._blt_column(theta, omega, steps)  # rational form c(x) = P/Q
    # tolerance: lfilter and the streaming recursion round differently
    np.testing.assert_allclose(
        compact._impulse(Q, P, steps),
        f.inverse_coefficients(steps),
        rtol=1e-8,
        atol=1e-8 * np.abs(C_inv).max(),
    )


def test_blt_has_no_horizon():
    f = factors.BLT((0.9, 0.3), (0.2, 0.1))
    state = f.init((2,))
    for _ in range(500):
        out, state = f.next(lambda t: np.ones(2), state)
    # constant input: y = z / c(1) with c(1) = 1 + Σ ω/(1 − θ) once the buffers settle
    np.testing.assert_allclose(out, 1 / (1 + 0.2 / 0.1 + 0.1 / 0.7), rtol=1e-12)


def test_bad_blt_and_arguments_are_refused(prefix):
    H, dense = prefix
    with pytest.raises(ValueError, match="decays"):
        factors.BLT((1.0,), (0.5,))
    with pytest.raises(ValueError, match="equal length"):
        factors.BLT((0.5, 0.2), (0.5,))
    with pytest.raises(ValueError, match="finite"):
        factors.BLT((0.5,), (np.nan,))
    with pytest.raises(ValueError, match="missing field"):
        factors.from_dict({"kind": "blt", "decays": [0.5]})
    with pytest.raises(TypeError, match="Participation"):
        compact_blt.fit_blt(H, participation=(4, 64), buffers=1)
    with pytest.raises(ValueError, match="buffers"):
        compact_blt.fit_blt(H, participation=PART, buffers=0)
    with pytest.raises(ValueError, match="dense_loss"):
        compact_banded.fit_banded(H, participation=PART, bandwidth=2, dense_loss=-1.0)
    with pytest.raises(ValueError, match="symmetric"):
        compact_banded.fit_banded(np.tril(H), participation=PART, bandwidth=2, dense_loss=dense)


# --- banded ------------------------------------------------------------------------------


def test_banded_bandwidth_one_is_normalized_identity():
    # closed form: C = I, sens² = k' = 3, tr(H) = T(T+1)/2 = 21 for T = 6 → loss 63
    H = mf_optimal.prefix_sum_gram(6)
    fit = compact_banded.fit_banded(
        H, participation=Participation(3, 2), bandwidth=1, dense_loss=1.0
    )
    np.testing.assert_allclose(fit.factor.strategy(6), np.eye(6))
    assert fit.loss == pytest.approx(63.0, rel=1e-12)


@pytest.mark.parametrize("bandwidth", [2, 16, 64])
def test_banded_fit_within_separation(prefix, bandwidth):
    H, dense = prefix
    toeplitz = compact_banded.fit_banded(
        H, participation=PART, bandwidth=bandwidth, refine=False, dense_loss=dense
    )
    fit = compact_banded.fit_banded(
        H, participation=PART, bandwidth=bandwidth, dense_loss=dense, max_iterations=150
    )
    for f in (toeplitz, fit):
        _check_valid(f, H, PART)
        assert f.factor.bandwidth == bandwidth and f.exact
        assert f.factor.state_bytes(10**6) == 8 * 10**6 * (bandwidth - 1)
    # closed form: unit columns that never overlap within a window → sens² = k = 4
    assert fit.method == "banded" and fit.sensitivity**2 == pytest.approx(4.0, rel=1e-12)
    assert 1 - 1e-4 <= fit.loss_ratio <= toeplitz.loss_ratio


def test_banded_ratios_shrink_with_bandwidth(prefix):
    H, dense = prefix
    ratios = [
        compact_banded.fit_banded(
            H, participation=PART, bandwidth=p, dense_loss=dense, refine=False
        ).loss_ratio
        for p in (2, 8, 32, 64)
    ]
    assert all(b < a for a, b in zip(ratios, ratios[1:], strict=False))


def test_banded_wider_than_separation_is_nonnegative_toeplitz(prefix):
    H, dense = prefix
    fit = compact_banded.fit_banded(H, participation=PART, bandwidth=100, dense_loss=dense)
    _check_valid(fit, H, PART)
    assert fit.method == "banded-toeplitz" and fit.exact
    assert np.all(fit.factor.strategy(T) >= 0)


def test_banded_full_bandwidth_is_the_dense_optimum(prefix):
    H, dense = prefix
    fit = compact_banded.fit_banded(H, participation=PART, bandwidth=T, dense_loss=dense)
    _check_valid(fit, H, PART)
    assert fit.method == "dense"
    assert fit.loss_ratio == pytest.approx(1.0, abs=1e-9)


def test_banded_fit_on_mafalda_workload():
    H = _mafalda_gram(48)
    part = Participation(3, 16)
    fit = compact_banded.fit_banded(H, participation=part, bandwidth=8, max_iterations=100)
    _check_valid(fit, H, part)
    assert fit.loss_ratio >= 1 - 1e-4 and fit.sensitivity**2 == pytest.approx(3.0)
