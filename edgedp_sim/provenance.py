"""Where a results file came from: the command, the code it ran, package versions and the git
revision.

Every results JSON the demo, ``edgedp sim`` and ``experiments/`` write goes through
:func:`write_json`, which adds an ``"environment"`` entry (:func:`environment`) to the payload:
Python, package versions, the git revision (and whether the tree had uncommitted changes),
the command that ran and :func:`code`, the digest of the repository files the run used.

The code digest (:func:`digest`) is the sha256 of the lines ``"<path>\0<sha256 of the
file's bytes>\n"``, one per file, sorted by path (relative to the repository, ``/``-separated).
Its files are the script that ran and every file of the project's source folders
(:data:`edgedp_sim.tracing.SOURCE_DIRS`) that the run imported or read — in every process of
the run when it was traced (:mod:`edgedp_sim.tracing`, as ``experiments/results.py`` runs
experiments), else in the writing process only — less this module and the tracer, which
compute nothing a result depends on. A change to any other file leaves it as it was; a
change to one of them makes the output stale.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from edgedp import strict_json
from edgedp_sim import tracing

__all__ = ["PACKAGES", "code", "command", "digest", "environment", "file_sha256", "write_json"]

#: Distributions whose versions a results file records (None: not installed).
#: what ``git_modified`` leaves out: the stored outputs and the measured durations
_NOT_CODE = (":!experiments/out", ":!benchmarks/out", ":!experiments/durations.json")
PACKAGES = (
    "edgedp",
    "numpy",
    "scipy",
    "simpy",
    "networkx",
    "scikit-learn",
    "pyzmq",
    "pynacl",
    "msgpack",
    "onnxruntime",
    "dp-accounting",
    "cvxpy",
    "matplotlib",
)


def environment() -> dict[str, Any]:
    """Python, package versions and the git revision of the source tree (if it is one)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            # stored results are not code: a run of several experiments writes them
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *_NOT_CODE],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        revision = rev.stdout.strip() if rev.returncode == 0 else None
        modified = bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        revision, modified = None, None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "git_revision": revision,
        "git_modified": modified,
        "command": command(),
        **run_times(),
        "code": code(),
    }


def run_times() -> dict[str, Any]:
    """When this process started (UTC, ISO 8601), its wall seconds since, and the CPU seconds
    of it and its finished children (None where the system does not tell)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    try:  # Linux: start time in clock ticks after boot, field 22 of /proc/self/stat
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        started: float | None = boot + ticks
    except (OSError, ValueError, IndexError, StopIteration):
        started = None
    return {
        "started_at": None
        if started is None
        else datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(timespec="seconds"),
        "wall_seconds": None if started is None else round(time.time() - started, 1),
        "cpu_seconds": round(cpu, 1),
    }


def command() -> str:
    """This process's command line, the script relative to the repository when inside it."""
    argv = list(sys.argv)
    if argv and argv[0]:
        script = Path(argv[0]).resolve()
        if script.is_file() and script.is_relative_to(tracing.ROOT):
            argv[0] = script.relative_to(tracing.ROOT).as_posix()
    return shlex.join(["python", *argv])


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def digest(files: Mapping[str, str]) -> str:
    """The code digest of ``{relative path: sha256 of the file}`` (module docstring).

    >>> digest({"b.py": "00", "a.py": "11"}) == digest({"a.py": "11", "b.py": "00"})
    True
    >>> digest({"a.py": "11"}) == digest({"a.py": "12"})
    False
    """
    lines = "".join(f"{path}\0{files[path]}\n" for path in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def code() -> dict[str, Any]:
    """The repository files this run used, each with its sha256, their :func:`digest`, and
    whether every process of the run was traced (``"traced"``) or only this one."""
    log = os.environ.get(tracing.ENV)
    paths = tracing.files(log)
    files = {p.relative_to(tracing.ROOT).as_posix(): file_sha256(p) for p in sorted(paths)}
    return {
        "digest": digest(files),
        "traced": "every process" if log else "this process",
        "files": files,
    }


def write_json(
    path: str | Path,
    payload: Mapping[str, Any],
    *,
    indent: int = 1,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """Write ``payload`` and its ``"environment"`` as strict JSON to ``path``; returns what it
    wrote (:mod:`edgedp.strict_json`: NaN as null, ±∞ as "inf" and "-inf").

    ``payload`` must not have its own ``"environment"`` entry; ``default`` is
    :func:`json.dumps`'s (how to write objects JSON has no type for).

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = Path(tmp) / "r.json"
    ...     record = write_json(p, {"loss": 0.5})
    ...     sorted(json.loads(p.read_text())["environment"]) == sorted(record["environment"])
    True
    >>> sorted(record["environment"])  # doctest: +NORMALIZE_WHITESPACE
    ['code', 'command', 'cpu_seconds', 'git_modified', 'git_revision', 'packages', 'platform',
     'python', 'started_at', 'wall_seconds']
    """
    if not isinstance(payload, Mapping):
        raise TypeError(f"Expected a mapping of results, got {type(payload).__name__}.")
    if "environment" in payload:
        raise ValueError("The results already have an 'environment' entry.")
    path = Path(path)
    record = {**payload, "environment": environment()}
    text = strict_json.dumps(record, indent=indent, sort_keys=sort_keys, default=default)
    path.write_text(text + "\n")
    return record
