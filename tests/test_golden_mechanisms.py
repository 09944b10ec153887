"""One golden plan hash and one golden model digest per mechanism.

Refactors of planning, the plan format, the engines or the command line must leave both
unchanged: a plan's hash is what devices verify and what results cite, and the digest of
the models after a short run is what the engines' bitwise equivalence rests on. Plans are
built through the Python API (the same code path as ``edgedp plan``) on a 6-node ring, 6
steps, batches of 4; the event engine on an ideal network must give the batch engine's
digest. Change a value here only together with a changelog entry saying why plans or
models changed.
"""

import pytest

from edgedp import api

DELTA = {"delta": 1e-6}
CASES = {
    "dsgd": ({}, "24e2014df308b5de", "1fc37bb03003bae5"),
    "dp-dsgd": ({"target_epsilon": 4.0, **DELTA}, "89176cbf436514da", "f1261532b78bf24d"),
    "antipgd": ({"target_epsilon": 4.0, **DELTA}, "651812ef3b310fbe", "7c74abef6e9d228c"),
    "dmf": ({"target_epsilon": 4.0, **DELTA}, "695aa9fc29cfb580", "ed1194a5016138f5"),
    "mafalda": ({"target_epsilon": 4.0, **DELTA}, "b182624fd763ce7f", "5f2ea262d3150003"),
    "banded": (
        {"target_epsilon": 4.0, "bandwidth": 2, **DELTA},
        "013a946e499138bd",
        "5fb4ed7863ba6b63",
    ),
    "blt": ({"target_epsilon": 4.0, "buffers": 2, **DELTA}, "60a0859952210c55", "0272d5007130491f"),
    "sr-gt": (
        {"target_epsilon": 1.0, "gamma": 0.001, "beta": 1000, "q1": 0.97, "q2": 0.98},
        "c8c0000c291f8b3f",
        "bc32bfad5d70fb8a",
    ),
    "dpop": (
        {"target_epsilon": 1.0, "gamma": 0.001, "q1": 0.97, "q2": 0.98},
        "c3f1c8fd5f31cdf7",
        "103ccce1eb0d98ce",
    ),
    "whisper": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "0ab3aaa2512f5e9a",
        "0470fc3d56772d28",
    ),
    "decor": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "68901badd1d8b2e4",
        "cad9fdc7cee97f82",
    ),
    "zipdl": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "c2fb858048b52eed",
        "8f4f0e096113cb85",
    ),
    "muffliato": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "ff1dcbd0041412aa",
        "644d0102ec9dc94e",
    ),
    "dome": (
        {"target_epsilon": 4.0, "sketch_dim": 8, **DELTA},
        "d2f32c28d91b3b5d",
        "54e15ac73b72f58d",
    ),
}


@pytest.mark.parametrize("mechanism", sorted(CASES))
def test_plan_hash_and_model_digest_are_golden(mechanism):
    options, plan_hash, digest = CASES[mechanism]
    plan = api.make_plan(mechanism, "ring:6", steps=6, batch_size=4, **options)
    assert plan.plan_hash[:16] == plan_hash
    batch = api.simulate(plan, engine="batch")
    assert batch.model_digests[0][:16] == digest
    event = api.simulate(plan, engine="event")
    assert event.model_digests == batch.model_digests
