"""Dense models with ``:blas`` products: one BLAS gemv per example, the same bits everywhere.

The ``exact`` products (the default) are pinned by tests/test_models.py; here the ``blas``
variant is checked against an independent BLAS call per example, across batch sizes, node
stacks and BLAS thread counts, and across the engines (batch = event = in-process agents
= agent processes).
"""

import math

import numpy as np
import pytest

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.agent import CHUNK_FLOATS
from edgedp.models import for_task, model_digest
from edgedp.models.dense import DenseModel
from edgedp.models.spec import parse
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets, engine
from firmware_py import deploy

ARCHS = ["softmax:3:blas", "mlp:5-7-3:tanh:blas", "mlp:5-16-8-4:relu,sigmoid:blas"]


def _data(model, rng, lead=(), batch=9):
    x = rng.standard_normal((*lead, batch, model.features))
    y = rng.integers(0, model.spec.outputs, (*lead, batch)).astype(float)
    return x, y


def test_names_round_trip_and_share_the_exact_init():
    spec = parse("mlp:4-3-2:blas", features=4)
    assert spec.name == "mlp:4-3-2:relu:blas" and spec.architecture == "mlp:4-3-2:relu"
    assert parse(spec.name, features=4) == spec
    exact = DenseModel(parse("mlp:4-3-2:relu", features=4))
    assert DenseModel(spec).init_params().tobytes() == exact.init_params().tobytes()
    assert parse("softmax:4:blas", features=2).name == "softmax:4:blas"
    assert for_task(TaskSpec(model="mlp:3-1:blas", loss="bce"), 3).spec.products == "blas"
    with pytest.raises(ValueError, match="Unknown activation 'blas2'"):
        parse("mlp:4-3-2:blas2", features=4)


@pytest.mark.parametrize("name", ARCHS)
def test_each_example_is_one_gemv_of_its_own_row(name, rng):
    # independent implementation: numpy's dot of a matrix and one vector (cblas gemv)
    model = DenseModel(parse(name, features=5))
    theta = rng.standard_normal(model.dim)
    x, _ = _data(model, rng)
    params = model.spec.unflatten(theta)
    acts = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}
    acts["sigmoid"] = lambda z: np.exp(-np.logaddexp(0.0, -z))
    out = model.outputs(theta, x)
    for b in range(len(x)):
        h = x[b]
        for layer in range(len(params) // 2):
            z = np.dot(params[2 * layer], h) + params[2 * layer + 1]
            if layer < len(model.spec.activations):
                h = acts[model.spec.activations[layer]](z)
        assert out[b].tobytes() == z.tobytes()


@pytest.mark.parametrize("name", ARCHS)
def test_bits_do_not_depend_on_batch_size_stack_or_chunk(name, rng):
    model = DenseModel(parse(name, features=5))
    theta = rng.standard_normal((2, 3, model.dim))
    x, y = _data(model, rng, lead=(2, 3))
    stacked = model.per_example_gradients(theta, x, y)
    alone = model.per_example_gradients(theta[1, 2], x[1, 2], y[1, 2])
    assert stacked[1, 2].tobytes() == alone.tobytes()
    for lo, hi in [(0, 1), (3, 4), (2, 7), (8, 9)]:  # a device's chunks of the same batch
        part = model.per_example_gradients(theta[1, 2], x[1, 2, lo:hi], y[1, 2, lo:hi])
        assert part.tobytes() == alone[lo:hi].tobytes()
    exact = DenseModel(parse(name.removesuffix(":blas"), features=5))
    np.testing.assert_allclose(  # the same function, summed in another order (float64)
        alone, exact.per_example_gradients(theta[1, 2], x[1, 2], y[1, 2]), rtol=1e-12, atol=1e-14
    )


def test_gradients_match_finite_differences(rng):
    model = DenseModel(parse("mlp:5-7-3:tanh:blas", features=5))
    theta = 0.5 * rng.standard_normal(model.dim)
    x, y = _data(model, rng, batch=1)
    g = model.per_example_gradients(theta, x, y)[0]
    eps = 1e-6
    for j in rng.choice(model.dim, 12, replace=False):
        e = np.zeros(model.dim)
        e[j] = eps
        fd = (model.loss(theta + e, x, y) - model.loss(theta - e, x, y)) / (2 * eps)
        assert g[j] == pytest.approx(float(fd), abs=1e-7)


def test_bits_do_not_depend_on_the_blas_thread_count(rng):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    model = DenseModel(parse("mlp:64-512-64-10:blas", features=64))  # layers past gemv's
    theta = 0.1 * rng.standard_normal(model.dim)  # single-thread threshold (m·n ≥ 9216)
    x, y = _data(model, rng, batch=6)
    got = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            got.append(model.per_example_gradients(theta, x, y).tobytes())
    assert got[0] == got[1]


# ---------------------------------------------------------------- the engines
# d = 77,834: an agent clips CHUNK_FLOATS // d = 13 examples at a time (13 + 1 for a batch of
# 14), the batch engine runs the 14 in one call, one node per call (8.7 MB of gradients).
# d = 9,610: the batch engine runs 3 nodes per call (4 MiB // 1.1 MB), agents one each.
BIG, BATCH = "mlp:64-1024-10:relu:blas", 14


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


@pytest.mark.parametrize(
    "model, n", [(BIG, 4), ("mlp:64-128-10:relu:blas", 6), ("mlp:64-128-10:relu", 6)]
)
def test_batch_engine_equals_event_engine_and_agents(model, n, make_agents, run_rounds):
    plan, data = _digits_plan(model, n, steps=3)
    if model == BIG:
        assert CHUNK_FLOATS // for_task(plan.task, 64).dim == BATCH - 1
    got = batch.run(plan, data, eval_every=3)
    assert np.max(np.abs(got.models[0] - got.models[0, :1])) > 0  # the models moved
    assert engine.run(plan, data).model_digest == got.digests[0]
    agents = make_agents(plan, data)
    run_rounds(agents, plan.steps, reverse=True)
    assert model_digest(np.stack([a.theta for a in agents])) == got.digests[0]


def test_agent_processes_equal_the_batch_engine(tmp_path):
    plan, data = _digits_plan(BIG, 4, steps=3, seed=21)
    (tmp_path / "run.plan").write_bytes(plan.to_bytes())
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run")
    assert run.wait(timeout=180) == [0] * 4
    assert model_digest(run.final_models()) == batch.run(plan, data).digests[0]
