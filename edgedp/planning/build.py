"""One plan builder for every mechanism: :func:`build` of a :class:`PlanRequest`.

``edgedp plan FAMILY``, scenario files and :func:`edgedp.make_plan` all call it, so the
three support the same mechanisms with the same checks and the same bytes. Per family:

* sgd / mf / dome: :func:`edgedp.plan.make_plan`; the planned mechanisms (dmf, mafalda,
  banded, blt) first compute their temporal factor for the topology
  (:func:`edgedp.families.mf.factorization.plan_factor`, on the MAFALDA workload Gram);
* cross (whisper, decor, zipdl, muffliato): :func:`edgedp.families.cross.planning.plan_cross_agent`;
* laplace (sr-gt, dpop): a :class:`~edgedp.families.laplace.accounting.LaplaceSchedule`, its
  gradient-gap bound δ from the clip norm and task (zero-out / replace-one) or given
  (``adjacency="problem"``).

Every Gaussian plan's participation is refused unless it covers what its task runs (an ε for
another participation certifies nothing runnable). Errors are :class:`ValueError` with the
message ``edgedp plan`` prints (options spelled as its flags).

The task's dataset and the topology parser live in the simulator packages
(``edgedp_sim``, ``edgedp_topologies``), imported here on use: planning is offline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgedp import mechanisms
from edgedp.planning import report as report_mod
from edgedp.planning import step_rule
from edgedp.planning.request import PlanRequest

__all__ = ["Built", "PlanRequest", "build", "default_participation"]

#: ``progress(iteration, loss, dual bound)`` of the offline factor planner.
Progress = Callable[[int, float, float], None]


@dataclass(frozen=True, slots=True)
class Built:
    """A built plan and what ``edgedp plan`` reports about it (None if not asked for)."""

    plan: Any  # the NoisePlan
    report: dict[str, Any] | None


def build(
    request: PlanRequest,
    *,
    report: bool = True,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> Built:
    """The certified NoisePlan of ``request`` and (``report=True``) its report.

    ``progress`` gets the factor planner's iterations (planned mechanisms); ``warn`` a line
    when the planner stops unconverged (the plan stays valid; its error may be above the
    optimum's).
    """
    if request.delta is not None and not 0 < float(request.delta) < 1:
        raise ValueError(f"--delta must be in (0, 1), got {request.delta!r}")
    if request.family == "laplace":
        return _laplace(request, report)
    participation = default_participation(request)
    if mechanisms.get(request.mechanism).noisy and (request.target_eps is None) == (
        request.noise_multiplier is None
    ):
        raise ValueError(
            "give exactly one of --target-eps E (with --delta) or --noise-multiplier S"
        )
    if request.target_eps is not None and request.delta is None:
        raise ValueError("--target-eps needs --delta D (e.g. --delta 1e-6)")
    graph = _graph(request.topology)
    task = task_of(request)
    model, local = task_model(task, graph.n)
    model_dim = model.dim
    _check_participation(request, task, graph.n, participation)
    if request.family == "cross":
        return _cross(request, graph, task, participation, (model_dim, local), report)
    from edgedp import plan as plan_mod

    factor, planned, gram = None, None, None
    if _planned(request.mechanism):
        factor, planned, gram = _planned_factor(request, graph, participation, progress, warn)
    sketch = sketch_of(request, model_dim, graph)
    factor = factor or _dome_factor(request)
    plan = plan_mod.make_plan(
        request.mechanism,
        graph,
        steps=request.steps,
        participation=participation,
        factor=factor,
        clip_norm=request.clip_norm,
        learning_rate=_learning_rate(request),
        weighting=request.weighting,
        noise_multiplier=request.noise_multiplier,
        target_epsilon=request.target_eps,
        delta=request.delta,
        task=task,
        seed=request.seed,
        topology_name=request.topology,
        sketch=sketch,
    )
    if request.learning_rate is None:  # the noise-budget rule (private plans)
        plan = step_rule.apply(plan, dim=model_dim, local_size=local)
    if not report:
        return Built(plan, None)
    payload = report_mod.plan_report(plan)
    skipped = list(planned.skipped) if planned is not None else []
    if plan.noise_multiplier > 0:
        payload["loss_ratio_to_dp_dsgd"] = report_mod.loss_ratio(plan, gram)
        if payload["loss_ratio_to_dp_dsgd"] is None:
            skipped.append(report_mod.LONG_HORIZON_NO_RATIO.format(limit=_dense_max()))
    if sketch is not None:
        payload.update(report_mod.dome_report(plan, model_dim))
    if planned is not None:
        payload["factorization_loss"] = planned.loss
        if planned.gap is not None:  # the dense optimum's certificate (not at long horizons)
            payload.update(
                dual_bound=planned.dual_bound, gap=planned.gap, converged=planned.converged
            )
        payload["planner_seconds"] = planned.seconds
        if planned.loss_ratio_to_dense is not None:
            payload["loss_ratio_to_dense_optimum"] = planned.loss_ratio_to_dense
        if planned.loss_ratio_to_dense is not None or planned.skipped:
            payload["device_state_floats_per_dim"] = plan.factor.state_bytes(1) // 8
    payload.update(report_mod.step_size_report(plan))
    if skipped:  # what this horizon does not compute, said in the output
        payload["skipped"] = skipped
    return Built(plan, payload)


def _dense_max() -> int:
    from edgedp.planning import workload

    return workload.DENSE_MAX_STEPS


# ------------------------------------------------------------------ the shared pieces
def task_of(request: PlanRequest):
    """The request's :class:`~edgedp.plan.TaskSpec`."""
    from edgedp.plan import TaskSpec

    dataset = request.dataset
    if dataset.partition("@")[0].lower().endswith((".npz", ".csv")):
        from edgedp_sim import datasets

        try:
            dataset = datasets.pin(dataset)  # the plan certifies this file's data
        except ValueError as exc:
            raise ValueError(f"task: {exc}") from None
    return TaskSpec(
        model=request.model,
        dataset=dataset,
        partition=request.partition,
        batch_size=request.batch_size,
        loss=request.loss or "",
    )


def task_model(task, nodes: int):
    """(model, examples per node) of ``task`` on ``nodes`` nodes, built once so a bad model,
    loss or dataset fails at plan time (``sensor-fusion:N:M:P:SEED``: paper 004's Eq. 42
    problem, M + P rows per sensor)."""
    from edgedp import models

    try:
        if task.dataset.startswith("sensor-fusion:"):
            from edgedp_sim import sensor_fusion

            _, m, p, _ = sensor_fusion.parse_spec(task.dataset)
            return models.for_task(task, p), m + p
        from edgedp_sim import datasets

        examples, features = datasets.shape(task.dataset)
        return models.for_task(task, features), examples // nodes
    except ValueError as exc:
        raise ValueError(f"task: {exc}") from None


def default_participation(request: PlanRequest):
    """The request's :class:`Participation`: its ``participation`` if given, else what the
    task runs (noiseless plans: every step once, ``steps,1``)."""
    from edgedp.accounting.participation import Participation

    text = request.participation
    if text is not None:
        try:
            return Participation.from_string(str(text))
        except ValueError as exc:
            raise ValueError(f"--participation {text!r}: {exc} (use k,b, e.g. 100,1)") from None
    if not mechanisms.get(request.mechanism).noisy or request.noise_multiplier == 0:
        return Participation(request.steps, 1)
    from edgedp_sim import datasets

    graph = _graph(request.topology)
    return datasets.task_participation(task_of(request), nodes=graph.n, steps=request.steps)


def _learning_rate(request: PlanRequest) -> float:
    """A Gaussian plan's step size: the request's, else the noiseless default (private plans
    then take the noise-budget rule's: :func:`edgedp.planning.step_rule.apply`)."""
    return step_rule.MAX_STEP if request.learning_rate is None else request.learning_rate


def _graph(spec: str):
    import edgedp_topologies

    try:
        return edgedp_topologies.parse(spec)
    except OSError as exc:
        raise ValueError(str(exc)) from None


def _check_participation(request: PlanRequest, task, nodes: int, participation) -> None:
    """Refuse a participation that is not what ``task`` runs on ``nodes`` nodes (noiseless
    plans certify nothing and are not checked)."""
    from edgedp_sim import datasets

    if not mechanisms.get(request.mechanism).noisy or request.noise_multiplier == 0:
        return
    datasets.check_participation(participation, task, nodes=nodes, steps=request.steps)


def _planned(mechanism: str) -> bool:
    from edgedp import mechanisms

    return mechanisms.get(mechanism).has("planned")


def _planned_factor(request: PlanRequest, graph, participation, progress, warn):
    """(factor, planning result, (W, H) with H the MAFALDA workload Gram or None)."""
    from edgedp import topology
    from edgedp.families.mf import factorization, mafalda
    from edgedp.planning import workload

    W = topology.WEIGHTINGS[request.weighting](graph)  # noqa: N806
    H: Any = None  # noqa: N806  (the T × T Gram, a SpectralWorkload, or None for dmf)
    long = request.steps > workload.DENSE_MAX_STEPS and request.mechanism in ("banded", "blt")
    if long:  # the workload from W's eigenvalues: no T × T matrix
        H = workload.SpectralWorkload.of_mixing(W, steps=request.steps)  # noqa: N806
    elif request.mechanism != "dmf":  # mafalda, banded, blt plan on H
        H = mafalda.workload_gram(W, steps=request.steps)  # noqa: N806
    planned = factorization.plan_factor(
        request.mechanism,
        W,
        steps=request.steps,
        participation=participation,
        progress=progress,
        bandwidth=request.bandwidth,
        buffers=request.buffers,
        tolerance=request.tolerance,
        max_iterations=request.max_iterations,
        workload_gram=H,
    )
    if not planned.converged and warn is not None:
        warn(
            f"the {request.mechanism} planner stopped unconverged after {planned.iterations} "
            f"iterations with a duality gap of {planned.gap:.1%} (--tolerance "
            f"{request.tolerance:g}); the plan and its epsilon are valid, but its expected "
            f"error may be up to {planned.gap:.1%} above the optimum's: raise --max-iterations"
        )
    return planned.factor, planned, None if H is None else (W, H)


def sketch_of(request: PlanRequest, model_dim: int, graph=None):
    """The :class:`~edgedp.families.dome.sketch.SketchSpec` of the request (dome; whisper/decor
    with a sketch dimension), checked against the model dimension d; None without a sketch."""
    if request.family != "dome":
        if request.sketch_dim is None:
            return None
        if not mechanisms.get(request.mechanism).has("sketchable"):
            mechs = " or ".join(", ".join(mechanisms.names(sketchable=True)).rsplit(", ", 1))
            raise ValueError(f"--sketch-dim is only for --mechanism dome, {mechs}")
    from edgedp.families.dome.sketch import SketchSpec

    if request.sketch_dim is None:
        raise ValueError("edgedp plan dome needs --sketch-dim k")
    adaptive: dict[str, Any] = {}
    if request.sketch_basis == "adaptive":
        from edgedp.families.dome import sketch_adaptive

        lag = request.sketch_lag
        if lag == 0 and graph is not None:
            tree = sketch_adaptive.spanning_tree([graph.neighbours(u) for u in range(graph.n)])
            lag = sketch_adaptive.min_lag(tree.height, max(1, request.sketch_refresh))
        adaptive = {
            "energy": request.sketch_energy,
            "probes": request.sketch_probes,
            "lag": lag,
            "mean_removal": request.sketch_mean_removal,
        }
    spec = SketchSpec(
        **adaptive,
        dim=request.sketch_dim,
        basis=request.sketch_basis,
        clip=request.sketch_clip,
        seed=request.sketch_seed,
        refresh=request.sketch_refresh,
        optimizer=request.optimizer,
        noise_aware=request.noise_aware,
    )
    if spec.dim > model_dim:
        raise ValueError(f"--sketch-dim {spec.dim} exceeds the model dimension d={model_dim}")
    return spec


def _dome_factor(request: PlanRequest):
    """dome's temporal factor in the sketched space (None: the identity default)."""
    if request.family != "dome" or request.sketch_temporal == "identity":
        return None
    from edgedp import factors

    return factors.AntiPGD()


# ------------------------------------------------------------------ cross and laplace
def _cross(request, graph, task, participation, shape, report) -> Built:
    """A cross-agent plan; ``shape`` is (model dimension d, examples per node)."""
    import numpy as np

    from edgedp.families.cross import planning as planner

    model_dim = shape[0]
    sketch = sketch_of(request, model_dim, graph)
    planned = planner.plan_cross_agent(
        request.mechanism,
        graph,
        steps=request.steps,
        participation=participation,
        clip_norm=request.clip_norm,
        learning_rate=_learning_rate(request),
        noise_multiplier=request.noise_multiplier,
        target_epsilon=request.target_eps,
        delta=request.delta,
        weighting=request.weighting,
        task=task,
        seed=request.seed,
        topology_name=request.topology,
        form=request.form,
        rank=request.rank,
        ridge=request.ridge,
        message_variance=request.message_variance,
        gossip_rounds=request.gossip_rounds,
        sketch=sketch,
    )
    plan = planned.plan
    if request.learning_rate is None:  # the noise-budget rule
        plan = step_rule.apply(plan, dim=model_dim, local_size=shape[1])
    if not report:
        return Built(plan, None)
    payload = planner.report(plan)
    payload["planner_seconds"] = planned.info["planner_seconds"]
    if sketch is not None:
        payload.update(report_mod.dome_report(plan, model_dim))
    spec, nu2 = plan.cross_agent, plan.noise_std**2
    assert spec is not None
    total = np.diag(spec.covariance(plan.edges))
    payload["agent_independent_variance"] = (nu2 * spec.diag).tolist()
    payload["agent_noise_variance"] = (nu2 * total).tolist()
    payload.update(report_mod.step_size_report(plan))
    return Built(plan, payload)


def _laplace(request: PlanRequest, report: bool) -> Built:
    """sr-gt / dpop (paper 004 Eq. 5): pure ε-DP, every round counted."""
    from edgedp import plan as plan_mod
    from edgedp.families.laplace import accounting as laplace

    m = request.mechanism
    if request.target_eps is None:
        raise ValueError(f"--mechanism {m} needs --target-eps E")
    missing = [f"--{k}" for k in ("gamma", "q1", "q2") if getattr(request, k) is None]
    tracking = mechanisms.get(m).has("tracking")  # sr-gt's β; dpop has none
    missing += ["--beta"] if tracking and request.beta is None else []
    if missing:
        raise ValueError(f"--mechanism {m} needs {' '.join(missing)} (paper 004 Eq. 5)")
    if not tracking and request.beta not in (None, 0.0):
        raise ValueError(f"--mechanism {m} has no tracking variable: drop --beta")
    graph = _graph(request.topology)
    task = task_of(request)
    clip, delta_grad = request.clip_norm, request.delta_grad
    example = request.adjacency != "problem"
    if not 0 < request.target_eps < float("inf"):
        raise ValueError(f"--target-eps must be > 0 and finite, got {request.target_eps!r}")
    if example:
        need = _example_delta(task, graph.n, clip, request.adjacency)
        delta_grad = need[0] if delta_grad is None else delta_grad
    elif delta_grad is None:
        raise ValueError("--adjacency problem needs --delta-grad D (your L1 gradient-gap bound)")
    else:
        task_model(task, graph.n)
    assert request.gamma is not None and request.q1 is not None and request.q2 is not None
    sched = laplace.LaplaceSchedule(
        gamma=request.gamma,
        beta=request.beta or 0.0,
        q1=request.q1,
        q2=request.q2,
        delta_grad=delta_grad,
        epsilon=request.target_eps,
        adjacency=request.adjacency,
    )
    if example:
        laplace.check_task(sched, clip_norm=clip, dim=need[1], batch_size=need[2])
    plan = plan_mod.make_plan(
        m,
        graph,
        steps=request.steps,
        clip_norm=clip,
        learning_rate=request.learning_rate,
        laplace=sched,
        weighting=request.weighting,
        task=task,
        seed=request.seed,
        topology_name=request.topology,
        delta=request.delta,
    )
    if not report:
        return Built(plan, None)
    return Built(plan, report_mod.laplace_report(plan))


def _example_delta(task, nodes: int, clip: float, adjacency: str) -> tuple[float, int, int]:
    """(δ, d, B) for the task's model and local batch: Δ√d/B, or 2Δ√d/B for replace-one."""
    from edgedp.families.laplace import accounting as laplace

    model, local = task_model(task, nodes)
    if local < 1:
        raise ValueError(f"{task.dataset} has too few examples for {nodes} nodes")
    batch = task.batch_size or local
    value = laplace.example_delta(
        clip_norm=clip, dim=model.dim, batch_size=batch, adjacency=adjacency
    )
    return value, model.dim, batch
