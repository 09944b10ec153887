"""The scripts in examples/ run and print what their ``.out`` file says (golden output).

Each script is a user of the documented API only (``import edgedp``); a change of behaviour
shows up here as a diff of its printed table.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def test_there_are_four_to_six_short_examples():
    assert 4 <= len(SCRIPTS) <= 6
    for script in SCRIPTS:
        assert len(script.read_text().splitlines()) <= 30, script.name
        assert (EXAMPLES / f"{script.stem}.out").is_file(), f"{script.stem}.out is missing"


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_prints_its_golden_output(script):
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=EXAMPLES
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stdout == (EXAMPLES / f"{script.stem}.out").read_text()
