"""Decentralized learning algorithms as pure update rules, one module each.

Every module exposes the same names: ``NAME``, ``TRUST_MODEL``, ``check_plan(plan)``, the
round protocol the engines drive, ``init_state``, ``send``, ``receive`` and ``model``
(documented in :mod:`edgedp.algorithms._gossip`), and ``MECHANISMS``: the
:class:`~edgedp.mechanisms.Mechanism` records it runs, which importing this package
registers (:mod:`edgedp.mechanisms`). :func:`for_mechanism` maps a plan's mechanism name to
its rules; callers pick them there and never branch on the module.
"""

from collections.abc import Mapping
from types import MappingProxyType

from edgedp import mechanisms
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

for _module in (dsgd, dp_dsgd, mf_dsgd, sr_gt, dpop, whisper, decor, zipdl, muffliato, dome):
    for _m in _module.MECHANISMS:
        mechanisms.register(_m)

#: Read-only mapping from the built-in mechanisms' names to their rules (modules).
BY_MECHANISM: Mapping[str, object] = MappingProxyType(
    {name: mechanisms.get(name).rules for name in mechanisms.names()}
)


def for_mechanism(mechanism: str):
    """The rules (algorithm module) that run ``mechanism``; ValueError naming the choices."""
    return mechanisms.get(mechanism).rules
