"""A minimal batch driver that hands every round to observers (probes, ground truth).

Temporary stand-in for the batch engine's observer hook: it runs the same steps as
:func:`sim.batch.run` — same keys, batch orders, clipping, noise source, ``send`` /
``receive`` and mixing table, so the final models have the same bits (tested) — without
evaluation, and calls ``observer.observe(RoundView)`` after each round's ``receive``. When
``sim.batch.run`` takes ``observers=``, callers switch to it and this module goes away.
Gaussian-noise plans only (the D-SGD family); Laplace plans need the engine's own context.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgedp import algorithms, clipping, models, rng
from edgedp.algorithms._gossip import StepContext
from edgedp.noise import NoiseSource, node_noise_key
from edgedp.plan import NoisePlan, batch_schedule
from sim.datasets import FederatedData
from sim.observers import RoundObserver, RoundView

__all__ = ["run"]


def run(
    plan: NoisePlan,
    data: FederatedData,
    observers: Sequence[RoundObserver],
    *,
    trials: int = 1,
    first_trial: int = 0,
) -> np.ndarray:
    """Run ``plan`` like :func:`sim.batch.run`, calling ``observers`` each round.

    Returns:
      The final models, ``(trials, nodes, d)``.
    """
    if data.nodes != plan.n:
        raise ValueError(f"Expected data for n={plan.n} nodes, got {data.nodes}.")
    algo = algorithms.for_mechanism(plan.mechanism)
    model = models.for_task(plan.task, data.features)
    d = model.dim
    batch, per_epoch = batch_schedule(plan, data.local_size)
    secret = rng.seed_secret(plan.seed)
    keys = np.empty((trials, plan.n), dtype=object)
    orders = np.empty((trials, plan.n, data.local_size), dtype=np.int64)
    for i, tr in enumerate(range(first_trial, first_trial + trials)):
        for u in range(plan.n):
            keys[i, u] = node_noise_key(secret, u, trial=tr)
            orders[i, u] = rng.permutation(rng.derive_key(secret, "batch", tr, u), data.local_size)
    source = NoiseSource(plan.factor, keys, d, plan.noise_std, memoize=plan.factor.kind == "dense")
    noise_state = source.init()
    theta = np.broadcast_to(model.init_params(), (trials, plan.n, d)).copy()
    node_idx = np.arange(plan.n)[None, :, None]
    alg_state = algo.init_state(theta)
    for t in range(plan.steps):
        slot = t % per_epoch
        sel = orders[:, :, slot * batch : (slot + 1) * batch]
        xb, yb = data.x[node_idx, sel], data.y[node_idx, sel]
        drawn: dict[str, np.ndarray | None] = {"gradient": None, "noise": None}

        def gradient(point, xb=xb, yb=yb, drawn=drawn):
            gsum, _ = clipping.clipped_sum(
                model.per_example_gradients(point, xb, yb), plan.clip_norm
            )
            drawn["gradient"] = gsum
            return gsum

        def noise(drawn=drawn):
            nonlocal noise_state
            if plan.noise_std == 0:
                return None
            drawn["noise"], noise_state = source.next(noise_state)
            return drawn["noise"]

        ctx = StepContext(t, plan.learning_rate, plan.clip_norm, batch, gradient, noise)
        before = alg_state
        alg_state, message = algo.send(alg_state, ctx)
        alg_state = algo.receive(
            alg_state, plan.mixing_weight, message[..., plan.mixing_index, :], ctx
        )
        view = RoundView(t, message, drawn["gradient"], drawn["noise"], before, batch)
        for obs in observers:
            obs.observe(view)
    return algo.model(alg_state)
