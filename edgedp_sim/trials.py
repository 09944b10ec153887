"""Noise-seed trials of a scenario, in keyed blocks (``edgedp sim run --trials``).

Trial i draws the plan's streams of trial i in either engine (``batch.run(first_trial=i)``,
``engine.run(trial=i)``); the network and faults come from the scenario seed and are the
same in every trial. :func:`block` runs trials ``first … first + count − 1`` and returns a
:class:`Trials` with one row per trial; :func:`merge` concatenates blocks in trial order, so
N trials in blocks of any size, on any workers (:mod:`edgedp_sim.shards`), give the arrays
and digests of one process running all N.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgedp_sim import batch, engine, scenario_bytes, shards
from edgedp_sim.scenarios import Scenario

__all__ = ["Trials", "block", "merge", "run"]

#: Per-trial counters of each engine (summary key, result attribute).
_BATCH = {
    "lost_messages": "lost_messages",
    "offline_drops": "offline_drops",
    "missing": "missing",
    "skipped_rounds": "skipped_rounds",
    "crashes": "crashes",
}
_EVENT = {
    **_BATCH,
    "dropped_messages": "dropped_messages",
    "late_or_rejected": "rejected",
    "events": "events",
}


@dataclass(slots=True)
class Trials:
    """Trials of one scenario: curves ``(trials, evaluations)`` (mean over nodes), each
    trial's model digest and counters (``counters[key][i]``: messages, bytes, lost …),
    ``totals`` over all trials (non-finite and clipped examples, clip slots), the event
    engine's simulated seconds per trial and the first trial's seconds per round, the final
    models, and where each block ran (:class:`edgedp_sim.shards.BlockInfo`)."""

    engine: str
    engine_reason: str
    rounds: list[int]
    test_loss: np.ndarray
    test_accuracy: np.ndarray
    consensus_distance: np.ndarray
    digests: list[str]
    counters: dict[str, np.ndarray]
    totals: dict[str, int]
    simulated_seconds: np.ndarray | None = None
    round_seconds: list[float] | None = None
    models: np.ndarray | None = None  # every trial's final θ per node, (trials, nodes, d)
    blocks: list[shards.BlockInfo] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.digests)


def block(
    payload: bytes | Scenario,
    first: int,
    count: int,
    engine_name: str = "auto",
    progress: Callable[[int], None] | None = None,
) -> Trials:
    """Trials ``first`` … ``first + count − 1`` of the scenario (bytes of
    :func:`edgedp_sim.scenario_bytes.dump`, or the Scenario itself in this process);
    ``progress(rounds done)`` of the first trial."""
    from edgedp_sim import engine_choice

    sc = scenario_bytes.load(payload) if isinstance(payload, bytes) else payload
    name, why = engine_choice.check_engine(sc, engine_name)
    data = sc.data()
    plan = sc.plan
    if name == "batch":
        res = batch.run(
            plan,
            data,
            trials=count,
            first_trial=first,
            eval_every=sc.eval_every,
            progress=progress,
            initial_state=sc.initial_state,
            faults=sc.faults,
            network=sc.network,
            seed=sc.seed,
        )
        counters = {k: np.full(count, getattr(res, a)) for k, a in _BATCH.items()}
        counters["messages"] = np.full(count, res.messages // count)
        counters["bytes"] = np.full(count, res.bytes_sent // count)
        counters["dropped_messages"] = counters["lost_messages"] + counters["offline_drops"]
        return Trials(
            name,
            why,
            list(res.eval_steps),
            _rows(res.test_loss, count),
            _rows(res.test_accuracy, count),
            _rows(res.consensus_distance, count),
            res.digests,
            counters,
            {
                "nonfinite_examples": res.nonfinite,
                "clipped": res.clipped,
                "clip_slots": res.clip_slots,
            },
            models=np.asarray(res.models),
        )
    runs = [
        engine.run(
            plan,
            data,
            trial=i,
            network=sc.network,
            faults=sc.faults,
            seed=sc.seed,
            eval_every=sc.eval_every,
            progress=progress if i == first else None,
            initial_state=sc.initial_state,
        )
        for i in range(first, first + count)
    ]
    counters = {k: np.array([getattr(r, a) for r in runs]) for k, a in _EVENT.items()}
    counters["messages"] = np.array([r.messages for r in runs])
    counters["bytes"] = np.array([r.bytes_sent for r in runs])
    return Trials(
        name,
        why,
        list(runs[0].eval_rounds),
        np.array([r.test_loss for r in runs], dtype=np.float64),
        np.array([r.test_accuracy for r in runs], dtype=np.float64).reshape(count, -1),
        np.array([r.consensus_distance for r in runs], dtype=np.float64),
        [r.model_digest for r in runs],
        counters,
        {"nonfinite_examples": sum(r.nonfinite for r in runs)},
        simulated_seconds=np.array([r.simulated_seconds for r in runs]),
        round_seconds=list(runs[0].round_seconds),
        models=np.stack([r.models for r in runs]),
    )


def _rows(per_eval: list[np.ndarray], count: int) -> np.ndarray:
    """(trials, evaluations) from the batch engine's one (trials,) array per evaluation."""
    return np.array(per_eval, dtype=np.float64).reshape(-1, count).T.copy()


def merge(parts: list[Trials]) -> Trials:
    """Blocks in trial order → one :class:`Trials` (concatenation; totals summed)."""
    head = parts[0]
    if len(parts) == 1:
        return head
    sim = [p.simulated_seconds for p in parts]
    return Trials(
        head.engine,
        head.engine_reason,
        head.rounds,
        np.concatenate([p.test_loss for p in parts]),
        np.concatenate([p.test_accuracy for p in parts]),
        np.concatenate([p.consensus_distance for p in parts]),
        [d for p in parts for d in p.digests],
        {k: np.concatenate([p.counters[k] for p in parts]) for k in head.counters},
        {k: sum(p.totals[k] for p in parts) for k in head.totals},
        None if sim[0] is None else np.concatenate(sim),
        head.round_seconds,
        np.concatenate([p.models for p in parts]),
    )


def run(
    sc: Scenario,
    trials: int = 1,
    *,
    engine_name: str = "auto",
    client: Any = None,
    block_trials: int | None = None,
    progress: Callable[[int], None] | None = None,
    block_progress: Callable[[int, int, shards.BlockInfo], None] | None = None,
) -> Trials:
    """``trials`` trials of ``sc``: in this process (``client=None``) or on a Dask client,
    in blocks of ``block_trials`` (default: all in one block here, about four blocks per
    worker on a client). ``progress(rounds)`` of trial 0 here; ``block_progress(trials done,
    trials, info)`` after each block."""
    from edgedp_sim import engine_choice

    engine_choice.check_engine(sc, engine_name)  # refused here, before any work is shipped
    if block_trials is None:
        workers = 1 if client is None else max(1, len(client.scheduler_info()["workers"]))
        block_trials = trials if client is None else max(1, -(-trials // (4 * workers)))
    blocks = shards.split(trials, block_trials)
    if client is None:
        out, infos = shards.run_blocks(
            None, block, sc, blocks, merge, args=(engine_name, progress), progress=block_progress
        )
    else:
        out, infos = shards.run_blocks(
            client,
            block,
            scenario_bytes.dump(sc),
            blocks,
            merge,
            args=(engine_name,),
            progress=block_progress,
        )
    out.blocks = infos
    return out
