"""Packaging: extras named where they are needed, pinned installs, project files, the wheel."""

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from edgedp import extras

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
#: import name -> distribution name, where they differ
#: The import packages the wheel installs.
INSTALLED_PACKAGES = ("edgedp", "edgedp_sim", "firmware_py", "edgedp_topologies", "edgedp_cli")
DISTRIBUTION = {"sklearn": "scikit-learn", "dp_accounting": "dp-accounting", "distributed": "dask"}


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement string."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement)[0]).lower()


def _packages(extra: str) -> set[str]:
    """Distributions an extra installs, following edgedp[...] self-references."""
    out = set()
    for req in EXTRAS[extra]:
        inner = re.fullmatch(r"edgedp\[([^\]]+)\]", req)
        if inner:
            for sub in inner[1].split(","):
                out |= _packages(sub.strip())
        else:
            out.add(_name(req))
    return out


def _mentioned_extras():
    """(where, extras) of every `edgedp[...]` in the docs and the code users see."""
    files = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("edgedp", "edgedp_cli", "edgedp_sim", "firmware_py"):
        files += sorted((ROOT / folder).rglob("*.py"))
    for path in files:
        for m in re.finditer(r"edgedp\[([A-Za-z0-9_,-]+)\]", path.read_text()):
            if m[1] != "EXTRA":  # the placeholder in extras.py's comments
                yield f"{path.relative_to(ROOT)}: {m[0]}", m[1].split(",")


def test_every_install_hint_names_an_extra_that_exists():
    unknown = [where for where, extras in _mentioned_extras() if set(extras) - set(EXTRAS)]
    assert unknown == []


def test_every_optional_module_maps_to_an_extra_that_installs_it():
    for module, extra in extras.EXTRAS.items():
        assert DISTRIBUTION.get(module, module) in _packages(extra), (module, extra)


def test_extras_split_device_runtime_from_offline_tools():
    assert _packages("onnx") == {"onnxruntime"}  # what a device needs for ONNX models
    assert _packages("onnx-build") == {"onnx"}
    assert "cvxpy" in _packages("reference")
    assert all("cvxpy" not in _packages(e) for e in EXTRAS if e not in ("reference", "all"))
    # the demo installs what `edgedp demo` imports and no test tools or reference solvers
    assert _packages("demo") >= {"scipy", "simpy", "matplotlib", "scikit-learn"}
    assert not _packages("demo") & {"pytest", "hypothesis", "cvxpy", "mypy", "onnx"}
    assert _packages("all") == set().union(*(_packages(e) for e in EXTRAS if e != "all"))


def test_cvxpy_missing_is_one_clear_error():
    code = (
        "import sys; sys.modules['cvxpy'] = None\n"
        "import numpy as np\n"
        "from edgedp.families.cross import covariance as whisper\n"
        "whisper.optimal_covariance_cvxpy(np.full((2, 2), 0.5))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ImportError: cvxpy is not installed (the reference solver): "
        "pip install 'edgedp[reference]'"
    )


def test_constraints_pin_everything_make_installs():
    lines = [
        s.strip()
        for s in (ROOT / "constraints.txt").read_text().splitlines()
        if s.strip() and not s.startswith("#")
    ]
    pins = {}
    for line in lines:
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
        assert m, f"not an exact pin: {line!r}"
        pins[_name(m[1])] = m[2]
    assert "edgedp" not in pins
    base = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert base | _packages("all") <= set(pins)
    makefile = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in re.search(r"^PIP\s*:=(.*)$", makefile, re.M)[1]
    for stamp in ("$(ALL):", "$(DEMO):"):  # what `make test` and `make demo` install
        recipe = makefile.split(stamp, 1)[1].split("\n\n", 1)[0]
        assert re.search(r"^\t\$\(PIP\) -e '\.\[", recipe, re.M), recipe


def test_citation_is_cff_with_the_package_version_and_the_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["version"] == PYPROJECT["project"]["version"]
    assert cff["license"] == "Apache-2.0" and cff["authors"] == [{"name": "edgedp developers"}]
    # the five source papers (papers 000-004 of the design), titles as the papers print them
    assert [r["title"] for r in cff["references"]] == [
        "Unified Privacy Guarantees for Decentralized Learning via Matrix Factorization",
        "Whisper D-SGD: Correlated Noise Across Agents for Differentially Private "
        "Decentralized Learning",
        "Communication Efficient, Differentially Private Distributed Optimization using "
        "Correlation-Aware Sketching",
        "Multi-Epoch Matrix Factorization Mechanisms for Private Machine Learning",
        "Enhancing Accuracy in Differentially Private Distributed Optimization Through "
        "Sensitivity Reduction",
    ]
    assert all(r["authors"] and r["type"] for r in cff["references"])


def test_license_is_the_apache_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0")
    assert "END OF TERMS AND CONDITIONS" in text and "Copyright 2026 edgedp developers" in text


def test_wheel_ships_license_and_type_marker(tmp_path):
    pytest.importorskip("setuptools", minversion="77")  # the dev extra installs it
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "edgedp/py.typed" in names
    assert any(re.search(r"\.dist-info/licenses/LICENSE$", n) for n in names)
    assert re.search(r"^License-Expression: Apache-2.0$", meta, re.M)
    provided = set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    assert provided == set(EXTRAS)
    assert re.search(r"^Requires-Dist: onnx>=[^\n]*extra == \"onnx-build\"", meta, re.M)


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel `pip wheel .` builds, from a copy of the sources (offline, no isolation)."""
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for package in INSTALLED_PACKAGES:
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--quiet", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("edgedp-*.whl")
    return wheel


def test_wheel_installs_in_a_clean_venv_and_its_commands_run(tmp_path):
    """The built wheel, installed with the extra `edgedp plan` needs (`plan`: no simulator) into a
    fresh venv (no repository on the path, packages from the registry pinned by
    constraints.txt): `edgedp --version`,
    `edgedp plan`, `edgedp account` and `edgedp-agent --help` work, and the wheel installs
    no top-level module that another distribution could own."""
    pytest.importorskip("setuptools", minversion="77")
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        top = {n.split("/", 1)[0] for n in zf.namelist() if "/" in n}
    top = {t for t in top if not t.endswith((".dist-info", ".data"))}
    assert top == set(INSTALLED_PACKAGES), top
    assert all(t == "edgedp" or t.startswith("edgedp_") or t == "firmware_py" for t in top)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bindir = venv / "bin"
    install = subprocess.run(
        [str(bindir / "python"), "-m", "pip", "install", "--quiet", "-c"]
        + [str(ROOT / "constraints.txt"), f"{wheel}[plan]"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    run = dict(capture_output=True, text=True, cwd=tmp_path, env={"PATH": str(bindir)})

    version = subprocess.run([str(bindir / "edgedp"), "--version"], **run)
    assert version.returncode == 0 and version.stdout.strip() == (
        f"edgedp {PYPROJECT['project']['version']}"
    )
    plan = subprocess.run(
        [str(bindir / "edgedp"), "--json", "plan", "sgd", "p.plan", "--topology", "ring:8"]
        + ["--steps", "20", "--participation", "20,1", "--noise-multiplier", "2"],
        **run,
    )
    assert plan.returncode == 0, plan.stderr
    assert (tmp_path / "p.plan").stat().st_size > 0
    account = subprocess.run([str(bindir / "edgedp"), "--json", "account", "p.plan"], **run)
    assert account.returncode == 0, account.stderr
    assert json.loads(account.stdout)["plan_hash"] == json.loads(plan.stdout)["plan_hash"]
    agent = subprocess.run([str(bindir / "edgedp-agent"), "--help"], **run)
    assert agent.returncode == 0 and "--config" in agent.stdout
    where = subprocess.run(
        [str(bindir / "python"), "-c", "import edgedp; print(edgedp.__file__)"], **run
    )
    assert str(venv) in where.stdout  # the installed copy, not the repository's


def test_make_test_type_checks_the_package():
    """`make test` (and `make lint`) run mypy over edgedp/, which ships py.typed."""
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test:", "lint:"):
        recipe = makefile.split(f"\n{target}", 1)[1].split("\n\n", 1)[0]
        assert re.search(r"^\t\$\(VENV\)/bin/mypy$", recipe, re.M), recipe
    assert PYPROJECT["tool"]["mypy"]["files"] == ["edgedp"]
    assert (ROOT / "edgedp" / "py.typed").exists()
    assert "mypy" in _packages("dev")
