"""One golden plan hash and one golden model digest per mechanism.

Refactors of planning, the plan format, the engines or the command line must leave both
unchanged: a plan's hash is what devices verify and what results cite, and the digest of
the models after a short run is what the engines' bitwise equivalence rests on. Plans are
built through the Python API (the same code path as ``edgedp plan``) from each
mechanism's first registry example (a 6-node ring, 6 steps, batches of 4); the event
engine on an ideal network must give the batch engine's digest. Change a value here only
together with a changelog entry saying why plans or models changed.
"""

import pytest

from edgedp import api, mechanisms

#: mechanism -> (plan hash, model digest) of its first example (its registry record's
#: ``examples[name]``, planned in :data:`edgedp.mechanisms.EXAMPLE_FRAME`).
GOLDEN = {
    "dsgd": ("24e2014df308b5de", "1fc37bb03003bae5"),
    "dp-dsgd": ("8324a9ae270c8808", "846c494a5bf84654"),
    "antipgd": ("6652f3008c8360a2", "d6b16210bf107477"),
    "dmf": ("a75306466d23debe", "e47b89b97c3ca257"),
    "mafalda": ("3d68b19aaf814570", "769168509b8f9d20"),
    "banded": ("0620b0e958995ecd", "ef6e21566e4611d6"),
    "blt": ("3e55f80e22bf3b08", "f6f2f38fce165a24"),
    "sr-gt": ("c8c0000c291f8b3f", "bc32bfad5d70fb8a"),
    "dpop": ("c3f1c8fd5f31cdf7", "103ccce1eb0d98ce"),
    "whisper": ("42aa7e750efd712f", "30ce037df30a7d6e"),
    "decor": ("081b03217bf69a0b", "ac6cc4057a68cce5"),
    "zipdl": ("b050469523dc0c2a", "36f9db2c55a8db61"),
    "muffliato": ("0823e7daf9da8d2b", "06869f86d0dfa6cb"),
    "dome": ("a6ed804522318684", "538f5e8f7428f52a"),
}


@pytest.mark.parametrize("mechanism", sorted(GOLDEN))
def test_plan_hash_and_model_digest_are_golden(mechanism):
    plan_hash, digest = GOLDEN[mechanism]
    options = mechanisms.get(mechanism).examples[mechanism]
    plan = api.make_plan(mechanism, **mechanisms.EXAMPLE_FRAME, **options)
    assert plan.plan_hash[:16] == plan_hash
    batch = api.simulate(plan, engine="batch")
    assert batch.model_digests[0][:16] == digest
    event = api.simulate(plan, engine="event")
    assert event.model_digests == batch.model_digests
