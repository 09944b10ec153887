"""Initial states of the simulated nodes: the model's common init, or random per node and trial.

Paper 004 (§6, Table 4) draws every agent's initial state x_i(0) ~ N(0, I) afresh in every
Monte Carlo trial; the engines otherwise start every node at the model's ``init_params()``.
``spec`` is ``"model"`` (default) or ``"normal"`` / ``"normal:STD"``: x_i(0) = STD · z with z
the standard normals of the keyed stream :meth:`edgedp.streams.RunKeys.initial` (node,
trial) — reproducible, bound to the plan and run like every other stream, and independent
of the noise and batch streams. The initial state is not part of a plan: it does not
change the plan hash, and the privacy guarantees hold for every initial state (paper 004
Definition 2 quantifies over x(0)).

>>> parse("normal:0.5"), parse("model")
(0.5, None)
"""

from __future__ import annotations

import math

import numpy as np

from edgedp import rng, runtime, streams

__all__ = ["SPECS", "parse", "states"]

#: Accepted forms of an initial-state spec (``normal`` takes an optional ``:STD``).
SPECS = ("model", "normal", "normal:STD")


def parse(spec: str) -> float | None:
    """The std of a ``normal[:STD]`` spec, or None for ``model`` (ValueError otherwise)."""
    text = str(spec).strip()
    if text == "model":
        return None
    head, _, tail = text.partition(":")
    if head == "normal":
        try:
            std = float(tail) if tail else 1.0
        except ValueError:
            std = math.nan
        if math.isfinite(std) and std > 0:
            return std
    raise ValueError(
        f"initial_state = {spec!r}: expected 'model', 'normal' or 'normal:STD' with STD > 0."
    )


def states(
    spec: str,
    keys: streams.RunKeys,
    *,
    nodes: int,
    dim: int,
    trials: int = 1,
    first_trial: int = 0,
) -> np.ndarray | None:
    """``(trials, nodes, dim)`` initial states for ``spec``, or None for ``"model"``.

    >>> from edgedp.rng import seed_secret
    >>> k = streams.RunKeys(seed_secret(0), "ab" * 32, "simulation")
    >>> a = states("normal", k, nodes=2, dim=3, trials=2)
    >>> b = states("normal", k, nodes=2, dim=3, trials=1, first_trial=1)
    >>> a.shape, bool(np.array_equal(a[1], b[0]))
    ((2, 2, 3), True)
    """
    std = parse(spec)
    if std is None:
        return None
    # rng.gaussian(node_key(keys, "initial", u, trial=first_trial + i), 0, (dim,)) per (i, u)
    stack = runtime.initial_keys(keys, nodes=nodes, trials=trials, first_trial=first_trial)
    return std * rng.stacked(stack, 0, (dim,), lambda g: g.standard_normal((dim,)))
