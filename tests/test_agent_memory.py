"""An agent's working memory: in-place arithmetic keeps the bits, and the peak stays bounded.

The device path computes the round with as few model-sized arrays as it can (one per-example
buffer, the local step and the noise scaling in place, mixing block by block). Each change is
checked here against the plain numpy expressions it replaces, written out again in this file,
and the peak of numpy allocations during rounds is measured with tracemalloc (allocation
counts, not wall-clock time).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import edgedp_topologies
from edgedp import agent as agent_mod
from edgedp import factors, rng
from edgedp import gossip as _gossip
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.errors import NonFiniteMessageError
from edgedp.models.linear import LinearModel
from edgedp.node_round import NodeRound
from edgedp.noise import NoiseSource
from edgedp.plan import TaskSpec, make_plan

FLOATS = st.floats(-1e3, 1e3, allow_subnormal=False) | st.sampled_from([0.0, -0.0])


# ---------------------------------------------------------------- the plain expressions
def plain_per_example(kind, theta, x, y):
    w = theta[..., None, :-1]
    m = np.sum(x * w, axis=-1) + theta[..., None, -1]
    r = np.exp(-np.logaddexp(0.0, -m)) - y if kind == "logistic" else m - y
    return np.concatenate([x * r[..., None], r[..., None]], axis=-1)


def plain_mix(weights, vectors):
    out = np.zeros(vectors[0].shape)
    for w, v in zip(weights, vectors, strict=True):
        out = out + w * v
    return out


def plain_banded(f, draws, t, buffers):
    acc = draws[t]
    for j, y in enumerate(buffers, start=1):
        acc = acc - f.bands[t, j] * y
    return acc / f.bands[t, 0]


def plain_blt(f, draws, steps):
    s = [np.zeros_like(draws[0]) for _ in f.decays]
    out = []
    for t in range(steps):
        y = draws[t]
        for omega, b in zip(f.weights, s, strict=True):
            y = y - omega * b
        s = [theta * b + y for theta, b in zip(f.decays, s, strict=True)]
        out.append(y)
    return out


# ---------------------------------------------------------------- bits
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["logistic", "linear"]),
    st.sampled_from([(), (2,), (2, 3)]),
    st.integers(1, 4),
    st.integers(1, 9),
    st.integers(0, 2**32 - 1),
)
def test_per_example_gradients_have_the_bits_of_the_plain_expression(kind, lead, b, f, seed):
    r = np.random.default_rng(seed)
    theta = r.standard_normal((*lead, f + 1)) * 3
    x = r.standard_normal((*lead[-1:], b, f))  # x broadcasts over the leading trial axis
    y = (r.random((*lead[-1:], b)) > 0.5).astype(float)
    got = LinearModel(kind, f).per_example_gradients(theta, x, y)
    assert got.tobytes() == plain_per_example(kind, theta, x, y).tobytes()


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5), st.integers(1, 3 * _gossip.MIX_BLOCK // 2), st.data())
def test_blockwise_mixing_of_separate_vectors_has_the_bits_of_the_stacked_mix(m, d, data):
    weights = data.draw(hnp.arrays(np.float64, m, elements=st.floats(-2, 2)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    vectors = list(np.random.default_rng(seed).standard_normal((m, d)))
    vectors[0][: min(d, 3)] = -0.0  # 0 + (−0) must give +0, as the plain sum does
    got = _gossip.mix_gathered(weights, vectors)
    assert got.tobytes() == plain_mix(weights, vectors).tobytes()
    assert got.tobytes() == _gossip.mix_gathered(weights, np.stack(vectors)).tobytes()


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, st.integers(1, 40), elements=FLOATS),
    st.booleans(),
    st.floats(1e-3, 10),
    st.integers(1, 64),
)
def test_local_step_in_place_has_the_bits_and_leaves_its_inputs_alone(g, with_noise, lr, b):
    theta = np.linspace(-1, 1, g.size)
    noise = np.cos(np.arange(g.size)) * 5 if with_noise else None
    g0, n0 = g.copy(), None if noise is None else noise.copy()
    got = _gossip.local_step(theta, g, noise, learning_rate=lr, batch_size=b)
    total = g0 if noise is None else g0 + n0
    assert got.tobytes() == (theta - lr * (total / b)).tobytes()
    assert g.tobytes() == g0.tobytes()  # the caller's gradient (a probe may keep it)
    assert noise is None or noise.tobytes() == n0.tobytes()


def _banded_factor(T, p, seed):
    r = np.random.default_rng(seed)
    C = np.tril(r.standard_normal((T, T))) + np.diag(2.0 + r.random(T))
    return factors.Banded.from_matrix(np.tril(C) - np.tril(C, k=-p), p)


@pytest.mark.parametrize(
    ("memoize", "consume"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["fresh", "memoized", "consumed", "memoized-consumed"],
)
@pytest.mark.parametrize(
    "factor",
    [
        _banded_factor(9, 1, 0),
        _banded_factor(9, 3, 1),
        factors.Dense(np.tril(np.full((9, 9), 0.4)) + np.eye(9)),
        factors.BLT((0.9, 0.5), (0.3, 0.2)),
        factors.AntiPGD(),
        factors.Identity(),
    ],
    ids=["banded-1", "banded-3", "dense", "blt", "antipgd", "identity"],
)
def test_streamed_noise_has_the_bits_of_the_plain_recursions(factor, memoize, consume):
    key = np.array(rng.derive_key(rng.seed_secret(3), "noise", 0), dtype=object)
    std, steps, d = 1.7, 9, 11
    src = NoiseSource(factor, key, d, std, memoize=memoize, consume=consume)
    draws = [rng.gaussian(key[()], t, (d,)) for t in range(steps)]
    if isinstance(factor, factors.Banded):
        ys = []
        for t in range(steps):
            ys.append(plain_banded(factor, draws, t, ys[::-1][: factor.bandwidth - 1]))
        want = [std * y for y in ys]
    elif isinstance(factor, factors.Dense):
        want = []
        for t in range(steps):
            acc = factor.inverse[t, 0] * draws[0]
            for tau in range(1, t + 1):
                if factor.inverse[t, tau] != 0.0:
                    acc = acc + factor.inverse[t, tau] * draws[tau]
            want.append(std * acc)
    elif isinstance(factor, factors.BLT):
        want = [std * y for y in plain_blt(factor, draws, steps)]
    elif isinstance(factor, factors.AntiPGD):
        want = [std * (draws[t] - (draws[t - 1] if t else 0.0)) for t in range(steps)]
    else:
        want = [std * z for z in draws]
    state = src.init()
    for t in range(steps):
        before = [b.tobytes() for b in state.buffers]
        out, new = src.next(state)
        assert out.tobytes() == want[t].tobytes(), t
        if not consume:  # the previous state is not written through
            assert [b.tobytes() for b in state.buffers] == before
        regenerated = src.state_at(t + 1)
        assert all(
            a.tobytes() == b.tobytes()
            for a, b in zip(new.buffers, regenerated.buffers, strict=True)
        )
        state = new


# ---------------------------------------------------------------- peak memory
D, BATCH, STEPS = 200_000, 8, 6


def _data():
    r = np.random.default_rng(0)
    return r.standard_normal((BATCH, D - 1)), np.arange(BATCH, dtype=float) % 2


def _agent(kind, x, y):
    C = np.tril(np.full((STEPS, STEPS), 0.3)) + np.eye(STEPS)
    factor = {
        "identity": None,
        "antipgd": None,
        "banded": factors.Banded.from_matrix(np.tril(C) - np.tril(C, -3), 3),
        "dense": factors.Dense(C),
        "blt": factors.BLT((0.9, 0.5), (0.3, 0.2)),
    }[kind]
    mech = {"identity": "dp-dsgd"}.get(kind, kind)
    plan = make_plan(
        mech,
        edgedp_topologies.parse("complete:3"),
        steps=STEPS,
        participation=Participation(STEPS, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
        factor=factor,
        task=TaskSpec(batch_size=BATCH),
    )
    secret = rng.seed_secret(0)
    agent = Agent(
        plan.share(0),
        model=LinearModel("logistic", D - 1),
        x=x,
        y=y,
        noise_key=rng.derive_key(secret, "n"),
        batch_key=rng.derive_key(secret, "b"),
        keep_gradient=False,
    )
    return agent, plan.factor.state_bytes(D) / (8 * D)


@pytest.mark.parametrize("kind", ["identity", "antipgd", "banded", "dense", "blt"])
def test_a_round_allocates_at_most_four_model_sized_arrays_plus_the_factor_state(kind, monkeypatch):
    """Two neighbours' messages sit in the inbox (they are the round's input, made by the
    test); the agent's own arrays at the peak — model, factor state and round temporaries —
    stay within 4 model-sized vectors plus the state. The per-example chunk is one
    example, as on a device from d = ``CHUNK_FLOATS`` (10⁶) on; below that it holds up to
    ``CHUNK_FLOATS`` floats."""
    monkeypatch.setattr(agent_mod, "CHUNK_FLOATS", D)
    x, y = _data()
    peers = {v: np.random.default_rng(v).standard_normal(D) * 1e-3 for v in (1, 2)}
    warm, _ = _agent(kind, x, y)  # the modules a round imports, loaded before measuring
    warm.begin_round()
    del warm
    tracemalloc.start()  # the agent's own arrays, from θ₀ and the factor's first state on
    try:
        agent, state_vectors = _agent(kind, x, y)
        for t in range(STEPS):
            agent.begin_round()
            agent.inbox.setdefault(t, {}).update(peers)
            agent.end_round()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    vectors = peak / (8 * D)
    allowed = 4 + state_vectors
    assert vectors <= allowed + 0.05, (kind, vectors, allowed)


def test_a_failed_round_regenerates_the_factor_state_and_the_run_is_unchanged(monkeypatch):
    """The rollback of a refused message rebuilds the noise stream from the key (the state
    of the round's start is no longer kept twice): same bits as a run that never failed."""
    runs = []
    check = NodeRound._check_finite
    for fail in (False, True):
        agent, _ = _agent("banded", *_data())
        peers = {v: np.full(D, 1e-3) for v in agent.neighbours}
        failed = []

        def refuse_once(self, *arrays, agent=agent, failed=failed, fail=fail):
            if fail and agent.round == 2 and not failed:
                failed.append(True)
                raise NonFiniteMessageError("injected")
            check(self, *arrays)

        monkeypatch.setattr(NodeRound, "_check_finite", refuse_once)
        for t in range(STEPS):
            try:
                agent.begin_round()
            except NonFiniteMessageError:
                assert agent.noise_state.step == t and agent.message is None
                agent.begin_round()
            agent.inbox.setdefault(t, {}).update(peers)
            agent.end_round()
        assert failed == ([True] if fail else [])
        runs.append(agent.theta.tobytes())
    assert runs[0] == runs[1]
