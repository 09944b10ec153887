"""Decentralized learning algorithms as pure update rules, one module each.

Every module exposes the same names: ``NAME``, ``TRUST_MODEL``, ``check_plan(plan)``,
``RULES`` (a :class:`~edgedp.mechanisms.Rules` value: ``init_state``, ``send``, ``receive``,
``model``, ``check_plan`` and ``message_bound``, the round protocol the engines drive, see
:mod:`edgedp.algorithms._gossip`) and ``MECHANISMS``: the
:class:`~edgedp.mechanisms.Mechanism` records it runs. :data:`BUILTIN` lists them all, in
this order; :mod:`edgedp.mechanisms` starts its registry from it. :func:`for_mechanism` maps
a plan's mechanism name to its rules; callers pick them there and never branch on the
module.
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
from edgedp.algorithms.families import FAMILIES

__all__ = [
    "BUILTIN",
    "BY_MECHANISM",
    "FAMILIES",
    "MODULES",
    "StepContext",
    "for_mechanism",
]

#: The algorithm modules, in registration order.
MODULES = (dsgd, dp_dsgd, mf_dsgd, sr_gt, dpop, whisper, decor, zipdl, muffliato, dome)
#: Every built-in mechanism (the registry's first entries, in this order).
BUILTIN: tuple[mechanisms.Mechanism, ...] = tuple(m for mod in MODULES for m in mod.MECHANISMS)

#: Read-only mapping from the built-in mechanisms' names to their rules.
BY_MECHANISM: Mapping[str, mechanisms.RoundRules] = MappingProxyType(
    {m.name: m.rules for m in BUILTIN}
)


def for_mechanism(mechanism: str) -> mechanisms.RoundRules:
    """The rules that run ``mechanism``; ValueError naming the choices."""
    return mechanisms.get(mechanism).rules
