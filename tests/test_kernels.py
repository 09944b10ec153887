"""The compiled loops of edgedp_sim.kernels = the numpy/scipy/scikit-learn paths, bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedp import rng, streams
from edgedp_sim import kernels

needs_numba = pytest.mark.skipif(not kernels.AVAILABLE, reason="numba is not installed")


def _keys(trials: int, nodes: int) -> np.ndarray:
    run = streams.RunKeys(rng.seed_secret(4), "ef" * 32, streams.SIMULATION_RUN)
    return np.array(
        [[run.noise(u, trial=t) for u in range(nodes)] for t in range(trials)], dtype=object
    )


@needs_numba
@pytest.mark.parametrize("shape", [(1,), (3,), (4,), (5,), (2, 3), (9,)])
def test_compiled_laplace_ahead_equals_the_per_stream_draws(shape):
    keys = _keys(12, 3)
    ahead = kernels.LaplaceAhead(rng.key_words(keys), shape, ahead=5)
    for step, scale in ((0, 1.0), (1, 0.0), (4, 2.5e-3), (5, 7.0e5), (2**40, 3.0), (3, 1.0)):
        got = ahead.draw(step, scale=scale)
        assert got.shape == (12, 3, *shape)
        for t, u in np.ndindex(keys.shape):  # one numpy generator per (trial, node) stream
            alone = rng.laplace(keys[t, u], step, shape, scale=scale)
            assert got[t, u].tobytes() == alone.tobytes()


@needs_numba
def test_compiled_laplace_ahead_equals_the_numpy_look_ahead_over_many_steps():
    words = rng.key_words(_keys(200, 3))
    mine, theirs = kernels.LaplaceAhead(words, (1,)), rng.LaplaceAhead(words, (1,))
    assert mine._ahead == 64  # 600 streams: the default pass is 64 steps
    for step in range(150):
        scale = 0.5 * 0.99**step
        assert mine.draw(step, scale=scale).tobytes() == theirs.draw(step, scale=scale).tobytes()
    big = kernels.LaplaceAhead(np.zeros((1000, 100, 2), dtype=np.uint64), (100,))
    assert big._ahead == 1  # 10^7 draws per step: one step per pass (memory)


def test_laplace_ahead_falls_back_to_numpy_without_numba(monkeypatch):
    monkeypatch.setattr(kernels, "AVAILABLE", False)
    words = rng.key_words(_keys(3, 2))
    ahead = kernels.laplace_ahead(words, (2,))
    assert type(ahead) is rng.LaplaceAhead
    assert (
        ahead.draw(7, scale=0.5).tobytes()
        == rng.laplace_stacked(words, 7, (2,), scale=0.5).tobytes()
    )


def _sorted_samples(data, n, d, kind):
    """Samples with ties and duplicates: small integers times a scale, optionally jittered,
    sorted ascending in the first coordinate."""
    ints = data.draw(st.lists(st.integers(-3, 3), min_size=n * d, max_size=n * d))
    scale = data.draw(st.sampled_from([1.0, 0.1, 1e-9, 1e6]))
    p = np.array(ints, dtype=np.float64).reshape(n, d) * scale
    if kind == "jitter":
        seed = data.draw(st.integers(0, 2**32 - 1))
        p = p + 1e-10 * np.random.default_rng(seed).random(p.shape)
    elif kind == "wide":
        p[:, 0] *= 1e3
    return p[np.argsort(p[:, 0], kind="stable")]


@needs_numba
@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(5, 120),
    d=st.integers(1, 4),
    k=st.integers(1, 4),
    kind=st.sampled_from(["ties", "jitter", "wide"]),
)
def test_sorted_scans_equal_the_trees_with_ties_and_duplicates(data, n, d, k, kind):
    from scipy.spatial import cKDTree
    from sklearn.neighbors import KDTree

    p = _sorted_samples(data, n, d, kind)
    k = min(k, n - 1)
    got = kernels.sorted_knn_radius(p, k, budget=np.inf)
    want = cKDTree(p).query(p, [k + 1], p=np.inf)[0][:, 0]
    assert got.tobytes() == want.tobytes()
    # NPEET's radius (minus 1e-15: strictly inside; below 0 at distance-0 neighbours) and
    # others around it: counts of points within max-norm distance <= r, the point included
    shrink = data.draw(st.sampled_from([1e-15, 0.0, -1e-15, 1e-3]))
    radius = want - shrink
    counts = kernels.sorted_ball_counts(p, radius, budget=np.inf)
    tree = KDTree(p, metric="chebyshev").query_radius(p, np.maximum(radius, 0.0), count_only=True)
    assert counts.tolist() == np.where(radius >= 0, tree, 0).tolist()
    brute = (np.abs(p[:, None, :] - p[None, :, :]).max(axis=-1) <= radius[:, None]).sum(axis=1)
    assert counts.tolist() == np.where(radius >= 0, brute, 0).tolist()


@needs_numba
def test_sorted_scans_give_up_when_a_tree_is_cheaper():
    g = np.random.default_rng(0)
    p = g.standard_normal((4000, 6))  # six comparable coordinates: long scans
    p = p[np.argsort(p[:, 0])]
    assert kernels.sorted_knn_radius(p, 3) is None
    assert kernels.sorted_ball_counts(p, np.full(4000, 1.0)) is None
    q = p * np.array([1e4, 1, 1, 1, 1, 1])  # the first coordinate outspreads the others
    assert kernels.sorted_knn_radius(q, 3) is not None


@needs_numba
@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(8, 150),
    dx=st.integers(1, 3),
    dy=st.integers(1, 3),
    kind=st.sampled_from(["ties", "jitter", "wide"]),
    budgets=st.sampled_from([(None, None), (0.0, None), (None, 0.0)]),
)
def test_compiled_ksg_equals_the_numpy_and_tree_paths(data, n, dx, dy, kind, budgets):
    # ksg_mi's compiled scans (all of them, or with the k-NN or the vector counts sent back
    # to the trees by a zero budget) against its numpy/scipy/scikit-learn path
    from edgedp_sim import leakage

    p = _sorted_samples(data, n, dx + dy, kind)
    p = p[np.random.default_rng(n).permutation(n)]  # input order is not sorted
    x, y = p[:, :dx], p[:, dx:]
    knn, run = budgets
    with pytest.MonkeyPatch.context() as mp:
        if knn is not None:
            mp.setattr(kernels, "SCAN_BUDGET", knn)
        if run is not None:
            mp.setattr(kernels, "RUN_BUDGET", run)
        fast = leakage.ksg_mi(x, y, prenoised=True)
        mp.setattr(kernels, "AVAILABLE", False)
        slow = leakage.ksg_mi(x, y, prenoised=True)
    assert fast.tobytes() == slow.tobytes()


@needs_numba
def test_compiled_laplace_ahead_sends_a_zero_uniform_to_the_key_s_own_generator():
    # a uniform of exactly 0 (probability 2^-53 a word) makes numpy skip a word: that key is
    # redrawn by its own generator; marked here by hand, the draws stay the per-stream ones
    keys = _keys(4, 3)
    ahead = kernels.LaplaceAhead(rng.key_words(keys), (2,), ahead=3)
    ahead.draw(6, scale=1.0)
    ahead._zero[1, 5] = ahead._any_zero[1] = True  # step 7, key (1, 2)
    ahead._logs[1, 5] = np.nan  # must not be used
    got = ahead.draw(7, scale=0.5)
    for t, u in np.ndindex(keys.shape):
        assert got[t, u].tobytes() == rng.laplace(keys[t, u], 7, (2,), scale=0.5).tobytes()
