"""Shared test configuration: one deterministic hypothesis profile and small fixtures."""

import edgedp._numerics  # noqa: F401  (before numpy: the dispatch every edgedp process uses)

# isort: split
import numpy as np
import pytest
from hypothesis import settings

from edgedp import models, streams
from edgedp.agent import Agent

settings.register_profile("edgedp", derandomize=True, database=None, deadline=None, max_examples=40)
settings.load_profile("edgedp")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def _in_process_agents(plan, data, **agent_kw):
    keys = streams.RunKeys.simulation(plan)
    model = models.for_task(plan.task, data.features)
    return [
        Agent(
            plan.share(u),
            model=model,
            x=data.x[u],
            y=data.y[u],
            **keys.agent(u, plan.share(u).neighbours),
            **agent_kw,
        )
        for u in range(plan.n)
    ]


@pytest.fixture
def make_agents():
    """``make_agents(plan, data, **agent_kw)``: one in-process Agent per node, keyed from the
    plan seed the way the simulators key them (noise, batches, cross-agent pairs)."""
    return _in_process_agents


def _run_rounds(agents, rounds, *, reverse=False, drop=None):
    for _ in range(rounds):
        outs = [a.begin_round() for a in agents]
        sends = [(o, a.node, v) for o, a in zip(outs, agents, strict=True) for v in o.recipients]
        for o, u, v in reversed(sends) if reverse else sends:
            if drop is None or not drop(o.round, u, v):
                frames = [bytes(f) for f in o.frames_for(v)]  # this recipient's alone:
                # even nodes keep them as the daemon does (owned, read-only), odd ones copy
                assert agents[v].receive(frames, authenticated_sender=u, owned=v % 2 == 0)
        for a in agents:
            a.end_round()


@pytest.fixture
def run_rounds():
    """``run_rounds(agents, rounds, *, reverse=False, drop=None)``: deliver every message in
    process (last sent first if ``reverse``), asserting each is accepted; ``drop(round,
    sender, recipient)`` loses a message."""
    return _run_rounds
