"""NoisePlan: everything the nodes of a run need, versioned, hashed and certified.

A plan is an immutable description (CONVENTIONS C2): the topology and its gossip table, the
horizon T, the participation schema, the temporal factor, the noise multiplier σ, the clip
norm Δ, the learning rate, the task it was planned for and a simulation seed. Its hash is
the SHA-256 of its canonical msgpack encoding; neighbours compare hashes before they talk.
Loading a plan re-certifies it: the sensitivity is recomputed by the accountant from the
factor and must equal the stored one, so a tampered or stale plan is refused. Devices do
it without T×T matrices (:mod:`edgedp.accounting.factor_sensitivity`: O(T) or O(T·p²)
for identity, AntiPGD, banded and BLT factors). When the exact value needs the T×T Gram
matrix (a dense C with negative entries, or a signed BLT, beyond
``factor_sensitivity.DENSE_STEPS``) the device checks the stored value against two cheap
bounds on it: below the lower bound it is refused; at or above the upper bound it is
accepted (it is certainly enough noise); in between it is accepted only inside a plan
signed by the device's trusted planning key, whose planner computed it from the Gram
matrix (:func:`make_plan`). A plan too large for the device (``max_memory``) is refused
before its factor is built (:mod:`edgedp.footprint`).

Every plan states the adjacency its guarantee is for (``adjacency``; CONVENTIONS, DESIGN §6).
Gaussian plans certify **zero-out** adjacency: one example of one node is replaced by one
whose gradient is zero at every step. The batch schedule (:func:`batch_schedule`) depends on
the local dataset size, so removing an example would reshuffle the other examples' batches:
add/remove adjacency is not what these plans certify. Replacing one example by any other
doubles the sensitivity (2Δ per participation): ``replace_one_mu`` = 2μ. Laplace plans
state the adjacency of their schedule (zero-out, replace-one or problem).

Version 2 plans (this module) differ from version 1 in the adjacency they state and in
the Laplace noise scale (:mod:`edgedp.accounting.laplace`); version 1 files are refused.

A private mechanism never runs without noise: a plan of a noisy mechanism whose σ is 0
(or whose Laplace ε is ∞) is refused when loaded; only ``dsgd`` is noise-free by name.

Each device receives a :class:`NodeShare` — its own row of the gossip table and the noise
parameters — and nothing else (no other node's neighbours, no secrets).

Laplace mechanisms (``sr-gt``, ``dpop``; paper 004) carry an optional ``laplace`` section —
a :class:`~edgedp.accounting.laplace.LaplaceSchedule` (γ, β, q₁, q₂, δ, ε, adjacency) —
that is part of the encoding and hash only when present, so Gaussian plans keep their
hashes. Their Gaussian fields are inert: identity factor, σ = 0, participation (T, 1)
(every round is counted), and ``learning_rate`` holds γ = α₁ for display only — the
schedule is authoritative.

Cross-agent mechanisms (``whisper``, ``decor``, ``zipdl``, ``muffliato``; papers 001, 000
App. A.4–A.6) carry an optional ``cross_agent`` section — a
:class:`~edgedp.cross_agent.CrossAgentSpec` with the normalized covariance factors — likewise
encoded and hashed only when present; build them with
:func:`edgedp.planning.cross_agent.make_plan`. Their guarantee comes from
:mod:`edgedp.accounting.cross_agent` (``sensitivity`` is the Mahalanobis one, so
ν = σ·sens·Δ and μ = 1/σ as everywhere). Pairwise secrets and the shared seed are never in
a plan.

DOME plans (``dome``; paper 002) carry an optional ``sketch`` section — a
:class:`~edgedp.sketch.SketchSpec` (k, basis family, public seed, refresh, optimizer) — also
encoded and hashed only when present. Their guarantee is MF-D-SGD's for the plan's factor
(identity by default): :mod:`edgedp.accounting.dome`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgedp import (
    _codec,
    _validate,
    bounds,
    certification,
    factors,
    footprint,
    mechanisms,
    signing,
    topology,
)
from edgedp import cross_agent as cross_mod
from edgedp import sketch as sketch_mod
from edgedp.accounting import factor_sensitivity, gdp, mf
from edgedp.accounting import laplace as laplace_acc
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError

__all__ = [
    "ADJACENCIES",
    "PLAN_VERSION",
    "NodeShare",
    "NoisePlan",
    "TaskSpec",
    "batch_schedule",
    "make_plan",
]

PLAN_VERSION = 2

#: Adjacencies a plan can certify (module docstring); Gaussian plans certify zero-out.
ADJACENCIES = laplace_acc.ADJACENCIES
GAUSSIAN_ADJACENCY = certification.GAUSSIAN_ADJACENCY

# Mechanism names and kinds come from the registry (edgedp.mechanisms); these tuples are
# the built-in ones, for readers that list them.
#: Mechanisms whose noise is the Laplace schedule of paper 004 (Eq. 5), not a Gaussian factor.
LAPLACE_MECHANISMS = mechanisms.names(noise="laplace")
#: Mechanisms whose Gaussian noise is correlated across agents (a ``cross_agent`` section).
CROSS_AGENT_MECHANISMS = mechanisms.names(family="cross")
#: Cross-agent kinds a ``dome`` plan may carry: one noise vector per node and step, mixed
#: once (Zip-DL's per-message noise and Muffliato's K gossip rounds are not sketched).
SKETCHED_CROSS_KINDS = mechanisms.names(sketchable=True)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """The learning task a plan was made for (defaults: the demo's task).

    ``batch_size = 0`` means every step uses the node's whole local dataset, i.e. every
    example participates at every step: participation (T, 1).
    """

    model: str = "logistic"
    dataset: str = "digits-parity"
    partition: str = "iid"
    batch_size: int = 0
    loss: str = ""  # "" = the model's default (bce logistic, mse linear, ce softmax/mlp)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "model": self.model,
            "dataset": self.dataset,
            "partition": self.partition,
            "batch_size": self.batch_size,
        }
        if self.loss:  # only when set, so plans without a loss keep their hashes
            d["loss"] = self.loss
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskSpec:
        return cls(
            str(d["model"]),
            str(d["dataset"]),
            str(d["partition"]),
            int(d["batch_size"]),
            str(d.get("loss", "")),
        )

    def pinned(self) -> TaskSpec:
        """The task with an ``onnx:PATH`` model pinned to the file's hash (``models.pin_onnx``)."""
        if not self.model.startswith("onnx:"):
            return self
        from edgedp import models

        return replace(self, model=models.pin_onnx(self.model))


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
    _facts: Any = field(default=None, init=False, repr=False, compare=False)
    _hash: str | None = field(default=None, init=False, repr=False, compare=False)
    _certificate: Any = field(default=None, init=False, repr=False, compare=False)
    _gram: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def private(self) -> bool:
        """True when the plan adds noise (σ > 0, or a Laplace schedule with finite ε)."""
        if self.laplace is not None:
            return self.laplace.private
        return self.noise_multiplier > 0

    @property
    def noise_kind(self) -> str:
        """What nodes add: ``"none"``, ``"gaussian"`` or ``"laplace"`` (the registry's)."""
        return mechanisms.get(self.mechanism).noise

    @property
    def message_kind(self) -> str:
        """What a message is: ``"model"`` (a noised model), ``"sketch"`` (k coefficients,
        DOME) — either with noise correlated across agents when a ``cross_agent`` section
        is present (``"model+cross"``, ``"sketch+cross"``)."""
        kind = "sketch" if self.sketch is not None else "model"
        return kind + ("+cross" if self.cross_agent is not None else "")

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
        :func:`~edgedp.accounting.cross_agent.guarantee`, DOME:
        :func:`~edgedp.accounting.dome.guarantee`, sr-gt/dpop:
        :func:`~edgedp.accounting.laplace.plan_guarantee`)."""
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
            # only when present, so plans without it keep their hashes
            **({"laplace": self.laplace.to_dict()} if self.laplace is not None else {}),
            **({"cross_agent": self.cross_agent.to_dict()} if self.cross_agent else {}),
            **({"sketch": self.sketch.to_dict()} if self.sketch is not None else {}),
            **({"message_bound": self.message_bound} if self.message_bound is not None else {}),
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
    def from_bytes(
        cls,
        data: bytes,
        *,
        trusted_key: str | None = None,
        max_memory: int | None = None,
        gram: bool = False,
    ) -> NoisePlan:
        """Decode, check version, hash and signature, size, rebuild, and re-certify.

        A signature, when present, must verify; with ``trusted_key`` (the operator's planning
        public key, hex) the plan must be signed by it (PlanError otherwise). With
        ``max_memory`` (bytes) a plan whose load would need more is refused
        (:class:`edgedp.footprint.PlanTooLargeError`) before its factor is built. ``gram``
        (planner-side tools) recomputes a sensitivity that needs the T×T Gram matrix
        instead of checking it by bounds and signature.
        """
        footprint.check(2 * len(data), max_memory, f"a plan file of {len(data):,} bytes")
        try:
            outer = _codec.decode(data)
            d = outer["plan"]
            stored_hash = outer["hash"]
            envelope = outer.get("signature")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PlanError(f"Not a NoisePlan file: {exc}") from None
        if envelope is not None or trusted_key is not None:
            if envelope is None:
                raise PlanError(
                    "The plan is not signed, but this device trusts only plans signed by its "
                    "planning key (sign it with `edgedp sign PLAN --key planner.key`)."
                )
            try:
                signing.verify(envelope, str(stored_hash), trusted_key)
            except signing.SignatureError as exc:
                raise PlanError(str(exc)) from None
        if d.get("version") == 1:
            raise PlanError(
                "Plan version 1 predates stated adjacencies and the corrected Laplace noise "
                "scale; re-create it with `edgedp plan` (same arguments)."
            )
        if d.get("version") != PLAN_VERSION:
            raise PlanError(
                f"Plan version {d.get('version')!r} is not supported (expected {PLAN_VERSION})."
            )
        try:
            needed, what = footprint.plan_bytes(d, len(data))
        except (TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"Malformed NoisePlan field: {exc}") from None
        footprint.check(needed, max_memory, what)
        try:
            k, b = d["participation"]
            plan = cls(
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
                laplace=(
                    laplace_acc.LaplaceSchedule.from_dict(d["laplace"]) if "laplace" in d else None
                ),
                cross_agent=(
                    cross_mod.CrossAgentSpec.from_dict(d["cross_agent"])
                    if "cross_agent" in d
                    else None
                ),
                sketch=sketch_mod.SketchSpec.from_dict(d["sketch"]) if "sketch" in d else None,
                adjacency=str(d["adjacency"]),
                message_bound=float(d["message_bound"]) if "message_bound" in d else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"Malformed NoisePlan field: {exc}") from None
        if plan.plan_hash != stored_hash:
            raise PlanError("NoisePlan hash mismatch: the file was modified or corrupted.")
        certification.certify(plan, trusted=trusted_key is not None, gram=gram)
        if plan.mechanism != "dsgd" and not plan.private:
            raise PlanError(
                f"This {plan.mechanism} plan adds no noise (noise_multiplier 0 or epsilon inf): "
                "a private mechanism never runs without noise; plan 'dsgd' for a run "
                "without privacy."
            )
        return plan

    def share(self, node: int) -> NodeShare:
        """What device ``node`` needs, and nothing about other nodes."""
        _validate.integer(minimum=0, node=node)
        if node >= self.n:
            raise ValueError(f"Expected node={node} < n={self.n}.")
        return NodeShare(
            node=node,
            plan_hash=self.plan_hash,
            version=self.version,
            mechanism=self.mechanism,
            steps=self.steps,
            participation=self.participation,
            factor=self.factor,
            noise_std=self.noise_std,
            clip_norm=self.clip_norm,
            learning_rate=self.learning_rate,
            neighbours=tuple(int(v) for v in self.mixing_index[node]),
            weights=tuple(float(w) for w in self.mixing_weight[node]),
            task=self.task,
            laplace=self.laplace,
            cross_agent=(
                None
                if self.cross_agent is None
                else self.cross_agent.node(
                    node,
                    edges=self.edges,
                    neighbours=self.mixing_index[node],
                    weights=self.mixing_weight[node],
                )
            ),
            sketch=self.sketch,
            tree=self._aggregate_tree(),
            network=self.network_facts(),
        )

    def network_facts(self) -> bounds.NetworkFacts:
        """What every node needs for the bound on honest messages (:mod:`edgedp.bounds`);
        computed once per plan."""
        if self._facts is None:
            object.__setattr__(self, "_facts", bounds.network_facts(self))
        return self._facts

    def _aggregate_tree(self):
        """The public spanning tree of an adaptive DOME basis (None otherwise)."""
        if self.sketch is None or self.sketch.basis != sketch_mod.ADAPTIVE:
            return None
        from edgedp import sketch_adaptive
        from edgedp.algorithms import dome

        return sketch_adaptive.spanning_tree(dome._graph(self))


@dataclass(frozen=True, slots=True, eq=False)
class NodeShare:
    """One device's part of a plan: its padded mixing row and its noise parameters."""

    node: int
    plan_hash: str
    version: int
    mechanism: str
    steps: int
    participation: Participation
    factor: Any
    noise_std: float
    clip_norm: float
    learning_rate: float
    neighbours: tuple[int, ...]
    weights: tuple[float, ...]
    task: TaskSpec
    laplace: laplace_acc.LaplaceSchedule | None = None
    cross_agent: cross_mod.NodeCrossAgent | None = None
    sketch: sketch_mod.SketchSpec | None = None
    tree: Any = None  # adaptive DOME: the public spanning tree (edgedp.sketch_adaptive.Tree)
    network: Any = None  # edgedp.bounds.NetworkFacts: n, W's column sums, noise std per round


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
    (paper 000 Thm 7 under LDP), and the per-step noise std is ν = σ · sens · Δ.

    Laplace mechanisms (``sr-gt``, ``dpop``; paper 004) take ``laplace=LaplaceSchedule(...)``
    instead (it carries ε), no σ/ε/δ/participation; ``learning_rate`` defaults to γ and
    must equal it; ``clip_norm`` may be ``inf`` (no clipping) with ``adjacency="problem"``.

    ``message_bound`` states the largest |entry| of an honest message; receivers reject
    larger ones. Without it the bound is derived from the plan (:mod:`edgedp.bounds`).
    """
    mech = mechanisms.get(mechanism)
    if mech.family == "cross":
        raise ValueError(
            f"mechanism={mechanism!r} plans correlated noise across agents: build it with "
            "edgedp.planning.cross_agent.make_plan (or `edgedp plan`)."
        )
    builder, noisy, laplace_noise = mech.factor, mech.noisy, mech.noise == "laplace"
    _validate.integer(minimum=1, steps=steps)
    if laplace_noise:
        if laplace is None:
            raise ValueError(f"mechanism={mechanism!r} needs laplace=LaplaceSchedule(...).")
        if noise_multiplier is not None or target_epsilon is not None or delta is not None:
            raise ValueError(
                f"mechanism={mechanism!r} takes its epsilon from the Laplace schedule; "
                "drop noise_multiplier/target_epsilon/delta."
            )
        if learning_rate is None:
            learning_rate = laplace.gamma
        if learning_rate != laplace.gamma:
            raise ValueError(
                f"Expected learning_rate={learning_rate!r} to equal gamma={laplace.gamma!r} "
                "(the first stepsize) for Laplace plans."
            )
        participation = participation or Participation(steps, 1)
        laplace_acc.check_task(laplace, clip_norm=clip_norm)
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
    if builder is not None:
        if factor is not None:
            raise ValueError(
                f"mechanism={mechanism!r} fixes its own temporal factor; do not pass one."
            )
        factor = builder()
    elif factor is None and mech.default_factor is not None:
        factor = mech.default_factor()
    elif factor is None:
        raise ValueError(f"mechanism={mechanism!r} needs a temporal factor (factor=...).")
    index, weight = topology.weighting_table(graph, weighting)  # no n × n matrix
    if laplace_noise:
        sigma, sens, exact = 0.0, 0.0, True
    elif not noisy:
        if noise_multiplier not in (None, 0.0) or target_epsilon is not None:
            raise ValueError(
                "mechanism='dsgd' adds no noise; drop --noise-multiplier/--target-eps."
            )
        sigma, sens, exact = 0.0, 0.0, True
    else:
        if (noise_multiplier is None) == (target_epsilon is None):
            raise ValueError("Give exactly one of noise_multiplier or target_epsilon (with delta).")
        if target_epsilon is not None:
            if delta is None:
                raise ValueError("target_epsilon needs delta.")
            noise_multiplier = gdp.noise_multiplier(target_epsilon, delta=delta)
        else:
            assert noise_multiplier is not None  # exactly one of the two was given
            _validate.positive(noise_multiplier=noise_multiplier)
        g = _planned_guarantee(factor, participation, float(noise_multiplier), steps)
        sigma, sens, exact = float(g.noise_multiplier), float(g.sensitivity), bool(g.exact)
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
    )
    certification.certify(plan, trusted=True)
    return plan


#: Up to this horizon the planner certifies from the T×T Gram matrix even when the compact
#: route applies (the plans planned before it existed keep their bits and hashes).
PLANNER_GRAM_STEPS = 2048


def _planned_guarantee(factor, participation, sigma: float, steps: int) -> mf.LDPGuarantee:
    """The planner's guarantee: from the Gram matrix up to PLANNER_GRAM_STEPS or when the
    compact route has only bounds, else from the compact route (equal up to rounding)."""
    fs = None
    if steps > PLANNER_GRAM_STEPS:
        fs = factor_sensitivity.sensitivity(factor, participation, steps=steps)
    if fs is not None and fs.value is not None:
        return mf.factor_guarantee(
            factor, participation=participation, noise_multiplier=sigma, steps=steps
        )
    return mf.ldp_guarantee(
        factor.strategy(steps), participation=participation, noise_multiplier=sigma
    )


def batch_schedule(
    plan: NoisePlan | NodeShare, local_size: int, *, dim: int | None = None
) -> tuple[int, int]:
    """``(batch_size, batches_per_epoch)`` for a local dataset, checked against the plan.

    Step t uses batch ``t mod batches_per_epoch`` of a fixed keyed permutation, so every
    example participates exactly every ``batches_per_epoch`` steps. A noisy plan must certify
    that participation: ``b`` equal to batches per epoch and ``k ≥ ⌈T / b⌉``. A Laplace plan
    with example adjacency must certify the task's gradient bound: δ ≥ 2Δ√d/B, which needs
    the model dimension ``dim`` (engines always pass it).
    """
    _validate.integer(minimum=1, local_size=local_size)
    batch = plan.task.batch_size or local_size
    if batch > local_size:
        raise PlanError(f"batch_size={batch} exceeds the local dataset size {local_size}.")
    needed = Participation.for_task(plan.steps, local_size=local_size, batch_size=batch)
    needed_k, per_epoch = needed.k, needed.b
    part = plan.participation
    noisy = getattr(plan, "noise_multiplier", None)
    noisy = (plan.noise_std > 0) if noisy is None else noisy > 0
    laplace = getattr(plan, "laplace", None)
    if laplace is not None:
        if dim is None and laplace.adjacency == "example":
            raise PlanError("A Laplace plan with example adjacency needs the model dimension.")
        try:
            laplace_acc.check_task(laplace, clip_norm=plan.clip_norm, dim=dim, batch_size=batch)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
    if noisy and not part.covers(needed):
        raise PlanError(
            f"The plan certifies participation (k,b)=({part.k},{part.b}) but this task runs "
            f"({needed_k},{per_epoch}) (local size {local_size}, batch {batch}); re-plan with "
            f"--participation {needed_k},{per_epoch}."
        )
    return batch, per_epoch
