"""The Python API: plan a private run, certify it, simulate it and probe its leakage.

Four functions and the typed results they return (docs/API.md lists them with examples):

- :func:`make_plan` — one builder for every mechanism (the planner of ``edgedp plan``);
- :func:`account` — the certified guarantee of a plan against an attacker;
- :func:`simulate` — run a plan in the batch or SimPy event engine, optionally under a
  scenario's network and faults, over several noise draws;
- :func:`leak` — empirical leakage (M-NMI, reconstruction) to curious nodes and eavesdroppers.

This module imports only the standard library: planning (scipy), the plan builder and
the simulator (simpy, sklearn) are imported inside the functions, so ``import edgedp`` stays
a device import. Bad arguments raise ``ValueError`` (or ``TypeError``) with one-line messages.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgedp.extras import install_extra, install_hint, naming_the_extra, need_extra

if TYPE_CHECKING:
    from edgedp.plan import NoisePlan

__all__ = [
    "AttackerLeak",
    "Guarantee",
    "LeakResult",
    "SimulationResult",
    "account",
    "export_model",
    "install_extra",
    "install_hint",
    "leak",
    "make_plan",
    "scenario_for",
    "save_dataset",
    "simulate",
]

#: Request fields set from make_plan's own arguments, never through ``**options``.
_ARGUMENTS = {"mechanism", "topology", "steps", "participation"}


_need = need_extra


def _extras_named(function: Callable) -> Callable:
    """``function`` raising one ImportError that names the extra to install when an optional
    package is missing (not the import chain of a device-only install)."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ImportError as exc:
            named = naming_the_extra(exc, f"edgedp.{function.__name__}()")
            if named is None:
                raise
            raise named from None

    return wrapper


# ------------------------------------------------------------------ planning
@_extras_named
def make_plan(
    mechanism: str,
    topology: str,
    *,
    steps: int,
    target_epsilon: float | None = None,
    delta: float | None = None,
    noise_multiplier: float | None = None,
    participation: str | tuple[int, int] | Any = None,
    clip_norm: float = 1.0,
    learning_rate: float | None = None,
    model: str = "logistic",
    dataset: str = "digits-parity",
    partition: str = "iid",
    batch_size: int = 0,
    seed: int = 0,
    **options: Any,
) -> NoisePlan:
    """A certified :class:`~edgedp.plan.NoisePlan` for any mechanism (``edgedp plan``).

    Args:
      mechanism: dsgd, dp-dsgd, antipgd, dmf, mafalda, banded, blt, whisper, decor, zipdl,
        muffliato, dome, sr-gt or dpop.
      topology: a topology spec (``er:100:0.05:1``, ``ring:16``, ``karate`` ...) or an
        edge-list file.
      steps: gossip steps T.
      target_epsilon: calibrate the noise to this ε at ``delta`` (Gaussian mechanisms) or
        the pure ε of a Laplace schedule (sr-gt, dpop).
      delta: δ of ``target_epsilon`` (Gaussian mechanisms).
      noise_multiplier: σ instead of ``target_epsilon``.
      participation: ``"k,b"``, ``(k, b)`` or a Participation; default: what the task runs
        (Gaussian mechanisms; Laplace ones count every round and take none).
      clip_norm: Δ, the per-example L2 clip norm.
      learning_rate: the stepsize; default: the planner's noise-budget rule for private
        plans (:mod:`edgedp.planning.step_rule`, recorded in ``plan.step_size``), 0.5
        without noise; sr-gt/dpop take none (γ is their first stepsize).
      model, dataset, partition, batch_size, seed: the task (``edgedp plan`` options);
        ``dataset`` may be a file of your own (``my.npz``, ``my.csv``; :func:`save_dataset`)
        and ``model`` an ``onnx:PATH`` training graph (``edgedp model import`` of a
        ``torch.onnx.export`` file).
      **options: any other ``edgedp plan`` option with ``_`` for ``-`` (``bandwidth``,
        ``buffers``, ``form``, ``rank``, ``gossip_rounds``, ``sketch_dim``, ``gamma``,
        ``beta``, ``q1``, ``q2``, ``delta_grad``, ``adjacency``, ``weighting``, ``loss`` ...).

    Returns:
      The NoisePlan (frozen; ``plan.to_bytes()`` is what ``edgedp plan FAMILY OUT`` writes).

    The options become an :class:`edgedp.planning.request.PlanRequest` built by
    :func:`edgedp.planning.build.build`, the builder of ``edgedp plan`` and of scenario files.

    Raises:
      ValueError: a bad value, or an option of another mechanism family, with the message
        ``edgedp plan`` prints.
      TypeError: an unknown option.
    """
    from edgedp.planning import build
    from edgedp.planning.request import PlanRequest

    given = dict(
        options,
        mechanism=mechanism,
        topology=topology,
        steps=steps,
        target_eps=target_epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        participation=_participation_text(participation),
        clip_norm=clip_norm,
        learning_rate=learning_rate,
        model=model,
        dataset=dataset,
        partition=partition,
        batch_size=batch_size,
        seed=seed,
    )
    if "target_eps" in options:
        raise TypeError("make_plan() got an unknown option 'target_eps'; use target_epsilon")
    known = set(PlanRequest.__dataclass_fields__)
    for key in options:
        if key not in known or key in _ARGUMENTS:
            valid = sorted(known - _ARGUMENTS - {"target_eps"})
            raise TypeError(f"make_plan() got an unknown option {key!r}; valid: {valid}")
    # options of other families stay at their defaults (a request refuses them otherwise);
    # None is "the default" only where the default is None (clip_norm=None is refused)
    keep = {"clip_norm", "model", "dataset", "partition", "batch_size", "seed", "steps"}
    try:
        request = PlanRequest.from_mapping(
            {k: v for k, v in given.items() if v is not None or k in keep}
        )
    except TypeError as exc:  # the request's names are the CLI's; say the keyword's
        raise TypeError(str(exc).replace("target_eps=", "target_epsilon=")) from None
    return build.build(request, report=False).plan


def _participation_text(participation) -> str | None:
    """``"k,b"`` of ``participation`` (None: what the task runs)."""
    if participation is None or isinstance(participation, str):
        return participation
    if isinstance(participation, tuple) and len(participation) == 2:
        return f"{participation[0]},{participation[1]}"
    if hasattr(participation, "k") and hasattr(participation, "b"):
        return f"{participation.k},{participation.b}"
    raise TypeError(f"participation={participation!r}: expected 'k,b', (k, b) or a Participation")


# ------------------------------------------------------------------ accounting
@dataclass(frozen=True, slots=True)
class Guarantee:
    """The certified guarantee of a plan against one attacker.

    ``epsilon`` at ``delta`` (the plan's δ unless asked otherwise; δ = 0 for the pure ε of
    Laplace plans) against ``attacker`` (the plan's own guarantee: who it holds against, in
    words); ``mu`` the μ-GDP parameter of Gaussian plans (None for Laplace);
    ``covers_attacker`` False when the plan protects nothing against this attacker (no
    noise); ``report`` every number the accountant gave (what ``edgedp account`` or
    ``edgedp leak`` print).
    """

    mechanism: str
    attacker: str
    trust_model: str
    adjacency: str
    epsilon: float
    delta: float
    mu: float | None
    covers_attacker: bool
    report: dict[str, Any] = field(repr=False)


def _plan_of(plan) -> NoisePlan:
    """``plan`` itself (a NoisePlan), or the certified plan of a plan file's path or bytes.

    Raises:
      ValueError: the file cannot be read or is not a valid plan (the message says why).
      TypeError: anything else.
    """
    from edgedp.errors import PlanError
    from edgedp.plan import NoisePlan

    if isinstance(plan, NoisePlan):
        return plan
    if isinstance(plan, (str, os.PathLike)):
        try:
            data = Path(plan).read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read plan {str(plan)!r}: {exc.strerror}") from None
    elif isinstance(plan, (bytes, bytearray)):
        data = bytes(plan)
    else:
        raise TypeError(f"plan={plan!r}: expected a NoisePlan or a plan file (path or bytes)")
    try:
        return NoisePlan.from_bytes(data, gram=True)
    except PlanError as exc:
        raise ValueError(str(exc)) from None


def _delta(plan, delta: float | None) -> float:
    """``delta``, or the plan's own δ when None; ValueError outside (0, 1)."""
    if delta is None:
        return float(plan.delta)
    ok = isinstance(delta, (int, float)) and not isinstance(delta, bool)
    if not (ok and 0 < delta < 1):
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    return float(delta)


@_extras_named
def account(
    plan,
    *,
    attacker: str | None = None,
    delta: float | None = None,
    steps_done: int | None = None,
) -> Guarantee:
    """The plan's certified guarantee (``edgedp account``).

    Args:
      plan: a NoisePlan (:func:`make_plan`), or a plan file's path or bytes.
      attacker: None — the plan's own guarantee (LDP plans: every attacker; Whisper/DECOR:
        the eavesdropper); or an attacker of :func:`leak` (``"hbc:1,2"``,
        ``"eavesdropper:all"``, ``"eavesdropper:all:encrypted"`` ...): the guarantee for
        that view (e.g. the insider ε of a Whisper plan).
      delta: δ of the (ε, δ) conversion (Gaussian plans); default the plan's ``delta``.
      steps_done: privacy spent after this many steps (``attacker=None`` only).

    Raises:
      ValueError: a bad ``attacker``, ``delta`` (outside (0, 1)) or ``steps_done``.
    """
    from edgedp.planning.report import plan_report

    plan = _plan_of(plan)
    delta = _delta(plan, delta)
    if attacker is None:
        if steps_done is not None and not 0 <= steps_done <= plan.steps:
            raise ValueError(f"Expected steps_done={steps_done!r} in [0, {plan.steps}].")
        report = plan_report(plan, delta, steps_done)
        laplace = plan.laplace is not None
        eps = report["epsilon_spent"] if laplace else report["epsilon"]
        return Guarantee(
            mechanism=plan.mechanism,
            attacker=report["attacker"],
            trust_model=report["trust_model"],
            adjacency=plan.adjacency,
            epsilon=eps,
            delta=0.0 if laplace else delta,
            mu=None if laplace else report["mu"],
            covers_attacker=math.isfinite(eps),
            report=report,
        )
    if steps_done is not None:
        raise ValueError("steps_done applies with attacker=None only (the LDP ledger).")
    adversary = _need("edgedp_sim.adversary")
    probing = _need("edgedp_sim.probing")
    att = adversary.parse_attacker(attacker)
    report = probing.formal_guarantee(plan, att, delta=delta)
    return Guarantee(
        mechanism=plan.mechanism,
        attacker=att.label,
        trust_model=report["trust_model"],
        adjacency=report["adjacency"],
        epsilon=report["epsilon"],
        delta=report["delta"],
        mu=report.get("mu"),
        covers_attacker=bool(report["covers_attacker"]),
        report=report,
    )


# ------------------------------------------------------------------ simulation
@dataclass(frozen=True, slots=True)
class SimulationResult:
    """What :func:`simulate` measured; curves are one row per trial.

    ``rounds`` the evaluated rounds; ``test_loss``, ``test_accuracy`` and
    ``consensus_distance`` each ``(trials, len(rounds))`` (mean over nodes);
    ``final_models`` every node's final θ ``(trials, nodes, d)`` (:func:`export_model`);
    ``final_test_loss``/``final_test_accuracy`` the mean over trials of the last
    evaluation and ``final_test_loss_std`` its spread; ``bytes_sent`` and ``messages`` per
    trial (trial 0); ``model_digests`` the SHA-256 of each trial's final models (equal to
    real agents' for the same plan on an ideal network); ``simulated_seconds`` of the
    event engine's clock (None for the batch engine); ``metrics`` the engine's counters
    (dropped, lost, missing messages ...); ``step_size`` where the plan's step size came
    from and what that assumed about privacy; ``warnings`` e.g. a final test loss above the
    starting model's, with its likely cause and fix.
    """

    mechanism: str
    engine: str
    scenario: str
    trials: int
    rounds: tuple[int, ...] = field(repr=False)
    test_loss: Any = field(repr=False)  # numpy (trials, evaluations)
    test_accuracy: Any = field(repr=False)
    consensus_distance: Any = field(repr=False)
    final_models: Any = field(repr=False)  # numpy (trials, nodes, d)
    final_test_loss: float
    final_test_loss_std: float
    final_test_accuracy: float | None
    bytes_sent: int
    messages: int
    model_digests: tuple[str, ...] = field(repr=False)
    simulated_seconds: float | None
    plan_hash: str
    metrics: dict[str, Any] = field(repr=False)
    step_size: str = field(default="", repr=False)
    warnings: tuple[str, ...] = ()


def scenario_for(plan, scenario: Any = None):
    """The :class:`edgedp_sim.scenarios.Scenario` that runs ``plan`` under ``scenario``.

    ``scenario``: None (an ideal network), a dict with a scenario file's tables other than
    the plan's (``network``, ``faults``, ``seed``, ``eval_every``, ``name`` ...), a path to
    a scenario file (its network and faults; its own plan tables are ignored) or a Scenario
    (its network and faults).
    """
    scenarios = _need("edgedp_sim.scenarios")
    if scenario is None:
        return scenarios.from_plan(plan)
    if isinstance(scenario, scenarios.Scenario):
        return dataclasses.replace(scenario, plan=plan)
    base = Path(".")
    if isinstance(scenario, (str, os.PathLike)):
        path = Path(scenario)
        raw = scenarios.read_toml(path)  # ScenarioError is a ValueError
        for key in ("plan", "topology", "task", "privacy", "steps"):
            raw.pop(key, None)
        base = path.parent
    elif isinstance(scenario, dict):
        raw = dict(scenario)
    else:
        raise TypeError(f"scenario={scenario!r}: expected None, a dict, a path or a Scenario")
    raw.setdefault("name", f"plan-{plan.plan_hash[:8]}")
    return scenarios.parse(raw, base=base, plan=plan)


@_extras_named
def simulate(
    plan,
    scenario: Any = None,
    *,
    engine: str = "auto",
    trials: int = 1,
    eval_every: int | None = None,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> SimulationResult:
    """Run ``plan`` in a simulator (``edgedp sim run``).

    Args:
      plan: a NoisePlan, or a plan file's path or bytes.
      scenario: where it runs (:func:`scenario_for`): None = an ideal network.
      engine: ``"batch"`` (vectorized; dropouts, loss, crashes and churn as round masks at
        zero latency), ``"event"`` (SimPy: latency, bandwidth, deadlines and every fault)
        or ``"auto"``: the event engine only when timing matters
        (:func:`edgedp_sim.engine_choice.choose_engine`; the scenario's ``engine`` key wins).
      trials: independent noise draws: the plan's noise streams of trials 0..N-1 in either
        engine (on an ideal network the event engine's trial i is the batch engine's).
      eval_every: rounds between evaluations (default: the scenario's).
      progress: called with the number of rounds done (trial 0; in this process only).
      workers: run the trials in blocks on a local Dask cluster of this many processes.
      scheduler: run them on the Dask scheduler at this address. Either way the result is
        the one of this process, bit for bit (:mod:`edgedp_sim.trials`).

    Raises:
      ValueError: a bad engine, trials or scenario (the message names the field).
    """
    plan = _plan_of(plan)
    if engine not in ("auto", "batch", "event"):
        raise ValueError(f"engine={engine!r}; expected 'auto', 'batch' or 'event'.")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"Expected trials={trials!r} to be an integer >= 1.")
    sc = scenario_for(plan, scenario)
    every = sc.eval_every if eval_every is None else eval_every
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"Expected eval_every={every!r} to be an integer >= 1.")
    sc = dataclasses.replace(sc, eval_every=every)
    trials_mod = _need("edgedp_sim.trials")
    shards = _need("edgedp_sim.shards")
    runner = _need("edgedp_sim.runner")
    _need("edgedp_sim.engine_choice").check_engine(sc, engine)  # ScenarioError is a ValueError
    with shards.optional(scheduler, workers) as client:
        res = trials_mod.run(
            sc, trials, engine_name=engine, client=client, progress=None if client else progress
        )
    first = {k: int(v[0]) for k, v in res.counters.items()}
    metrics: dict[str, Any] = {"nonfinite_examples": res.totals["nonfinite_examples"]}
    if res.engine == "batch":
        metrics["clipped_fraction"] = res.totals["clipped"] / res.totals["clip_slots"]
        keys: tuple[str, ...] = ("lost_messages", "offline_drops", "missing")
    else:
        first["rejected"] = first.pop("late_or_rejected")
        keys = ("dropped_messages", "lost_messages", "offline_drops", "rejected", "missing")
    for key in (*keys, "skipped_rounds", "crashes", *(("events",) if "events" in first else ())):
        metrics[key] = first[key]
    if res.round_seconds is not None:
        metrics["round_seconds"] = list(res.round_seconds)
    loss, acc = res.test_loss, res.test_accuracy
    final = loss[:, -1]
    sim_s = None if res.simulated_seconds is None else float(res.simulated_seconds[0])
    warnings = runner.warnings_for(sc, res)
    return SimulationResult(
        mechanism=plan.mechanism,
        engine=res.engine,
        scenario=sc.name,
        trials=trials,
        rounds=tuple(int(r) for r in res.rounds),
        test_loss=loss,
        test_accuracy=acc,
        consensus_distance=res.consensus_distance,
        final_models=res.models,
        final_test_loss=float(final.mean()),
        final_test_loss_std=float(final.std()),
        final_test_accuracy=float(acc[:, -1].mean()) if acc.size else None,
        bytes_sent=first["bytes"],
        messages=first["messages"],
        model_digests=tuple(res.digests),
        simulated_seconds=sim_s,
        plan_hash=plan.plan_hash,
        metrics=metrics,
        step_size=_need("edgedp_sim.training_check").step_size_line(plan),
        warnings=tuple(warnings),
    )


# ------------------------------------------------------------------ your own data and model
def save_dataset(path, x, y, *, x_test=None, y_test=None, task: str | None = None) -> str:
    """Write numpy arrays as a dataset file and return the name a plan takes as ``dataset``.

    ``x`` ``(N, F)`` and ``y`` ``(N,)`` (used as given: scale features yourself); without
    ``x_test``/``y_test`` 20% are held out by a seeded split. ``task``: ``logistic`` (labels
    0/1), ``softmax`` (0..C-1) or ``linear``; default inferred from the labels. The file is
    the ``.npz`` layout of :func:`edgedp_sim.datasets.load_file` (a ``.csv`` works too);
    a plan pins its SHA-256, so the devices' shards and the simulator use these arrays.

    Raises:
      ValueError: arrays of other shapes, non-finite values, labels that do not fit ``task``.
    """
    datasets = _need("edgedp_sim.datasets")
    return datasets.save(path, x, y, x_test=x_test, y_test=y_test, task=task)


# ------------------------------------------------------------------ the trained model
@_extras_named
def export_model(plan, params, out, *, node: int | None = None) -> tuple[Path, Path]:
    """Write a trained model as an ONNX inference graph ``out`` and its flat θ (``.npy``).

    Args:
      plan: the NoisePlan it was trained with (or its file): the task names the model.
      params: :attr:`SimulationResult.final_models`, a device's ``final.npy`` loaded, or
        any ``(d,)`` / ``(nodes, d)`` / ``(trials, nodes, d)`` array (trial 0 is taken).
      out: the ``.onnx`` path; the θ goes beside it with ``.npy``.
      node: export node ``node``'s model (default: the average over nodes).

    Returns:
      ``(onnx_path, npy_path)``. The graph maps ``x`` ``(batch, features)`` to ``output``:
      class probabilities, P(y = 1) or the regression value
      (:mod:`edgedp.models.export`; needs ``pip install 'edgedp[onnx-build]'``).

    Raises:
      ValueError: parameters of the wrong size or not finite, or a model without an
        inference graph (least-squares).
    """
    from edgedp.models import export

    plan = _plan_of(plan)
    datasets = _need("edgedp_sim.datasets")
    features = datasets.shape(plan.task.dataset)[1]
    return export.export(plan.task, features, params, out, node=node)


# ------------------------------------------------------------------ leakage
@dataclass(frozen=True, slots=True)
class AttackerLeak:
    """One attacker's empirical leakage next to its formal guarantee.

    ``m_nmi`` the maximum over iterations of the normalized mutual information between the
    victim's gradients and what the attacker saw (None when no iteration could be
    estimated); ``nmi_curve`` per iteration (None where skipped); ``trials_per_iteration``
    the trials each iteration's estimate used (the rounds the attacker observed: fewer on
    lossy networks); ``cosine``/``mse`` of the attacker's reconstruction; ``epsilon`` the
    certified ε for this attacker at ``delta`` under ``adjacency``; ``epsilon_lb`` an
    audit's empirical lower bound (None without an audit); ``warnings`` why the numbers
    may mislead (too few trials for the dimension, negative estimates clipped).
    """

    attacker: str
    m_nmi: float | None
    nmi_curve: tuple[float | None, ...]
    trials_per_iteration: tuple[int, ...]
    cosine: float | None
    mse: float | None
    epsilon: float
    delta: float
    adjacency: str
    epsilon_lb: float | None
    trust_model: str
    guarantee: str
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LeakResult:
    """:func:`leak`'s report: one :class:`AttackerLeak` per attacker, and the full report
    (``report["cost"]``: seconds and peak memory of the run)."""

    mechanism: str
    engine: str
    victim: int
    trials: int
    attackers: tuple[AttackerLeak, ...]
    report: dict[str, Any] = field(repr=False)


@_extras_named
def leak(
    plan,
    attackers: str | Sequence[str] = ("hbc:1", "eavesdropper:all"),
    *,
    scenario: Any = None,
    trials: int = 200,
    victim: int = 0,
    encrypted: bool = False,
    audit_trials: int = 0,
    seed: int = 0,
    delta: float | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> LeakResult:
    """Empirical leakage of ``victim``'s gradients to each attacker (``edgedp leak``).

    Args:
      plan: a NoisePlan, or a plan file's path or bytes.
      attackers: one attacker or a list: ``hbc:NODES`` (curious nodes, comma-separated),
        ``eavesdropper:all``, ``eavesdropper:node:N`` or ``eavesdropper:U-V[,U-V...]``;
        eavesdroppers may end in ``:encrypted``.
      scenario: as in :func:`simulate` (network effects run on the event engine).
      trials: Monte Carlo trials N (the MI is estimated over them).
      victim: the attacked node.
      encrypted: eavesdroppers see CURVE-encrypted links.
      audit_trials: also audit each attacker (0: none, else >= 8) for ``epsilon_lb``.
      seed: the KSG tie-breaking noise.
      delta: δ of each attacker's certified ε (default the plan's ``delta``).
      progress: called with a line of text now and then.
      workers: run the trials in keyed blocks on a local Dask cluster of this many processes.
      scheduler: run them on the Dask scheduler at this address. Either way every number of
        the report is the one of this process, bit for bit (``report["blocks"]`` says where
        each block ran and ``report["peak_worker_mb"]`` the largest worker's peak memory).

    On a lossy network each iteration's M-NMI is estimated on the trials in which the
    attacker observed what its estimate needs (the messages that arrived); ValueError when
    too few trials remain for every iteration.
    """
    adversary = _need("edgedp_sim.adversary")
    leak_mod = _need("edgedp_sim.leak")
    plan = _plan_of(plan)
    delta = _delta(plan, delta)
    if isinstance(attackers, str):  # one attacker, not its letters
        attackers = [attackers]
    if 0 < audit_trials < 8:
        raise ValueError(f"Expected audit_trials={audit_trials} to be 0 (no audit) or >= 8.")
    parsed = []
    for text in attackers:
        a = adversary.parse_attacker(str(text))
        if encrypted and a.kind != "hbc" and not a.encrypted:
            a = adversary.parse_attacker(f"{text}:encrypted")
        parsed.append(a)
    if not parsed:
        raise ValueError("Expected at least one attacker (e.g. 'hbc:1' or 'eavesdropper:all').")
    sc = scenario_for(plan, scenario)
    options = dict(
        trials=trials,
        victim=victim,
        seed=seed,
        progress=progress,
        audit_trials=audit_trials,
        delta=delta,
    )
    with _need("edgedp_sim.shards").optional(scheduler, workers) as client:
        report = leak_mod.run(sc, parsed, client=client, **options)
    entries = tuple(
        AttackerLeak(
            attacker=e["attacker"],
            m_nmi=e["m_nmi"],
            nmi_curve=tuple(e["nmi_curve"]),
            trials_per_iteration=tuple(e["n_trials_per_iteration"]),
            cosine=e.get("cosine"),
            mse=e.get("mse"),
            epsilon=e["epsilon"],
            delta=e["delta"],
            adjacency=e["adjacency"],
            epsilon_lb=e.get("epsilon_lb"),
            trust_model=e["trust_model"],
            guarantee=e["guarantee"],
            warnings=tuple(e.get("warnings", ())),
        )
        for e in report["attackers"]
    )
    return LeakResult(
        mechanism=report["mechanism"],
        engine=report["engine"],
        victim=report["victim"],
        trials=report["n_trials"],
        attackers=entries,
        report=report,
    )
