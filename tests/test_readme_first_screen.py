"""The README's first screen: one command for each of its three users, run as printed.

The commands are read from the README's table (so the page and the test cannot drift) and
run in a scratch folder that sees the repository's scenario files, with the virtualenv's
``edgedp`` as ``.venv/bin/edgedp``; each must exit 0 and write what the table says to read.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _first_screen_commands() -> dict[str, str]:
    rows = re.findall(r"^\| ([^|]+?) \| `([^`]+)` \| [^|]+\|$", README, re.M)
    return {job.strip(): command for job, command in rows}


def test_the_first_screen_names_three_jobs_before_the_demo_details():
    jobs = _first_screen_commands()
    assert [j.split()[0] for j in jobs] == ["simulate", "run", "evaluate"], jobs
    first_screen = README.split("## ", 1)[0]
    assert all(command in first_screen for command in jobs.values())
    assert len(first_screen.splitlines()) <= 40


@pytest.mark.parametrize("job", ["simulate", "run", "evaluate"])
def test_each_first_screen_command_runs_as_printed(tmp_path, job):
    command = next(c for j, c in _first_screen_commands().items() if j.startswith(job))
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    (tmp_path / "edgedp_sim").symlink_to(ROOT / "edgedp_sim")
    if job == "evaluate":  # fewer trials: the command's shape is what is tested
        command = command.replace("--trials 100", "--trials 20")
    out = subprocess.run(
        ["bash", "-c", command + " -q"], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    if job == "simulate":
        assert (tmp_path / "lan" / "loss.png").stat().st_size > 0
    elif job == "run":
        assert "test_loss" in out.stdout and "model_digest" in out.stdout
    else:
        assert "M-NMI" in out.stdout or "m_nmi" in out.stdout.lower(), out.stdout
