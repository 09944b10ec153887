"""Dense models with ``:gemm`` products: the clipped sum from per-layer factors.

Checked against the materialised path (per-example gradients, then clipping), for the
clipping bound the accountant assumes, for bitwise stacking and BLAS-thread independence,
and across the engines (batch = event = in-process agents = agent processes).
"""

import math

import numpy as np
import pytest

import edgedp_topologies
from edgedp import clipping, streams
from edgedp.accounting.participation import Participation
from edgedp.models import fused, model_digest
from edgedp.models.dense import DenseModel
from edgedp.models.spec import parse
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine
from firmware_py import deploy

ARCHS = ["softmax:3:gemm", "mlp:5-7-3:tanh:gemm", "mlp:5-16-8-4:relu,sigmoid:gemm"]


def _data(model, rng, lead=(), batch=9, scale=1.0):
    x = scale * rng.standard_normal((*lead, batch, model.features))
    y = rng.integers(0, model.spec.outputs, (*lead, batch)).astype(float)
    return x, y


def test_names_round_trip_and_share_the_exact_init():
    spec = parse("mlp:4-3-2:gemm", features=4)
    assert spec.name == "mlp:4-3-2:relu:gemm" and spec.products == "gemm"
    assert parse(spec.name, features=4) == spec
    exact = DenseModel(parse("mlp:4-3-2:relu", features=4))
    assert DenseModel(spec).init_params().tobytes() == exact.init_params().tobytes()
    assert DenseModel(spec).clips_fused and not exact.clips_fused
    with pytest.raises(ValueError, match="ending in ':gemm'"):
        exact.clipped_gradient_sum(exact.init_params(), np.ones((2, 4)), np.zeros(2), clip_norm=1)


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("clip_norm", [0.05, 1.0, np.inf])
def test_clipped_contributions_are_within_the_bound_and_sum_to_the_slow_way(name, clip_norm, rng):
    model = DenseModel(parse(name, features=5))
    theta = rng.standard_normal((2, model.dim))
    x, y = _data(model, rng, lead=(2,), batch=11, scale=3.0)
    factors = model.clip_factors(theta, x, y, clip_norm=clip_norm)
    grads = model.per_example_gradients(theta, x, y)  # the slow way: (2, 11, d)
    contributions = grads * factors[..., None]
    # the bound, exactly as the accountant assumes (float64 norm of each contribution)
    assert np.all(clipping.l2_norms(contributions) <= clip_norm)
    norms = clipping.l2_norms(grads)
    if clip_norm == 0.05:
        assert np.mean(norms > clip_norm) > 0.5  # most examples clipped: the bound is tight
    np.testing.assert_allclose(factors, np.minimum(1.0, clip_norm / norms), rtol=1e-11)
    got, hit, bad = model.clipped_gradient_sum(theta, x, y, clip_norm=clip_norm)
    slow, slow_hit, _ = clipping.clipped_sum(grads, clip_norm)
    # the same sum in another rounding order (plus the 2^-40 relative clip margin)
    np.testing.assert_allclose(got, contributions.sum(axis=-2), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got, slow, rtol=1e-10, atol=1e-12)
    assert hit.tolist() == slow_hit.tolist() and bad.tolist() == [0, 0]


def test_non_finite_or_overflowing_examples_add_zero(rng):
    model = DenseModel(parse("mlp:5-7-3:tanh:gemm", features=5))
    theta = rng.standard_normal(model.dim)
    x, y = _data(model, rng, batch=6)
    x[2, 1], x[4] = np.nan, 1e200  # a NaN input; an input whose norm² overflows
    got, hit, bad = model.clipped_gradient_sum(theta, x, y, clip_norm=1.0)
    keep = [0, 1, 3, 5]
    want = model.clipped_gradient_sum(theta, x[keep], y[keep], clip_norm=1.0)[0]
    assert int(bad) == 2 and np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert model.clip_factors(theta, x, y, clip_norm=1.0)[[2, 4]].tolist() == [0.0, 0.0]


def test_stacked_matmul_is_per_slice_gemm_bit_for_bit(rng):
    # numpy's stacked matmul must call the same BLAS routine on every slice as a 2-D call
    for m, k, n in [(14, 64, 128), (14, 128, 10), (1, 9, 4), (300, 64, 128), (10, 14, 64)]:
        a = rng.standard_normal((7, m, k))
        b = rng.standard_normal((7, n, k)).swapaxes(-1, -2)  # a transposed view, as Wᵀ
        stacked = fused.matmul(a, b)
        for g in range(7):
            assert stacked[g].tobytes() == np.matmul(a[g], b[g]).tobytes()
            assert stacked[g].tobytes() == fused.matmul(a[g : g + 1], b[g : g + 1])[0].tobytes()


@pytest.mark.parametrize("name", ARCHS)
def test_a_node_has_the_same_bits_alone_or_in_a_stack(name, rng):
    model = DenseModel(parse(name, features=5))
    theta = rng.standard_normal((2, 3, model.dim))
    x, y = _data(model, rng, lead=(2, 3))
    stacked = model.clipped_gradient_sum(theta, x, y, clip_norm=1.0)[0]
    alone = model.clipped_gradient_sum(theta[1, 2], x[1, 2], y[1, 2], clip_norm=1.0)[0]
    assert stacked[1, 2].tobytes() == alone.tobytes()
    shared = model.clipped_gradient_sum(theta[1, 2], x, y, clip_norm=1.0)[0]  # broadcast θ
    assert shared[1, 2].tobytes() == alone.tobytes()
    assert model.loss(theta, x, y)[1, 2] == model.loss(theta[1, 2], x[1, 2], y[1, 2])
    exact = DenseModel(parse(name.removesuffix(":gemm"), features=5))
    np.testing.assert_allclose(model.loss(theta, x, y), exact.loss(theta, x, y), rtol=1e-13)


def test_bits_do_not_depend_on_the_blas_thread_count(rng):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    model = DenseModel(parse("mlp:64-512-64-10:gemm", features=64))  # past OpenBLAS's
    theta = 0.1 * rng.standard_normal((3, model.dim))  # single-thread gemm size
    x, y = _data(model, rng, lead=(3,), batch=200)
    got = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            got.append(model.clipped_gradient_sum(theta, x, y, clip_norm=1.0)[0].tobytes())
            got.append(model.loss(theta, x, y).tobytes())
    assert got[0] == got[2] and got[1] == got[3]


# ---------------------------------------------------------------- the engines
BATCH = 14


def _digits_plan(model, n, steps, seed=5):
    data = datasets.partition(datasets.load("digits", seed=seed), n, seed=seed)
    per_epoch = data.local_size // BATCH
    plan = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse(f"ring:{n}"),
        steps=steps,
        participation=Participation(math.ceil(steps / per_epoch), per_epoch),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        seed=seed,
        topology_name=f"ring:{n}",
        task=TaskSpec(model=model, dataset="digits", batch_size=BATCH),
    )
    return plan, data


def test_batch_engine_equals_event_engine_and_agents(make_agents, run_rounds):
    plan, data = _digits_plan("mlp:64-128-10:relu:gemm", 6, steps=3)
    got = batch.run(plan, data, eval_every=3)
    assert got.clipped_fraction > 0  # the clipped sum did clip
    other, _ = _digits_plan("mlp:64-128-10:relu:blas", 6, steps=3)
    blas = batch.run(other, data, eval_every=3, keys=streams.RunKeys.simulation(plan))
    np.testing.assert_allclose(got.models, blas.models, rtol=1e-9, atol=1e-12)
    assert got.digests[0] != blas.digests[0]  # another rounding: another digest
    assert engine.run(plan, data).model_digest == got.digests[0]
    agents = make_agents(plan, data)
    run_rounds(agents, plan.steps, reverse=True)
    assert model_digest(np.stack([a.theta for a in agents])) == got.digests[0]


def test_agent_processes_equal_the_batch_engine(tmp_path):
    plan, data = _digits_plan("mlp:64-32-10:tanh:gemm", 3, steps=3, seed=21)
    (tmp_path / "run.plan").write_bytes(plan.to_bytes())
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run")
    assert run.wait(timeout=180) == [0] * 3
    assert model_digest(run.final_models()) == batch.run(plan, data).digests[0]
