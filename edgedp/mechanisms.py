"""The mechanism registry: every mechanism edgedp plans, certifies and runs, declared once.

A mechanism is one :class:`Mechanism` record (its round rules as a :class:`Rules` value,
noise kind, trust model, accountant, factor, attack and worked examples) in one
:class:`Family` — the planner that builds it (``edgedp plan FAMILY``). What the mechanisms
of one family may differ in is the family's: a family names a ``traits`` type (a frozen
dataclass, e.g. the cross-agent family's ``correlated``, ``shared_seed``, ...), and each of
its mechanisms carries one value of it. This module names no family and no mechanism: the
package's ``__init__`` enters the explicit lists :data:`edgedp.families.FAMILIES` and
:data:`edgedp.families.BUILTIN` (:func:`install_builtin`) when edgedp is imported; the
family packages import this module, never the reverse.
Everything that used to keep its own list of mechanism names derives it from here: the
plan's checks and :meth:`~edgedp.plan.NoisePlan.guarantee`, the planner's factorized set,
the command line's choices, scenario files, the simulator's attacks and the tests' cases
(each record's ``examples``). Adding a mechanism is one :func:`register` call (a built-in
one: its rules module in its family's package and one entry in
:data:`edgedp.families.MODULES`).

>>> from edgedp import mechanisms
>>> mechanisms.get("mafalda").family, mechanisms.get("mafalda").has("planned")
('mf', True)
>>> mechanisms.names(noise="laplace")
('sr-gt', 'dpop')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EXAMPLE_FRAME",
    "GAUSSIAN_EXAMPLE",
    "NOISE_KINDS",
    "Family",
    "Guarantee",
    "Mechanism",
    "NoTraits",
    "RoundRules",
    "Rules",
    "examples",
    "families",
    "family",
    "get",
    "install_builtin",
    "names",
    "register",
    "unregister",
]

#: What a node adds to its message: nothing, Gaussian noise from the plan's factor and ν, or
#: the Laplace schedule of paper 004.
NOISE_KINDS = ("none", "gaussian", "laplace")
#: Where a record's ``examples`` are planned: ``edgedp.make_plan(name, **EXAMPLE_FRAME,
#: **example)`` — a few seconds at most, for tests and docs.
EXAMPLE_FRAME: Mapping[str, Any] = MappingProxyType(
    {"topology": "ring:6", "steps": 6, "batch_size": 4}
)
#: Example options of a Gaussian mechanism (ε at δ), which several families' examples share.
GAUSSIAN_EXAMPLE: Mapping[str, Any] = MappingProxyType({"target_epsilon": 4.0, "delta": 1e-6})


@dataclass(frozen=True, slots=True)
class NoTraits:
    """The traits of a family whose mechanisms differ in nothing but their record."""


@dataclass(frozen=True, slots=True)
class Family:
    """A planner family (``edgedp plan NAME``) and what its mechanisms may differ in.

    ``traits`` is a frozen dataclass type whose fields, all defaulted, are the facts other
    code asks of a mechanism of this family (:meth:`Mechanism.has`, :func:`names`); each
    mechanism of the family carries one value of it (the defaults when it gives none).
    """

    name: str
    traits: type = NoTraits

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower():
            raise ValueError(f"Expected a lower-case family name, got {self.name!r}.")
        if not (isinstance(self.traits, type) and is_dataclass(self.traits)):
            raise TypeError(f"family {self.name}: traits must be a dataclass type.")
        try:
            self.traits()
        except TypeError:
            raise TypeError(f"family {self.name}: every trait needs a default.") from None

    @property
    def facts(self) -> tuple[str, ...]:
        """The names of its traits."""
        return tuple(f.name for f in fields(self.traits))


@runtime_checkable
class RoundRules(Protocol):
    """The round protocol every engine drives (:mod:`edgedp.gossip`)."""

    def init_state(self, theta0: Any) -> Any: ...

    def send(self, state: Any, ctx: Any) -> Any: ...

    def receive(self, state: Any, weights: Any, gathered: Any, ctx: Any) -> Any: ...

    def model(self, state: Any) -> Any: ...

    def check_plan(self, plan: Any) -> None: ...

    def message_bound(self, share: Any, *, dim: int, theta0: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Rules:
    """A mechanism's round rules as one value (satisfies :class:`RoundRules`): each
    rules module builds its ``RULES`` from functions, and a new mechanism may reuse
    another's and change one (``dataclasses.replace(dsgd.RULES, check_plan=...)``)."""

    init_state: Callable[[Any], Any]
    send: Callable[[Any, Any], Any]
    receive: Callable[[Any, Any, Any, Any], Any]
    model: Callable[[Any], Any]
    check_plan: Callable[[Any], None]
    message_bound: Callable[..., Any]


@runtime_checkable
class Guarantee(Protocol):
    """What an accountant returns: ε at a given δ and δ at a given ε, for ``steps`` rounds.

    Gaussian plans return :class:`~edgedp.accounting.mf.LDPGuarantee` (μ-GDP), Laplace
    plans :class:`~edgedp.families.laplace.accounting.PureGuarantee` (pure ε, δ = 0).
    """

    @property
    def steps(self) -> int: ...

    def epsilon(self, delta: float) -> float: ...

    def delta(self, epsilon: float) -> float: ...


@dataclass(frozen=True, slots=True)
class Mechanism:
    """One mechanism: its name in a plan, its rules, noise, family, accountant and examples.

    Attributes:
      name: the plan's ``mechanism`` string (part of the plan's bytes: never rename one).
      rules: the round rules (a :class:`Rules` value, or any object satisfying
        :class:`RoundRules`).
      family: the name of its :class:`Family` (``edgedp plan FAMILY``, the planner that
        builds it).
      noise: one of :data:`NOISE_KINDS`.
      trust_model: the attacker its accountant's guarantee holds against.
      accountant: ``accountant(plan, steps_done=None) -> Guarantee``, re-derived from the
        plan's factor or schedule (never from stored numbers).
      factor: the temporal factor it fixes (a no-argument builder), or None when the
        planner or caller supplies one.
      default_factor: the factor used when none is supplied (a builder), else None.
      command_line: ``edgedp plan FAMILY`` can build it (False: only the Python API, e.g. a
        dense factor the caller computed).
      attack: the name of the algorithm-specific reconstruction attack the simulator's
        leakage runs use against it (``edgedp_sim.attacks.ATTACKS``); the default is the
        update inversion of the D-SGD family.
      traits: a value of its family's ``traits`` type (None: the family's defaults, filled
        in when it is registered).
      examples: label -> ``edgedp.make_plan`` options of a small plan of it in
        :data:`EXAMPLE_FRAME`, the first labelled with its name; the tests take their cases
        from here, so a new mechanism brings its own.
    """

    name: str
    rules: Any
    family: str
    noise: str
    trust_model: str
    accountant: Callable[..., Guarantee]
    factor: Callable[[], Any] | None = None
    default_factor: Callable[[], Any] | None = None
    command_line: bool = True
    attack: str = "update-inversion"
    traits: Any = None
    examples: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower():
            raise ValueError(f"Expected a lower-case mechanism name, got {self.name!r}.")
        if self.noise not in NOISE_KINDS:
            raise ValueError(f"Unknown noise={self.noise!r}; expected one of {NOISE_KINDS}.")
        if not isinstance(self.rules, RoundRules):
            raise TypeError(
                f"{self.name}: rules must provide init_state, send, receive, model, "
                "check_plan and message_bound (edgedp.mechanisms.RoundRules)."
            )
        if not callable(self.accountant):
            raise TypeError(f"{self.name}: accountant must be callable(plan, steps_done=None).")
        if self.factor is not None and self.default_factor is not None:
            raise ValueError(f"{self.name}: give factor or default_factor, not both.")
        if self.examples and next(iter(self.examples)) != self.name:
            raise ValueError(f"{self.name}: the first example is labelled with its name.")

    def has(self, fact: str) -> bool:
        """True when its family has the trait ``fact`` and this mechanism has it set (False
        for a mechanism of a family without it); ValueError for a fact no family has."""
        _check_facts((fact,))
        return bool(getattr(self.traits, fact, False))

    @property
    def accountant_name(self) -> str:
        """The accountant's dotted name (what reports print)."""
        a = self.accountant
        return f"{getattr(a, '__module__', '?')}.{getattr(a, '__qualname__', repr(a))}"

    @property
    def noisy(self) -> bool:
        """True when its plans must carry noise (a private mechanism never runs without)."""
        return self.noise != "none"

    @property
    def attacker(self) -> str:
        """Who the plan's own ε holds against, in words (what every report names beside ε):
        every attacker for node-private noise, the eavesdropper for noise correlated
        across agents (insiders are accounted separately), nobody without noise."""
        if not self.noisy:
            return "none (no noise)"
        if self.has("correlated"):
            return "an eavesdropper on every link (no pairwise secret or shared seed)"
        return "every attacker (all messages seen: LDP)"


_FAMILIES: dict[str, Family] = {}
_FACTS: set[str] = set()  # every registered family's trait names
_REGISTRY: dict[str, Mechanism] = {}
_BUILTIN_INSTALLED = False


def _entered(mechanism: Mechanism, known: Mapping[str, Family]) -> Mechanism:
    """``mechanism`` checked against its family, its traits filled in."""
    fam = known.get(mechanism.family)
    if fam is None:
        raise ValueError(
            f"{mechanism.name}: unknown family={mechanism.family!r}; expected one of "
            f"{tuple(known)}."
        )
    if mechanism.traits is None:
        return replace(mechanism, traits=fam.traits())
    if type(mechanism.traits) is not fam.traits:
        raise TypeError(
            f"{mechanism.name}: traits must be a {fam.traits.__name__} (family {fam.name}), "
            f"got {type(mechanism.traits).__name__}."
        )
    return mechanism


def install_builtin(builtin_families: tuple[Family, ...], builtin: tuple[Mechanism, ...]) -> None:
    """Enter the built-in families and mechanisms, once: ``edgedp/__init__.py`` calls it
    with :data:`edgedp.families.FAMILIES` and :data:`edgedp.families.BUILTIN` when the
    package is imported, so this module names no mechanism and imports no rules (the
    family packages import it)."""
    global _BUILTIN_INSTALLED
    if _BUILTIN_INSTALLED:
        raise RuntimeError("The built-in mechanisms are already installed.")
    known = {f.name: f for f in builtin_families}
    if len(known) != len(builtin_families):
        raise RuntimeError("Two built-in families share a name.")
    entered = [_entered(m, known) for m in builtin]
    if len({m.name for m in entered}) != len(entered):
        raise RuntimeError("Two built-in mechanisms share a name.")
    _FAMILIES.update(known)
    _FACTS.update(fact for fam in known.values() for fact in fam.facts)
    _REGISTRY.update((m.name, m) for m in entered)
    _BUILTIN_INSTALLED = True


def _loaded() -> dict[str, Mechanism]:
    """The registry; RuntimeError when it is asked before the package entered its
    built-in mechanisms (a module looking a mechanism up while edgedp is imported)."""
    if not _BUILTIN_INSTALLED:
        raise RuntimeError(
            "The mechanism registry was asked before edgedp installed its built-in "
            "mechanisms: look mechanisms up when called, not while modules are imported."
        )
    return _REGISTRY


def register(mechanism: Mechanism) -> Mechanism:
    """Add ``mechanism`` to its (registered) family and return the entered record (its
    traits filled in); ValueError when its name is taken or its family unknown, TypeError
    when its traits are not its family's."""
    if mechanism.name in _loaded():
        raise ValueError(f"Mechanism {mechanism.name!r} is already registered.")
    entered = _entered(mechanism, _FAMILIES)
    _REGISTRY[mechanism.name] = entered
    return entered


def unregister(name: str) -> None:
    """Remove a registered mechanism (tests that register their own)."""
    _loaded().pop(name, None)


def get(name: str) -> Mechanism:
    """The mechanism called ``name``; ValueError naming the choices otherwise."""
    try:
        return _loaded()[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown mechanism={name!r}; expected one of {sorted(_loaded())}."
        ) from None


def families() -> tuple[str, ...]:
    """The registered families' names, in registration order."""
    _loaded()
    return tuple(_FAMILIES)


def family(name: str) -> Family:
    """The family called ``name``; ValueError naming the choices otherwise."""
    _loaded()
    try:
        return _FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown family={name!r}; expected one of {tuple(_FAMILIES)}.") from None


def _check_facts(facts) -> None:
    unknown = sorted(set(facts) - _FACTS)
    if unknown:
        raise ValueError(f"Unknown traits {unknown}; the families have {sorted(_FACTS)}.")


def names(
    *,
    family: str | tuple[str, ...] | None = None,
    noise: str | None = None,
    command_line: bool | None = None,
    **traits: Any,
) -> tuple[str, ...]:
    """Registered names, in registration order, filtered by the given fields and traits (a
    trait filter keeps only mechanisms of the families that have it, e.g.
    ``names(sketchable=True)``)."""
    families = (family,) if isinstance(family, str) else family
    _check_facts(traits)
    missing = object()
    return tuple(
        m.name
        for m in _loaded().values()
        if (families is None or m.family in families)
        and (noise is None or m.noise == noise)
        and (command_line is None or m.command_line == command_line)
        and all(getattr(m.traits, k, missing) == v for k, v in traits.items())
    )


def examples(**filters: Any) -> tuple[tuple[str, str, Mapping[str, Any]], ...]:
    """(label, mechanism, options) of every example of the mechanisms ``names(**filters)``
    gives, in registration order: the tests' cases."""
    return tuple(
        (label, name, options)
        for name in names(**filters)
        for label, options in get(name).examples.items()
    )
