"""Empirical privacy auditing: tests of each attacker's certificate that have power, beside
statistically valid lower bounds on μ and ε.

:func:`run` (behind ``edgedp audit``) runs N trials of a scenario, trial i in world
i mod 2 — canary absent (0) or present (1), the two neighbouring inputs of the plan's
certified adjacency (:mod:`edgedp_sim.canary`) — with one :class:`~edgedp_sim.adversary.Probe` per
attacker, computes each attacker's test statistic (:mod:`edgedp_sim.audit_view`: the
Neyman–Pearson likelihood ratio its view allows) and decides (:mod:`edgedp_sim.audit_verdict`):

* ``mu_lb`` (Gaussian plans): a lower bound on the μ of the Gaussian trade-off the attacker's
  test shows on held-out trials, against the certified μ — the test that catches a plan
  adding less noise than it certifies, with a few hundred trials;
* ``epsilon_lb``: a lower bound on ε at the report's δ (pure ε for Laplace plans), against
  the certified ε; ``epsilon_lb_max`` the most these trials can show, ``epsilon_lb_typical``
  what a mechanism exactly at the certified μ typically shows;
* both at confidence 1 − α/m for the m tests of the report (Bonferroni), so that a sound
  plan is flagged (``violation``) with probability at most α = 1 − confidence over all
  attackers together;
* ``mu_hat`` with its interval (Gaussian): the GDP parameter fitted to the two distributions
  of the statistic (an estimate, not part of the verdict), ``mu_view`` / ``epsilon_view``
  the exact privacy loss of the attacker's view with this canary, from the linear view;

beside the certified ε (and μ) of the plan's accountant for that attacker
(:func:`edgedp_sim.probing.formal_guarantee`), each named with its δ, adjacency and attacker.

Trials are keyed blocks: trial i's noise, batches and canary position come from the plan's
keys and i alone, its world and half from i (:func:`edgedp_sim.audit_verdict.layout`), so the
statistics of trials [a, b) (``first_trial``) can be computed anywhere and joined — how the
audit shards over workers. The batch engine runs them in chunks sized to a memory budget
(:data:`CHUNK_BYTES`, :func:`chunk_for`); the event engine one at a time (the plan's keys of
that trial) when the scenario has latency, loss or faults — there the attacker's model of the
mechanism is the ideal network's and unseen messages count as their expected value, a valid
test, weaker when the network changes what is mixed.

The views and the statistics are computed under one BLAS thread (:func:`_one_blas_thread`):
a multi-threaded BLAS may split a product differently with another thread count and give
other last bits, and an audit's statistics must be a function of the plan and the trials
alone — the same in this process, on a Dask worker, and whatever the caller's BLAS set-up.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from edgedp import models, runtime
from edgedp_sim import (
    adversary,
    audit_report,
    audit_verdict,
    audit_view,
    batch,
    engine,
    linear_view,
    probing,
    shards,
)
from edgedp_sim import canary as canary_mod
from edgedp_sim.adversary import Attacker

__all__ = [
    "CHUNK_BYTES",
    "MAX_CHUNK",
    "MIN_CHUNK",
    "block",
    "bytes_per_trial",
    "chunk_for",
    "merge",
    "run",
]

#: Working memory of one chunk of trials on the batch engine when no chunk is given.
CHUNK_BYTES = 96 * 2**20
#: Bounds of the chunk :func:`chunk_for` picks.
MIN_CHUNK, MAX_CHUNK = 8, 1000


def bytes_per_trial(plan, attackers: Sequence[Attacker], *, dim: int, batch_size: int) -> int:
    """Bytes one trial of a batch-engine chunk holds at its peak (an estimate from the array
    shapes): the engine's per-example gradients and their copies (4 × nodes × B × d), states
    and noise buffers, each probe's record (messages seen and its members' own values over
    T rounds) and the statistic's working copy of the widest record."""
    n, steps, d = plan.n, plan.steps, int(dim)
    state = getattr(plan.factor, "state_bytes", None)
    engine_bytes = 8 * n * d * (4 * max(1, batch_size) + 8) + (n * state(d) if state else 0)
    per_slot = plan.cross_agent is not None and plan.cross_agent.message_variance > 0
    record = widest = 0
    for a in attackers:
        links, senders, members = a.resolve(plan.edges, plan.n)
        seen = 0 if a.encrypted else (len(links) if per_slot else len(senders))
        record += 8 * steps * d * (seen + 4 * len(members))
        widest = max(widest, seen)
    return engine_bytes + record + 2 * 8 * steps * d * widest


def chunk_for(
    plan, attackers: Sequence[Attacker], *, dim: int, batch_size: int, budget: int = CHUNK_BYTES
) -> int:
    """Trials per batch-engine call: as many as fit ``budget`` bytes (:func:`bytes_per_trial`),
    between :data:`MIN_CHUNK` and :data:`MAX_CHUNK`."""
    per = bytes_per_trial(plan, attackers, dim=dim, batch_size=batch_size)
    return int(min(MAX_CHUNK, max(MIN_CHUNK, budget // max(1, per))))


def run(
    sc,
    attackers: Sequence[Attacker],
    *,
    trials: int,
    first_trial: int = 0,
    victim: int = 0,
    canary: str = "gradient",
    background: str | None = None,
    confidence: float = 0.95,
    delta: float | None = None,
    engine_name: str = "auto",
    chunk: int | None = None,
    progress: Callable[[str], None] | None = None,
    data: Any = None,
    keep_scores: bool = False,
    client: Any = None,
    block_trials: int | None = None,
    block_progress: Callable | None = None,
) -> dict[str, Any]:
    """Audit ``sc``'s plan against each attacker (module docstring); a JSON-ready report.

    Args:
      sc: a :class:`~edgedp_sim.scenarios.Scenario` (``scenarios.from_plan`` for a bare plan).
      attackers: who attacks (:func:`edgedp_sim.adversary.parse_attacker`).
      trials: N ≥ 8 (half of them per world; half of each world selects the threshold).
      first_trial: the first trial's index: trials ``first_trial ..`` (disjoint ranges are
        independent audits, and blocks of one audit).
      victim: the node holding the canary.
      canary: ``"gradient"`` (white-box) or ``"example"`` (black-box, crafted input).
      background: ``"zero"`` or ``"data"`` (:mod:`edgedp_sim.canary`; default by canary kind).
      confidence: 1 − α: the probability that a sound plan is not flagged, over all
        attackers together; also of the μ̂ interval.
      delta: δ ∈ (0, 1) of the certified (ε, δ) and of ε_lb; default the plan's δ
        (pure-ε Laplace plans: reported at δ = 0).
      engine_name: ``"auto"``, ``"batch"`` or ``"event"``.
      chunk: trials per batch-engine call (default: :func:`chunk_for`, a memory budget).
      progress: called with a line of text now and then.
      data: the engines' data instead of ``sc.data()``.
      keep_scores: also return each attacker's statistic and worlds (``scores``, not JSON).
      client: a Dask client (:func:`edgedp_sim.shards.connect`): the trials run there in
        blocks of ``block_trials`` (default about four per worker); the report is the one of
        this process bit for bit, plus ``blocks`` (where each ran, its worker's peak memory),
        ``workers`` and ``peak_worker_mb``.
      block_progress: called with (trials done, trials, BlockInfo) after each block.
    """
    plan = sc.plan
    delta = _check_arguments(plan, trials, first_trial, confidence, delta, chunk)
    engine_name = probing.engine_for(sc, engine_name)
    if client is not None and data is not None:
        raise ValueError("data cannot be shipped to workers: give it in the scenario instead.")
    started = time.perf_counter()
    setup = _make_setup(sc, tuple(attackers), victim, canary, background, engine_name, data)
    can, d, views = setup.canary, setup.model.dim, setup.views
    if chunk is None:
        chunk = chunk_for(plan, attackers, dim=d, batch_size=can.batch_size)
    ids = range(first_trial, first_trial + trials)
    seconds = {"simulation": 0.0, "statistic": time.perf_counter() - started}
    if client is None:
        scores, blocks = _scores(setup, ids, chunk, seconds, progress), None
    else:
        options = (tuple(attackers), victim, canary, background, engine_name, chunk, first_trial)
        scores, blocks = _on_client(
            client, sc, options, seconds, trials, block_trials, block_progress
        )
    results, verdict = audit_report.evaluate(
        plan, attackers, views, scores, ids, confidence=confidence, delta=delta
    )
    for entry, s in zip(results, scores, strict=True):
        if keep_scores:
            entry["scores"], entry["present"] = s, audit_verdict.layout(ids)[0]
        if progress is not None:
            progress(audit_report.summary(entry))
    total = time.perf_counter() - started
    return {
        "scenario": sc.name,
        "mechanism": plan.mechanism,
        "adjacency": plan.adjacency,
        "engine": engine_name,
        "victim": victim,
        "canary": can.kind,
        "background": can.background,
        "canary_rounds": list(can.steps),
        "batch_size": can.batch_size,
        "n_trials": trials,
        "trial_ids": [ids.start, ids.stop],
        "chunk": min(chunk, trials) if engine_name == "batch" else 1,
        "confidence": confidence,
        "delta": delta,
        "verdict": verdict,
        "seconds": round(total, 3),
        "simulation_seconds": round(seconds["simulation"], 3),
        "statistic_seconds": round(seconds["statistic"], 3),
        "trials_per_second": trials / total if total > 0 else None,
        "method": audit_report.METHOD,
        "attackers": results,
        **({} if blocks is None else shards.where(blocks)),
    }


def _check_arguments(plan, trials, first_trial, confidence, delta, chunk) -> float:
    """Refuse what :func:`run` cannot audit; the δ of the report (0 for Laplace plans)."""
    if trials < 8:
        raise ValueError(f"Expected trials={trials} >= 8 (both worlds in both halves).")
    if first_trial < 0:
        raise ValueError(f"Expected first_trial={first_trial} >= 0.")
    if not 0 < confidence < 1:
        raise ValueError(f"Expected confidence={confidence} in (0, 1).")
    delta = plan.delta if delta is None else delta
    if not 0 < delta < 1:  # also refuses NaN
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    if chunk is not None and chunk < 1:
        raise ValueError(f"Expected chunk={chunk} >= 1.")
    if not plan.private:
        raise ValueError("The plan adds no noise: there is no finite epsilon to audit.")
    return 0.0 if plan.laplace is not None else float(delta)


def _on_client(client, sc, options, seconds, trials, block_trials, block_progress):
    """(scores, blocks) of the trials run in blocks on a Dask client (about four blocks per
    worker unless ``block_trials``), merged as this process would hold them; their
    simulation and statistic time is added to ``seconds``."""
    from edgedp_sim import scenario_bytes

    workers = max(1, len(client.scheduler_info()["workers"]))
    size = block_trials or max(1, -(-trials // (4 * workers)))
    merged, blocks = shards.run_blocks(
        client,
        block,
        scenario_bytes.dump(sc),
        shards.split(trials, size),
        merge,
        args=options,
        label="audit-trials",
        progress=block_progress,
    )
    for key in seconds:
        seconds[key] += merged["seconds"][key]
    return list(merged["scores"]), blocks


def _one_blas_thread(fn: Callable) -> Callable:
    """``fn`` run under one BLAS thread (module docstring), the caller's limit restored after."""

    @functools.wraps(fn)
    def pinned(*args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return pinned


@_one_blas_thread
def _make_setup(sc, attackers, victim, canary, background, engine_name, data) -> _Setup:
    """The canary, every attacker's view and the noise sources of an audit of ``sc``."""
    plan = sc.plan
    data = sc.data() if data is None else data
    model = models.for_task(plan.task, data.features)
    d = model.dim
    theta0 = np.asarray(model.init_params(), dtype=np.float64)
    can = canary_mod.for_plan(
        plan,
        victim=victim,
        local_size=data.local_size,
        dim=d,
        kind=canary,
        background=background,
        model=model,
        data=data,
    )
    tr = linear_view.trace(plan, batch_size=can.batch_size, dim=d, theta0=theta0)
    src = linear_view.sources(plan, slots=tr.slots)
    views = [
        audit_view.build(attacker=a, plan=plan, tr=tr, src=src, canary=can, theta0=theta0)
        for a in attackers
    ]
    del tr  # the impulse responses live on in the views' weights
    return _Setup(sc, attackers, views, can, model, src, data, engine_name)


@_one_blas_thread
def _scores(setup, ids: range, chunk: int, seconds: dict, progress) -> list[np.ndarray]:
    """Every attacker's statistic on trials ``ids``, in chunks of ``chunk`` trials on the
    batch engine (one at a time on the event engine)."""
    trials = len(ids)
    scores = [np.empty(trials) for _ in setup.attackers]
    step = chunk if setup.engine_name == "batch" else 1
    for start in range(ids.start, ids.stop, step):
        part = range(start, min(start + step, ids.stop))
        for j, s in enumerate(_block_scores(setup, part, seconds)):
            scores[j][part.start - ids.start : part.stop - ids.start] = s
        done = part.stop - ids.start
        if progress is not None and (
            step > 1 or done % max(1, trials // 20) == 0 or done == trials
        ):
            progress(f"simulated {done}/{trials} trials ({setup.engine_name} engine)")
    return scores


_CACHE: dict[tuple, _Setup] = {}  # a worker's set-up of the audit it is running (one entry)


def block(payload: bytes, first: int, count: int, attackers, victim, canary, background,
          engine_name: str, chunk: int, first_trial: int) -> dict[str, Any]:  # fmt: skip
    """Trials ``first_trial + first`` … of an audit on a worker (the Dask task of
    :func:`edgedp_sim.shards.run_blocks`): the scenario arrives as bytes
    (:mod:`edgedp_sim.scenario_bytes`); the set-up is built once per worker and audit."""
    from edgedp_sim import scenario_bytes

    key = (scenario_bytes.digest(payload), attackers, victim, canary, background, engine_name)
    if key not in _CACHE:
        _CACHE.clear()
        sc = scenario_bytes.load(payload)
        _CACHE[key] = _make_setup(sc, attackers, victim, canary, background, engine_name, None)
    seconds = {"simulation": 0.0, "statistic": 0.0}
    ids = range(first_trial + first, first_trial + first + count)
    return {"scores": _scores(_CACHE[key], ids, chunk, seconds, None), "seconds": seconds}


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Blocks in trial order → each attacker's statistics over all trials, seconds summed."""
    return {
        "scores": np.concatenate([np.array(p["scores"]) for p in parts], axis=1),
        "seconds": {k: sum(p["seconds"][k] for p in parts) for k in parts[0]["seconds"]},
    }


@dataclass(frozen=True, slots=True, eq=False)
class _Setup:
    """What every block of trials needs (scenario, attackers and their views, canary, data)."""

    sc: Any
    attackers: Sequence[Attacker]
    views: Sequence[audit_view.View]
    canary: canary_mod.Canary
    model: Any
    src: linear_view.Sources
    data: Any
    engine_name: str

    @property
    def plan(self):
        return self.sc.plan

    @property
    def keys(self):
        return runtime.simulation_keys(self.sc.plan)


def _block_scores(setup: _Setup, block: range, seconds: dict) -> list[np.ndarray]:
    """Every attacker's statistic on trials ``block`` (a function of the plan, the canary
    and the trials' indices only)."""
    plan, can, model, keys = setup.plan, setup.canary, setup.model, setup.keys
    d = model.dim
    present, _ = audit_verdict.layout(block)
    probes = [adversary.Probe(a, plan, trials=len(block), dim=d) for a in setup.attackers]
    t0 = time.perf_counter()
    if setup.engine_name == "batch":
        positions = np.array([can.position(keys, i, setup.data.local_size) for i in block])
        batch.run(
            plan,
            setup.data,
            trials=len(block),
            first_trial=block.start,
            eval_every=plan.steps,
            observers=probes,
            gradient_transform=can.batch_transform(model, present, positions),
        )
    else:
        (i,) = block
        sc = setup.sc
        engine.run(
            plan,
            setup.data,
            trial=i,
            network=sc.network,
            faults=sc.faults,
            seed=sc.seed + i,
            eval_every=plan.steps,
            observers=probes,
            gradient_transforms={
                can.victim: can.node_transform(
                    model, bool(present[0]), can.position(keys, i, setup.data.local_size)
                )
            },
        )
    t1 = time.perf_counter()
    out = [
        audit_view.statistic(
            view,
            probe.log,
            keys=[(keys, i) for i in block],
            plan=plan,
            canary=can,
            model=model,
            src=setup.src,
        )
        for view, probe in zip(setup.views, probes, strict=True)
    ]
    seconds["simulation"] += t1 - t0
    seconds["statistic"] += time.perf_counter() - t1
    return out
