"""The batch engine against a node-by-node engine built from the same pure functions."""

import numpy as np
import pytest

import edgedp_topologies
from edgedp import clipping, rng, streams
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError
from edgedp.gossip import local_step, mix_node
from edgedp.models.linear import LinearModel
from edgedp.noise import NoiseSource
from edgedp.plan import TaskSpec, batch_schedule, make_plan
from edgedp_sim import batch, datasets

GRAPH = edgedp_topologies.parse("er:10:0.4:3")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=1), 10, seed=1)


def _plan(mechanism, steps=15, batch_size=0, participation=None, **kw):
    m = DATA.local_size
    bs = batch_size or m
    part = participation or Participation(-(-steps // (m // bs)), m // bs)
    noise = {} if mechanism == "dsgd" else {"noise_multiplier": 0.7}
    return make_plan(
        mechanism,
        GRAPH,
        steps=steps,
        participation=part,
        clip_norm=1.0,
        learning_rate=0.3,
        task=TaskSpec(dataset="synthetic-logistic", batch_size=batch_size),
        seed=5,
        **noise,
        **kw,
    )


def node_by_node(plan, data, trial=0):
    """Each node keeps its own state and noise stream; mixing uses only its plan share."""
    model = LinearModel(plan.task.model, data.features)
    keys = streams.RunKeys.simulation(plan)
    bs, per_epoch = batch_schedule(plan, data.local_size)
    shares = [plan.share(u) for u in range(plan.n)]
    sources = [
        NoiseSource(
            plan.factor,
            np.array(keys.noise(u, trial=trial), dtype=object),
            model.dim,
            s.noise_std,
        )
        for u, s in enumerate(shares)
    ]
    states = [src.init() for src in sources]
    orders = [rng.permutation(keys.batch(u, trial=trial), data.local_size) for u in range(plan.n)]
    theta = [model.init_params() for _ in range(plan.n)]
    for t in range(plan.steps):
        slot = t % per_epoch
        half = []
        for u, s in enumerate(shares):
            sel = orders[u][slot * bs : (slot + 1) * bs]
            g = model.per_example_gradients(theta[u], data.x[u, sel], data.y[u, sel])
            gsum, _, _ = clipping.clipped_sum(g, s.clip_norm)
            noise = None
            if s.noise_std > 0:
                noise, states[u] = sources[u].next(states[u])
            half.append(
                local_step(theta[u], gsum, noise, learning_rate=s.learning_rate, batch_size=bs)
            )
        theta = [mix_node(s.weights, [half[v] for v in s.neighbours]) for s in shares]
    return np.stack(theta)


@pytest.mark.parametrize("mechanism", ["dsgd", "dp-dsgd", "antipgd"])
@pytest.mark.parametrize("batch_size", [0, 8])
def test_batch_engine_equals_node_by_node_bitwise(mechanism, batch_size):
    p = _plan(mechanism, batch_size=batch_size)
    res = batch.run(p, DATA, trials=2, eval_every=5)
    for trial in range(2):
        ref = node_by_node(p, DATA, trial=trial)
        assert batch.model_digest(ref) == res.digests[trial]


def test_trials_are_independent_and_reproducible():
    p = _plan("dp-dsgd")
    both = batch.run(p, DATA, trials=2)
    second = batch.run(p, DATA, trials=1, first_trial=1)
    assert both.digests[1] == second.digests[0]
    assert both.digests[0] != both.digests[1]


def test_noise_free_run_reaches_consensus_and_learns():
    p = _plan("dsgd", steps=60)
    res = batch.run(p, DATA, eval_every=20)
    assert res.test_loss[-1][0] < 0.8 * res.test_loss[0][0]
    assert res.consensus_distance[-1][0] < 1e-2


def test_participation_must_cover_the_task():
    p = _plan("dp-dsgd", participation=Participation(1, 15))
    with pytest.raises(PlanError, match="participation"):
        batch.run(p, DATA)


def test_noise_is_what_the_plan_says():
    # with zero learning signal (clip tiny), the mean model's drift is the mean noise:
    # one step of DP-D-SGD from 0 gives θ = −η·W·(g + ν z)/B; check the variance of ν z/B.
    p = _plan("dp-dsgd", steps=1)
    res = batch.run(p, DATA, trials=200)
    eta, bs = p.learning_rate, DATA.local_size
    W = p.mixing_matrix()
    pred_var = (eta * p.noise_std / bs) ** 2 * np.sum(W**2, axis=1)  # per coordinate, per node
    centred = res.models - res.models.mean(axis=0)
    emp = centred.var(axis=0).mean(axis=1)
    np.testing.assert_allclose(emp, pred_var, rtol=0.25)  # 200 trials × d coords: ~5% sd
