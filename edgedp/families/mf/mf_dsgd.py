"""MF-D-SGD: Gaussian noise correlated in time by the plan's factor C_local (paper 000 Alg. 1).

Node u adds ``ν (C_local⁻¹ Z_u)[t]`` at step t, built from its own past normals only
(``C = C_local ⊗ I_n``), so the noise is local. AntiPGD (C_local = lower-triangular ones),
banded and any dense lower-triangular C_local run through this module; MAFALDA and D-MF are
the same rule with a planned C_local.

Trust model LDP: certified by :func:`edgedp.accounting.mf.ldp_guarantee` with sens(C_local)
under the plan's (k, b) participation (paper 000 Thm 7, Lemma 10).
"""

from __future__ import annotations

from edgedp import factors, mechanisms
from edgedp import gossip as _gossip
from edgedp.accounting import mf
from edgedp.families import mf as family

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
]

NAME = "mf-dsgd"
TRUST_MODEL = "LDP: every message is private against an attacker who sees all messages"


def check_plan(plan) -> None:
    """MF-D-SGD needs a lower-triangular temporal factor covering the plan's horizon."""
    steps = getattr(plan.factor, "steps", None)
    if steps is not None and steps < plan.steps:
        raise ValueError(f"Expected the factor's horizon {steps} >= steps={plan.steps}.")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this plan check.
RULES = _gossip.rules(check_plan)


def _mechanism(name: str, *, options=(), examples=None, **fields) -> mechanisms.Mechanism:
    """An MF-D-SGD mechanism: these rules, Gaussian noise, the μ-GDP matrix accountant;
    ``options`` are the factor's planner options (a planned factor), ``examples`` its
    examples besides the one at target ε with those options' values."""
    planned = fields.pop("planned", False)
    first = {**mechanisms.GAUSSIAN_EXAMPLE, **dict(options)}
    return mechanisms.Mechanism(
        name,
        RULES,
        family="mf",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=mf.plan_guarantee,
        traits=family.MfTraits(planned=planned, factor_options=tuple(dict(options))),
        examples={name: first, **(examples or {})},
        **fields,
    )


#: The mechanisms these rules run (registered by :mod:`edgedp.families`): ``planned`` ones
#: get their factor from :mod:`edgedp.families.mf.factorization`.
MECHANISMS = (
    _mechanism("antipgd", factor=factors.AntiPGD),
    _mechanism("dmf", planned=True),
    _mechanism("mafalda", planned=True),
    _mechanism("banded", planned=True, options={"bandwidth": 2}),
    _mechanism(
        "blt",
        planned=True,
        options={"buffers": 2},
        examples={"blt-sigma": {"noise_multiplier": 1.5, "buffers": 2, "max_iterations": 30}},
    ),
    # a dense factor the caller computed (Python API only: no example plan by name)
    mechanisms.Mechanism(
        "dense",
        RULES,
        family="mf",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=mf.plan_guarantee,
        command_line=False,
    ),
)
