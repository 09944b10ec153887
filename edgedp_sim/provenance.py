"""Where a results file came from: Python, package versions and the git revision.

Every results JSON the demo, ``edgedp sim`` and ``experiments/`` write goes through
:func:`write_json`, which adds an ``"environment"`` entry (:func:`environment`) to the payload.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from edgedp import strict_json

__all__ = ["PACKAGES", "environment", "write_json"]

#: Distributions whose versions a results file records (None: not installed).
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
            ["git", "status", "--porcelain", "--untracked-files=no"],
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
    >>> sorted(record["environment"])
    ['git_modified', 'git_revision', 'packages', 'platform', 'python']
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
