"""The mechanism families, one package each, and the registry's explicit lists.

A family package holds everything of its mechanisms: the package's ``__init__`` declares the
:class:`~edgedp.mechanisms.Family` (``FAMILY``, with the traits its mechanisms may differ in
and the example options they share); one module per mechanism (or group of mechanisms that
run the same rules) holds the round rules; beside them its accountant and its planner.

- :mod:`~edgedp.families.sgd` — ``dsgd``, ``dp-dsgd``;
- :mod:`~edgedp.families.mf` — MF-D-SGD with every temporal factor, and its factor planners;
- :mod:`~edgedp.families.laplace` — ``sr-gt``, ``dpop``, their accountant and tuning;
- :mod:`~edgedp.families.cross` — ``whisper``, ``decor``, ``zipdl``, ``muffliato``, the
  cross-agent noise, its accountant and covariance planners;
- :mod:`~edgedp.families.dome` — ``dome``, its sketches and its accountant.

Every rules module exposes the same names: ``NAME``, ``TRUST_MODEL``, ``check_plan(plan)``,
``RULES`` (a :class:`~edgedp.mechanisms.Rules` value: ``init_state``, ``send``, ``receive``,
``model``, ``check_plan`` and ``message_bound``, the round protocol the engines drive, see
:mod:`edgedp.gossip`) and ``MECHANISMS``: the :class:`~edgedp.mechanisms.Mechanism` records
it runs. :data:`FAMILIES` and :data:`BUILTIN` are the lists :mod:`edgedp.mechanisms` starts
its registry from (``edgedp/__init__.py`` enters them), in this order. :func:`for_mechanism`
maps a plan's mechanism name to its rules; callers pick them there and never branch on the
module.
"""

from collections.abc import Mapping
from types import MappingProxyType

from edgedp import mechanisms
from edgedp.families import cross, dome, laplace, mf, sgd
from edgedp.families.cross import decor, muffliato, whisper, zipdl
from edgedp.families.dome import rules as dome_rules
from edgedp.families.laplace import dpop, sr_gt
from edgedp.families.mf import mf_dsgd
from edgedp.families.sgd import dp_dsgd, dsgd

__all__ = [
    "BUILTIN",
    "BY_MECHANISM",
    "FAMILIES",
    "MODULES",
    "for_mechanism",
]

#: The families, in the order of ``edgedp plan``'s subcommands.
FAMILIES: tuple[mechanisms.Family, ...] = (
    sgd.FAMILY,
    mf.FAMILY,
    laplace.FAMILY,
    cross.FAMILY,
    dome.FAMILY,
)
#: The rules modules, in registration order.
MODULES = (dsgd, dp_dsgd, mf_dsgd, sr_gt, dpop, whisper, decor, zipdl, muffliato, dome_rules)
#: Every built-in mechanism (the registry's first entries, in this order).
BUILTIN: tuple[mechanisms.Mechanism, ...] = tuple(m for mod in MODULES for m in mod.MECHANISMS)

#: Read-only mapping from the built-in mechanisms' names to their rules.
BY_MECHANISM: Mapping[str, mechanisms.RoundRules] = MappingProxyType(
    {m.name: m.rules for m in BUILTIN}
)


def for_mechanism(mechanism: str) -> mechanisms.RoundRules:
    """The rules that run ``mechanism``; ValueError naming the choices."""
    return mechanisms.get(mechanism).rules
