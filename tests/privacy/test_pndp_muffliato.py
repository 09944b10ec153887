"""Cyffers et al. 2022's PNDP accounting of DP-D-SGD, recomputed from the update equations.

Nothing here calls a helper of ``edgedp.accounting.pndp_muffliato`` or ``pndp`` besides the
public accountants. DP-D-SGD on scalar models, θ_0 = 0, step size η = 1 (it scales every
message and drops out), inputs x_t^u = g_t^u + ν z_t^u:

    θ_{t+½}^u = θ_t^u − x_t^u,   θ_{t+1}^u = Σ_w W_uw θ_{t+½}^w,

θ_{t+½}^u being the message u sends at step t. Each message is linear in the inputs; the
coefficient of x_t^x in message (j, w) is read off a run of these rules on the unit input
e_x at step t (no matrix power is taken).

* The theorem's sum, another way: for each gradient step t, each later message (j, w) with
  w a neighbour of the attacker v or v itself, add coef(u) / Σ_x coef(x)² — the victim's
  coefficient over the variance of that message's step-t noise.
* Validity by brute force: the attacker's view is Gaussian; its exact Rényi divergence for
  a user-level zero-out change of the victim is α/(2ν²) · max_{d ∈ [−1, 1]^T} dᵀ X d with
  X = F_uᵀ Σ⁻¹ F_u (F_u the victim's input columns in the observed rows, Σ the covariance
  of the unknown noises), a convex function maximized at a vertex of the box: all 2^T are
  tried. Cyffers et al.'s bound must never be smaller.
"""

# Paper letters W, T, X, F; see docs/NOTATION.md.
# ruff: noqa: N803, N806

import itertools

import numpy as np
import pytest

import edgedp_topologies
from edgedp import topology
from edgedp.accounting import pndp, pndp_muffliato
from edgedp.accounting.participation import Participation


def _graph(spec):
    g = edgedp_topologies.parse(spec)
    return topology.metropolis_hastings(g), np.asarray(g.edges)


def _message_coefficients(W, T):
    """coef[t, x, j, w]: coefficient of input x_t^x in message θ_{j+½}^w, by running the rules."""
    n = W.shape[0]
    coef = np.zeros((T, n, T, n))
    for t, x in itertools.product(range(T), range(n)):
        theta = np.zeros(n)
        for j in range(T):
            half = theta.copy()
            if j == t:
                half[x] += (
                    1.0  # the unit input (sign of −x dropped: only squares and ratios matter)
                )
            coef[t, x, j] = half
            theta = W @ half
    return coef


def _neighbours(edges, v):
    return sorted({int(b) for a, b in edges if a == v} | {int(a) for a, b in edges if b == v})


def _theorem_sum(coef, edges, u, v):
    T = coef.shape[0]
    total = 0.0
    for t in range(T):
        for j in range(t, T):
            for w in [*_neighbours(edges, v), v]:
                column = coef[t, :, j, w]
                total += column[u] / np.dot(column, column)
    return total


def _exact_rdp_per_order(coef, edges, u, v, noise_std):
    """max over the box of the Gaussian view's Mahalanobis distance, over 2 ν² (RDP / α)."""
    T, n = coef.shape[:2]
    rows = [(j, w) for j in range(T) for w in _neighbours(edges, v)]
    unknown = [(t, x) for t in range(T) for x in range(n) if x != v]  # v knows its own inputs
    F_noise = np.array([[coef[t, x, j, w] for (t, x) in unknown] for (j, w) in rows])
    F_u = np.array([[coef[t, u, j, w] for t in range(T)] for (j, w) in rows])
    X = F_u.T @ np.linalg.solve(F_noise @ F_noise.T, F_u)
    best = max(float(d @ X @ d) for d in itertools.product((-1.0, 1.0), repeat=T))
    return best / (2.0 * noise_std**2)


@pytest.mark.parametrize("spec,T", [("florentine", 5), ("er:8:0.4:3", 4), ("ring:6", 6)])
def test_theorem_sum_from_update_equations(spec, T):
    W, edges = _graph(spec)
    coef = _message_coefficients(W, T)
    S = pndp_muffliato.pair_sums(W, steps=T, edges=edges)
    n = W.shape[0]
    for u, v in itertools.product(range(n), range(n)):
        if u != v:
            assert S[u, v] == pytest.approx(_theorem_sum(coef, edges, u, v), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("spec,T,sigma", [("er:7:0.45:1", 4, 1.0), ("ring:6", 5, 0.7)])
def test_bound_is_never_below_the_exact_gaussian_divergence(spec, T, sigma):
    W, edges = _graph(spec)
    coef = _message_coefficients(W, T)
    setting = pndp.PNDPSetting(W, np.eye(T), Participation(T, 1), sigma, edges)
    res = pndp_muffliato.pndp_guarantees(setting)
    noise_std = sigma * np.sqrt(T)  # the plan's calibration: ν = σ · sens_LDP, sens_LDP = √T
    assert res.ldp_rho == pytest.approx(1 / (2 * sigma**2))
    ratios = []
    for a, u, rho in zip(res.attacker, res.victim, res.rho, strict=True):
        exact = _exact_rdp_per_order(coef, edges, int(u), int(a), noise_std)
        assert exact <= rho * (1 + 1e-9) + 1e-12, (a, u, exact, rho)
        ratios.append(exact / rho)
    assert max(ratios) > 0.9  # at neighbours both are near the LDP value: the check can fail


def test_looser_than_paper_000_accounting_and_capped_at_ldp():
    # paper 000 Fig. 2: its accounting is below Cyffers et al.'s at every distance
    W, edges = _graph("florentine")
    T = 10
    setting = pndp.PNDPSetting(W, np.eye(T), Participation(T, 1), 1.0, edges)
    ours = pndp.pndp_guarantees(setting, attackers=[0])
    theirs = pndp_muffliato.pndp_guarantees(setting, attackers=[0])
    assert np.array_equal(ours.victim, theirs.victim)
    assert np.array_equal(ours.distance, theirs.distance)
    assert np.all(ours.rdp(2.0) <= theirs.rdp(2.0) * (1 + 1e-9))
    assert np.all(theirs.rdp(2.0) <= 2 * theirs.ldp_rho + 1e-15)
    assert np.all(theirs.rdp(2.0)[theirs.distance == 1] == pytest.approx(2 * theirs.ldp_rho))
    eps = theirs.epsilon(1e-5)
    assert np.all(np.diff(eps[np.argsort(theirs.rho)]) >= -1e-12)  # ε grows with the RDP


def test_refuses_what_the_theorem_does_not_cover():
    W, edges = _graph("ring:5")
    antipgd = np.tril(np.ones((4, 4)))
    with pytest.raises(ValueError, match="independent noise"):
        pndp_muffliato.pndp_guarantees(pndp.PNDPSetting(W, antipgd, Participation(4, 1), 1.0))
    skew = np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 0.5, 0.5]])
    with pytest.raises(ValueError, match="symmetric"):
        pndp_muffliato.pndp_guarantees(pndp.PNDPSetting(skew, np.eye(3), Participation(3, 1), 1.0))
    with pytest.raises(ValueError, match="row-stochastic"):
        pndp_muffliato.pair_sums(2 * skew, steps=3)
    with pytest.raises(ValueError, match="steps"):
        pndp_muffliato.pair_sums(W, steps=0)
    with pytest.raises(ValueError, match="attackers"):
        pndp_muffliato.pndp_guarantees(
            pndp.PNDPSetting(W, np.eye(3), Participation(3, 1), 1.0), attackers=[9]
        )
