"""Sweeps: a grid of scenario variants and seeds, one Dask task per point (``edgedp sim sweep``).

Before anything runs, every point is parsed as a scenario and checked against its engine
(:func:`edgedp_sim.engine_choice.check_engine`): a bad value or a point its engine cannot run
refuses the whole sweep, naming the point. Workers receive each point's scenario bytes
(:mod:`edgedp_sim.scenario_bytes`, the plan built once here), never a path.

Every point is written as it finishes, to ``OUT/points/<digest>.json`` (``digest``: of its
scenario bytes and engine), and ``OUT/sweep.json`` is rewritten with every row so far: a
summary row, or for a point that failed an error row (``error``: the exception and its
message) while the other points go on. ``resume=True`` keeps the finished rows of the same
points (same digest) and runs the rest: points never run or cut off, and failed ones.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgedp import _validate, strict_json
from edgedp_sim import (
    engine_choice,
    provenance,
    runner,
    scenario_bytes,
    shards,
    sweep_summary,
    training_check,
)
from edgedp_sim.scenarios import ScenarioError, parse

__all__ = ["Outcome", "Point", "points", "run"]

#: The keys a sweep file may hold (each ``[grid]`` key is a dotted scenario key, checked by
#: parsing every grid point).
SWEEP_KEYS = ("scenario", "seeds", "grid", "engine")


@dataclass(frozen=True, slots=True)
class Point:
    """One grid point: its name (``KEY=VALUE,...,seed=S``), scenario bytes, the engine that
    runs it and the digest its result file is named by."""

    name: str
    scenario: bytes = field(repr=False)
    engine: str
    digest: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """A sweep's rows (sorted by point name; failed points as error rows), the points run
    now, those kept from an earlier run (``resume``), and the failed ones."""

    rows: list[dict[str, Any]]
    ran: list[str]
    kept: list[str]
    failed: list[str]


def _grid(sweep: dict[str, Any], base: Path) -> tuple[Path, list[tuple[str, dict]]]:
    """The base scenario file and every (name, raw scenario) of the grid."""
    _validate.known_keys(sweep, SWEEP_KEYS, error=ScenarioError)
    if "scenario" not in sweep:
        raise ScenarioError("sweep.scenario (the base scenario file) is required")
    if sweep.get("engine", "auto") not in engine_choice.ENGINES:
        raise ScenarioError(
            f"engine = {sweep['engine']!r}; choose one of {list(engine_choice.ENGINES)}"
        )
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
    out = []
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
            out.append((point["name"], point))
    return path, out


def points(sweep: dict[str, Any], base: Path) -> list[Point]:
    """The points of a sweep file's tables (``scenario``: a base scenario file relative to
    ``base``, ``seeds``, ``[grid]`` of dotted keys → value lists, ``engine``). Every point
    is parsed and checked against its engine before anything runs; the first bad one raises
    ScenarioError naming it, as does a point that appears twice."""
    path, grid = _grid(sweep, base)
    engine = sweep.get("engine", "auto")
    out, seen = [], set()
    for name, raw in grid:
        if name in seen:
            raise ScenarioError(f"grid point {name} appears twice (a repeated grid value)")
        seen.add(name)
        try:
            sc = parse(raw, base=path.parent)
            engine_choice.check_engine(sc, engine)
        except ScenarioError as exc:
            raise ScenarioError(f"grid point {name}: {exc}") from None
        data = scenario_bytes.dump(sc)
        digest = scenario_bytes.digest(data + engine.encode())
        out.append(Point(name, data, engine, digest))
    return out


def run_point(scenario: bytes, engine: str) -> dict[str, Any]:
    """One point's summary row (the Dask task)."""
    return runner.run_scenario(scenario_bytes.load(scenario), engine_name=engine)


def _write(path: Path, payload: Any) -> None:
    """Write strict JSON to ``path`` through a temporary file and a rename (whole or absent)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(strict_json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)


def _stored(folder: Path) -> dict[str, dict[str, Any]]:
    """The point files of an earlier run, by digest (unreadable ones are left out)."""
    found = {}
    for f in sorted(folder.glob("*.json")):
        try:
            record = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("digest"), str):
            found[record["digest"]] = record
    return found


def run(
    sweep_file: Path,
    *,
    out: Path,
    scheduler: str | None = None,
    workers: int = 2,
    resume: bool = False,
    progress: bool = False,
) -> Outcome:
    """Run a sweep file's points on a Dask cluster (local by default; module docstring for
    the files written, error rows and ``resume``)."""
    sweep_file = Path(sweep_file)
    try:
        sweep = tomllib.loads(sweep_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{sweep_file}: {exc}") from None
    todo = points(sweep, sweep_file.parent)
    out = Path(out)
    folder = out / "points"
    folder.mkdir(parents=True, exist_ok=True)
    stored = _stored(folder) if resume else {}
    if not resume:  # a fresh sweep: results of an earlier one in this folder are removed
        for f in folder.glob("*.json"):
            f.unlink()
    records = {p.digest: stored[p.digest] for p in todo if "row" in stored.get(p.digest, {})}
    kept = [p.name for p in todo if p.digest in records]
    pending = [p for p in todo if p.digest not in records]
    env = provenance.environment()

    def save() -> list[dict[str, Any]]:
        rows = sorted(
            (
                r.get("row") or {"scenario": r["point"], "error": r["error"]}
                for r in records.values()
            ),
            key=lambda r: r["scenario"],
        )
        done = [r for r in rows if "error" not in r]
        _write(
            out / "sweep.json",
            {
                "rows": rows,
                "points": sweep_summary.summarize(done),
                "comparison_protocol": training_check.comparison_protocol(done),
                "environment": env,
            },
        )
        return rows

    if progress and kept:
        print(f"kept {len(kept)} finished points of {out}", file=sys.stderr, flush=True)
    ran, failed = [], []
    if pending:
        by_key = {f"sweep-{p.digest}": p for p in pending}
        with shards.connect(scheduler, workers) as client:
            items = [(key, (p.scenario, p.engine)) for key, p in by_key.items()]
            for i, (key, row, exc) in enumerate(shards.finished(client, run_point, items), 1):
                p = by_key[key]
                record: dict[str, Any] = {"point": p.name, "digest": p.digest}
                if exc is None:
                    record["row"] = row
                    note = f"final test loss {row['final_test_loss']:.4f}" + (
                        " (worse than the start: see warnings)" if row["warnings"] else ""
                    )
                else:
                    record["error"] = f"{type(exc).__name__}: {exc}"
                    failed.append(p.name)
                    note = f"FAILED: {record['error']}"
                _write(folder / f"{p.digest}.json", {**record, "environment": env})
                records[p.digest] = record
                ran.append(p.name)
                save()
                if progress:
                    print(f"[{i}/{len(pending)}] {p.name}: {note}", file=sys.stderr, flush=True)
    rows = save()
    sweep_summary.plot([r for r in rows if "error" not in r], out / "sweep.png")
    return Outcome(rows, ran, kept, failed)
