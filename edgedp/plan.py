"""NoisePlan: everything the nodes of a run need, versioned, hashed and certified.

A plan is an immutable description (CONVENTIONS C2): the topology and its gossip table, the
horizon T, the participation schema, the temporal factor, the noise multiplier σ, the clip
norm Δ, the learning rate, the task it was planned for (:class:`~edgedp.task.TaskSpec`) and
a simulation seed. It is a record with two typed axes (:mod:`edgedp.plan_axes`): what a
node adds (:class:`~edgedp.plan_axes.NoiseKind`) and what a message is
(:class:`~edgedp.plan_axes.MessageKind`); the per-family sections (``laplace``,
``cross_agent``, ``sketch``) are typed fields that belong to exactly one point of that grid.
Its hash is the SHA-256 of its canonical msgpack encoding, computed once; neighbours compare
hashes before they talk. Loading a plan re-certifies it (:mod:`edgedp.certification`): the
sensitivity is recomputed by the accountant from the factor and must equal the stored one,
so a tampered or stale plan is refused; devices do it without T×T matrices, and a value
only the Gram matrix can check is accepted between two cheap bounds only in a plan signed
by the device's trusted planning key. A plan too large for the device (``max_memory``) is
refused before its factor is built (:mod:`edgedp.footprint`).

Every plan states the adjacency its guarantee is for (``adjacency``; CONVENTIONS, DESIGN §6).
Gaussian plans certify **zero-out** adjacency: one example of one node is replaced by one
whose gradient is zero at every step. The batch schedule (:func:`batch_schedule`) depends on
the local dataset size, so removing an example would reshuffle the other examples' batches:
add/remove adjacency is not what these plans certify. Replacing one example by any other
doubles the sensitivity (2Δ per participation): ``replace_one_mu`` = 2μ. Laplace plans
state the adjacency of their schedule (zero-out, replace-one or problem).

Every plan states the δ its ε is reported at (``delta`` in (0, 1)): the δ it was calibrated
to (``target_epsilon`` then records the ε, checked on load), else the δ given when planned
(default :data:`DEFAULT_DELTA`). Reports, commands, the API and a device's budget use it
unless asked for another δ; Laplace plans are pure ε, ``delta`` is their PLD line's.
Version 3 (this module) adds both to version 2, whose files are refused (they do not say
which δ their ε is at: re-create them with ``edgedp plan``), as version 1 files are.

A private mechanism never runs without noise: a plan of a noisy mechanism whose σ is 0
(or whose Laplace ε is ∞) is refused when loaded; only ``dsgd`` is noise-free by name.
Each device receives only its :class:`~edgedp.node_share.NodeShare` (:meth:`NoisePlan.share`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgedp import _codec, _validate, bounds, certification, factors, mechanisms, signing, topology
from edgedp.accounting import gdp, mf
from edgedp.accounting.participation import Participation
from edgedp.families.cross import noise as cross_mod
from edgedp.families.dome import sketch as sketch_mod
from edgedp.families.laplace import accounting as laplace_acc
from edgedp.node_share import NodeShare
from edgedp.plan_axes import MessageKind, NoiseKind, axes
from edgedp.step_size import StepSizeChoice
from edgedp.task import TaskSpec, batch_schedule  # batch_schedule: checked against a plan

__all__ = [
    "ADJACENCIES",
    "DEFAULT_DELTA",
    "PLAN_VERSION",
    "NodeShare",
    "NoisePlan",
    "TaskSpec",
    "batch_schedule",
    "make_plan",
]

PLAN_VERSION = certification.PLAN_VERSION

#: Adjacencies a plan can certify (module docstring); Gaussian plans certify zero-out.
ADJACENCIES = laplace_acc.ADJACENCIES
GAUSSIAN_ADJACENCY = certification.GAUSSIAN_ADJACENCY
#: The δ a plan is reported at when planned without one (from σ, or pure-ε Laplace).
DEFAULT_DELTA = certification.DEFAULT_DELTA


@dataclass(frozen=True, slots=True, eq=False)
class NoisePlan:
    """A certified plan. Build it with :func:`make_plan`; load it with :meth:`from_bytes`."""

    mechanism: str
    topology: str
    n: int
    edges: np.ndarray
    weighting: str
    mixing_index: np.ndarray
    mixing_weight: np.ndarray
    steps: int
    participation: Participation
    factor: Any
    noise_multiplier: float
    sensitivity: float
    sensitivity_exact: bool
    clip_norm: float
    learning_rate: float
    task: TaskSpec = field(default_factory=TaskSpec)
    seed: int = 0
    version: int = PLAN_VERSION
    laplace: laplace_acc.LaplaceSchedule | None = None
    cross_agent: cross_mod.CrossAgentSpec | None = None
    sketch: sketch_mod.SketchSpec | None = None
    adjacency: str = GAUSSIAN_ADJACENCY
    message_bound: float | None = None
    delta: float = DEFAULT_DELTA  # the δ its ε is reported at (module docstring)
    target_epsilon: float | None = None  # the ε its noise was calibrated to at ``delta``
    step_size: StepSizeChoice | None = None
    #: The two axes (:mod:`edgedp.plan_axes`), set once from the mechanism and the sections.
    noise_kind: NoiseKind = field(init=False, compare=False)
    message_kind: MessageKind = field(init=False, compare=False)
    _facts: Any = field(default=None, init=False, repr=False, compare=False)
    _hash: str | None = field(default=None, init=False, repr=False, compare=False)
    _certificate: Any = field(default=None, init=False, repr=False, compare=False)
    _gram: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        noise, message = axes(
            self.mechanism, laplace=self.laplace, cross_agent=self.cross_agent, sketch=self.sketch
        )
        object.__setattr__(self, "noise_kind", noise)
        object.__setattr__(self, "message_kind", message)

    @property
    def private(self) -> bool:
        """True when the plan adds noise (σ > 0, or a Laplace schedule with finite ε)."""
        if self.noise_kind is NoiseKind.LAPLACE:
            assert self.laplace is not None  # the axes require the section
            return self.laplace.private
        return self.noise_multiplier > 0

    @property
    def noise_std(self) -> float:
        """ν = σ · sens · Δ: the std of the normals each node feeds its temporal factor."""
        if self.noise_multiplier == 0:  # also when Δ = inf (unclipped Laplace plans)
            return 0.0
        return self.noise_multiplier * self.sensitivity * self.clip_norm

    @property
    def mu(self) -> float:
        """μ of the μ-GDP guarantee per example of any node (LDP), ``inf`` without noise."""
        return math.inf if self.noise_multiplier == 0 else 1.0 / self.noise_multiplier

    @property
    def replace_one_factor(self) -> float:
        """How much larger μ (Gaussian) or ε (Laplace) is under replace-one adjacency."""
        return 2.0 if self.adjacency == "zero-out" else 1.0

    def guarantee(self, *, steps_done: int | None = None) -> mechanisms.Guarantee:
        """Re-derive the guarantee with the mechanism's accountant (never from stored
        numbers): μ-GDP for Gaussian plans, pure ε for Laplace plans (DP-D-SGD family:
        :func:`~edgedp.accounting.mf.plan_guarantee`, cross-agent:
        :func:`~edgedp.families.cross.accounting.guarantee`, DOME:
        :func:`~edgedp.families.dome.accounting.guarantee`, sr-gt/dpop:
        :func:`~edgedp.families.laplace.accounting.plan_guarantee`)."""
        return mechanisms.get(self.mechanism).accountant(self, steps_done=steps_done)

    @property
    def certified_sensitivity(self) -> float | None:
        """The stored sensitivity when certification accepted it by bounds or signature
        (module docstring), None when the accountant recomputes it exactly."""
        return self._certificate

    def mixing_matrix(self) -> np.ndarray:
        W = np.zeros((self.n, self.n))  # noqa: N806 (paper letter)
        for u in range(self.n):
            for v, w in zip(self.mixing_index[u], self.mixing_weight[u], strict=True):
                W[u, v] += w
        return W

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "mechanism": self.mechanism,
            "topology": self.topology,
            "n": self.n,
            "edges": self.edges,
            "weighting": self.weighting,
            "mixing_index": self.mixing_index,
            "mixing_weight": self.mixing_weight,
            "steps": self.steps,
            "participation": [self.participation.k, self.participation.b],
            "factor": self.factor.to_dict(),
            "noise_multiplier": self.noise_multiplier,
            "sensitivity": self.sensitivity,
            "sensitivity_exact": self.sensitivity_exact,
            "clip_norm": self.clip_norm,
            "learning_rate": self.learning_rate,
            "task": self.task.to_dict(),
            "seed": self.seed,
            "adjacency": self.adjacency,
            "delta": self.delta,
            # only when present, so plans without it keep their hashes
            **({"laplace": self.laplace.to_dict()} if self.laplace is not None else {}),
            **({"cross_agent": self.cross_agent.to_dict()} if self.cross_agent else {}),
            **({"sketch": self.sketch.to_dict()} if self.sketch is not None else {}),
            **({"message_bound": self.message_bound} if self.message_bound is not None else {}),
            **({"target_epsilon": self.target_epsilon} if self.target_epsilon is not None else {}),
            **({"step_size": self.step_size.to_dict()} if self.step_size is not None else {}),
        }

    @property
    def plan_hash(self) -> str:
        """SHA-256 of the canonical encoding, computed once (``dataclasses.replace`` makes a
        new plan with its own). The plan's top-level arrays are made read-only then, so
        the cached hash cannot go stale by writing into them."""
        if self._hash is None:
            for a in (self.edges, self.mixing_index, self.mixing_weight):
                if isinstance(a, np.ndarray):
                    a.flags.writeable = False
            digest = hashlib.sha256(_codec.canonical_bytes(self.to_dict())).hexdigest()
            object.__setattr__(self, "_hash", digest)
        assert self._hash is not None
        return self._hash

    def to_bytes(self, *, signing_key: str | None = None) -> bytes:
        """The plan file; with ``signing_key`` (an Ed25519 planning key, hex) it carries the
        operator's signature of the plan hash (:mod:`edgedp.signing`)."""
        outer: dict[str, Any] = {"plan": self.to_dict(), "hash": self.plan_hash}
        if signing_key is not None:
            outer["signature"] = signing.sign(self.plan_hash, signing_key)
        return _codec.encode(outer)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NoisePlan:
        """The plan of a decoded :meth:`to_dict` (KeyError, TypeError or ValueError when a
        field is missing or malformed, PlanError when a section does not fit the axes).
        Not certified: load plan files with :meth:`from_bytes`."""
        k, b = d["participation"]
        return cls(
            mechanism=str(d["mechanism"]),
            topology=str(d["topology"]),
            n=int(d["n"]),
            edges=np.asarray(d["edges"]),
            weighting=str(d["weighting"]),
            mixing_index=np.asarray(d["mixing_index"]),
            mixing_weight=np.asarray(d["mixing_weight"]),
            steps=int(d["steps"]),
            participation=Participation(int(k), int(b)),
            factor=factors.from_dict(d["factor"]),
            noise_multiplier=float(d["noise_multiplier"]),
            sensitivity=float(d["sensitivity"]),
            sensitivity_exact=bool(d["sensitivity_exact"]),
            clip_norm=float(d["clip_norm"]),
            learning_rate=float(d["learning_rate"]),
            task=TaskSpec.from_dict(d["task"]),
            seed=int(d["seed"]),
            laplace=laplace_acc.LaplaceSchedule.from_dict(d["laplace"]) if "laplace" in d else None,
            cross_agent=(
                cross_mod.CrossAgentSpec.from_dict(d["cross_agent"]) if "cross_agent" in d else None
            ),
            sketch=sketch_mod.SketchSpec.from_dict(d["sketch"]) if "sketch" in d else None,
            adjacency=str(d["adjacency"]),
            message_bound=float(d["message_bound"]) if "message_bound" in d else None,
            delta=float(d["delta"]),
            target_epsilon=float(d["target_epsilon"]) if "target_epsilon" in d else None,
            step_size=StepSizeChoice.from_dict(d["step_size"]) if "step_size" in d else None,
        )

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        trusted_key: str | None = None,
        max_memory: int | None = None,
        gram: bool = False,
    ) -> NoisePlan:
        """Decode, check version, hash and signature, size, rebuild, and re-certify
        (:func:`edgedp.certification.load`, which documents the arguments)."""
        return certification.load(
            data, cls.from_dict, trusted_key=trusted_key, max_memory=max_memory, gram=gram
        )

    def with_step_size(self, learning_rate: float, choice: StepSizeChoice | None) -> NoisePlan:
        """This plan with another step size and how it was chosen (None: given); the
        guarantee does not depend on it, so the certificate carries over."""
        _validate.positive(learning_rate=learning_rate)
        out = replace(self, learning_rate=float(learning_rate), step_size=choice)
        object.__setattr__(out, "_certificate", self._certificate)
        object.__setattr__(out, "_gram", self._gram)
        return out

    def share(self, node: int) -> NodeShare:
        """What device ``node`` needs, and nothing about other nodes
        (:class:`edgedp.node_share.NodeShare`)."""
        return _share_of(self, node)

    def network_facts(self) -> bounds.NetworkFacts:
        """What every node needs for the bound on honest messages (:mod:`edgedp.bounds`);
        computed once per plan."""
        if self._facts is None:
            object.__setattr__(self, "_facts", bounds.network_facts(self))
        return self._facts


def _share_of(plan: NoisePlan, node: int) -> NodeShare:
    """What device ``node`` of ``plan`` needs, and nothing about other nodes."""
    _validate.integer(minimum=0, node=node)
    if node >= plan.n:
        raise ValueError(f"Expected node={node} < n={plan.n}.")
    return NodeShare(
        node=node,
        plan_hash=plan.plan_hash,
        version=plan.version,
        mechanism=plan.mechanism,
        steps=plan.steps,
        participation=plan.participation,
        factor=plan.factor,
        noise_std=plan.noise_std,
        clip_norm=plan.clip_norm,
        learning_rate=plan.learning_rate,
        neighbours=tuple(int(v) for v in plan.mixing_index[node]),
        weights=tuple(float(w) for w in plan.mixing_weight[node]),
        task=plan.task,
        laplace=plan.laplace,
        cross_agent=(
            None
            if plan.cross_agent is None
            else plan.cross_agent.node(
                node,
                edges=plan.edges,
                neighbours=plan.mixing_index[node],
                weights=plan.mixing_weight[node],
            )
        ),
        sketch=plan.sketch,
        tree=_aggregate_tree(plan),
        network=plan.network_facts(),
    )


def _aggregate_tree(plan: NoisePlan) -> Any:
    """The public spanning tree of an adaptive DOME basis (None otherwise)."""
    if plan.sketch is None or plan.sketch.basis != sketch_mod.ADAPTIVE:
        return None
    from edgedp.families.dome import sketch_adaptive

    return sketch_adaptive.spanning_tree(
        topology.neighbour_lists(plan.mixing_index, plan.mixing_weight)
    )


def make_plan(
    mechanism: str,
    graph: topology.Graph,
    *,
    steps: int,
    participation: Participation | None = None,
    clip_norm: float,
    learning_rate: float | None = None,
    laplace: laplace_acc.LaplaceSchedule | None = None,
    weighting: str = "metropolis-hastings",
    noise_multiplier: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    factor: Any = None,
    task: TaskSpec | None = None,
    seed: int = 0,
    topology_name: str | None = None,
    sketch: sketch_mod.SketchSpec | None = None,
    message_bound: float | None = None,
) -> NoisePlan:
    """Build and certify a plan.

    Exactly one of ``noise_multiplier`` (σ) or ``target_epsilon`` (with ``delta``) sets the
    noise, except for ``dsgd`` which has none. The sensitivity comes from the accountant
    (paper 000 Thm 7 under LDP), and the per-step noise std is ν = σ · sens · Δ. The plan
    records ``delta`` (default :data:`DEFAULT_DELTA`) and ``target_epsilon``.

    Laplace mechanisms (``sr-gt``, ``dpop``; paper 004) take ``laplace=LaplaceSchedule(...)``
    instead (it carries ε), no σ/ε/participation; ``learning_rate`` defaults to γ and
    must equal it; ``clip_norm`` may be ``inf`` (no clipping) with ``adjacency="problem"``.

    ``message_bound`` states the largest |entry| of an honest message; receivers reject
    larger ones. Without it the bound is derived from the plan (:mod:`edgedp.bounds`).
    """
    mech = mechanisms.get(mechanism)
    if mech.family == "cross":
        raise ValueError(
            f"mechanism={mechanism!r} plans correlated noise across agents: build it with "
            "edgedp.families.cross.planning.plan_cross_agent (or `edgedp plan`)."
        )
    _validate.integer(minimum=1, steps=steps)
    if delta is not None:
        _validate.open_unit(delta=delta)
    if mech.noise == "laplace":
        learning_rate = _laplace_rate(
            mech, laplace, learning_rate, noise_multiplier, target_epsilon
        )
        assert laplace is not None  # _laplace_rate refused a Laplace plan without one
        laplace_acc.check_task(laplace, clip_norm=clip_norm)
        participation = participation or Participation(steps, 1)
    else:
        if laplace is not None:
            raise ValueError(f"mechanism={mechanism!r} is Gaussian; laplace=... is for sr-gt/dpop.")
        if participation is None or learning_rate is None:
            raise ValueError(f"mechanism={mechanism!r} needs participation and learning_rate.")
        _validate.positive(clip_norm=clip_norm, learning_rate=learning_rate)
    if weighting not in topology.WEIGHTINGS:
        raise ValueError(
            f"Unknown weighting={weighting!r}; expected one of {sorted(topology.WEIGHTINGS)}."
        )
    factor = _factor_of(mech, factor)
    index, weight = topology.weighting_table(graph, weighting)  # no n × n matrix
    sigma, sens, exact = _noise(
        mech, factor, participation, steps, noise_multiplier, target_epsilon, delta
    )
    noisy = mech.noisy
    target = None if target_epsilon is None or not noisy else float(target_epsilon)
    task = (task or TaskSpec()).pinned()
    plan = NoisePlan(
        mechanism=mechanism,
        topology=topology_name or graph.name or f"graph:{graph.n}",
        n=graph.n,
        edges=np.asarray(graph.edges, dtype=np.int64).reshape(-1, 2),
        weighting=weighting,
        mixing_index=index,
        mixing_weight=weight,
        steps=steps,
        participation=participation,
        factor=factor,
        noise_multiplier=sigma,
        sensitivity=sens,
        sensitivity_exact=exact,
        clip_norm=float(clip_norm),
        learning_rate=float(learning_rate),
        task=task,
        seed=seed,
        laplace=laplace,
        sketch=sketch,
        adjacency=laplace.adjacency if laplace is not None else GAUSSIAN_ADJACENCY,
        message_bound=None if message_bound is None else float(message_bound),
        delta=DEFAULT_DELTA if delta is None else float(delta),
        target_epsilon=target,
    )
    certification.certify(plan, trusted=True)
    return plan


def _laplace_rate(mech, laplace, learning_rate, noise_multiplier, target_epsilon) -> float:
    """A Laplace plan's learning rate: its schedule's γ (the schedule carries ε too)."""
    if laplace is None:
        raise ValueError(f"mechanism={mech.name!r} needs laplace=LaplaceSchedule(...).")
    if noise_multiplier is not None or target_epsilon is not None:
        raise ValueError(
            f"mechanism={mech.name!r} takes its epsilon from the Laplace schedule; "
            "drop noise_multiplier/target_epsilon."
        )
    if learning_rate is None:
        learning_rate = laplace.gamma
    if learning_rate != laplace.gamma:
        raise ValueError(
            f"Expected learning_rate={learning_rate!r} to equal gamma={laplace.gamma!r} "
            "(the first stepsize) for Laplace plans."
        )
    return learning_rate


def _factor_of(mech: mechanisms.Mechanism, factor: Any) -> Any:
    """The temporal factor: the mechanism's own, else the caller's, else its default."""
    if mech.factor is not None:
        if factor is not None:
            raise ValueError(
                f"mechanism={mech.name!r} fixes its own temporal factor; do not pass one."
            )
        return mech.factor()
    if factor is None and mech.default_factor is not None:
        return mech.default_factor()
    if factor is None:
        raise ValueError(f"mechanism={mech.name!r} needs a temporal factor (factor=...).")
    return factor


def _noise(
    mech, factor, participation, steps, noise_multiplier, target_epsilon, delta
) -> tuple[float, float, bool]:
    """(σ, sensitivity, exact) from the accountant: zero for Laplace and noiseless plans."""
    if mech.noise == "laplace":
        return 0.0, 0.0, True
    if not mech.noisy:
        if noise_multiplier not in (None, 0.0) or target_epsilon is not None:
            raise ValueError(
                "mechanism='dsgd' adds no noise; drop --noise-multiplier/--target-eps."
            )
        return 0.0, 0.0, True
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ValueError("Give exactly one of noise_multiplier or target_epsilon (with delta).")
    if target_epsilon is not None:
        if delta is None:
            raise ValueError("target_epsilon needs delta.")
        noise_multiplier = gdp.noise_multiplier(target_epsilon, delta=delta)
    else:
        assert noise_multiplier is not None  # exactly one of the two was given
        _validate.positive(noise_multiplier=noise_multiplier)
    g = mf.planned_guarantee(factor, participation, float(noise_multiplier), steps)
    return float(g.noise_multiplier), float(g.sensitivity), bool(g.exact)
