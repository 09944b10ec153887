"""A toy mechanism, whole: the one file a new mechanism needs (tests/test_mechanisms.py).

D-SGD's round rules under another name with their own plan check, LDP Gaussian noise
certified by the matrix accountant, and one example plan. Registering it is one line,
``mechanisms.register(toy_mechanism.MECHANISM)``; planning, certification, both engines,
``edgedp plan sgd --mechanism``, the attack table, leak runs, the audit's plans and the
example-driven tests then take it.
"""

import dataclasses

from edgedp import factors, mechanisms
from edgedp.accounting import mf
from edgedp.families.sgd import dsgd


def check_plan(plan) -> None:
    """The toy runs the identity factor only."""
    if plan.factor.kind != "identity":
        raise ValueError("test-sgd uses the identity factor")


RULES = dataclasses.replace(dsgd.RULES, check_plan=check_plan)
MECHANISM = mechanisms.Mechanism(
    "test-sgd",
    RULES,
    family="sgd",
    noise="gaussian",
    trust_model="LDP (test only)",
    accountant=mf.plan_guarantee,
    factor=factors.Identity,
    examples={"test-sgd": {"noise_multiplier": 2.0}},
)
