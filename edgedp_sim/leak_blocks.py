"""A leakage run's trials in keyed blocks on a Dask cluster (``edgedp leak --workers``).

Trial i of a leakage run draws every stream from the plan's keys of trial i — the batch
engine's noise, batches and initial states (``first_trial``), the event engine's trial and
its seed ``scenario seed + i`` — and each attacker's estimate of trial i uses that trial's
observations and keys only. So a block of trials ``first … first + count − 1``
(:func:`block`) computes on any worker, from the scenario's bytes, exactly the rows the single
process computes for those trials: the victim's private values 𝒱, every attacker's
information set and point estimate, and ``final`` of the final models. :func:`merge` keeps the
blocks in trial order; :func:`observe` hands them to :func:`edgedp_sim.leak.run`, which
estimates the MI on all N trials in the client, as it does for its own chunks — the report is
the single process's bit for bit (``tests/test_shards.py`` checks it on a real cluster whose
worker is killed mid-run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from edgedp import models
from edgedp_sim import leak_trials, scenario_bytes, shards
from edgedp_sim.adversary import Attacker

__all__ = ["block", "merge", "observe"]


def block(payload: bytes, first: int, count: int, attackers: tuple[Attacker, ...], victim: int,
          engine_name: str, chunk: int, initial_state: str | None,
          final: Callable | None) -> dict[str, Any]:  # fmt: skip
    """Trials ``first`` … ``first + count − 1`` of a leakage run of the scenario ``payload``
    (:mod:`edgedp_sim.scenario_bytes`): ``truth`` (the victim's 𝒱 per chunk), ``info`` and
    ``point`` (per attacker, per chunk), the estimators' ``names`` and ``finals``."""
    sc = scenario_bytes.load(payload)
    data = sc.data()
    model = models.for_task(sc.plan.task, data.features)
    common = dict(
        victim=victim,
        progress=None,
        data=data,
        dim=model.dim,
        theta0=model.init_params(),
        initial_state=sc.initial_state if initial_state is None else initial_state,
        final=final,
        start=first,
    )
    if engine_name == "batch":
        parts = leak_trials.observe_batch(sc, attackers, trials=count, chunk=chunk, **common)
    else:
        parts = leak_trials.observe_event(sc, attackers, trials=count, **common)
    truth, info, point, names, finals = parts
    return {"truth": truth, "info": info, "point": point, "names": names, "finals": finals}


def merge(parts: list[dict[str, Any]]) -> tuple:
    """Blocks in trial order → ``(truth, info, point, names, finals)`` as
    :func:`edgedp_sim.leak.run` gathers them in one process (lists of chunks)."""
    attackers = parts[0]["info"].keys()
    return (
        [t for p in parts for t in p["truth"]],
        {i: [a for p in parts for a in p["info"][i]] for i in attackers},
        {i: [a for p in parts for a in p["point"][i]] for i in attackers},
        parts[0]["names"],
        [f for p in parts for f in p["finals"]],
    )


def observe(client: Any, sc, attackers: Sequence[Attacker], *, trials: int, engine_name: str,
            chunk: int, victim: int, initial_state: str | None, final: Callable | None,
            block_trials: int | None, progress: Callable | None) -> tuple[tuple, list]:  # fmt: skip
    """The trials of a leakage run on ``client`` (None: in this process), in blocks of
    ``block_trials`` (default about four per worker; all trials here): :func:`merge`'s
    tuple and each block's :class:`~edgedp_sim.shards.BlockInfo`."""
    if client is None:  # in this process, one block after the other
        size = block_trials or trials
    else:
        workers = max(1, len(client.scheduler_info()["workers"]))
        size = block_trials or max(1, -(-trials // (4 * workers)))
    return shards.run_blocks(
        client,
        block,
        scenario_bytes.dump(sc),
        shards.split(trials, size),
        merge,
        args=(tuple(attackers), victim, engine_name, chunk, initial_state, final),
        label="leak-trials",
        progress=progress,
    )
