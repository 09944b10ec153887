"""Run a scenario in an engine, write its metrics (JSON) and plots (PNG); sweeps on Dask."""

from __future__ import annotations

import itertools
import json
import math
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edgedp import _validate, mechanisms, models
from edgedp.accounting import laplace
from edgedp_sim import (
    batch,
    engine,
    provenance,
    round_faults,
    sweep_summary,
    training_check,
)
from edgedp_sim.scenarios import Scenario, ScenarioError, parse

__all__ = [
    "choose_engine",
    "guarantee",
    "resolve_engine",
    "run_scenario",
    "run_sweep",
    "sweep_points",
]

#: The keys a sweep file may hold (each ``[grid]`` key is a dotted scenario key, checked by
#: parsing every grid point).
SWEEP_KEYS = ("scenario", "seeds", "grid", "engine")
ENGINES = ("auto", "event", "batch")


def _progress(label: str, total: int, enabled: bool):
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="round", leave=False)

    def update(done: int) -> None:
        bar.n = done
        bar.refresh()

    return update, bar.close


def choose_engine(sc: Scenario) -> tuple[str, str]:
    """(engine, why): the event engine only when timing matters — a latency that is not
    zero, a finite bandwidth, or crashes/churn without a round clock (``compute_s = 0``);
    the batch engine otherwise, faults included (:mod:`edgedp_sim.round_faults`). An explicit
    ``engine`` key wins."""
    if sc.engine != "auto":
        return sc.engine, "engine key of the scenario"
    net, f = sc.network, sc.faults
    why = round_faults.timing(net)
    if why is not None:
        return "event", why
    if (f.crashes or f.churn_rate_per_s) and not net.compute_s > 0:
        return "event", "crashes need a round clock (network.compute_s > 0) in the batch engine"
    return "batch", "zero latency and infinite bandwidth" + (
        " (faults as round masks)" if round_faults.faulty(f, net) else ""
    )


def resolve_engine(sc: Scenario, engine_name: str = "auto") -> tuple[str, str]:
    """(engine, why) that runs ``sc``: ``"auto"`` is :func:`choose_engine`; ``"batch"`` (asked
    for, or the scenario's ``engine`` key) is refused where timing matters, since the batch
    engine has no clock: it would drop the latency or bandwidth without a word.

    Raises:
      ScenarioError: an unknown engine, or the batch engine on a scenario it cannot run.
    """
    if engine_name == "auto":
        engine_name, why = choose_engine(sc)
    elif engine_name in ENGINES:
        why = "chosen by the caller"
    else:
        raise ScenarioError(f"unknown engine {engine_name!r}; use auto, event or batch")
    if engine_name == "batch":
        auto, reason = choose_engine(replace(sc, engine="auto"))
        if auto == "event":
            raise ScenarioError(
                f"the batch engine cannot run this scenario: {reason} (it has no clock); "
                'use --engine event (engine = "event")'
            )
    return engine_name, why


def run_scenario(
    sc: Scenario,
    *,
    engine_name: str = "auto",
    out: Path | None = None,
    show_progress: bool = False,
    delta: float | None = None,
) -> dict[str, Any]:
    """Run one scenario; returns the summary (and writes files into ``out`` if given).

    ``engine_name``: ``"auto"`` (the scenario's ``engine`` key, else
    :func:`choose_engine`), ``"batch"`` or ``"event"``; the summary says
    which engine ran and why. The summary holds the plan's certified ``epsilon`` at
    ``delta`` (default the plan's δ; 0 for the pure ε of Laplace plans), its ``adjacency``
    and the ``attacker`` it holds against.
    """
    delta = sc.plan.delta if delta is None else delta
    if not 0 < delta < 1:
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    engine_name, why = resolve_engine(sc, engine_name)
    net = sc.network
    data = sc.data()
    update, close = _progress(sc.name, sc.plan.steps, show_progress)
    started = time.perf_counter()
    if engine_name == "batch":
        res = batch.run(
            sc.plan,
            data,
            eval_every=sc.eval_every,
            progress=update,
            initial_state=sc.initial_state,
            faults=sc.faults,
            network=net,
            seed=sc.seed,
        )
        metrics = {
            "rounds": res.eval_steps,
            "test_loss": [float(v[0]) for v in res.test_loss],
            "test_accuracy": [float(v[0]) for v in res.test_accuracy],
            "consensus_distance": [float(v[0]) for v in res.consensus_distance],
        }
        summary = {
            "messages": res.messages,
            "bytes": res.bytes_sent,
            "dropped_messages": res.lost_messages + res.offline_drops,
            "lost_messages": res.lost_messages,
            "offline_drops": res.offline_drops,
            "missing": res.missing,
            "skipped_rounds": res.skipped_rounds,
            "crashes": res.crashes,
            "nonfinite_examples": res.nonfinite,
            "model_digest": res.digests[0],
            "simulated_seconds": None,
        }
    elif engine_name == "event":
        res = engine.run(
            sc.plan,
            data,
            network=sc.network,
            faults=sc.faults,
            seed=sc.seed,
            eval_every=sc.eval_every,
            progress=update,
            initial_state=sc.initial_state,
        )
        metrics = {
            "rounds": res.eval_rounds,
            "test_loss": res.test_loss,
            "test_accuracy": res.test_accuracy,
            "consensus_distance": res.consensus_distance,
            "round_seconds": res.round_seconds,
        }
        summary = {
            "messages": res.messages,
            "bytes": res.bytes_sent,
            "dropped_messages": res.dropped_messages,
            "lost_messages": res.lost_messages,
            "offline_drops": res.offline_drops,
            "late_or_rejected": res.rejected,
            "missing": res.missing,
            "skipped_rounds": res.skipped_rounds,
            "nonfinite_examples": res.nonfinite,
            "crashes": res.crashes,
            "events": res.events,
            "simulated_seconds": res.simulated_seconds,
            "model_digest": res.model_digest,
        }
    close()
    summary = {
        "scenario": sc.name,
        "engine": engine_name,
        "engine_reason": why,
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
        "warnings": _warnings(
            sc.plan, metrics["test_loss"], data, summary["skipped_rounds"], sc.faults.dropout
        ),
    }
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        provenance.write_json(out / "metrics.json", {"summary": summary, **metrics})
        _plot(metrics, out, sc.name)
        np.save(out / "final_models.npy", np.asarray(res.models).reshape(sc.plan.n, -1))
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


def _warnings(plan, losses: list[float], data, skipped: int, dropout: float) -> list[str]:
    """The run's warnings: a final test loss above the starting model's
    (:func:`edgedp_sim.training_check.worse_than_start`)."""
    dim = models.for_task(plan.task, data.features).dim
    line = training_check.worse_than_start(
        plan,
        losses[0],
        losses[-1],
        dim=dim,
        local_size=data.local_size,
        skipped_rounds=skipped,
        dropout=dropout,
    )
    return [] if line is None else [line]


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


# ------------------------------------------------------------------ sweeps
def sweep_points(sweep: dict[str, Any], base: Path) -> list[tuple[str, dict[str, Any]]]:
    """The grid of a sweep file: ``scenario`` (a base scenario file), ``seeds`` and ``[grid]``
    mapping dotted keys (e.g. ``"faults.dropout"``) to value lists, and ``engine``. Every key
    is checked, and every grid point is parsed as a scenario before anything runs."""
    _validate.known_keys(sweep, SWEEP_KEYS, error=ScenarioError)
    if "scenario" not in sweep:
        raise ScenarioError("sweep.scenario (the base scenario file) is required")
    if sweep.get("engine", "auto") not in ENGINES:
        raise ScenarioError(f"engine = {sweep['engine']!r}; choose one of {list(ENGINES)}")
    path = Path(sweep["scenario"])
    path = path if path.is_absolute() else base / path
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"sweep.scenario {path}: {exc}") from None
    grid = sweep.get("grid", {})
    seeds = sweep.get("seeds", [raw.get("seed", 0)])
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ScenarioError("[grid] must map dotted keys to non-empty lists of values")
    if not isinstance(seeds, list) or not seeds:
        raise ScenarioError(f"seeds = {seeds!r} must be a non-empty list of integers")
    keys = sorted(grid)
    points = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        for seed in seeds:
            point = json.loads(json.dumps(raw))
            label = []
            for k, v in zip(keys, combo, strict=True):
                node = point
                *parents, leaf = k.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                    if not isinstance(node, dict):
                        raise ScenarioError(f"[grid] key {k!r}: {p} is not a table")
                node[leaf] = v
                label.append(f"{k}={v}")
            point["seed"] = seed
            point["name"] = ",".join([*label, f"seed={seed}"])
            points.append((point["name"], point))
    for name, point in points:  # validate everything before any work is shipped
        try:
            resolve_engine(parse(point, base=path.parent), sweep.get("engine", "auto"))
        except ScenarioError as exc:
            raise ScenarioError(f"grid point {name}: {exc}") from None
    return [(name, {"raw": point, "base": str(path.parent)}) for name, point in points]


def _run_point(spec: dict[str, Any], engine_name: str) -> dict[str, Any]:
    sc = parse(spec["raw"], base=Path(spec["base"]))
    return run_scenario(sc, engine_name=engine_name)


def run_sweep(
    sweep_file: Path,
    *,
    out: Path,
    scheduler: str | None = None,
    workers: int = 2,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Run every point of a sweep on a Dask cluster (local by default) and gather a table."""
    from dask.distributed import Client, LocalCluster, as_completed

    sweep_file = Path(sweep_file)
    try:
        sweep = tomllib.loads(sweep_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{sweep_file}: {exc}") from None
    points = sweep_points(sweep, sweep_file.parent)
    engine_name = sweep.get("engine", "auto")
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        )
        client = Client(cluster)
    else:
        client = Client(scheduler)
    try:
        futures = {
            client.submit(_run_point, spec, engine_name, pure=False): name for name, spec in points
        }
        rows = []
        for i, fut in enumerate(as_completed(futures), start=1):
            rows.append(fut.result())
            if progress:
                print(
                    f"[{i}/{len(points)}] {futures[fut]}: final test loss "
                    f"{rows[-1]['final_test_loss']:.4f}"
                    + (" (worse than the start: see warnings)" if rows[-1]["warnings"] else ""),
                    flush=True,
                )
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    rows.sort(key=lambda r: r["scenario"])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    points = sweep_summary.summarize(rows)
    protocol = training_check.comparison_protocol(rows)
    provenance.write_json(
        out / "sweep.json", {"rows": rows, "points": points, "comparison_protocol": protocol}
    )
    sweep_summary.plot(rows, out / "sweep.png")
    return rows
