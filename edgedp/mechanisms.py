"""The mechanism registry: every mechanism edgedp plans, certifies and runs, declared once.

Each algorithm module (:mod:`edgedp.algorithms`) declares its round rules as one
:class:`Rules` value and its :class:`Mechanism` records in ``MECHANISMS``; the package's
``__init__`` enters the explicit list :data:`edgedp.algorithms.BUILTIN` here
(:func:`install_builtin`) when edgedp is imported. The algorithms import this module,
never the reverse.
Everything that used to keep its own list of mechanism names derives it from here: the
plan's checks and :meth:`~edgedp.plan.NoisePlan.guarantee`, the planner's factorized set,
the command line's choices, scenario files and the simulator's attacks. Adding a mechanism
is one :func:`register` call with its round rules, noise kind and accountant (a built-in
one: its module and one entry in :data:`edgedp.algorithms.MODULES`).

>>> from edgedp import mechanisms
>>> mechanisms.get("mafalda").family, mechanisms.get("mafalda").planned
('mf', True)
>>> mechanisms.names(noise="laplace")
('sr-gt', 'dpop')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "FAMILIES",
    "NOISE_KINDS",
    "Guarantee",
    "Mechanism",
    "RoundRules",
    "Rules",
    "get",
    "install_builtin",
    "names",
    "register",
    "unregister",
]

#: Planner and command-line families: ``edgedp plan FAMILY``.
FAMILIES = ("sgd", "mf", "laplace", "cross", "dome")
#: What a node adds to its message: nothing, Gaussian noise from the plan's factor and ν, or
#: the Laplace schedule of paper 004.
NOISE_KINDS = ("none", "gaussian", "laplace")


@runtime_checkable
class RoundRules(Protocol):
    """The round protocol every engine drives (:mod:`edgedp.algorithms._gossip`)."""

    def init_state(self, theta0: Any) -> Any: ...

    def send(self, state: Any, ctx: Any) -> Any: ...

    def receive(self, state: Any, weights: Any, gathered: Any, ctx: Any) -> Any: ...

    def model(self, state: Any) -> Any: ...

    def check_plan(self, plan: Any) -> None: ...

    def message_bound(self, share: Any, *, dim: int, theta0: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Rules:
    """A mechanism's round rules as one value (satisfies :class:`RoundRules`): each
    algorithm module builds its ``RULES`` from functions, and a new mechanism may reuse
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
    plans :class:`~edgedp.accounting.laplace.PureGuarantee` (pure ε, δ = 0).
    """

    @property
    def steps(self) -> int: ...

    def epsilon(self, delta: float) -> float: ...

    def delta(self, epsilon: float) -> float: ...


@dataclass(frozen=True, slots=True)
class Mechanism:
    """One mechanism: its name in a plan, its rules, noise, planner family and accountant.

    Attributes:
      name: the plan's ``mechanism`` string (part of the plan's bytes: never rename one).
      rules: the round rules (a :class:`Rules` value, or any object satisfying
        :class:`RoundRules`).
      family: one of :data:`FAMILIES` (``edgedp plan FAMILY``, the planner that builds it).
      noise: one of :data:`NOISE_KINDS`.
      trust_model: the attacker its accountant's guarantee holds against.
      accountant: ``accountant(plan, steps_done=None) -> Guarantee``, re-derived from the
        plan's factor or schedule (never from stored numbers).
      factor: the temporal factor it fixes (a no-argument builder), or None when the
        planner or caller supplies one.
      default_factor: the factor used when none is supplied (a builder), else None.
      planned: its factor comes from :mod:`edgedp.planning.factorization`.
      sketchable: a ``dome`` plan may carry its cross-agent noise in the sketched space.
      command_line: ``edgedp plan FAMILY`` can build it (False: only the Python API, e.g. a
        dense factor the caller computed).
      attack: the name of the algorithm-specific reconstruction attack the simulator's
        leakage runs use against it (``edgedp_sim.attacks.ATTACKS``); the default is the
        update inversion of the D-SGD family.
      correlated: its noise is correlated across agents by a planned covariance R̃ (family
        cross): ε per trust model (eavesdropper, insider, neighbourhood) and the cross-agent
        linear-Gaussian attack apply; False for node-private cross-agent noise.
      shared_seed: part of its noise may come from a seed all agents share (known to an
        honest-but-curious coalition of nodes).
      message_noise: its nodes add noise to each outgoing message as well (Zip-DL).
      gossip_rounds: its plan's steps count K gossip rounds per gradient round (Muffliato).
      tracking: its Laplace schedule carries the gradient-tracking stepsize β (sr-gt).
      factor_options: the planner options its temporal factor takes (``bandwidth``,
        ``buffers``), spelled as ``edgedp plan`` flags with ``_`` for ``-``.
    """

    name: str
    rules: Any
    family: str
    noise: str
    trust_model: str
    accountant: Callable[..., Guarantee]
    factor: Callable[[], Any] | None = None
    default_factor: Callable[[], Any] | None = None
    planned: bool = False
    sketchable: bool = False
    command_line: bool = True
    attack: str = "update-inversion"
    correlated: bool = False
    shared_seed: bool = False
    message_noise: bool = False
    gossip_rounds: bool = False
    tracking: bool = False
    factor_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower():
            raise ValueError(f"Expected a lower-case mechanism name, got {self.name!r}.")
        if self.family not in FAMILIES:
            raise ValueError(f"Unknown family={self.family!r}; expected one of {FAMILIES}.")
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
        cross_only = ("correlated", "shared_seed", "message_noise", "gossip_rounds")
        if self.family != "cross" and any(getattr(self, f) for f in cross_only):
            raise ValueError(f"{self.name}: {cross_only} describe cross-agent noise only.")
        if self.tracking and self.noise != "laplace":
            raise ValueError(f"{self.name}: tracking describes a Laplace schedule.")

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
        if self.correlated:
            return "an eavesdropper on every link (no pairwise secret or shared seed)"
        return "every attacker (all messages seen: LDP)"


_REGISTRY: dict[str, Mechanism] = {}
_BUILTIN_INSTALLED = False


def install_builtin(builtin: tuple[Mechanism, ...]) -> None:
    """Enter the built-in mechanisms, once: ``edgedp/__init__.py`` calls it with
    :data:`edgedp.algorithms.BUILTIN` when the package is imported, so this module names
    no mechanism and imports no algorithm (the algorithms import it)."""
    global _BUILTIN_INSTALLED
    if _BUILTIN_INSTALLED:
        raise RuntimeError("The built-in mechanisms are already installed.")
    taken = [m.name for m in builtin if m.name in _REGISTRY]
    if taken:
        raise RuntimeError(f"Built-in mechanism names registered before: {taken}.")
    _REGISTRY.update((m.name, m) for m in builtin)
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
    """Add ``mechanism``; ValueError when its name is taken."""
    if mechanism.name in _loaded():
        raise ValueError(f"Mechanism {mechanism.name!r} is already registered.")
    _REGISTRY[mechanism.name] = mechanism
    return mechanism


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


def names(
    *,
    family: str | tuple[str, ...] | None = None,
    noise: str | None = None,
    planned: bool | None = None,
    sketchable: bool | None = None,
    command_line: bool | None = None,
    correlated: bool | None = None,
) -> tuple[str, ...]:
    """Registered names, in registration order, filtered by the given fields."""
    families = (family,) if isinstance(family, str) else family
    return tuple(
        m.name
        for m in _loaded().values()
        if (families is None or m.family in families)
        and (noise is None or m.noise == noise)
        and (planned is None or m.planned == planned)
        and (sketchable is None or m.sketchable == sketchable)
        and (command_line is None or m.command_line == command_line)
        and (correlated is None or m.correlated == correlated)
    )
