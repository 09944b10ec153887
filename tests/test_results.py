"""Stored experiment results come from the code: every output in experiments/out records the
code it ran and is current, the quick versions give the stored numbers again, and
docs/RESULTS.md's generated tables are what the stored outputs generate."""

import json
import re
import sys
from pathlib import Path

import pytest

import edgedp_sim
from edgedp_sim import provenance

ROOT = Path(edgedp_sim.__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import paper_rows  # noqa: E402
import results  # noqa: E402
import results_doc  # noqa: E402

CI = [e for e in results.EXPERIMENTS if e.ci]


def _regenerate(name: str, quick: bool) -> str:
    return f"make results ONLY={name}" + (" QUICK=1" if quick else "")


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_every_stored_output_comes_from_the_current_code(quick):
    stale = results.stale_outputs(quick=quick)
    assert not stale, "stale outputs:\n" + "\n".join(
        f"  {name}: {'; '.join(why)}\n    regenerate: {_regenerate(name, quick)}"
        for name, why in stale.items()
    )


def test_every_experiment_script_is_registered():
    helpers = {"common", "results", "results_doc", "paper_rows"}
    scripts = {p.stem for p in (ROOT / "experiments").glob("*.py")} - helpers
    assert scripts == set(results.BY_NAME)


@pytest.mark.parametrize("experiment", CI, ids=[e.name for e in CI])
def test_the_quick_version_gives_the_stored_numbers(experiment, tmp_path):
    results.run_one(experiment, quick=True, out_dir=tmp_path)
    stored = json.loads(experiment.output(quick=True).read_text())
    fresh = json.loads((tmp_path / f"{experiment.name}.json").read_text())
    assert fresh["environment"]["code"] == stored["environment"]["code"]
    assert results.compare(stored, fresh) == []


def test_results_doc_is_what_the_stored_outputs_generate():
    text = results.DOC.read_text()
    blocks = {m["name"] for m in results_doc.MARK.finditer(text)}
    assert blocks == set(results_doc.BLOCKS), "every block once, and no other"
    assert {e.name for e in results.EXPERIMENTS} <= blocks
    assert results_doc.render(text) == text, "regenerate: python experiments/results.py doc"
    readme = results.README.read_text()
    assert {m["name"] for m in results_doc.MARK.finditer(readme)} == set(results_doc.README_BLOCKS)
    assert results_doc.render(readme, results_doc.README_BLOCKS) == readme, (
        "regenerate: python experiments/results.py doc"
    )


# a number outside a generated block may only name a paper, its parts or a reference
_NAMES = re.compile(
    r"(paper|papers|Fig\.|Figs\.|Table|Tables|Eq\.|Alg\.|Thm|Theorem|Lemma|§)"
    r"\s*\d+(\.\d+)?([–,]\s*\d+)*|\[\d+\]|ε_lb|"
    r"σ²|x\*|x\(K\)|x\(0\)|1x\*|[\w/.]+\.(py|md|json|png)"
)


def test_results_doc_has_no_number_outside_its_generated_blocks():
    text = re.sub(r"`[^`]*`", "", results_doc.MARK.sub("", results.DOC.read_text()))
    prose = [
        line
        for line in text.splitlines()
        if not line.startswith("#") and not line.startswith("<!--")
    ]
    found = [(line, m.group()) for line in prose for m in re.finditer(r"\d+", _NAMES.sub("", line))]
    assert not found, "numbers typed by hand (generate them from an output):\n" + "\n".join(
        f"  {number!r} in: {line}" for line, number in found
    )


def test_every_paper_has_rows_from_a_registered_experiment():
    assert set(paper_rows.PAPERS) == {"000", "001", "002", "003", "004"}
    assert {r.paper for r in paper_rows.ROWS} == set(paper_rows.PAPERS)
    assert {r.experiment for r in paper_rows.ROWS} <= set(results.BY_NAME)
    # the paper's numbers the outputs record are the ones the rows print
    t4 = results_doc.load("leakage_table4")["paper_table4"]
    printed = results_doc.papers()
    for eps in ("10", "1", "0.1"):
        assert paper_rows.sig(t4[f"sr-gt eps={eps}"]["hbc"], 2) in printed


def test_verdicts_are_computed_from_the_numbers():
    assert paper_rows.same_to_digits(6.5e5, 6.496e5, 2).startswith("reproduced")
    assert paper_rows.same_to_digits(6.5e5, 6.56e5, 2).startswith("differs")
    assert paper_rows.within(0.52, 0.55, 0.1).startswith("reproduced")
    assert paper_rows.within(0.52, 0.145, 0.1) == "differs (edgedp / paper = 0.279)"
    assert paper_rows.within(0.0, 1e-16, 0.01).startswith("reproduced")


def test_every_experiment_has_measured_durations():
    measured = results.durations()
    missing = [
        f"{e.name} ({mode})"
        for e in results.EXPERIMENTS
        for mode in ("full", "quick")
        if mode not in measured.get(e.name, {})
    ]
    assert not missing, f"never timed: {missing} (make results records it)"


def test_an_edited_file_makes_an_output_stale(tmp_path):
    code = tmp_path / "edgedp" / "m.py"
    data = tmp_path / "edgedp_topologies" / "data" / "g.edges"
    for path, text in ((code, "X = 1\n"), (data, "0 1\n")):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    files = {p.relative_to(tmp_path).as_posix(): provenance.file_sha256(p) for p in (code, data)}
    record = {"digest": provenance.digest(files), "traced": "every process", "files": files}
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"environment": {"code": record}}))
    assert results.stale(out, root=tmp_path) == []
    code.write_text("X = 2\n")
    assert results.stale(out, root=tmp_path) == ["edgedp/m.py changed"]
    data.unlink()
    assert results.stale(out, root=tmp_path) == [
        "edgedp/m.py changed",
        "edgedp_topologies/data/g.edges is gone",
    ]
    out.write_text(json.dumps({"environment": {"code": {**record, "traced": "this process"}}}))
    assert "not written by a traced run" in results.stale(out, root=tmp_path)[0]
    out.write_text(json.dumps({"environment": {"git_revision": "abc"}}))
    assert results.stale(out, root=tmp_path) == [
        "no code record (written before outputs recorded their code)"
    ]
    assert results.stale(tmp_path / "missing.json") == ["missing.json is missing"]


def test_the_digest_is_sha256_over_sorted_paths_and_file_hashes():
    import hashlib

    files = {"b/x.py": "22", "a/y.py": "11"}
    lines = b"a/y.py\x0011\nb/x.py\x0022\n"  # sorted by path, one line each
    assert provenance.digest(files) == hashlib.sha256(lines).hexdigest()


_WORKER_SCRIPT = """
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

from edgedp_sim import provenance


def work(_):
    import edgedp_topologies  # imported only here, in a forked worker

    return edgedp_topologies.parse("karate").n  # reads edgedp_topologies/data/karate_club.edges


if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(1, mp_context=fork) as pool:
        assert list(pool.map(work, [0])) == [34]
    provenance.write_json(sys.argv[1], {})
"""


def test_the_trace_records_what_forked_workers_import_and_read(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(_WORKER_SCRIPT)
    results.traced([sys.executable, str(script), str(tmp_path / "traced.json")])
    code = json.loads((tmp_path / "traced.json").read_text())["environment"]["code"]
    assert code["traced"] == "every process"
    assert {"edgedp_topologies/__init__.py", "edgedp_topologies/data/karate_club.edges"} <= set(
        code["files"]
    )
    assert not set(code["files"]) & set(edgedp_sim.tracing.RECORDERS)
    assert code["digest"] == provenance.digest(code["files"])
    # without the tracer only the writing process is seen: the worker's imports are missing
    import subprocess

    subprocess.run([sys.executable, str(script), str(tmp_path / "plain.json")], check=True)
    plain = json.loads((tmp_path / "plain.json").read_text())["environment"]["code"]
    assert plain["traced"] == "this process"
    assert "edgedp_topologies/data/karate_club.edges" not in plain["files"]
    assert results.stale(tmp_path / "plain.json")[0].startswith("not written by a traced run")


def test_compare_ignores_where_and_how_long_and_nothing_else():
    stored = {"a": 1.0, "rows": [{"loss": 0.5, "seconds": 3.0}], "environment": {"x": 1}}
    same = {"a": 1.0, "rows": [{"loss": 0.5, "seconds": 9.0}], "environment": {"x": 2}}
    assert results.compare(stored, same) == []
    moved = {"a": 1.0, "rows": [{"loss": 0.5 * (1 + 1e-6), "seconds": 3.0}], "environment": {}}
    assert results.compare(stored, moved) == ["rows[0].loss: 0.5 != 0.5000005"]
    assert results.compare({"n": 3}, {"n": 3.0}) == []
    assert results.compare({"n": True}, {"n": 1}) == ["n: True != 1"]
    assert results.compare({"x": float("nan")}, {"x": float("nan")}) == []
    assert results.compare({"x": [1]}, {"x": [1, 2]}) == ["x: 1 items != 2"]
    assert results.compare({"x": 1}, {}) == ["x: only in the stored output"]
