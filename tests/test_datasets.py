"""Offline datasets, IID and Dirichlet(α) partitions, per-node shard files."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedp_sim import datasets


def _skew(labels_per_node: np.ndarray, classes: int) -> float:
    """Mean over nodes of the largest label fraction (1/classes for a perfect mix, 1 skewed)."""
    counts = np.stack([np.bincount(row, minlength=classes) for row in labels_per_node])
    return float(np.mean(counts.max(axis=1) / counts.sum(axis=1)))


@given(
    classes=st.integers(2, 6),
    per_class=st.integers(1, 40),
    nodes=st.integers(1, 12),
    alpha=st.sampled_from([0.01, 0.3, 1.0, 10.0, float("inf")]),
    seed=st.integers(0, 2**16),
)
def test_dirichlet_uses_each_example_at_most_once_in_equal_shares(
    classes, per_class, nodes, alpha, seed
):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, classes * per_class)
    m = len(labels) // nodes
    if m < 1:
        return
    idx = datasets.dirichlet_indices(labels, nodes, m, alpha=alpha, seed=seed)
    assert idx.shape == (nodes, m)
    assert len(np.unique(idx)) == idx.size  # every example at most once
    assert idx.min() >= 0 and idx.max() < len(labels)


@settings(max_examples=10)
@given(seed=st.integers(0, 2**16))
def test_dirichlet_large_alpha_is_the_iid_mix_and_small_alpha_is_skewed(seed):
    labels = np.repeat(np.arange(10), 200)
    rng = np.random.default_rng(seed)
    labels = labels[rng.permutation(len(labels))]
    wide = datasets.dirichlet_indices(labels, 10, 100, alpha=1e6, seed=seed)
    iid = datasets.partition(
        datasets.Dataset("t", np.zeros((2000, 1)), labels.astype(float), None, None, "softmax"),
        10,
        seed=seed,
    )
    narrow = datasets.dirichlet_indices(labels, 10, 100, alpha=0.05, seed=seed)
    s_wide, s_iid = _skew(labels[wide], 10), _skew(iid.y.astype(int), 10)
    s_narrow = _skew(labels[narrow], 10)
    assert abs(s_wide - s_iid) < 0.05 and s_wide < 0.25  # IID: ~0.1 + sampling noise
    assert s_narrow > 0.6  # few labels per node
    exact = datasets.dirichlet_indices(labels, 10, 100, alpha=float("inf"), seed=seed)
    assert _skew(labels[exact], 10) < 0.25


def test_dirichlet_falls_back_to_the_nearest_label_when_one_runs_out():
    labels = np.array([0] * 2 + [1] * 10 + [2] * 10)
    idx = datasets.dirichlet_indices(labels, 2, 11, alpha=0.01, seed=3)
    assert len(np.unique(idx)) == 22  # everything used, nothing twice


def test_partition_schemes_and_errors():
    digits = datasets.load("digits", seed=0)
    assert digits.classes == 10 and digits.task == "softmax"
    fed = datasets.partition(digits, 16, scheme="dirichlet:0.1", seed=2)
    assert fed.x.shape == (16, len(digits.y_train) // 16, 64)
    rows = {tuple(r) for r in fed.x.reshape(-1, 64)}
    assert len(rows) >= 0.95 * fed.x.shape[0] * fed.x.shape[1]  # (digits has a few duplicates)
    assert datasets.partition(digits, 4, seed=0).y.shape == (4, len(digits.y_train) // 4)
    with pytest.raises(ValueError, match="dirichlet:ALPHA with ALPHA > 0"):
        datasets.partition(digits, 4, scheme="dirichlet:-1")
    with pytest.raises(ValueError, match="Unknown partition scheme='shards'"):
        datasets.partition(digits, 4, scheme="shards")
    with pytest.raises(ValueError, match="regression dataset"):
        datasets.partition(datasets.load("diabetes"), 4, scheme="dirichlet:1")


def test_iid_partition_is_unchanged():
    data = datasets.load("synthetic-logistic", seed=1)
    fed = datasets.partition(data, 10, seed=1)
    order = np.random.default_rng(1).permutation(len(data.y_train))[: 10 * fed.local_size]
    assert np.array_equal(fed.y.reshape(-1), data.y_train[order])


def test_regression_sets_are_standardised_and_offline():
    for name, features in [("diabetes", 10), ("synthetic-regression:5:300", 5)]:
        data = datasets.load(name, seed=0)
        assert data.task == "linear" and data.classes == 0 and data.x_train.shape[1] == features
        assert abs(data.y_train.mean()) < 1e-9 and abs(data.y_train.std() - 1) < 1e-9


def test_write_shards_in_the_agent_format(tmp_path):
    fed = datasets.partition(datasets.load("digits", seed=0), 3, scheme="dirichlet:1", seed=0)
    paths = datasets.write_shards(fed, tmp_path / "shards")
    assert [p.name for p in paths] == ["node-0.npz", "node-1.npz", "node-2.npz"]
    with np.load(paths[2], allow_pickle=False) as shard:
        assert np.array_equal(shard["x"], fed.x[2]) and np.array_equal(shard["y"], fed.y[2])
        assert shard["y"].dtype == np.float64
