"""Plans for noise correlated across agents: Whisper, DECOR, Zip-DL, Muffliato.

:func:`plan_cross_agent` returns a :class:`PlannedCrossAgent`: a certified
:class:`~edgedp.plan.NoisePlan` (``.plan``) with a ``cross_agent`` section
(:class:`~edgedp.families.cross.noise.CrossAgentSpec`), normalized so that the most exposed node has
unit precision max_u [R̃⁻¹]_uu = 1; the plan's ν = σ·sens·Δ then gives μ = 1/σ
(:mod:`edgedp.families.cross.accounting`). :func:`report` gives what ``edgedp plan`` prints:
the noise each agent adds, the post-mixing variance Tr(W R Wᵀ)/n per step (paper 001
Thm 1) next to DP-D-SGD's at the same guarantee, and ε per trust model.

* whisper — 001 Eq. (10) solved densely (:mod:`~edgedp.families.cross.covariance`), then a compact
  form (:mod:`~edgedp.families.cross.compact_covariance`): ``local`` (default; per-edge
  secrets, cost deg+1 draws), ``lowrank`` r (shared seed, r+1 draws) or ``dense``.
* decor — 001 §V-C: σ²_pair I + σ²_cor L put in Eq. (10).
* zipdl — 000 App. A.6: D = 1, message-wise variance m (not credited under LDP).
* muffliato — 000 App. A.4: D = 1, K gossip rounds per gradient step (steps = K·T').

:func:`replan_alive` is the dropout mitigation: Eq. (10) re-solved on the nodes that are
online in a round (Metropolis–Hastings on the induced subgraph) with the same bound, so the
per-step guarantee of every online node stays within the plan's (experiments/
cross_agent_dropout.py measures it).
"""

# Paper letters W, R, D, U: see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp import _validate, factors, mechanisms, topology
from edgedp.accounting import gdp
from edgedp.accounting.participation import Participation
from edgedp.families.cross import accounting as cross_acc
from edgedp.families.cross import compact_covariance
from edgedp.families.cross import covariance as whisper
from edgedp.families.cross import noise as cross_mod
from edgedp.plan import DEFAULT_DELTA, NoisePlan, TaskSpec

__all__ = [
    "PlannedCrossAgent",
    "plan_cross_agent",
    "post_mixing_variance",
    "replan_alive",
    "report",
]


@dataclass(frozen=True, slots=True)
class PlannedCrossAgent:
    """A certified plan and the planner's facts about it."""

    plan: NoisePlan
    info: dict[str, Any]


def _spec(mechanism, graph, W, *, form, rank, ridge, message_variance, gossip_rounds):
    n, edges = graph.n, np.asarray(graph.edges, dtype=np.int64).reshape(-1, 2)
    mech = mechanisms.get(mechanism)
    info: dict[str, Any] = {}
    factor, c, D = np.zeros((n, 0)), np.zeros(0), np.ones(n)
    if mechanism in ("whisper", "decor"):
        pair = whisper.pair_covariance(W, whisper.laplacian(n, edges), ridge=ridge)
        D = np.full(n, pair.pair_variance)
        c = np.full(len(edges), pair.correlated_variance)
        if mechanism == "whisper":
            dense = whisper.optimal_covariance(W, ridge=ridge)
            fit = compact_covariance.fit(
                W,
                edges,
                dense.covariance,
                form=form,
                rank=rank,
                ridge=ridge,
                start_pair=(pair.pair_variance, pair.correlated_variance),
            )
            D, factor, c = fit.diag, fit.factor, fit.edge_variance
            info = {
                "form": form,
                "rank": int(factor.shape[1]),
                "utility_ratio": fit.ratio,
                "dense_objective": dense.objective,
                "dense_gap": dense.gap,
                "draws_per_step": fit.draws_per_step,
            }
    elif mech.has("message_noise"):
        info = {"message_variance_ratio": float(message_variance)}
    info["ridge"] = float(ridge)
    spec = cross_mod.CrossAgentSpec(
        kind=mechanism,
        diag=D,
        factor=factor,
        edge_variance=c,
        message_variance=message_variance if mech.has("message_noise") else 0.0,
        gossip_rounds=gossip_rounds if mech.has("gossip_rounds") else 1,
        info=info,
    )
    return spec


def _normalized(spec, edges, index, weight):
    """Scale the factors so that max_u (unit precision) = 1."""
    P = cross_acc.unit_precision(spec, edges=edges, mixing_index=index, mixing_weight=weight)
    m = float(np.max(P))
    if not 0 < m < math.inf:
        raise ValueError("The planned covariance is not positive definite.")
    return dataclasses.replace(
        spec,
        diag=spec.diag * m,
        factor=spec.factor * math.sqrt(m),
        edge_variance=spec.edge_variance * m,
        message_variance=spec.message_variance * m,
    )


def plan_cross_agent(
    mechanism: str,
    graph: topology.Graph,
    *,
    steps: int,
    participation: Participation,
    clip_norm: float,
    learning_rate: float,
    noise_multiplier: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    weighting: str = "metropolis-hastings",
    task: TaskSpec | None = None,
    seed: int = 0,
    topology_name: str | None = None,
    form: str = "local",
    rank: int = 8,
    ridge: float = whisper.DEFAULT_RIDGE,
    sketch: Any = None,
    message_variance: float = 1.0,
    gossip_rounds: int = 1,
) -> PlannedCrossAgent:
    """Plan cross-agent noise for ``graph`` and certify it (module docstring).

    Exactly one of ``noise_multiplier`` σ or ``target_epsilon`` (with ``delta``) sets the
    noise: the eavesdropper guarantee is μ = 1/σ with k = the plan's participations
    (gradient rounds for Muffliato). ``steps`` counts rounds (K·T' for Muffliato).
    ``sketch=SketchSpec(...)`` (whisper, decor) gives a ``dome`` plan whose k-dim releases
    carry this noise, R̃ ⊗ I_k: every per-step bound of :mod:`edgedp.families.cross.accounting`
    is coordinate-free, and all nodes share S_t, so the noise cancels in the mixing as in ℝᵈ.

    Raises:
      ValueError: on unknown mechanism/form or inconsistent arguments.

    >>> import edgedp_topologies
    >>> p = plan_cross_agent("decor", edgedp_topologies.parse("ring:6"), steps=10,
    ...                      participation=Participation(10, 1), clip_norm=1.0, learning_rate=0.1,
    ...                      noise_multiplier=2.0).plan
    >>> print(p.mechanism, p.mu, round(p.guarantee().sensitivity, 6))
    decor 0.5 3.162278
    """
    if mechanism not in (kinds := mechanisms.names(family="cross")):
        raise ValueError(f"Unknown mechanism={mechanism!r}; expected one of {kinds}.")
    sketchable = mechanisms.names(sketchable=True)
    if sketch is not None and mechanism not in sketchable:
        raise ValueError(
            f"sketch=... (DOME messages) combines with {sketchable}, not {mechanism!r}."
        )
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ValueError("Give exactly one of noise_multiplier or target_epsilon (with delta).")
    if delta is not None:
        _validate.open_unit(delta=delta)
    if target_epsilon is not None:
        if delta is None:
            raise ValueError("target_epsilon needs delta.")
        noise_multiplier = gdp.noise_multiplier(target_epsilon, delta=delta)
    assert noise_multiplier is not None  # exactly one of the two was given
    if not noise_multiplier > 0:
        raise ValueError(f"Expected noise_multiplier={noise_multiplier!r} > 0.")
    if weighting not in topology.WEIGHTINGS:
        raise ValueError(
            f"Unknown weighting={weighting!r}; expected one of {sorted(topology.WEIGHTINGS)}."
        )
    if form not in compact_covariance.FORMS:
        raise ValueError(f"Unknown form={form!r}; expected one of {compact_covariance.FORMS}.")
    W = topology.WEIGHTINGS[weighting](graph)
    topology.validate(W, graph)
    index, weight = topology.mixing_table(W)
    edges = np.asarray(graph.edges, dtype=np.int64).reshape(-1, 2)
    t0 = time.perf_counter()
    spec = _spec(
        mechanism,
        graph,
        W,
        form=form,
        rank=rank,
        ridge=ridge,
        message_variance=message_variance,
        gossip_rounds=gossip_rounds,
    )
    spec = _normalized(spec, edges, index, weight)
    task = (task or TaskSpec()).pinned()
    plan = NoisePlan(
        mechanism=mechanism if sketch is None else "dome",
        topology=topology_name or graph.name or f"graph:{graph.n}",
        n=graph.n,
        edges=edges,
        weighting=weighting,
        mixing_index=index,
        mixing_weight=weight,
        steps=int(steps),
        participation=participation,
        factor=factors.Identity(),
        noise_multiplier=float(noise_multiplier),
        sensitivity=0.0,
        sensitivity_exact=True,
        clip_norm=float(clip_norm),
        learning_rate=float(learning_rate),
        task=task,
        seed=seed,
        cross_agent=spec,
        sketch=sketch,
        delta=DEFAULT_DELTA if delta is None else float(delta),
        target_epsilon=None if target_epsilon is None else float(target_epsilon),
    )
    plan = dataclasses.replace(plan, sensitivity=cross_acc.guarantee(plan).sensitivity)
    plan = NoisePlan.from_bytes(plan.to_bytes())  # certifies (hash, factors, sensitivity)
    # timings stay out of the plan (and its hash), so re-planning gives the same bytes
    return PlannedCrossAgent(plan, {**spec.info, "planner_seconds": time.perf_counter() - t0})


def _message_variances(spec, index, weight) -> np.ndarray:
    """Var of the noise on the message u → index[u, j] (unit ν), shape (n, m); self: D_u."""
    out = np.repeat(spec.diag[:, None], index.shape[1], axis=1)
    for u in range(spec.n):
        mask = (index[u] != u) & (weight[u] != 0)
        w = weight[u][mask]
        if w.size:
            out[u, mask] += spec.message_variance * (1.0 - w**2 / (w @ w))
    return out


def post_mixing_variance(plan) -> float:
    """E‖W v‖²/n per gradient step in absolute units: ν² Tr(W R̃ Wᵀ)/n (001 Thm 1).

    Muffliato: the noise passes K gossip rounds (W^K); Zip-DL: each node mixes the
    message-wise noises it receives (independent across senders).
    """
    spec, W = plan.cross_agent, plan.mixing_matrix()
    nu2 = plan.noise_std**2
    if mechanisms.get(spec.kind).has("message_noise"):
        var = _message_variances(spec, plan.mixing_index, plan.mixing_weight)
        back = cross_mod.reverse_slots(plan.mixing_index)
        got = var[plan.mixing_index, back]  # variance of what u receives in slot j
        return nu2 * float(np.mean(np.sum(plan.mixing_weight**2 * got, axis=1)))
    A = np.linalg.matrix_power(W, spec.gossip_rounds)
    R = spec.covariance(plan.edges)
    return nu2 * float(np.trace(A @ R @ A.T)) / plan.n


def report(plan, *, delta: float | None = None) -> dict[str, Any]:
    """The facts ``edgedp plan`` prints for a cross-agent plan (absolute variances), ε at
    ``delta`` (default the plan's)."""
    delta = plan.delta if delta is None else delta
    spec = plan.cross_agent
    nu2 = plan.noise_std**2
    g = plan.guarantee()
    trust = cross_acc.trust_report(plan, delta=delta)
    if mechanisms.get(spec.kind).has("message_noise"):
        var = _message_variances(spec, plan.mixing_index, plan.mixing_weight)
        sent = (plan.mixing_index != np.arange(plan.n)[:, None]) & (plan.mixing_weight != 0)
        noise_var = nu2 * float(var[sent].mean())
    else:
        noise_var = nu2 * float(np.mean(np.diag(spec.covariance(plan.edges))))
    k = cross_acc.participations(spec, plan.participation, plan.steps)
    ldp_std2 = (plan.noise_multiplier * plan.clip_norm) ** 2 * k  # DP-D-SGD at the same μ
    A = np.linalg.matrix_power(plan.mixing_matrix(), spec.gossip_rounds)
    out = {
        "mechanism": plan.mechanism,
        "topology": plan.topology,
        "n": plan.n,
        "steps": plan.steps,
        "participation": f"{plan.participation.k},{plan.participation.b}",
        "noise_multiplier": plan.noise_multiplier,
        "sensitivity": plan.sensitivity,
        "noise_std": plan.noise_std,
        "clip_norm": plan.clip_norm,
        "independent_variance": nu2 * float(np.mean(spec.diag)),
        "independent_variance_min": nu2 * float(np.min(spec.diag)),
        "noise_variance": noise_var,
        "post_mixing_variance": post_mixing_variance(plan),
        "ldp_post_mixing_variance": ldp_std2 * float(np.sum(A**2)) / plan.n,
        "adjacency": plan.adjacency,
        "mu": g.mu,
        "epsilon": g.epsilon(delta),
        "epsilon_replace_one": gdp.epsilon(plan.replace_one_factor * g.mu, delta=delta),
        # the looser RDP conversion of the same μ (paper 001 Thm 2's formula, applied with
        # per-step sensitivity Δ; the paper's 2C is replace-one adjacency)
        "epsilon_rdp": cross_acc.rdp_epsilon(g.mu, delta=delta),
        "epsilon_eavesdropper": trust["eavesdropper"],
        "epsilon_insider": trust["insider"],
        "epsilon_neighbourhood": trust["neighbourhood"],
        "delta": delta,
        "attacker": mechanisms.get(plan.mechanism).attacker,
        "trust_model": mechanisms.get(plan.mechanism).trust_model,
        "plan_hash": plan.plan_hash,
    }
    out.update({k: v for k, v in spec.info.items() if k not in out})
    return out


def replan_alive(graph, alive, *, mechanism: str = "whisper", ridge: float = whisper.DEFAULT_RIDGE):
    """Dropout mitigation: re-plan on the nodes ``alive`` in a round (unit bound).

    Returns ``(W_A, R_A)``: Metropolis–Hastings weights of the subgraph induced by ``alive``
    and its covariance — Eq. (10) for ``whisper``, σ²_pair I + σ²_cor L_A for ``decor`` —
    with max_i [R_A⁻¹]_ii = 1: no online node's per-step precision exceeds the plan's unit
    bound, so privacy is never worse than planned, and the correlated part cancels among
    the nodes that actually mix. (A node left without online neighbours gets D = 1.)
    """
    alive = np.asarray(sorted(int(a) for a in alive), dtype=np.int64)
    pos = {int(u): i for i, u in enumerate(alive)}
    edges = [(pos[u], pos[v]) for u, v in graph.edges if u in pos and v in pos]
    W_A = topology.metropolis_hastings(topology.Graph(len(alive), tuple(edges)))
    if mechanism == "decor":
        pair = whisper.pair_covariance(W_A, whisper.laplacian(len(alive), edges), ridge=ridge)
        return W_A, pair.covariance
    return W_A, whisper.optimal_covariance(W_A, ridge=ridge).covariance
