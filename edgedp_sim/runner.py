"""Run a scenario in an engine, write its metrics (JSON) and plots (PNG)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgedp import _validate, mechanisms, models
from edgedp.families.laplace import accounting as laplace
from edgedp_sim import provenance, training_check
from edgedp_sim.engine_choice import check_engine
from edgedp_sim.scenarios import Scenario

__all__ = ["guarantee", "run_scenario", "warnings_for"]


def _progress(label: str, total: int, enabled: bool):
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="round", leave=False)

    def update(done: int) -> None:
        bar.n = done
        bar.refresh()

    return update, bar.close


def run_scenario(
    sc: Scenario,
    *,
    engine_name: str = "auto",
    out: Path | None = None,
    show_progress: bool = False,
    trials: int = 1,
    client: Any = None,
    block_trials: int | None = None,
    delta: float | None = None,
) -> dict[str, Any]:
    """Run ``trials`` noise draws of one scenario; returns the summary (and writes
    ``metrics.json`` and ``loss.png`` into ``out`` if given).

    ``engine_name``: ``"auto"``, ``"batch"`` or ``"event"``
    (:func:`edgedp_sim.engine_choice.check_engine`); the
    summary says which engine ran and why. With ``client`` (a Dask client,
    :func:`edgedp_sim.shards.connect`) the trials run in blocks of ``block_trials`` on its
    workers and are merged into the arrays of a run in this process
    (:mod:`edgedp_sim.trials`). Counts (messages, bytes, losses …) are totals over the
    trials; the curves are the mean over trials of the mean over nodes. The summary holds
    the plan's certified ``epsilon`` at ``delta`` (default the plan's δ; 0 for the pure ε of
    Laplace plans), its ``adjacency`` and the ``attacker`` it holds against;
    ``final_models.npy`` in ``out`` is trial 0's θ per node.
    """
    from edgedp_sim import shards
    from edgedp_sim import trials as trials_mod

    _validate.integer(1, trials=trials)
    delta = sc.plan.delta if delta is None else delta
    if not 0 < delta < 1:
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    check_engine(sc, engine_name)
    update, close = _progress(sc.name, sc.plan.steps, show_progress and client is None)
    started = time.perf_counter()
    blocks = None
    if client is not None and show_progress:
        blocks = shards.block_lines(sc.name)
    try:
        res = trials_mod.run(
            sc,
            trials,
            engine_name=engine_name,
            client=client,
            block_trials=block_trials,
            progress=update,
            block_progress=blocks,
        )
    finally:
        close()
    metrics = {
        "rounds": res.rounds,
        "test_loss": _mean_rows(res.test_loss),
        "test_accuracy": _mean_rows(res.test_accuracy),
        "consensus_distance": _mean_rows(res.consensus_distance),
    }
    if res.round_seconds is not None:
        metrics["round_seconds"] = res.round_seconds
    if trials > 1:
        metrics["per_trial"] = {
            "test_loss": res.test_loss.tolist(),
            "test_accuracy": res.test_accuracy.tolist(),
            "consensus_distance": res.consensus_distance.tolist(),
        }
    counts = {k: int(v.sum()) for k, v in res.counters.items()}
    summary: dict[str, Any] = {
        "messages": counts.pop("messages"),
        "bytes": counts.pop("bytes"),
        "dropped_messages": counts.pop("dropped_messages"),
        **counts,
        "nonfinite_examples": res.totals["nonfinite_examples"],
        "model_digest": res.digests[0],
        "simulated_seconds": (
            None if res.simulated_seconds is None else float(res.simulated_seconds.mean())
        ),
    }
    final = res.test_loss[:, -1]
    summary = {
        "scenario": sc.name,
        "engine": res.engine,
        "engine_reason": res.engine_reason,
        "seed": sc.seed,
        "rounds": sc.plan.steps,
        "nodes": sc.plan.n,
        "mechanism": sc.plan.mechanism,
        "final_test_loss": metrics["test_loss"][-1],
        "final_test_accuracy": metrics["test_accuracy"][-1] if metrics["test_accuracy"] else None,
        **guarantee(sc.plan, delta),
        "plan_hash": sc.plan.plan_hash,
        "wall_seconds": round(time.perf_counter() - started, 3),
        **summary,
        **training_check.step_size_entry(sc.plan),
        "step_size": training_check.step_size_line(sc.plan),
        "warnings": warnings_for(sc, res),
    }
    if trials > 1:
        summary.update(
            trials=trials,
            final_test_loss_std=float(final.std()),
            model_digests=res.digests,
        )
    if client is not None:  # where each block ran, and the memory it took
        summary["blocks"] = [
            {"first_trial": i.first, "trials": i.count, "worker": i.worker, "peak_mb": i.peak_mb}
            for i in res.blocks
        ]
        summary["peak_worker_mb"] = max(i.peak_mb for i in res.blocks)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        provenance.write_json(out / "metrics.json", {"summary": summary, **metrics})
        _plot(metrics, out, sc.name)
        np.save(out / "final_models.npy", res.models[0].reshape(sc.plan.n, -1))
        summary["files"] = [str(out / f) for f in ("metrics.json", "loss.png", "final_models.npy")]
    return summary


def guarantee(plan, delta: float) -> dict[str, Any]:
    """``mu`` (Gaussian), ``epsilon`` at ``delta`` (Laplace: the pure ε spent over the run,
    δ 0), ``adjacency`` and ``attacker`` of a plan's own certified guarantee."""
    mech = mechanisms.get(plan.mechanism)
    if plan.laplace is not None:  # paper 004: pure eps-DP
        eps, mu, delta = laplace.epsilon_spent(plan.laplace, plan.steps), None, 0.0
    elif plan.noise_multiplier > 0:
        g = plan.guarantee()
        eps, mu = g.epsilon(delta), g.mu
    else:
        eps, mu = math.inf, math.inf
    return {
        **({"mu": mu} if mu is not None else {}),
        "epsilon": eps,
        "delta": delta,
        "adjacency": plan.adjacency,
        "attacker": mech.attacker,
    }


def warnings_for(sc: Scenario, res) -> list[str]:
    """A run's warnings (:class:`edgedp_sim.trials.Trials` of ``sc``): a final test loss,
    mean over trials, above the starting model's
    (:func:`edgedp_sim.training_check.worse_than_start`)."""
    plan, data = sc.plan, sc.data()
    loss = res.test_loss
    line = training_check.worse_than_start(
        plan,
        float(loss[:, 0].mean()),
        float(loss[:, -1].mean()),
        dim=models.for_task(plan.task, data.features).dim,
        local_size=data.local_size,
        worse_trials=int(np.sum(loss[:, -1] > loss[:, 0])),
        trials=len(loss),
        skipped_rounds=int(res.counters["skipped_rounds"].sum()),
        dropout=sc.faults.dropout,
    )
    return [] if line is None else [line]


def _mean_rows(rows: np.ndarray) -> list[float]:
    """The mean over trials of each column (one trial: its row, as floats)."""
    return [float(v) for v in (rows[0] if rows.shape[0] == 1 else rows.mean(axis=0))]


def _plot(metrics: dict, out: Path, title: str) -> None:
    from matplotlib.figure import Figure

    panels = [
        ("test_loss", "test loss (mean over nodes)", True),
        ("consensus_distance", "consensus distance", True),
    ]
    if metrics.get("round_seconds"):
        panels.append(("round_seconds", "simulated seconds per round", False))
    fig = Figure(figsize=(5 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels))
    for ax, (key, label, log) in zip(np.atleast_1d(axes), panels, strict=True):
        xs = metrics["rounds"] if key != "round_seconds" else range(1, len(metrics[key]) + 1)
        ax.plot(list(xs), metrics[key])
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        if log and min(metrics[key]) > 0:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=110)
