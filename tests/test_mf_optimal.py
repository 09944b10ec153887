"""Tests for edgedp.planning.mf_optimal (paper 003, Eq. 5-6, Thm 3.1, Cor 3.1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import scipy.optimize as sopt

from edgedp.accounting.participation import Participation
from edgedp.accounting.sensitivity import from_gram, sensitivity
from edgedp.planning import mf_optimal

TOL = 1e-6  # solver tolerance on the relative duality gap in these tests
RTOL_BRUTE = 1e-4  # brief: agree with a generic solve for tiny T to 1e-4 relative


@dataclass(frozen=True)
class Case:
    steps: int
    k: int
    b: int

    @property
    def participation(self) -> Participation:
        return Participation(self.k, self.b)


CASES = (
    Case(32, 1, 32),  # single participation (Denisov et al. 2022)
    Case(32, 2, 16),
    Case(32, 4, 8),
    Case(32, 32, 1),  # every step
    Case(64, 4, 16),
    Case(64, 8, 8),
    Case(64, 16, 4),
    Case(64, 3, 8),  # steps > k·b: overlapping windows
    Case(33, 3, 10),  # classes of unequal size
)


@pytest.fixture(scope="module")
def solved() -> dict[Case, mf_optimal.Factorization]:
    return {
        c: mf_optimal.optimize(
            mf_optimal.prefix_sum_gram(c.steps), participation=c.participation, tolerance=TOL
        )
        for c in CASES
    }


def _antipgd(T: int) -> np.ndarray:
    return np.tril(np.ones((T, T)))


def test_prefix_sum_gram_is_AtA():
    for T in (1, 2, 7):
        A = _antipgd(T)
        np.testing.assert_array_equal(mf_optimal.prefix_sum_gram(T), A.T @ A)


def test_loss_closed_forms():
    # closed form: C = I has sens² = k' (participations) and tr(H) = T(T+1)/2 for prefix sums
    T, part = 12, Participation(3, 4)
    H = mf_optimal.prefix_sum_gram(T)
    assert mf_optimal.loss(np.eye(T), H, part) == pytest.approx(3 * T * (T + 1) / 2, rel=1e-12)
    # C = A: B = I, so the loss is sens(A)²·T
    s = sensitivity(_antipgd(T), part).value
    assert mf_optimal.loss(_antipgd(T), H, part) == pytest.approx(s * s * T, rel=1e-12)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c.steps}-k{c.k}-b{c.b}")
def test_certificate_and_factor(case: Case, solved):
    f = solved[case]
    T, part = case.steps, case.participation
    H = mf_optimal.prefix_sum_gram(T)
    assert f.converged and 0 <= f.gap <= TOL
    assert f.dual_bound <= f.loss
    # C lower triangular with CᵀC = X (brief: 1e-10 relative)
    np.testing.assert_array_equal(f.C, np.tril(f.C))
    assert np.max(np.abs(f.C.T @ f.C - f.X)) <= 1e-10 * np.max(np.abs(f.X))
    # X >= 0 for prefix sums (003 §3); sens = 1, exact (co-participating entries of X are 0)
    assert f.X.min() >= 0.0
    exact = from_gram(f.X, part.patterns(T))
    assert exact.exact and exact.value == pytest.approx(1.0, rel=1e-12)
    assert sensitivity(f.C, part).value == pytest.approx(1.0, rel=1e-10)
    # the reported loss is the loss of C; it beats DP-SGD (C = I) and C = A (B = I)
    assert mf_optimal.loss(f.C, H, part) == pytest.approx(f.loss, rel=1e-10)
    assert f.loss <= mf_optimal.loss(np.eye(T), H, part)
    assert f.loss <= mf_optimal.loss(_antipgd(T), H, part)


def test_every_step_participation_closed_form():
    # hand-derived: with one window covering all steps, X = diag(√H_tt) is optimal and
    # S = X⁻¹HX⁻¹ certifies it, so the optimal loss is (Σ_t √H_tt)² for any H
    rng = np.random.default_rng(3)
    G = rng.standard_normal((10, 10))
    for H in (mf_optimal.prefix_sum_gram(20), G @ G.T + np.eye(10)):
        T = H.shape[0]
        f = mf_optimal.optimize(H, participation=Participation(T, 1), tolerance=1e-9)
        assert f.loss == pytest.approx(np.sqrt(np.diag(H)).sum() ** 2, rel=1e-8)


def test_paper_003_table_6():
    # paper 003 App. I.3, Table 6: n = 6, (k, b) = (3, 2), root total squared error.
    # prefix sum: 6.461 under every constraint set; momentum 0.95: 16.131 with the
    # "in-between" constraints Eq. 36 (in-window X >= 0), which our program matches here
    # (16.134 with X >= 0 everywhere, 16.114 with d = 1 sensitivity and no sign constraint).
    T, part = 6, Participation(3, 2)
    i, j = np.indices((T, T))
    beta = 0.95
    momentum = np.where(i >= j, (1 - beta ** (i - j + 1)) / (1 - beta), 0.0)
    for A, error in ((_antipgd(T), 6.461), (momentum, 16.131)):
        f = mf_optimal.optimize(A.T @ A, participation=part, workload=A, tolerance=1e-9)
        assert np.sqrt(f.loss) == pytest.approx(error, abs=5e-4)
        np.testing.assert_allclose(f.B @ f.C, A, atol=1e-10 * np.abs(A).max())
        assert f.loss == pytest.approx(np.sum(f.B**2), rel=1e-10)  # sens = 1, ‖B‖²_F


def _brute_force(H: np.ndarray, part: Participation, *, signed: bool) -> float:
    """Generic SLSQP over lower-triangular C (X = CᵀC), independent of the module.

    signed=False: paper 003 Eq. 35 (X >= 0, 1ᵀX[π,π]1 <= 1). signed=True (k <= 2 only):
    paper 000 Thm 7, Σ_{s,t∈π} |X[s,t]| <= 1 as X_ss + X_tt ± 2 X_st <= 1, no sign condition.
    """
    T = H.shape[0]
    rows, cols = np.tril_indices(T)

    def unpack(c):
        C = np.zeros((T, T))
        C[rows, cols] = c
        return C

    def objective(c):
        C = unpack(c)
        Xinv = np.linalg.inv(C.T @ C)
        return np.trace(H @ Xinv), (-2 * C @ Xinv @ H @ Xinv)[rows, cols]

    def quad(u):  # uᵀXu = ‖Cu‖², gradient 2 (Cu) uᵀ
        return {
            "type": "ineq",
            "fun": lambda c: 1 - np.sum((unpack(c) @ u) ** 2),
            "jac": lambda c: -2 * np.outer(unpack(c) @ u, u)[rows, cols],
        }

    constraints = []
    for p in part.patterns(T):
        for signs in ([1, 1], [1, -1]) if signed and p.size == 2 else ([1] * p.size,):
            u = np.zeros(T)
            u[p] = signs
            constraints.append(quad(u))
    if not signed:
        iu, ju = np.triu_indices(T, 1)

        def jac(c):  # ∂X[i,j]/∂C = C[:, j] e_iᵀ + C[:, i] e_jᵀ
            C = unpack(c)
            out = np.zeros((iu.size, T, T))
            out[np.arange(iu.size), :, iu] += C[:, ju].T
            out[np.arange(iu.size), :, ju] += C[:, iu].T
            return out[:, rows, cols]

        def gram(c):
            C = unpack(c)
            return (C.T @ C)[iu, ju]

        constraints.append({"type": "ineq", "fun": gram, "jac": jac})
    start = np.eye(T)[rows, cols] / np.sqrt(1.01 * part.count(T))
    res = sopt.minimize(
        objective,
        start,
        jac=True,
        method="SLSQP",
        constraints=constraints,
        options={"ftol": 1e-14, "maxiter": 2000},
    )
    return float(res.fun)


@pytest.mark.parametrize("k, b", [(2, 4), (1, 8), (4, 2)])
def test_matches_brute_force_prefix_sum(k, b):
    H = mf_optimal.prefix_sum_gram(8)
    part = Participation(k, b)
    f = mf_optimal.optimize(H, participation=part, tolerance=1e-9)
    assert f.loss == pytest.approx(_brute_force(H, part, signed=False), rel=RTOL_BRUTE)


def test_matches_brute_force_arbitrary_gram():
    # arbitrary H: the optimum has X with negative entries; compare with Thm 7 constraints
    rng = np.random.default_rng(0)
    G = rng.standard_normal((8, 8))
    H = G @ G.T + 0.5 * np.eye(8)
    part = Participation(2, 4)
    f = mf_optimal.optimize(H, participation=part, tolerance=1e-9)
    assert f.X.min() < 0
    assert f.dual_bound <= f.loss
    assert f.loss == pytest.approx(_brute_force(H, part, signed=True), rel=RTOL_BRUTE)
    assert sensitivity(f.C, part).value == pytest.approx(1.0, rel=1e-10)


def test_progress_is_monotone_and_bounded():
    seen = []
    f = mf_optimal.optimize(
        mf_optimal.prefix_sum_gram(40),
        participation=Participation(4, 10),
        tolerance=1e-6,
        progress=lambda *a: seen.append(a),
    )
    assert [s[0] for s in seen] == list(range(f.iterations + 1))
    losses, bounds = np.array([s[1] for s in seen]), np.array([s[2] for s in seen])
    assert np.all(np.diff(losses) <= 0) and np.all(np.diff(bounds) >= 0)
    assert np.all(bounds <= losses)


def test_iteration_limit_keeps_a_valid_certificate():
    H = mf_optimal.prefix_sum_gram(64)
    full = mf_optimal.optimize(H, participation=Participation(4, 16), tolerance=1e-9)
    early = mf_optimal.optimize(H, participation=Participation(4, 16), max_iterations=2)
    assert early.iterations == 2 and not early.converged
    assert early.dual_bound <= full.loss and full.dual_bound <= early.loss


def test_rejects_bad_input():
    H = mf_optimal.prefix_sum_gram(4)
    part = Participation(2, 2)
    with pytest.raises(TypeError, match="participation"):
        mf_optimal.optimize(H, participation=(2, 2))
    with pytest.raises(ValueError, match="positive definite"):
        mf_optimal.optimize(np.ones((4, 4)), participation=part)
    with pytest.raises(ValueError, match="symmetric"):
        mf_optimal.optimize(np.tril(H), participation=part)
    with pytest.raises(ValueError, match="tolerance"):
        mf_optimal.optimize(H, participation=part, tolerance=0.0)
    with pytest.raises(ValueError, match="workload"):
        mf_optimal.optimize(H, participation=part, workload=np.eye(4))
    with pytest.raises(ValueError, match="strategy"):
        mf_optimal.loss(np.eye(3), H, part)
