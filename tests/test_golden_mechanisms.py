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
    "dsgd": ({}, "9a43b7ddbee6c5b0", "911f0752b4f92528"),
    "dp-dsgd": ({"target_epsilon": 4.0, **DELTA}, "9714c4adb5ab7fea", "bc17a97221a6747d"),
    "antipgd": ({"target_epsilon": 4.0, **DELTA}, "06658330e1b810f3", "e593b9e53d6fc5f9"),
    "dmf": ({"target_epsilon": 4.0, **DELTA}, "18658c370030ee5c", "a48a6eb9c13e1b85"),
    "mafalda": ({"target_epsilon": 4.0, **DELTA}, "330fdab1822a14b1", "08c2561681781786"),
    "banded": (
        {"target_epsilon": 4.0, "bandwidth": 2, **DELTA},
        "51e40c2308e6107f",
        "0a480b4e46ebb6df",
    ),
    "blt": ({"target_epsilon": 4.0, "buffers": 2, **DELTA}, "6691b59338964490", "ddd9521aeec99864"),
    "sr-gt": (
        {"target_epsilon": 1.0, "gamma": 0.001, "beta": 1000, "q1": 0.97, "q2": 0.98},
        "3f61b6e4631c7870",
        "9a5e8d33b06239df",
    ),
    "dpop": (
        {"target_epsilon": 1.0, "gamma": 0.001, "q1": 0.97, "q2": 0.98},
        "4c63a4342c625ef5",
        "52c7bd86f54370a9",
    ),
    "whisper": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "da3f80f13215aad7",
        "ba01ca2cc688b7f9",
    ),
    "decor": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "5725bb1afaa8ae65",
        "daf60ccbd4e5dc56",
    ),
    "zipdl": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "e0fbdaec83b81ef2",
        "cf1c561488a47915",
    ),
    "muffliato": (
        {"target_epsilon": 4.0, "clip_norm": 0.1, **DELTA},
        "2e0c8752b2755b46",
        "90ad0823cebc0153",
    ),
    "dome": (
        {"target_epsilon": 4.0, "sketch_dim": 8, **DELTA},
        "2e84d01f720fad2e",
        "9942def05924d4db",
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
