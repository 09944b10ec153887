"""Sweeps: every finished point kept, failing points as error rows, --resume, refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from edgedp_sim import runner, scenario_bytes, scenarios, sweep

# A DPOP scenario (paper 004 Eq. 45, no clipping): gamma = 1e30 diverges at step 9, a failure
# no check before the run can see; gamma = 0.01 runs.
BASE = """name = "dpop"
seed = 1
steps = 40
[topology]
spec = "ring:6"
[task]
dataset = "synthetic-logistic"
model = "linear"
[privacy]
mechanism = "dpop"
target_epsilon = 1.0
gamma = 0.01
q1 = 0.9
q2 = 0.95
delta_grad = 1.0
"""
SWEEP = 'scenario = "base.toml"\nseeds = [1, 2]\n[grid]\n"privacy.gamma" = [0.01, 1e30]\n'
CMD = [sys.executable, "-m", "edgedp_cli", "sim", "sweep"]


def _sweep(tmp_path, *extra):
    out = subprocess.run(
        [*CMD, str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "s"), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out, json.loads(out.stdout)


def test_a_failing_point_is_an_error_row_and_resume_runs_only_what_is_missing(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    out, first = _sweep(tmp_path, "--workers", "2")
    assert out.returncode == 1, out.stderr[-3000:]  # the run failed in part: status 1
    assert "2 of 4 points failed" in out.stderr and "Traceback" not in out.stderr
    rows = {r["scenario"]: r for r in first["runs"]}
    good = ["privacy.gamma=0.01,seed=1", "privacy.gamma=0.01,seed=2"]
    bad = ["privacy.gamma=1e+30,seed=1", "privacy.gamma=1e+30,seed=2"]
    assert sorted(rows) == sorted(good + bad) and sorted(first["failed"]) == bad
    for name in bad:
        assert rows[name]["error"].startswith("FloatingPointError: Model diverged")
    for name in good:
        assert "error" not in rows[name] and rows[name]["final_test_loss"] > 0
    stored = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert stored["rows"] == first["runs"] and stored["environment"]["git_revision"]
    files = sorted((tmp_path / "s" / "points").glob("*.json"))
    assert len(files) == 4  # one file per point, written as it finished
    # a sweep cut off before one point finished: its file is missing
    lost = next(f for f in files if json.loads(f.read_text())["point"] == good[1])
    lost.unlink()
    out, second = _sweep(tmp_path, "--workers", "1", "--resume")
    assert out.returncode == 1 and second["kept"] == [good[0]]
    assert sorted(second["ran"]) == sorted([good[1], *bad])  # missing and failed points
    again = {r["scenario"]: r for r in second["runs"]}
    assert again[good[0]] == rows[good[0]]  # kept as it was (wall time included)
    assert again[good[1]]["model_digest"] == rows[good[1]]["model_digest"]
    assert len(list((tmp_path / "s" / "points").glob("*.json"))) == 4


def test_incompatible_points_are_refused_before_anything_runs(tmp_path):
    (tmp_path / "base.toml").write_text(
        'seed = 1\nsteps = 5\n[topology]\nspec = "ring:6"\n[task]\n'
        'dataset = "synthetic-logistic"\n[privacy]\nmechanism = "dp-dsgd"\n'
        'noise_multiplier = 1.0\n[network]\nlatency = { kind = "constant", ms = 0 }\n'
    )
    grid = {"network.latency.ms": [0, 5]}
    table = {"scenario": "base.toml", "engine": "batch", "grid": grid}
    with pytest.raises(scenarios.ScenarioError) as info:
        sweep.points(table, tmp_path)
    # zero latency the batch engine runs; a latency makes timing matter, which it has no clock for
    assert str(info.value).startswith("grid point network.latency.ms=5,seed=1: the batch engine")
    (tmp_path / "sweep.toml").write_text(
        'scenario = "base.toml"\nengine = "batch"\n[grid]\n"network.latency.ms" = [0, 5]\n'
    )
    out = subprocess.run(
        [*CMD, str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "grid point network.latency.ms=5,seed=1" in out.stderr
    assert not (tmp_path / "s").exists()  # nothing ran, nothing was written
    twice = {"scenario": "base.toml", "grid": {"faults.dropout": [0.1, 0.1]}}
    with pytest.raises(scenarios.ScenarioError, match="appears twice"):
        sweep.points(twice, tmp_path)


def test_points_travel_as_bytes_not_paths(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "lat.csv").write_text("0,1,5\n1,2,7\n")
    (folder / "base.toml").write_text(
        BASE.replace("steps = 40", "steps = 6")
        + '[network]\nlatency = { kind = "table", file = "lat.csv", default_ms = 2 }\n'
    )
    pts = sweep.points({"scenario": "base.toml", "grid": {"faults.dropout": [0.0, 0.2]}}, folder)
    expected = [
        runner.run_scenario(scenario_bytes.load(p.scenario), engine_name=p.engine) for p in pts
    ]
    shutil.rmtree(folder)  # a worker that cannot see the sweep folder
    for p, want in zip(pts, expected, strict=True):
        sc = scenario_bytes.load(p.scenario)
        assert sc.network.latency.table[(1, 2)] == 7.0  # the table's rows travel in the bytes
        assert scenario_bytes.dump(sc) == p.scenario  # and come back as the same bytes
        got = sweep.run_point(p.scenario, p.engine)
        assert got["model_digest"] == want["model_digest"] and got["engine"] == "event"
