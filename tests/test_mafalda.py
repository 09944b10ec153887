# ruff: noqa: N803, N806  (paper letters W, H, C, T: see docs/NOTATION.md)
"""Tests for edgedp.families.mf.mafalda (paper 000, Lemma 10: MAFALDA workload Gram matrix)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import edgedp_topologies
from edgedp import topology
from edgedp.accounting.participation import Participation
from edgedp.accounting.sensitivity import sensitivity
from edgedp.errors import TopologyError
from edgedp.families.mf import mafalda

RTOL = 1e-10  # brief: fast paths agree with the explicit nT x nT construction to 1e-10


def _random_weights(graph: topology.Graph, seed: int = 0) -> np.ndarray:
    """Row-stochastic W on the graph's support (+ self loops) with random weights.

    Non-reversible whenever the graph has a cycle (Kolmogorov's criterion fails generically).
    """
    rng = np.random.default_rng(seed)
    A = graph.adjacency + np.eye(graph.n)
    W = A * rng.uniform(0.2, 1.0, A.shape)
    return W / W.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Weighting:
    name: str
    build: Callable[[topology.Graph], np.ndarray]


WEIGHTINGS = (
    Weighting("metropolis-hastings", topology.metropolis_hastings),  # symmetric
    Weighting("max-degree", topology.max_degree),  # symmetric
    Weighting("uniform-neighbour", topology.uniform_neighbour),  # reversible
    Weighting("random", _random_weights),  # non-reversible (except on trees)
)
GRAPHS = ("ring:6", "star:5", "complete:4", "er:8:0.4:1", "torus:3:3", "smallworld:10:4:0.3:2")
STEPS = (1, 2, 7, 12)


def _rel_err(H: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(H - ref)) / np.max(np.abs(ref)))


def _prefix_sum_gram(T: int) -> np.ndarray:
    A = np.tril(np.ones((T, T)))
    return A.T @ A


def _stacked_workload(W: np.ndarray, T: int) -> np.ndarray:
    """(I_T ⊗ W) W_T of paper 000, Eq. 5, built independently of the module (np.block)."""
    n = W.shape[0]
    powers = [np.linalg.matrix_power(W, p) for p in range(T)]
    W_T = np.block(
        [[powers[t - tau] if t >= tau else np.zeros((n, n)) for tau in range(T)] for t in range(T)]
    )
    return np.kron(np.eye(T), W) @ W_T


@pytest.mark.parametrize("weighting", WEIGHTINGS, ids=lambda w: w.name)
@pytest.mark.parametrize("spec", GRAPHS)
def test_fast_paths_match_bruteforce(spec, weighting):
    W = weighting.build(edgedp_topologies.parse(spec))
    for T in STEPS:
        ref = mafalda.workload_gram_bruteforce(W, steps=T)
        assert _rel_err(mafalda.workload_gram(W, steps=T), ref) < RTOL
        # general (reversible / eigenvector) path, also on symmetric W
        assert _rel_err(mafalda.workload_gram(W, steps=T, symmetric=False), ref) < RTOL


def test_random_weights_take_the_eigenvector_path():
    W = _random_weights(edgedp_topologies.parse("er:8:0.4:1"))
    assert mafalda._powers_gram_reversible(W, 5, stochastic=True) is None
    assert mafalda._powers_gram_eig(W, 5, stochastic=True) is not None


@pytest.mark.parametrize("block", [1 << 23, 100])  # one block; several blocks of powers
def test_direct_powers_fallback_matches_bruteforce(monkeypatch, block):
    W = _random_weights(edgedp_topologies.parse("er:8:0.4:1"), seed=3)
    T = 12
    ref = mafalda.workload_gram_bruteforce(W, steps=T)
    monkeypatch.setattr(mafalda, "_MAX_EIGVEC_COND", 0.0)  # refuse every eigen-basis
    monkeypatch.setattr(mafalda, "_POWER_BLOCK_ELEMENTS", block)  # 100 -> 1 power per block
    assert mafalda._powers_gram_eig(W, T, stochastic=True) is None
    assert _rel_err(mafalda.workload_gram(W, steps=T), ref) < RTOL


def test_bruteforce_follows_lemma_10_definition():
    # H = Σᵢ AᵢᵀAᵢ with Aᵢ = node i's columns (a·n + i) of (I_T⊗W)W_T; independent build.
    W = topology.uniform_neighbour(edgedp_topologies.parse("er:7:0.5:2"))
    T, n = 5, W.shape[0]
    A = _stacked_workload(W, T)
    H = sum(A[:, i::n].T @ A[:, i::n] for i in range(n))
    assert _rel_err(mafalda.workload_gram_bruteforce(W, steps=T), H) < 1e-13


def test_design_spectral_formula():
    # DESIGN §4: H[a,b] = Σⱼ Σ_{t=max(a,b)}^{T−1} λⱼ^{2t−a−b+2}, evaluated literally.
    W = topology.metropolis_hastings(edgedp_topologies.parse("er:9:0.4:4"))
    T = 6
    lam = np.linalg.eigvalsh(W)
    ref = np.array(
        [
            [sum(np.sum(lam ** (2 * t - a - b + 2)) for t in range(max(a, b), T)) for b in range(T)]
            for a in range(T)
        ]
    )
    assert _rel_err(mafalda.workload_gram(W, steps=T), ref) < RTOL


@pytest.mark.parametrize("n", [2, 5, 9])
def test_complete_graph_gives_prefix_sum_gram(n):
    # complete graph with MH weights: W = 11ᵀ/n, W^p = W for p >= 1, ⟨W^p, W^q⟩_F = 1, so
    # H[a, b] = T − max(a, b) = (AᵀA)[a, b] for the prefix-sum workload A (paper 003).
    W = topology.metropolis_hastings(edgedp_topologies.complete(n))
    np.testing.assert_allclose(W, np.full((n, n), 1.0 / n), rtol=0, atol=1e-15)
    T = 9
    ref = _prefix_sum_gram(T)
    np.testing.assert_allclose(ref[0, :3], [9.0, 8.0, 7.0])  # T − max(a, b), hand-derived
    for symmetric in (None, False):
        H = mafalda.workload_gram(W, steps=T, symmetric=symmetric)
        np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12)


def test_identity_without_validation_is_n_copies_of_prefix_sum():
    # W = I (isolated nodes, rejected by validate): tr((I^p)ᵀI^q) = n, so H = n·(T − max(a, b)).
    n, T = 4, 7
    H = mafalda.workload_gram(np.eye(n), steps=T, validate=False)
    np.testing.assert_allclose(H, n * _prefix_sum_gram(T), rtol=1e-14)
    with pytest.raises(TopologyError):
        mafalda.workload_gram(np.eye(n), steps=T)


def test_eigenvalue_minus_one():
    # W = [[0, 1], [1, 0]] (eigenvalues ±1): W^p = I or W, ⟨W^p, W^q⟩_F = 2 if p ≡ q (mod 2)
    # else 0, so H[a, b] = 2(T − max(a, b)) when a ≡ b (mod 2) and 0 otherwise (hand-derived).
    W = np.array([[0.0, 1.0], [1.0, 0.0]])
    T = 8
    a, b = np.indices((T, T))
    ref = np.where((a - b) % 2 == 0, 2.0 * (T - np.maximum(a, b)), 0.0)
    for symmetric in (None, False):
        np.testing.assert_allclose(
            mafalda.workload_gram(W, steps=T, symmetric=symmetric), ref, rtol=0, atol=1e-12
        )
    ring = edgedp_topologies.ring(6).adjacency / 2.0  # zero diagonal, bipartite: λ = −1
    ref = mafalda.workload_gram_bruteforce(ring, steps=10)
    assert _rel_err(mafalda.workload_gram(ring, steps=10), ref) < RTOL


def test_slow_mixing_ring_paths_agree():
    # ring:200 has |λ₂| ≈ 1 − 3e-4: the symmetric power-sum path and the eigen-basis GEMM
    # path (symmetric=False) are independent computations; brute force checks a short T.
    W = topology.metropolis_hastings(edgedp_topologies.ring(200))
    ref = mafalda.workload_gram_bruteforce(W, steps=4)  # nT = 800
    assert _rel_err(mafalda.workload_gram(W, steps=4), ref) < RTOL
    H = mafalda.workload_gram(W, steps=600)
    assert _rel_err(mafalda.workload_gram(W, steps=600, symmetric=False), H) < RTOL


@pytest.mark.parametrize("weighting", WEIGHTINGS, ids=lambda w: w.name)
def test_gram_is_symmetric_positive_definite(weighting):
    W = weighting.build(edgedp_topologies.parse("smallworld:12:4:0.3:2"))
    H = mafalda.workload_gram(W, steps=40)
    np.testing.assert_array_equal(H, H.T)  # filled symmetrically by construction
    assert np.linalg.eigvalsh(H).min() > 0  # A = (I_T⊗W)W_T K: no x with Aᵢx = 0 for all i
    # H[a, b] depends only on (|a − b|, T − max(a, b)): shifting both indices to the end
    assert np.allclose(H[-1, -1], np.sum(W * W))  # T − max = 1, d = 0: ⟨W, W⟩_F


def test_single_step_is_frobenius_norm():
    W = topology.uniform_neighbour(edgedp_topologies.star(6))
    H = mafalda.workload_gram(W, steps=1)
    np.testing.assert_allclose(H, [[np.sum(W * W)]], rtol=1e-14)


@pytest.mark.parametrize(
    "spec,weighting", [("ring:5", WEIGHTINGS[0]), ("er:6:0.5:1", WEIGHTINGS[2])]
)
def test_lemma_10_identity(spec, weighting):
    # Definition 9 with C = C_local ⊗ I_n vs Lemma 10's T × T form, for several C_local.
    W = weighting.build(edgedp_topologies.parse(spec))
    n, T = W.shape[0], 6
    rng = np.random.default_rng(7)
    part = Participation(2, 3)
    stacked = _stacked_workload(W, T)
    H = mafalda.workload_gram(W, steps=T)
    patterns = [p for u in range(n) for p in part.node_patterns(T, n, u)]
    for C_local in (
        np.eye(T),
        np.tril(np.ones((T, T))),  # AntiPGD's C_local (DESIGN §4)
        np.tril(rng.uniform(-0.3, 0.3, (T, T)), -1) + np.diag(rng.uniform(1, 2, T)),
    ):
        C = np.kron(C_local, np.eye(n))
        frob_big = np.sum((stacked @ np.linalg.inv(C)) ** 2)
        frob_small = np.trace(H @ np.linalg.inv(C_local.T @ C_local))
        assert abs(frob_big - frob_small) <= 1e-10 * frob_big
        sens_big = sensitivity(C, patterns).value  # B square invertible under LDP: B†B = I
        sens_small = sensitivity(C_local, part).value
        assert abs(sens_big - sens_small) <= 1e-12 * sens_small
        loss = mafalda.objective(C_local, W, steps=T, participation=part)
        assert abs(loss - sens_big**2 * frob_big) <= 1e-10 * loss


def test_objective_golden_values():
    W = topology.metropolis_hastings(edgedp_topologies.parse("er:10:0.4:5"))
    T = 8
    H = mafalda.workload_gram(W, steps=T)
    # C = I, (k, b) = (2, 4): X = I, sens² = k = 2 (DESIGN §4), loss = 2·tr(H)
    loss = mafalda.objective(np.eye(T), W, steps=T, participation=Participation(2, 4))
    assert loss == pytest.approx(2 * np.trace(H), rel=1e-12)
    # complete graph: H = prefix-sum Gram, so the loss is the centralized sens²·‖A C⁻¹‖_F²
    Wc = topology.metropolis_hastings(edgedp_topologies.complete(5))
    C = np.tril(np.full((T, T), 0.5)) + 0.5 * np.eye(T)
    A = np.tril(np.ones((T, T)))
    part = Participation(1, T)
    central = sensitivity(C, part).value ** 2 * np.sum((A @ np.linalg.inv(C)) ** 2)
    assert mafalda.objective(C, Wc, steps=T, participation=part) == pytest.approx(
        central, rel=1e-12
    )


def test_objective_rejects_bad_strategies():
    W = topology.metropolis_hastings(edgedp_topologies.ring(4))
    part = Participation(1, 1)
    with pytest.raises(ValueError, match="shape"):
        mafalda.objective(np.eye(3), W, steps=4, participation=part)
    with pytest.raises(ValueError, match="invertible"):
        mafalda.objective(np.zeros((4, 4)), W, steps=4, participation=part)
    with pytest.raises(TypeError, match="Participation"):
        mafalda.objective(np.eye(4), W, steps=4, participation=(1, 1))


def test_input_validation():
    W = topology.metropolis_hastings(edgedp_topologies.ring(5))
    with pytest.raises(ValueError, match="square"):
        mafalda.workload_gram(np.ones((2, 3)) / 3, steps=3)
    with pytest.raises(ValueError, match="finite"):
        mafalda.workload_gram(np.full((2, 2), np.nan), steps=3)
    with pytest.raises(TopologyError, match="row-stochastic"):
        mafalda.workload_gram(W * 0.9, steps=3)
    with pytest.raises(ValueError, match="steps=0"):
        mafalda.workload_gram(W, steps=0)
    with pytest.raises(TypeError, match="steps"):
        mafalda.workload_gram(W, steps=2.0)
    with pytest.raises(ValueError, match="symmetric"):
        mafalda.workload_gram(
            topology.uniform_neighbour(edgedp_topologies.star(4)), steps=3, symmetric=True
        )
    with pytest.raises(ValueError, match="overflowed"):
        mafalda.workload_gram(2.0 * np.eye(2), steps=600, validate=False)
    with pytest.raises(ValueError, match="<= 2000"):
        mafalda.workload_gram_bruteforce(W, steps=401)


def test_large_horizon_smoke():
    # brief: n = 60, T = 300 must plan well under a second (symmetric path: O(n·T + T²)).
    W = topology.metropolis_hastings(edgedp_topologies.erdos_renyi(60, 0.1, seed=0))
    start = time.perf_counter()
    H = mafalda.workload_gram(W, steps=300)
    elapsed = time.perf_counter() - start
    assert H.shape == (300, 300) and np.all(np.isfinite(H))
    assert elapsed < 1.0, f"workload_gram took {elapsed:.2f} s for n=60, T=300"
