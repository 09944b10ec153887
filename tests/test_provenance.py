"""Results files record where they came from: package versions and the git revision."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import edgedp_sim
from edgedp_sim import provenance

ROOT = Path(edgedp_sim.__file__).resolve().parent.parent


def test_write_json_adds_versions_and_the_source_revision(tmp_path):
    record = provenance.write_json(tmp_path / "r.json", {"loss": 0.25, "rows": [1, 2]})
    data = json.loads((tmp_path / "r.json").read_text())
    assert data == record and data["loss"] == 0.25 and data["rows"] == [1, 2]
    env = data["environment"]
    assert env["packages"]["numpy"] == np.__version__
    assert set(env["packages"]) == set(provenance.PACKAGES)
    if shutil.which("git") and (ROOT / ".git").exists():
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert env["git_revision"] == head and isinstance(env["git_modified"], bool)


def test_write_json_refuses_what_it_cannot_record(tmp_path):
    with pytest.raises(TypeError, match="mapping"):
        provenance.write_json(tmp_path / "r.json", [1, 2])
    with pytest.raises(ValueError, match="environment"):
        provenance.write_json(tmp_path / "r.json", {"environment": {}})
    assert not (tmp_path / "r.json").exists()


# a JSON file written directly: json.dump(...) or .write_text(json.dumps(...))
_DIRECT = re.compile(r"json\.dump\(|write_text\(\s*json\.dumps\(", re.S)


@pytest.mark.parametrize(
    "folder", ["experiments", "edgedp_sim", "edgedp_cli", "benchmarks", "scripts"]
)
def test_every_results_writer_goes_through_provenance(folder):
    direct = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / folder).rglob("*.py"))
        if _DIRECT.search(path.read_text())
    ]
    assert direct == [], f"write results with edgedp_sim.provenance.write_json: {direct}"
