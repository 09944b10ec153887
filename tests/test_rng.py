import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgedp import rng


@given(st.binary(min_size=1, max_size=40), st.integers(0, 2**40), st.integers(1, 50))
def test_draw_is_a_pure_function_of_key_and_step(secret, step, size):
    key = rng.derive_key(secret, "noise", 3)
    a = rng.gaussian(key, step, (size,))
    # interleave other draws: they must not disturb the stream
    rng.gaussian(key, step + 1, (size,))
    rng.gaussian(rng.derive_key(secret, "noise", 4), step, (size,))
    b = rng.gaussian(key, step, (size,))
    assert a.tobytes() == b.tobytes()


def test_steps_and_labels_give_different_streams():
    s = rng.seed_secret(1)
    k = rng.derive_key(s, "noise", 0)
    draws = {rng.gaussian(k, t, (8,)).tobytes() for t in range(50)}
    assert len(draws) == 50
    assert rng.gaussian(rng.derive_key(s, "noise", 1), 0, (8,)).tobytes() not in draws
    assert rng.derive_key(s, "noise", 1) != rng.derive_key(s, "noise", "1")
    assert rng.derive_key(rng.seed_secret(2), "noise", 0) != k


def test_a_prefix_of_a_longer_draw_is_not_required_but_shapes_are_stable():
    k = rng.derive_key(b"x", "a")
    assert rng.gaussian(k, 5, (3, 4)).shape == (3, 4)
    assert rng.laplace(k, 5, (7,), scale=2.0).shape == (7,)


def test_gaussian_and_laplace_moments():
    k = rng.derive_key(b"moments", "m")
    z = np.concatenate([rng.gaussian(k, t, (10_000,)) for t in range(20)])
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01  # 200k draws: 5-sigma ~ 0.011
    lap = np.concatenate([rng.laplace(k, t, (10_000,), scale=2.0) for t in range(20)])
    assert abs(np.mean(np.abs(lap)) - 2.0) < 0.03  # E|X| = scale
    # consecutive steps are uncorrelated
    a, b = rng.gaussian(k, 0, (100_000,)), rng.gaussian(k, 1, (100_000,))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.015


def test_permutation_is_keyed():
    k = rng.derive_key(b"p", "batch", 0)
    p = rng.permutation(k, 20)
    assert sorted(p.tolist()) == list(range(20))
    assert np.array_equal(p, rng.permutation(k, 20))


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_steps_are_refused(bad):
    with pytest.raises(ValueError, match="step"):
        rng.gaussian(rng.derive_key(b"x"), bad, (2,))


def test_bad_secret_and_labels():
    with pytest.raises(TypeError):
        rng.derive_key(b"")
    with pytest.raises(TypeError):
        rng.derive_key(b"x", 1.5)
    with pytest.raises(ValueError):
        rng.seed_secret(-3)
