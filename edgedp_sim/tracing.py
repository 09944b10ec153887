"""Which project files a run used: an audit hook that logs them from every process of the run.

:func:`install` adds a :func:`sys.addaudithook` hook that appends to one log file, for every
process that shares it (forked workers inherit the hook and the log's descriptor; a fresh
interpreter installs it again from the ``sitecustomize`` that :func:`environment` puts on
its ``PYTHONPATH``):

* ``module NAME`` — the first import of a module of the project's packages (:data:`PACKAGES`)
  or of a sibling of the experiment scripts;
* ``file PATH`` — a file of the project's source folders (:data:`SOURCE_DIRS`) opened for
  reading (graphs, scenario files), outputs in ``experiments/out`` excepted.

:func:`files` turns a log into the set of repository files (less :data:`RECORDERS`);
:mod:`edgedp_sim.provenance` hashes them into an output's code digest. This module imports
the standard library only: it is loaded by file path before anything else of the run.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = [
    "ENV",
    "PACKAGES",
    "RECORDERS",
    "ROOT",
    "SOURCE_DIRS",
    "environment",
    "files",
    "install",
]

#: Environment variable holding the log's path while a traced run lasts.
ENV = "EDGEDP_TRACE_LOG"
#: The repository: the folder holding the project's packages.
ROOT = Path(__file__).resolve().parent.parent
#: Top-level packages of the project (their modules are what a run can depend on).
PACKAGES = ("edgedp", "edgedp_sim", "edgedp_topologies", "edgedp_cli", "firmware_py")
#: Folders whose files are code or code's data; experiments/out holds results, not code.
SOURCE_DIRS = (*PACKAGES, "experiments")
#: The modules that make the record itself (this one and edgedp_sim/provenance.py): they
#: compute nothing a result depends on, so they are left out of every record.
RECORDERS = ("edgedp_sim/provenance.py", "edgedp_sim/tracing.py")
_OUTPUTS = ROOT / "experiments" / "out"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def install(log: str | os.PathLike[str]) -> None:
    """Log this process's (and its forks') project imports and reads to ``log`` (appended)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sources = tuple(str(ROOT / d) + os.sep for d in SOURCE_DIRS)
    outputs = str(_OUTPUTS) + os.sep
    siblings = frozenset(p.stem for p in (ROOT / "experiments").glob("*.py"))
    seen: set[str] = set()

    def hook(event: str, args: tuple) -> None:
        try:
            if event == "import":
                name = args[0]
                if name in seen or not (name.partition(".")[0] in PACKAGES or name in siblings):
                    return
                line = f"module {name}"
            elif event == "open":
                path, mode, flags = args
                if path is None or isinstance(path, int):
                    return
                if (mode is not None and set(str(mode)) & set("wax+")) or (flags & _WRITE_FLAGS):
                    return
                full = os.path.abspath(os.fsdecode(path))
                if not full.startswith(sources) or full.startswith(outputs):
                    return
                if "__pycache__" in full or full.endswith(".pyc"):
                    return
                line = f"file {full}"
            else:
                return
            if line not in seen:
                seen.add(line)
                os.write(fd, (line + "\n").encode())
        except Exception:  # noqa: BLE001  (a hook that raises would break the traced call)
            return

    sys.addaudithook(hook)


def environment(log: str | os.PathLike[str], folder: str | os.PathLike[str]) -> dict[str, str]:
    """Variables for a child interpreter that traces itself into ``log``: a ``sitecustomize``
    written into ``folder`` (a scratch folder) installs :func:`install` at start-up."""
    here = Path(__file__).resolve()
    (Path(folder) / "sitecustomize.py").write_text(
        "import importlib.util\n"
        f"_spec = importlib.util.spec_from_file_location('_edgedp_tracing', {str(here)!r})\n"
        "_mod = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_mod)\n"
        f"_mod.install({os.fspath(log)!r})\n"
    )
    path = os.environ.get("PYTHONPATH")
    return {
        ENV: os.fspath(log),
        "PYTHONPATH": os.fspath(folder) + (os.pathsep + path if path else ""),
    }


def files(log: str | os.PathLike[str] | None = None) -> set[Path]:
    """Repository files a run used: those in ``log`` (imports resolved to their source) and
    this process's loaded project modules and ``__main__`` script."""
    names = {
        name
        for name, mod in list(sys.modules.items())
        if name.partition(".")[0] in PACKAGES and getattr(mod, "__file__", None)
    }
    found: set[Path] = set()
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        found.add(Path(main).resolve())
    if log is not None and os.path.exists(log):
        for line in Path(log).read_text().splitlines():
            kind, _, value = line.partition(" ")
            if kind == "module":
                names.add(value)
            elif kind == "file":
                found.add(Path(value))
    for name in names:
        origin = _origin(name)
        if origin is not None:
            found.add(origin)
    return {
        p
        for p in found
        if p.is_file()
        and _inside_sources(p)
        and p.resolve().relative_to(ROOT).as_posix() not in RECORDERS
    }


def _origin(name: str) -> Path | None:
    path = getattr(sys.modules.get(name), "__file__", None)
    if path is None and name.partition(".")[0] in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        path = spec.origin if spec is not None else None
    elif path is None:  # a sibling of the experiment scripts
        path = ROOT / "experiments" / f"{name}.py"
    return Path(path).resolve() if path else None


def _inside_sources(path: Path) -> bool:
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return False
    return rel.parts[0] in SOURCE_DIRS and not path.resolve().is_relative_to(_OUTPUTS)
