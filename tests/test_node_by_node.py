"""Every mechanism whose noise is node-private, run node by node through the registry's round
rules only, gives the batch engine's bits.

The reference below is deliberately independent of the node runtime (:mod:`edgedp.runtime`),
which the batch engine, the Agent (devices, the event engine) and the daemon share: it
recomputes what that runtime decides another way, so a wrong key, batch slot or context in
the runtime shows up here instead of cancelling out. Each node keeps its own state, draws
its own noise from its own key with the per-stream generators (``NoiseSource`` on one key;
``rng.laplace`` per round, where the runtime draws a stack in bulk), takes its keys from
``RunKeys`` by label, its batch from its own permutation with the slot arithmetic written
out, and mixes exactly the messages of its plan share's neighbours, through
``mechanisms.get(name).rules`` (``init_state`` / ``send`` / ``receive`` / ``model``) with a
``StepContext`` it builds itself (the Laplace family's typed extra chosen by hand). It
runs every registry example of the sgd, mf and laplace families. Cross-agent (whisper, decor, zipdl,
muffliato) and sketched (dome) noise is drawn jointly over edges or in a shared basis:
tests/test_node_by_node_cross.py is their reference.
"""

import numpy as np
import pytest

from edgedp import api, clipping, mechanisms, models, rng, streams
from edgedp.gossip import LaplaceExtra, StepContext
from edgedp.noise import NoiseSource
from edgedp.plan import batch_schedule
from edgedp_sim import batch, scenarios

#: The families whose noise is node-private (the cross and dome families:
#: tests/test_node_by_node_cross.py).
FAMILIES = ("sgd", "mf", "laplace")
#: label -> (mechanism, options): every example of those families' registry records.
CASES = {label: (name, options) for label, name, options in mechanisms.examples(family=FAMILIES)}


def node_by_node(plan, data, trial: int) -> np.ndarray:
    rules = mechanisms.get(plan.mechanism).rules
    model = models.for_task(plan.task, data.features)
    keys = streams.RunKeys.simulation(plan)
    bs, per_epoch = batch_schedule(plan, data.local_size)
    shares = [plan.share(u) for u in range(plan.n)]
    noise_keys = [keys.noise(u, trial=trial) for u in range(plan.n)]
    sources = [
        NoiseSource(plan.factor, np.array(noise_keys[u], dtype=object), model.dim, s.noise_std)
        for u, s in enumerate(shares)
    ]
    noise_states = [src.init() for src in sources]
    orders = [rng.permutation(keys.batch(u, trial=trial), data.local_size) for u in range(plan.n)]
    states = [rules.init_state(model.init_params()) for _ in range(plan.n)]
    for t in range(plan.steps):
        contexts, messages = [], []
        for u, share in enumerate(shares):
            sel = orders[u][(t % per_epoch) * bs : (t % per_epoch + 1) * bs]
            x, y = data.x[u, sel], data.y[u, sel]

            def gradient(theta, x=x, y=y, clip=share.clip_norm):
                return clipping.clipped_sum(model.per_example_gradients(theta, x, y), clip)[0]

            def noise(u=u, share=share):
                if share.noise_std == 0 or plan.laplace is not None:
                    return None
                draw, noise_states[u] = sources[u].next(noise_states[u])
                return draw

            def laplace(scale, u=u, t=t):
                return rng.laplace(noise_keys[u], t, (model.dim,), scale=scale)

            ctx = StepContext(
                round=t,
                learning_rate=share.learning_rate,
                clip_norm=share.clip_norm,
                batch_size=bs,
                gradient=gradient,
                noise=noise,
                extra=None if plan.laplace is None else LaplaceExtra(laplace, share.laplace),
            )
            states[u], message = rules.send(states[u], ctx)
            contexts.append(ctx)
            messages.append(message)
        states = [
            rules.receive(states[u], share.weights, [messages[v] for v in share.neighbours], ctx)
            for (u, share), ctx in zip(enumerate(shares), contexts, strict=True)
        ]
    return np.stack([rules.model(s) for s in states])


@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_engine_equals_the_registry_node_by_node(case):
    mechanism, options = CASES[case]
    plan = api.make_plan(mechanism, **mechanisms.EXAMPLE_FRAME, **options)
    data = scenarios.from_plan(plan).data()
    res = batch.run(plan, data, trials=2, eval_every=plan.steps)
    for trial in range(2):
        ref = node_by_node(plan, data, trial)
        assert batch.model_digest(ref) == res.digests[trial], trial
    assert res.digests[0] != res.digests[1] or mechanism == "dsgd"


def test_a_dense_factor_plan_of_the_python_api_equals_node_by_node():
    """'dense' (a caller's lower-triangular C; Python API only) through the same reference."""
    import edgedp_topologies
    from edgedp import factors
    from edgedp.accounting.participation import Participation
    from edgedp.plan import TaskSpec, make_plan

    steps = 6
    C = np.tril(np.full((steps, steps), 0.25)) + np.eye(steps)  # noqa: N806 (paper letter)
    plan = make_plan(
        "dense",
        edgedp_topologies.parse("ring:6"),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.5,
        noise_multiplier=2.0,
        factor=factors.Dense(C),
        task=TaskSpec(batch_size=0),
        topology_name="ring:6",
    )
    data = scenarios.from_plan(plan).data()
    res = batch.run(plan, data, trials=2, eval_every=plan.steps)
    for trial in range(2):
        assert batch.model_digest(node_by_node(plan, data, trial)) == res.digests[trial], trial
    assert res.digests[0] != res.digests[1]
