"""Checkpoints hold no noise that can be regenerated from the key.

The attack this closes: for correlated factors a checkpoint held the factor's buffers (the
raw normals of past steps, or correlated outputs), so a local process that read it could
subtract the noise from public messages. Snapshots now hold the round and the model state;
the factor's state is regenerated on resume, bit for bit.
"""

import numpy as np
import pytest

import edgedp_topologies
from edgedp import _codec, factors
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import datasets

GRAPH = edgedp_topologies.parse("ring:4")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 4, seed=3)
T = 10
FACTORS = {
    "antipgd": None,
    "banded": factors.Banded.from_matrix(
        np.tril(np.ones((T, T))) - np.tril(np.ones((T, T)), -3), 3
    ),
    "blt": factors.BLT((0.9, 0.4), (0.3, 0.1)),
    "dense": factors.Dense(np.tril(np.ones((T, T))) + np.eye(T)),
}


def _plan(mechanism):
    factor = FACTORS[mechanism]
    return make_plan(
        mechanism,
        GRAPH,
        steps=T,
        participation=Participation(T, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        seed=4,
        task=TaskSpec(dataset="synthetic-logistic"),
        **({} if factor is None else {"factor": factor}),
    )


@pytest.mark.parametrize("mechanism", sorted(FACTORS))
def test_snapshots_hold_no_noise_and_resume_bit_for_bit(mechanism, make_agents, run_rounds):
    p = _plan(mechanism)
    full = make_agents(p, DATA)
    run_rounds(full, T)
    part = make_agents(p, DATA)
    run_rounds(part, 6)
    for a in part:
        snap = a.snapshot()
        assert "noise_buffers" not in snap
        blob = _codec.encode(snap)
        secrets = [a.noise.draw(t) for t in range(a.round)] + list(a.noise_state.buffers)
        for x in secrets:  # no normal of a past step and no factor buffer, not even a part
            assert x.tobytes()[:64] not in blob
            assert (a.noise.std * x).tobytes()[:64] not in blob
    fresh = make_agents(p, DATA)
    for a, b in zip(fresh, part, strict=True):
        a.restore(_codec.decode(_codec.encode(b.snapshot())))  # through the file format
    run_rounds(fresh, T - 6)
    assert [a.theta.tobytes() for a in fresh] == [a.theta.tobytes() for a in full]
