"""Long horizons: compact factors planned and reported without T × T matrices.

The spectral workload (edgedp.planning.workload) is checked against the Gram matrix of
paper 000's Lemma 10 built literally (nT × nT matrices) and against mafalda.workload_gram;
the first-window sensitivity against Thm 7 on the materialized C; the long-horizon loss
ratio against the dense one; fits on the spectral workload against fits on H.
"""

from __future__ import annotations

import numpy as np
import pytest

import edgedp_topologies
from edgedp import factors, topology
from edgedp.accounting import sensitivity as sens_mod
from edgedp.accounting.participation import Participation
from edgedp.families.mf import compact_banded, compact_blt, factorization, mafalda
from edgedp.families.mf.compact import _Toeplitz
from edgedp.planning import build, workload
from edgedp.planning.request import PlanRequest


def _mixing(spec: str, weighting: str = "metropolis-hastings") -> np.ndarray:
    return topology.WEIGHTINGS[weighting](edgedp_topologies.parse(spec))


@pytest.mark.parametrize("spec", ["ring:5", "star:4", "er:6:0.5:2"])
def test_spectral_workload_is_lemma_10(spec):
    W = _mixing(spec, "max-degree" if spec.startswith("star") else "metropolis-hastings")
    T = 7
    S = workload.SpectralWorkload.of_mixing(W, steps=T)
    literal = mafalda.workload_gram_bruteforce(W, steps=T)  # Σᵢ AᵢᵀAᵢ from nT × nT matrices
    np.testing.assert_allclose(S.dense(), literal, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(S.trace(), np.trace(literal), rtol=1e-12)
    big = workload.SpectralWorkload.of_mixing(W, steps=400)
    np.testing.assert_allclose(big.dense(), mafalda.workload_gram(W, steps=400), rtol=1e-11)
    assert workload.SpectralWorkload.prefix_sum(5).dense().tolist() == [
        [5 - max(a, b) for b in range(5)] for a in range(5)
    ]


TOEPLITZ = {
    "identity": factors.Identity(),
    "antipgd": factors.AntiPGD(),
    "blt": factors.BLT((0.9, 0.5), (0.3, 0.1)),
    "banded": factors.Banded(
        np.tile([1.0, -0.4, 0.1], (60, 1)) * (np.arange(3) <= np.arange(60)[:, None])
    ),
}


@pytest.mark.parametrize("name", sorted(TOEPLITZ))
def test_energy_and_gradient_of_every_toeplitz_factor(name):
    T = 60
    S = workload.SpectralWorkload.of_mixing(_mixing("er:9:0.4:1"), steps=T)
    c, beta = workload.toeplitz_columns(TOEPLITZ[name], T)
    C = TOEPLITZ[name].strategy(T)
    np.testing.assert_allclose(C[:, 0], c, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.linalg.inv(C)[:, 0], beta, rtol=1e-12, atol=1e-12)
    Binv = np.linalg.inv(C)
    energy, grad = S.energy(beta)
    np.testing.assert_allclose(energy, np.trace(S.dense() @ Binv @ Binv.T), rtol=1e-11)
    e = np.zeros(T)
    for i in (0, 3, 17, T - 1):  # central differences (E is quadratic in β: exact up to rounding)
        e[:] = 0
        e[i] = 1e-3
        fd = (S.energy(beta + e)[0] - S.energy(beta - e)[0]) / 2e-3
        np.testing.assert_allclose(grad[i], fd, rtol=1e-7, atol=1e-9 * np.abs(grad).max())


@pytest.mark.parametrize("part", [Participation(6, 10), Participation(60, 1), Participation(1, 60)])
def test_first_window_sensitivity_is_thm_7(part):
    T = 60
    toe = _Toeplitz(workload.SpectralWorkload.prefix_sum(T), part)
    rng = np.random.default_rng(3)
    positive = np.concatenate([[1.0], np.abs(rng.normal(size=T - 1)) * 0.8 ** np.arange(1, T)])
    short = np.zeros(T)
    short[:3] = [1.0, -0.6, 0.3]  # signed, shorter than b: columns of a window never overlap
    cases = [positive] + ([short] if part.b >= 3 or part.k == 1 else [])
    for c in cases:
        value, grad = toe.first_window(c)
        thm7 = sens_mod.sensitivity(factors._lower_toeplitz(c), part)
        np.testing.assert_allclose(value, thm7.value**2, rtol=1e-12)
        support = np.flatnonzero(c)
        for i in support[:5]:
            d = np.zeros(T)
            d[i] = 1e-6
            fd = (toe.first_window(c + d)[0] - toe.first_window(c - d)[0]) / 2e-6
            np.testing.assert_allclose(grad[i], fd, rtol=1e-6)
    signed = np.concatenate([[1.0], -(0.5 ** np.arange(1, T))])
    if part.count(T) == 1:  # one step per window: any column
        thm7 = sens_mod.sensitivity(factors._lower_toeplitz(signed), part)
        np.testing.assert_allclose(toe.first_window(signed)[0], thm7.value**2, rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="every pair"):
            toe.first_window(signed)


@pytest.mark.parametrize("name", ["antipgd", "blt", "banded"])
def test_long_horizon_loss_ratio_equals_the_dense_one(name):
    T, part = 60, Participation(6, 10)
    W = _mixing("ring:6")
    factor = TOEPLITZ[name]
    dense = factorization.relative_loss(factor.strategy(T), W, participation=part)
    compact = factorization.relative_loss_compact(factor, W, participation=part, steps=T)
    np.testing.assert_allclose(compact, dense, rtol=1e-10)


def test_fits_on_the_spectral_workload_match_the_fits_on_h():
    T, part = 300, Participation(18, 17)
    W = _mixing("ring:8")
    H, S = mafalda.workload_gram(W, steps=T), workload.SpectralWorkload.of_mixing(W, steps=T)
    for fit in (
        lambda G: compact_blt.fit_blt(G, participation=part, buffers=2, dense_loss=1.0),
        lambda G: compact_banded.fit_banded(
            G, participation=part, bandwidth=4, dense_loss=1.0, refine=False
        ),
    ):
        on_h, on_s = fit(H), fit(S)
        np.testing.assert_allclose(on_s.loss, on_h.loss, rtol=1e-8)
        assert on_s.exact and on_s.skipped == () and on_h.method == on_s.method
    alone = compact_blt.fit_blt(S, participation=part, buffers=1, restarts=2)
    assert alone.loss_ratio is None and "dense optimum" in alone.skipped[0]
    with pytest.raises(ValueError, match="signed=False"):
        compact_blt.fit_blt(S, participation=part, buffers=1, signed=True)


@pytest.mark.parametrize(
    ("mechanism", "extra"),
    [("antipgd", {}), ("banded", {"bandwidth": 3}), ("blt", {"buffers": 2})],
)
def test_plans_above_the_dense_limit_say_what_they_skip(mechanism, extra):
    T = workload.DENSE_MAX_STEPS + 952  # 3,000 steps
    request = PlanRequest.from_mapping(
        dict(mechanism=mechanism, topology="ring:8", steps=T, noise_multiplier=1.0)
        | dict(batch_size=10, participation=f"{-(-T // 17)},17", **extra)
    )
    built = build.build(request)
    report = built.report
    assert 0 < report["loss_ratio_to_dp_dsgd"] < (1 if mechanism != "antipgd" else np.inf)
    if mechanism == "antipgd":  # nothing is fitted, nothing skipped
        assert "skipped" not in report
    else:
        assert "gap" not in report and "loss_ratio_to_dense_optimum" not in report
        assert any("dense optimum" in s for s in report["skipped"])
        assert (mechanism == "banded") == any("refinement" in s for s in report["skipped"])
    loaded = type(built.plan).from_bytes(built.plan.to_bytes())  # a device re-certifies it
    assert loaded.plan_hash == built.plan.plan_hash


@pytest.mark.parametrize("spec", ["ring:8", "star:5", "er:9:0.4:1"])
def test_step_rule_noise_filters_equal_the_materialized_inverse(spec):
    from edgedp.planning import step_rule

    T = 60
    W = _mixing(spec, "max-degree" if spec.startswith("star") else "metropolis-hastings")
    lam = np.linalg.eigvalsh(W)
    rng = np.random.default_rng(5)
    lower = np.arange(3) <= np.arange(T)[:, None]
    ragged = factors.Banded((np.abs(rng.normal(size=(T, 3))) + [2.0, 0, 0]) * lower)
    P = lam[None, :] ** (T - np.arange(T))[:, None]  # λ_j^{T−t}
    for factor in [*TOEPLITZ.values(), ragged]:  # ragged: rows differ, the banded solve
        literal = np.linalg.inv(factor.strategy(T)).T @ P
        got = step_rule._filters(factor, lam, T)
        np.testing.assert_allclose(got, literal, rtol=1e-12, atol=1e-13)


def test_pndp_accounting_refuses_a_horizon_it_cannot_hold(monkeypatch):
    from edgedp.accounting import pndp

    T = 40
    request = PlanRequest.from_mapping(
        dict(mechanism="antipgd", topology="ring:4", steps=T, noise_multiplier=1.0, batch_size=10)
    )
    plan = build.build(request, report=False).plan
    assert pndp.pndp_guarantees(plan, attackers=[0]).mu.size == 3
    monkeypatch.setattr(pndp, "MAX_WORKING_BYTES", pndp.working_bytes(T, 3) - 1)
    with pytest.raises(ValueError, match=r"T x T Gram per victim.*T = 40 with 3 victims"):
        pndp.pndp_guarantees(plan, attackers=[0])
