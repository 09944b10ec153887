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
    for script in SCRIPTS:  # and each says what it needs beyond `make demo`, then exits
        if _needs(script) or "edgedp[" in script.read_text():
            assert "raise SystemExit(" in script.read_text() and "pip install" in script.read_text()
        assert len(script.read_text().splitlines()) <= 30, script.name
        assert (EXAMPLES / f"{script.stem}.out").is_file(), f"{script.stem}.out is missing"


def _needs(script: Path) -> list[str]:
    """Packages beyond every extra an example imports (PyTorch: never an edgedp dependency)."""
    return [m for m in ("torch",) if f"import {m}\n" in script.read_text()]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_prints_its_golden_output(script):
    for module in _needs(script):
        pytest.importorskip(module, reason=f"{script.name} needs {module}")
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=EXAMPLES
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stdout == (EXAMPLES / f"{script.stem}.out").read_text()
