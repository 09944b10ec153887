"""Contract tests for every temporal factor: streaming output equals the dense C⁻¹ Z."""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgedp import factors, rng
from edgedp.noise import NoiseSource


@dataclass(frozen=True)
class Case:
    name: str
    factor: object
    steps: int


def _random_lower(T, seed):
    r = np.random.default_rng(seed)
    return np.tril(r.standard_normal((T, T))) + np.diag(2.0 + r.random(T))


def _banded(T, p, seed):
    C = _random_lower(T, seed)
    return factors.Banded.from_matrix(np.tril(C) - np.tril(C, k=-p), p)


T = 24
CASES = [
    Case("identity", factors.Identity(), T),
    Case("antipgd", factors.AntiPGD(), T),
    Case("banded-1", _banded(T, 1, 0), T),
    Case("banded-4", _banded(T, 4, 1), T),
    Case("dense-random", factors.Dense(_random_lower(T, 2)), T),
    Case("dense-toeplitz", factors.Dense(np.tril(np.ones((T, T))) * 0.5 + np.eye(T)), T),
    Case("blt-1", factors.BLT((0.9,), (0.4,)), T),
    Case("blt-4", factors.BLT((0.99, 0.9, 0.6, 0.1), (0.05, 0.2, 0.3, 0.1)), T),
    Case("blt-signed", factors.BLT((0.95, 0.7, 0.3), (0.8, -1.1, 0.5)), T),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_streaming_equals_dense_product(case):
    Z = np.random.default_rng(7).standard_normal((case.steps, 3, 5))
    streamed = factors.noise_matrix_product(case.factor, Z)
    dense = np.einsum("ts,sij->tij", case.factor.materialize(case.steps), Z)
    # tolerance: forward substitution vs a matrix product differ by rounding only
    np.testing.assert_allclose(streamed, dense, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_materialize_inverts_strategy(case):
    C, C_inv = case.factor.strategy(case.steps), case.factor.materialize(case.steps)
    np.testing.assert_allclose(C @ C_inv, np.eye(case.steps), atol=1e-10)
    assert np.allclose(np.triu(C, 1), 0) and np.allclose(np.triu(C_inv, 1), 0)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_round_trip_and_bounded_state(case):
    back = factors.from_dict(case.factor.to_dict())
    np.testing.assert_array_equal(back.strategy(case.steps), case.factor.strategy(case.steps))
    state = case.factor.init((1000,))
    held = sum(b.nbytes for b in state.buffers)
    assert held == case.factor.state_bytes(1000) or case.factor.kind == "dense"
    assert held <= 8 * 1000 * 4  # never a T×d history


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_same_seed_same_bytes_and_resume(case):
    secret = rng.seed_secret(3)
    keys = np.array([rng.derive_key(secret, "noise", u) for u in range(2)], dtype=object)
    src = NoiseSource(case.factor, keys, 4, 1.5)
    state = src.init()
    out = []
    for _ in range(10):
        noise, state = src.next(state)
        out.append(noise)
    resumed = src.state_at(6)  # a process restarting at step 6 regenerates its state
    again = []
    for _ in range(4):
        noise, resumed = src.next(resumed)
        again.append(noise)
    assert np.array_equal(np.stack(out[6:]), np.stack(again))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_state_at_regenerates_the_streamed_state_bit_for_bit(case):
    # resume holds no noise: every step's state comes back from the key alone
    secret = rng.seed_secret(5)
    keys = np.array([rng.derive_key(secret, "noise", u) for u in range(3)], dtype=object)
    src = NoiseSource(case.factor, keys, 6, 0.7)
    state = src.init()
    for step in range(case.steps):
        again = src.state_at(step)
        assert again.step == state.step == step
        assert [b.tobytes() for b in again.buffers] == [b.tobytes() for b in state.buffers]
        _, state = src.next(state)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_noise_row_norms_are_those_of_the_dense_inverse(case):
    dense = np.linalg.norm(case.factor.materialize(case.steps), axis=1)
    # tolerance: streamed impulses / cumulative sums vs a dense inverse, rounding only
    np.testing.assert_allclose(case.factor.noise_row_norms(case.steps), dense, rtol=1e-9)


def test_antipgd_noise_telescopes():
    # closed form: sum_{t<T} (z_t - z_{t-1}) = z_{T-1}
    Z = np.random.default_rng(0).standard_normal((50, 3))
    out = factors.noise_matrix_product(factors.AntiPGD(), Z)
    np.testing.assert_allclose(out.sum(axis=0), Z[-1], atol=1e-12)


@given(st.integers(1, 12), st.integers(1, 5), st.integers(0, 10_000))
def test_banded_streaming_property(steps, p, seed):
    f = _banded(steps, min(p, steps), seed)
    Z = np.random.default_rng(seed).standard_normal((steps, 2))
    np.testing.assert_allclose(
        factors.noise_matrix_product(f, Z), f.materialize(steps) @ Z, rtol=1e-9, atol=1e-9
    )


def test_bad_factors_are_refused():
    with pytest.raises(ValueError, match="lower triangular"):
        factors.Dense(np.ones((3, 3)))
    with pytest.raises(ValueError, match="non-zero diagonal"):
        factors.Dense(np.tril(np.ones((3, 3))) - np.eye(3))
    with pytest.raises(ValueError, match="finite"):
        factors.Dense(np.diag([1.0, np.nan]))
    with pytest.raises(ValueError, match="Unknown temporal factor"):
        factors.from_dict({"kind": "os.system"})
    with pytest.raises(ValueError, match="missing field"):
        factors.from_dict({"kind": "dense"})
    with pytest.raises(ValueError, match="horizon"):
        f = factors.Dense(np.eye(2))
        s = f.init((1,))
        for _ in range(3):
            _, s = f.next(lambda t: np.zeros(1), s)
