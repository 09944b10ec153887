"""The compiled loops of edgedp_sim.kernels = the numpy/scipy/scikit-learn paths, bit for bit."""

import numpy as np
import pytest

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
