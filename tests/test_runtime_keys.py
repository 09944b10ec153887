"""The adversary and audit code ask the node runtime for a node's keys and batches: the
keys an attacker regenerates are the ones the node drew from, and the canary's example is
in the victim's batch exactly in the canary's rounds."""

import re
from pathlib import Path

import numpy as np
import pytest

import edgedp
from edgedp import models, runtime, streams
from edgedp.agent import Agent
from edgedp_sim import attacks, scenarios
from edgedp_sim import canary as canary_mod

ROOT = Path(__file__).parents[1]


def _plan(mechanism="decor", **kw):
    return edgedp.make_plan(mechanism, "ring:6", steps=6, noise_multiplier=1.0, **kw)


def test_each_node_key_is_the_one_node_keys_gives_and_the_streams():
    plan = _plan()
    keys = runtime.simulation_keys(plan)
    assert keys == streams.RunKeys.simulation(plan)
    for trial in (0, 3):
        for u in range(plan.n):
            neighbours = plan.share(u).neighbours
            node = runtime.node_keys(keys, u, neighbours, trial=trial)
            assert runtime.node_key(keys, "noise", u, trial=trial) == node.noise
            assert runtime.node_key(keys, "batch", u, trial=trial) == node.batch
            assert node.cross is not None
            assert runtime.node_key(keys, "shared", u, trial=trial) == node.cross.shared
            assert runtime.node_key(keys, "messages", u, trial=trial) == node.cross.messages
            for v in (v for v in neighbours if v != u):
                key = runtime.node_key(keys, "pair", u, trial=trial, peer=v)
                assert key == node.cross.pairs[v] == keys.pair(v, u, trial=trial)
            # the keys the streams module has always derived (digests unchanged)
            assert node.noise == keys.noise(u, trial=trial)
            assert node.batch == keys.batch(u, trial=trial)
            assert runtime.node_key(keys, "initial", u, trial=trial) == keys.initial(u, trial=trial)
    stack = runtime.initial_keys(keys, nodes=plan.n, trials=2, first_trial=1)
    assert stack[1, 4] == runtime.node_key(keys, "initial", 4, trial=2)
    with pytest.raises(ValueError, match="Unknown stream"):
        runtime.node_key(keys, "secret", 0)


def test_the_attacker_regenerates_the_noise_the_node_drew():
    """decor: an insider holding its edge with the victim regenerates that edge's term."""
    plan = _plan()
    share = plan.share(0)
    neighbour = next(v for v in share.neighbours if v != 0)
    got = attacks.known_cross_noise(
        plan, victim=0, neighbours=[neighbour], shared_seed=False, trials=2, steps=3, dim=4
    )
    assert got.shape == (2, 3, 4) and np.abs(got).sum() > 0
    none = attacks.known_cross_noise(
        plan, victim=0, neighbours=[], shared_seed=False, trials=2, steps=3, dim=4
    )
    assert not none.any()


def test_the_canary_example_is_in_the_victims_batch_exactly_in_its_rounds():
    plan = edgedp.make_plan(
        "dp-dsgd", "ring:4", steps=12, noise_multiplier=1.0, batch_size=64, seed=2
    )
    data = scenarios.from_plan(plan).data()
    model = models.for_task(plan.task, data.features)
    can = canary_mod.for_plan(plan, victim=1, local_size=data.local_size, dim=model.dim)
    assert can.per_epoch > 1 and len(can.steps) < plan.steps
    keys = runtime.simulation_keys(plan)
    share = plan.share(1)
    for trial in range(3):
        agent = Agent(
            share,
            model=model,
            x=data.x[1],
            y=data.y[1],
            **runtime.node_keys(keys, 1, share.neighbours, trial=trial).arguments(),
        )
        position = can.position(keys, trial, data.local_size)
        used = [t for t in range(plan.steps) if position in agent.schedule.select(t)]
        assert used == list(can.steps)


#: Modules that regenerate a node's streams: they ask edgedp.runtime, not RunKeys' methods.
KEY_USERS = ("attacks", "linear_view", "audit", "audit_view", "initial", "canary", "leak")


def test_attack_and_audit_code_derive_node_keys_through_the_runtime():
    direct = re.compile(
        r"RunKeys\.simulation|\bk(?:eys)?\.(?:noise|batch|initial|messages|shared|pair|cross|"
        r"per_trial)\(|slot \* self\.batch_size|range\(slot, "
    )
    found = [
        f"{name}.py:{i}"
        for name in KEY_USERS
        for i, line in enumerate((ROOT / "edgedp_sim" / f"{name}.py").read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert found == []
