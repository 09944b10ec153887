"""The noise a plan leaves in the final models, measured by the batch engine.

:func:`final_noise_variance` runs a plan's own update rules on zero gradients (every
per-example gradient replaced by 0 before clipping), so the final models are the noise
alone, carried through the mixing, the temporal factor, the cross-agent covariance and the
sketches exactly as in a run; the mean square of their coordinates, at step size 1, is the
s² of :func:`edgedp.planning.step_rule.final_noise_variance`, which computes it in closed
form where one exists and calls this function otherwise. The data are zeros of the task's
shape (no example is read) and the streams come from fixed keys that do not depend on the
plan's hash, so the value is a function of the plan's noise structure alone.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from edgedp import models, rng, streams
from edgedp_sim import batch
from edgedp_sim.churn import Faults
from edgedp_sim.datasets import FederatedData

__all__ = ["PROBE_RUN", "final_noise_variance"]

#: The run id of the probe's streams (never a simulation's or a device's).
PROBE_RUN = "noise-probe"
_PROBE_HASH = "0" * 64


def final_noise_variance(
    plan,
    *,
    local_size: int,
    features: int | None = None,
    trials: int | None = None,
    dropout: float = 0.0,
) -> float:
    """Mean over trials, nodes and coordinates of the squared final model at step size 1
    from the noise alone (module docstring); with ``dropout``, each node sits out each
    round with that probability (the batch engine's round masks, renormalised mixing).

    ``features`` defaults to the task's (model dimension from the dataset);
    ``trials`` to enough that trials × d ≥ 256 (at most 8, at least 2).
    """
    if features is None:
        from edgedp_sim import datasets

        features = datasets.load(plan.task.dataset, seed=0).x_train.shape[1]
    model = models.for_task(plan.task, features)
    if trials is None:
        trials = max(2, min(8, math.ceil(256 / model.dim)))
    unit = dataclasses.replace(plan, learning_rate=1.0, step_size=None)
    x = np.zeros((plan.n, local_size, features))
    y = np.zeros((plan.n, local_size))
    data = FederatedData(x, y, x[0, :1], y[0, :1], "probe")
    keys = streams.RunKeys(rng.seed_secret(plan.seed), _PROBE_HASH, PROBE_RUN)
    res = batch.run(
        unit,
        data,
        trials=trials,
        eval_every=plan.steps,
        keys=keys,
        gradient_transform=lambda step, point, sel, rows: np.zeros_like(rows),
        faults=Faults(dropout=dropout) if dropout else None,
        seed=plan.seed,
    )
    theta0 = model.init_params()
    return float(np.mean((res.models - theta0) ** 2))
