"""Bulk keyed Laplace draws (rng.laplace_stacked) = the per-stream keyed draws, bit for bit."""

import sys

import numpy as np
import pytest

from edgedp import noise, rng, streams


def _keys(trials: int, nodes: int) -> np.ndarray:
    run = streams.RunKeys(rng.seed_secret(3), "cd" * 32, streams.SIMULATION_RUN)
    return np.array(
        [[run.noise(u, trial=t) for u in range(nodes)] for t in range(trials)], dtype=object
    )


@pytest.mark.parametrize("shape", [(1,), (3,), (4,), (5,), (2, 3), (9,)])
@pytest.mark.parametrize("step", [0, 1, 999, 2**40])
def test_bulk_laplace_equals_the_per_stream_draws(shape, step):
    keys = _keys(40, 3)
    for scale in (0.0, 1.0, 2.5e-3, 7.0e5):
        bulk = rng.laplace_stacked(keys, step, shape, scale=scale)
        assert bulk.shape == (40, 3, *shape)
        for t, u in np.ndindex(keys.shape):  # one generator per (trial, node) stream
            alone = rng.laplace(keys[t, u], step, shape, scale=scale)
            assert bulk[t, u].tobytes() == alone.tobytes()


def test_bulk_laplace_from_key_words_and_a_single_key():
    keys = _keys(7, 2)
    words = rng.key_words(keys)
    assert words.shape == (7, 2, 2) and words.dtype == np.uint64
    assert words[3, 1].tolist() == list(keys[3, 1].words)
    a = rng.laplace_stacked(words, 12, (2,), scale=0.5)
    assert a.tobytes() == rng.laplace_stacked(keys, 12, (2,), scale=0.5).tobytes()
    one = rng.laplace_stacked(np.asarray(keys[0, 0], dtype=object), 12, (2,), scale=0.5)
    assert one.shape == (2,) and one.tobytes() == a[0, 0].tobytes()


def test_engine_laplace_draw_is_the_bulk_draw_of_every_node_stream():
    # the batch engine's (trials, nodes) stack and an agent's own key give the same bits
    keys = _keys(25, 3)
    stack = noise.laplace_draw(keys, 4, 2, 0.3)
    assert stack[11, 2].tobytes() == noise.laplace_draw(keys[11, 2], 4, 2, 0.3).tobytes()
    assert stack[11, 2].tobytes() == rng.laplace(keys[11, 2], 4, (2,), scale=0.3).tobytes()


def test_bulk_laplace_streams_are_distinct_per_trial_node_and_step():
    keys = _keys(50, 3)
    a = rng.laplace_stacked(keys, 0, (1,))
    assert len(np.unique(a)) == a.size  # every (trial, node) stream draws its own numbers
    assert not np.any(a == rng.laplace_stacked(keys, 1, (1,)))


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bulk_laplace_refuses_bad_steps_scales_and_words(bad):
    keys = _keys(2, 2)
    with pytest.raises(ValueError, match="step"):
        rng.laplace_stacked(keys, bad, (1,))
    with pytest.raises(ValueError, match="scale"):
        rng.laplace_stacked(keys, 0, (1,), scale=-1.0)
    with pytest.raises(ValueError, match="words"):
        rng.laplace_stacked(np.zeros((2, 3), dtype=np.uint64), 0, (1,))


def test_bulk_keys_equal_per_key_derivation():
    # RunKeys.per_trial (the prefix hashed once) = the per-(trial, node) keys, and the bulk
    # permutations and normals of edgedp_sim.batch / edgedp_sim.initial = the per-key draws
    keys = streams.RunKeys(rng.seed_secret(5), "cd" * 32, streams.SIMULATION_RUN)
    labels = (("noise", keys.noise), ("batch", keys.batch), ("initial-state", keys.initial))
    for label, one in labels:
        bulk = keys.per_trial(label, nodes=3, trials=4, first_trial=7)
        assert bulk.shape == (4, 3)
        assert bulk.tolist() == [[one(u, trial=7 + i) for u in range(3)] for i in range(4)]
    stack = keys.per_trial("batch", nodes=2, trials=3)
    perms = rng.stacked(stack, 0, (6,), lambda g: g.permutation(6)).astype(np.int64)
    assert perms.tolist() == [[rng.permutation(k, 6).tolist() for k in row] for row in stack]
    assert rng.derive_keys(b"s", ("a", 1), [(2, 3)]) == [rng.derive_key(b"s", "a", 1, 2, 3)]
    with pytest.raises(TypeError):
        rng.derive_keys(b"s", ("a",), [(-1,)])


@pytest.mark.parametrize("shape", [(1,), (5,), (2, 3)])
def test_laplace_ahead_equals_the_bulk_draws(shape):
    # the batch engine's look-ahead draws: in order, with jumps back and forth, any scale
    keys = _keys(30, 3)
    ahead = rng.LaplaceAhead(rng.key_words(keys), shape, ahead=4)
    for step, scale in (
        (0, 1.0),
        (1, 0.0),
        (2, 2.5e-3),
        (3, 7.0),
        (4, 1.0),
        (2**40, 3.0),
        (9, 1.0),
    ):
        want = rng.laplace_stacked(keys, step, shape, scale=scale)
        assert ahead.draw(step, scale=scale).tobytes() == want.tobytes()
    with pytest.raises(ValueError):
        ahead.draw(-1, scale=1.0)


@pytest.mark.parametrize(
    "sample",
    [
        lambda g: g.standard_normal(5),
        lambda g: g.permutation(5).astype(np.float64),  # bounded 32-bit draws: half words
        lambda g: np.r_[g.integers(0, 9, 3, dtype=np.uint32), g.random(2)],
    ],
)
def test_stacked_draws_equal_fresh_generators_per_stream(sample):
    keys = _keys(3, 4)
    got = rng.stacked(keys, 6, (5,), sample)
    want = np.array([[sample(rng.generator(k, 6)) for k in row] for row in keys])
    assert np.array_equal(got, want)
    # a stream re-keyed after one that kept half a word starts afresh, in either order
    again = rng.stacked(keys[::-1, ::-1], 6, (5,), sample)
    assert np.array_equal(again, want[::-1, ::-1])


def test_the_in_place_rekey_is_active_here_and_its_fallback_draws_the_same(monkeypatch):
    # on a 64-bit little-endian numpy the layout check passes (else every re-key would
    # silently take the slower setter path and the benchmarks would measure that)
    if sys.maxsize == 2**63 - 1 and sys.byteorder == "little":
        assert rng._Rekeyable()._key is not None
    keys = _keys(2, 3)
    fast = rng.stacked(keys, 4, (6,), lambda g: g.standard_normal(6))

    def refuse(self):
        raise RuntimeError("layout")

    monkeypatch.setattr(rng._Rekeyable, "_bind", refuse)
    monkeypatch.setattr(rng._SPARE, "gen", None, raising=False)
    slow_gen = rng._Rekeyable()
    assert slow_gen._key is None  # the setter path
    slow = rng.stacked(keys, 4, (6,), lambda g: g.standard_normal(6))
    want = np.array([[rng.generator(k, 4).standard_normal(6) for k in row] for row in keys])
    assert fast.tobytes() == slow.tobytes() == want.tobytes()


@pytest.mark.parametrize("step", [2**64, 2**64 + 5, -1])
def test_a_step_beyond_the_counter_word_is_refused_not_wrapped(step):
    keys = _keys(1, 2)
    for draw in (
        lambda: rng.generator(keys[0, 0], step),
        lambda: rng.stacked(keys, step, (2,), lambda g: g.standard_normal(2)),
        lambda: rng.laplace_stacked(keys, step, (2,)),
    ):
        with pytest.raises(ValueError, match="step"):
            draw()
