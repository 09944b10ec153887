"""Decentralized learning algorithms as pure update rules, one module each.

Every module exposes the same names: ``NAME``, ``TRUST_MODEL``, ``ACCOUNTANT``,
``check_plan(plan)`` and the round protocol the engines drive, ``init_state``, ``send``,
``receive`` and ``model`` (documented in :mod:`edgedp.algorithms._gossip`); ``combine``
(all nodes) and ``combine_node`` (one node) are the fixed-order mixing of the messages.
:data:`BY_MECHANISM` maps a plan's mechanism name to its module; callers pick a module
there and never branch on its type.
"""

from collections.abc import Mapping
from types import MappingProxyType

from edgedp.algorithms import (
    decor,
    dome,
    dp_dsgd,
    dpop,
    dsgd,
    mf_dsgd,
    muffliato,
    sr_gt,
    whisper,
    zipdl,
)
from edgedp.algorithms._gossip import StepContext

__all__ = [
    "BY_MECHANISM",
    "StepContext",
    "decor",
    "dome",
    "dp_dsgd",
    "dpop",
    "dsgd",
    "for_mechanism",
    "mf_dsgd",
    "muffliato",
    "sr_gt",
    "whisper",
    "zipdl",
]

#: Static, read-only mapping from mechanism name (as in a NoisePlan) to algorithm module.
BY_MECHANISM: Mapping[str, object] = MappingProxyType(
    {
        "dsgd": dsgd,
        "dp-dsgd": dp_dsgd,
        "antipgd": mf_dsgd,
        "banded": mf_dsgd,
        "blt": mf_dsgd,
        "dense": mf_dsgd,
        "dmf": mf_dsgd,
        "mafalda": mf_dsgd,
        "sr-gt": sr_gt,
        "dpop": dpop,
        "whisper": whisper,
        "decor": decor,
        "zipdl": zipdl,
        "muffliato": muffliato,
        "dome": dome,
    }
)


def for_mechanism(mechanism: str):
    """The algorithm module that runs ``mechanism``; ValueError naming the choices otherwise."""
    try:
        return BY_MECHANISM[mechanism]
    except KeyError:
        raise ValueError(
            f"Unknown mechanism={mechanism!r}; expected one of {sorted(BY_MECHANISM)}."
        ) from None
