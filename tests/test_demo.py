"""`edgedp demo --quick` end to end, and its report in a real headless browser.

The quick setting (edgedp_sim.demo_plans.QUICK) runs every part the embedded default runs —
five plans at one ε, the event engine over a lossy network, real agent processes, leakage
probes with the audit — on small graphs; `make demo` runs the default.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import headless
import pytest

from edgedp_sim import demo_plans, demo_report

ROOT = Path(__file__).resolve().parent.parent


def _edgedp(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "edgedp_cli", *args], capture_output=True, text=True, env=env,
        cwd=cwd,
    )  # fmt: skip


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    proc = _edgedp("demo", "--quick", "--out", "out", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "out", proc


def test_quick_demo_plans_runs_and_reports(quick_run):
    out, proc = quick_run
    data = json.loads((out / "results.json").read_text())
    rows = {r["mechanism"]: r for r in data["results"]}
    assert list(rows) == ["dsgd", "dp-dsgd", "mafalda", "whisper", "dome"]
    # one common guarantee against the eavesdropper, certified by each plan's accountant
    for mech in ("dp-dsgd", "mafalda", "whisper", "dome"):
        assert math.isclose(rows[mech]["epsilon"], demo_plans.QUICK.target_epsilon, rel_tol=1e-6)
        assert rows[mech]["adjacency"] == "zero-out"
        assert rows[mech]["delta"] == demo_plans.QUICK.delta
    assert rows["dsgd"]["epsilon"] == "inf"
    # MAFALDA's and Whisper's planners predict less noise than DP-D-SGD's at equal epsilon
    assert rows["dp-dsgd"]["predicted_noise_ratio"] == 1.0
    assert 0 < rows["mafalda"]["predicted_noise_ratio"] < 1
    assert 0 < rows["whisper"]["predicted_noise_ratio"] < 1
    assert set(rows["whisper"]["epsilon_by_attacker"]) >= {"eavesdropper", "insider"}
    # the lossy network lost messages; DOME sends k of d floats
    assert all(r["lost_messages"] > 0 for r in rows.values())
    assert rows["dome"]["bytes_per_round"] < 0.5 * rows["dp-dsgd"]["bytes_per_round"]
    # each private mechanism at its own rule step size, said in results.json and the table
    assert data["comparison_protocol"].startswith(
        "comparison protocol: each private mechanism at its own step size"
    )
    assert all(rows[m]["step_size"].find("noise-budget rule") > 0 for m in ("dp-dsgd", "dome"))
    assert all(r["warnings"] == [] for r in rows.values())  # every run ended below its start
    assert "comparison protocol:" in proc.stdout
    assert all(len(r["model_digests"]) == demo_plans.QUICK.trials for r in rows.values())
    assert len(set(rows["dp-dsgd"]["model_digests"])) == demo_plans.QUICK.trials  # fresh noise
    # real agents computed the simulator's bits
    agents = data["agents"]
    assert agents["equal"] and agents["real_digest"] == agents["simulated_digest"]
    # three attackers against each private mechanism, with the formal epsilon beside, and
    # the same probes on the run without noise: the scale of M-NMI
    leak = data["leakage"]["rows"]
    assert len(leak) == 5 * 3
    assert {e["attacker"].split(":")[0] for e in leak} == {"hbc", "eavesdropper"}
    private = [e for e in leak if e["mechanism"] != "dsgd"]
    assert all(isinstance(e["epsilon"], float) and e["delta"] == 1e-6 for e in private)
    scale = [e for e in leak if e["mechanism"] == "dsgd"]
    assert all(e["epsilon"] == "inf" and e["epsilon_lb"] is None for e in scale)
    assert "without noise" in proc.stdout
    audited = [e for e in leak if e["mechanism"] not in ("dome", "dsgd")]
    assert all(e["audit_mu_low"] <= e["audit_mu_hat"] <= e["audit_mu_high"] for e in audited)
    assert data["environment"]["packages"]["numpy"]
    assert "git_revision" in data["environment"]
    for name in ("report.html", "test_loss.png", "bytes_per_round.png"):
        assert (out / name).stat().st_size > 1000
    # the terminal ends with the table and the report's path
    assert "DP-D-SGD" in proc.stdout and "MAFALDA" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].endswith(str(Path("out") / "report.html"))
    assert "planning 5 mechanisms" in proc.stderr


def test_every_epsilon_names_its_attacker_and_compares_at_the_same_one(quick_run):
    """results.json holds each plan's ε against each attacker class; the terminal table
    prints exactly those, one column per attacker, and says at which attacker the rows
    hold the same guarantee."""
    out, proc = quick_run
    data = json.loads((out / "results.json").read_text())
    eps = demo_plans.QUICK.target_epsilon
    classes = [c for c, _, _ in demo_plans.ATTACKER_CLASSES]
    for r in data["results"]:
        by = r["epsilon_by_attacker"]
        assert list(by) == classes
        if r["mechanism"] == "dsgd":
            assert set(by.values()) == {"inf"}
        elif r["mechanism"] == "whisper":  # the eavesdropper's eps is the plan's
            assert math.isclose(by["eavesdropper"], eps, rel_tol=1e-6)
            assert eps < by["insider"] <= by["neighbourhood"]
        else:  # node-private noise: the same eps against every attacker
            assert all(math.isclose(v, eps, rel_tol=1e-6) for v in by.values())
    table = demo_report.format_table(data)
    assert table in proc.stdout
    head, _, *body = table.splitlines()
    for _, column, words in demo_plans.ATTACKER_CLASSES:
        assert column in head and f"{column} = {words}" in table
    for r, line in zip(data["results"], body, strict=False):
        cells = line[len(r["algorithm"]) :].split()[:3]
        want = [demo_report.eps_cell(r["epsilon_by_attacker"][c]) for c in classes]
        assert cells == want, (line, want)
    assert f"delta = {demo_plans.QUICK.delta:g}" in table and "zero-out" in table


def test_the_readme_table_is_the_demo_output_of_its_results_file():
    """README's demo table is `format_table` of experiments/out/demo_run.json, the summary of
    the `edgedp demo` run that produced it (generated by `make results`, never by hand)."""
    stored = json.loads((ROOT / "experiments" / "out" / "demo_run.json").read_text())
    table = demo_report.format_table(stored)
    readme = (ROOT / "README.md").read_text()
    assert f"```\n{table}\n```" in readme
    assert stored["config"] == json.loads(json.dumps(dataclasses.asdict(demo_plans.DemoConfig())))


@pytest.fixture(scope="module")
def browser():
    path, why = headless.chromium()
    if path is None:
        pytest.skip(f"no headless browser: {why}")
    return path


def test_report_renders_in_a_headless_browser(quick_run, browser, tmp_path):
    out, _ = quick_run
    shot = tmp_path / "report.png"
    page = headless.load(browser, out / "report.html", screenshot=shot)
    assert page.title == "edgedp demo report"
    text = (out / "report.html").read_text()
    assert "Correlated noise" in text and "without noise" in text
    assert page.console_errors == [] and page.exceptions == [] and page.failed_requests == []
    # self-contained: the page itself and its embedded images, nothing fetched
    assert all(u.startswith(("file://", "data:")) for u in page.requests), page.requests
    assert len(page.images) == 2
    assert all(i["complete"] and i["width"] > 0 and i["height"] > 0 for i in page.images)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_browser_check_sees_a_broken_page(browser, tmp_path):
    """The harness must be able to fail: a missing image and a script error are caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><title>bad</title><img src="missing.png" alt="x">'
        "<script>console.error('boom'); undefinedFunction();</script>"
    )
    page = headless.load(browser, bad)
    assert page.images[0]["width"] == 0
    assert any("boom" in e for e in page.console_errors)
    assert page.exceptions


@pytest.mark.parametrize("option", ["--steps", "--trials", "--workers"])
def test_zero_steps_or_trials_are_refused(tmp_path, option):
    proc = _edgedp("demo", "--quick", option, "0", "--out", "x", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"edgedp: error: {option} 0 must be >= 1"
    assert not (tmp_path / "x").exists()


def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    proc = _edgedp("demo", "--quick", "--out", "file/out", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "edgedp: error: --out file/out: Not a directory"
