import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgedp import _codec, clipping, models
from edgedp.models import dense
from edgedp.models.linear import LinearModel
from edgedp.plan import TaskSpec

floats = st.floats(-1e6, 1e6, allow_nan=False)
arrays = hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=5), elements=floats)


int64 = st.integers(-(2**63), 2**63 - 1)


@given(arrays, st.dictionaries(st.text(max_size=5), int64 | st.text(max_size=5), max_size=4))
def test_codec_round_trip(arr, extra):
    obj = {"a": arr, "nested": [arr, {"x": extra}], "i": np.arange(3)}
    back = _codec.decode(_codec.encode(obj))
    np.testing.assert_array_equal(back["a"], arr)
    assert back["a"].dtype == np.float64 and back["i"].dtype == np.int64
    assert back["nested"][1]["x"] == extra
    assert _codec.encode(back) == _codec.encode(obj)  # canonical: same data, same bytes


@given(st.binary(max_size=200))
def test_codec_never_crashes_on_garbage(blob):
    try:
        _codec.decode(blob)
    except ValueError:
        pass


def test_codec_rejects_oversized_integers():
    with pytest.raises(ValueError, match="64 bits"):
        _codec.encode({"x": 2**70})


def test_codec_rejects_bad_array_records():
    good = _codec.encode({"a": np.zeros(3)})
    bad = good.replace(b"<f8", b"|O8")
    with pytest.raises(ValueError, match="Malformed"):
        _codec.decode(bad)
    import msgpack

    short = msgpack.packb({"__nd__": "<f8", "shape": [4], "data": b"\x00" * 8})
    with pytest.raises(ValueError, match="bytes"):
        _codec.decode(short)


@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 8)), elements=floats),
    st.floats(0.01, 100),
)
def test_clipping_properties(x, clip):
    out, hit = clipping.clip_l2(x, clip)
    norms = clipping.l2_norms(out)
    assert np.all(norms <= clip * (1 + 1e-12))
    inside = ~hit
    np.testing.assert_array_equal(out[inside], x[inside])  # untouched inside the ball
    # direction preserved: out = s * x with 0 < s <= 1
    for row_in, row_out in zip(x[hit], out[hit], strict=True):
        np.testing.assert_allclose(row_out, row_in * (clip / np.linalg.norm(row_in)), rtol=1e-9)


def test_clipped_sum_counts_and_sensitivity():
    g = np.array([[[3.0, 4.0], [0.0, 0.0], [0.6, 0.8]]])
    s, c, bad = clipping.clipped_sum(g, 1.0)
    np.testing.assert_allclose(s, [[1.2, 1.6]])
    assert c.tolist() == [1] and bad.tolist() == [0]
    # removing any one example changes the sum by at most the clip norm
    for b in range(3):
        s2, _, _ = clipping.clipped_sum(np.delete(g, b, axis=1), 1.0)
        assert np.linalg.norm(s - s2) <= 1.0 + 1e-12
    with pytest.raises(ValueError, match="clip_norm"):
        clipping.clip_l2(g, 0.0)


@pytest.mark.parametrize("kind", ["logistic", "linear"])
def test_model_gradients_match_finite_differences(kind, rng):
    model = LinearModel(kind, features=4)
    theta = rng.standard_normal(model.dim)
    x = rng.standard_normal((7, 4))
    y = (rng.random(7) > 0.5).astype(float) if kind == "logistic" else rng.standard_normal(7)
    grad = model.per_example_gradients(theta, x, y).mean(axis=0)
    eps = 1e-6
    fd = np.array(
        [
            (model.loss(theta + eps * e, x, y) - model.loss(theta - eps * e, x, y)) / (2 * eps)
            for e in np.eye(model.dim)
        ]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)  # float64 central differences


@pytest.mark.parametrize(
    "name,loss",
    [
        ("logistic", ""),
        ("linear", ""),
        ("softmax:3", ""),
        ("mlp:3-8-3:relu", ""),
        ("mlp:3-8-6-4:tanh", ""),
        ("mlp:3-5-4-3:sigmoid,identity", ""),
        ("mlp:3-8-1:tanh", "bce"),
        ("mlp:3-8-1:relu", "mse"),
    ],
)
def test_models_broadcast_over_leading_axes(name, loss, rng):
    model = models.for_task(TaskSpec(model=name, loss=loss), 3)
    theta = rng.standard_normal((2, 4, model.dim))
    x = rng.standard_normal((2, 4, 5, 3))
    y = (rng.random((2, 4, 5)) > 0.5).astype(float)
    batched = model.per_example_gradients(theta, x, y)
    single = model.per_example_gradients(theta[1, 2], x[1, 2], y[1, 2])
    assert batched[1, 2].tobytes() == single.tobytes()  # same bits alone or batched
    shared = model.per_example_gradients(theta, x[0, 0], y[0, 0])  # broadcast data
    assert (
        shared[1, 3].tobytes()
        == model.per_example_gradients(theta[1, 3], x[0, 0], y[0, 0]).tobytes()
    )
    losses = model.loss(theta, x, y)
    assert losses.shape == (2, 4) and losses[1, 2] == model.loss(theta[1, 2], x[1, 2], y[1, 2])


@pytest.mark.parametrize("batch", [5, 30])
def test_dense_nodes_run_in_blocks_with_each_node_s_own_bits(batch, monkeypatch, rng):
    """The exact products run as many nodes at once as keep the temporaries under a bound
    (and a node over it in example chunks): every node's bits are those it has alone."""
    model = models.for_task(TaskSpec(model="mlp:3-8-6-4:tanh"), 3)
    theta = rng.standard_normal((3, 5, model.dim))
    x = rng.standard_normal((3, 5, batch, 3))
    y = rng.integers(0, 4, size=(3, 5, batch)).astype(float)
    alone = [model.per_example_gradients(theta[i], x[i], y[i]) for i in range(3)]
    monkeypatch.setattr(dense, "_CHUNK_ELEMENTS", 1000)  # 4 nodes a block; 20 rows a chunk
    assert len(model._blocks(15, batch)) == (4 if batch == 5 else 30)
    blocked = model.per_example_gradients(theta, x, y)
    for i in range(3):
        assert blocked[i].tobytes() == alone[i].tobytes()
    assert (
        model.loss(theta, x, y).tobytes()
        == np.stack(
            [
                np.mean(model.per_example_losses(theta[i, j], x[i, j], y[i, j]))
                for i in range(3)
                for j in range(5)
            ]
        )
        .reshape(3, 5)
        .tobytes()
    )


# entries that make rows non-finite or overflow the square sum, beside ordinary values
hostile = st.one_of(
    floats,
    st.sampled_from([np.nan, np.inf, -np.inf, 1e308, -1e308, 1e200, 5e-324, 0.0, -0.0]),
)


@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(0, 7)), elements=hostile),
    st.floats(0.01, 100),
)
def test_clipping_with_non_finite_and_overflowing_rows(x, clip):
    """Against the definitions written out: a row with a NaN/±inf entry becomes zeros and is
    counted, a finite row is scaled to norm ≤ clip (its norm computed without overflow)."""
    out, hit, bad = clipping._clip(x.copy(), clip)
    finite = np.array([all(np.isfinite(v) for v in row) for row in x])
    assert bad.tolist() == (~finite).tolist()
    assert not out[~finite].any()
    for row_in, row_out, h, f in zip(x, out, hit, finite, strict=True):
        if not f:
            continue
        top = max((abs(float(v)) for v in row_in), default=0.0)
        norm = top * np.sqrt(sum((float(v) / top) ** 2 for v in row_in)) if top else 0.0
        assert bool(h) == (norm > clip * (1 + 1e-12)) or np.isclose(norm, clip)
        assert np.all(np.isfinite(row_out))
        if not h:
            np.testing.assert_array_equal(row_out, row_in)
    # in place (devices) gives the same bits
    in_place, hit2, bad2 = clipping._clip(x.copy(), clip, overwrite=True)
    assert in_place.tobytes() == out.tobytes()
    assert hit2.tolist() == hit.tolist() and bad2.tolist() == bad.tolist()


@given(st.lists(hnp.arrays(np.float64, st.integers(0, 9), elements=hostile), max_size=3))
def test_non_finite_counts_every_nan_and_inf(arrays):
    from edgedp import outgoing

    want = sum(1 for a in arrays for v in a if not np.isfinite(v))
    assert outgoing.non_finite(*arrays) == want
