"""The docs are true where a machine can check them: their ``sh`` blocks run, their links resolve.

* Every fenced block marked ``sh`` in the walkthrough docs runs, in page order, as one bash
  script (``set -euo pipefail``) in a scratch folder that sees the repository's scenario
  files, with this checkout's ``edgedp`` on the PATH. Blocks that need boards, root or
  systemd are marked ``text`` and say so in the page; every block names its kind.
* Every relative link of README.md and docs/*.md names a file that exists, and its
  ``#anchor`` a heading of that file; every repository path the pages mention exists; a
  section cited by name (``DEVICES.md, "Keys"``) is a heading or a lead-in of that page.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Pages whose ``sh`` blocks run (each must have at least one).
RUNNABLE = ["DEVICES.md", "DEVICE_RUNTIME.md", "SCENARIOS.md", "MECHANISMS.md"]
#: Pages whose citations by section name are checked (the others are being rewritten).
OWN = ["README.md", "API.md", "DEVICES.md", "DEVICE_RUNTIME.md", "MECHANISMS.md", "NOTATION.md"]
OWN += ["SCENARIOS.md"]
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```$", re.M | re.S)


def _page(name: str) -> Path:
    return ROOT / name if name == "README.md" else ROOT / "docs" / name


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in FENCE.finditer(text)]


def _script(name: str) -> str:
    blocks = [body for kind, body in _blocks(_page(name).read_text()) if kind == "sh"]
    assert blocks, f"{name}: no sh block"
    parts = [f"echo '== {name} block {i + 1}' >&2\n{body}" for i, body in enumerate(blocks)]
    return "set -euo pipefail\n" + "\n".join(parts)


@pytest.mark.parametrize("name", RUNNABLE)
def test_every_block_says_what_it_is(name):
    kinds = [kind for kind, _ in _blocks(_page(name).read_text())]
    assert all(kinds), f"{name}: a fenced block without a kind (sh: run by the tests; text: not)"


@pytest.mark.parametrize("name", RUNNABLE)
def test_the_sh_blocks_run(name, tmp_path):
    (tmp_path / "edgedp_sim").symlink_to(ROOT / "edgedp_sim")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)  # this checkout's code, whatever the venv was installed from
    out = subprocess.run(
        ["bash", "-c", _script(name)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _headings(text: str) -> list[str]:
    body = FENCE.sub("", text)
    return [m[1].strip() for m in re.finditer(r"^#{1,6} (.+)$", body, re.M)]


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _headings(text):
        slug = _slug(heading)
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def _links(path: Path):
    for m in re.finditer(r"\]\(([^)\s]+)\)", FENCE.sub("", path.read_text())):
        target = m[1]
        if not re.match(r"[a-z]+:", target):
            yield target


def test_relative_links_and_anchors_resolve():
    bad = []
    for path in DOCS:
        for target in _links(path):
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                bad.append(f"{path.name}: {target} (no such file)")
            elif anchor and anchor not in _anchors(dest.read_text()):
                bad.append(f"{path.name}: {target} (no such heading)")
    assert bad == []


PATH_MENTION = re.compile(
    r"(?<![\w/.-])((?:docs|tests|benchmarks|experiments|scripts|examples|edgedp|edgedp_sim"
    r"|edgedp_cli|firmware_py|edgedp_topologies)/[\w./-]*\w)(?:\.\{([\w,]+)\})?"
)


PLACEHOLDERS = {"NAME", "PATH", "RUN_ID", "FAMILY", "MECH"}


def _exists(mention: str) -> bool:
    """A file or folder of the checkout; ``pkg/module.Name`` names module.py's attribute, and
    a path with a placeholder (``families/FAMILY/NAME.py``) stands for any such file."""
    module, _, attribute = mention.rpartition(".")
    return (
        (ROOT / mention).exists()
        or bool(attribute[:1].isupper() and (ROOT / f"{module}.py").exists())
        or any(part.split(".")[0] in PLACEHOLDERS for part in mention.split("/"))
    )


def test_every_repository_path_mentioned_exists():
    bad = []
    for path in DOCS:
        for m in PATH_MENTION.finditer(path.read_text()):
            # a.{json,png} is a.json and a.png
            mentions = [f"{m[1]}.{ext}" for ext in m[2].split(",")] if m[2] else [m[1]]
            bad += [f"{path.name}: {x}" for x in mentions if not _exists(x)]
    assert bad == []


def test_sections_cited_by_name_exist():
    bad = []
    for name in OWN:
        text = re.sub(r"\s+", " ", _page(name).read_text())
        for m in re.finditer(r"\b([A-Z_]+\.md)\]?(?:\([^)]*\))?,? \(?\"([^\"]+)\"", text):
            target = _page(m[1])
            page = target.read_text()
            leads = {x.rstrip(".") for x in re.findall(r"^\*\*?([^*\n]+?)\*\*?", page, re.M)}
            if m[2] not in _headings(page) and m[2] not in leads:
                bad.append(f"{name}: {m[1]}, {m[2]!r}")
    assert bad == []


def test_the_link_check_can_fail(tmp_path):
    page = "# Keys and trust\n\nSee [a](#keys-and-trust), [b](#nothing), [c](NOPE.md).\n"
    assert _anchors(page) == {"keys-and-trust"}
    doc = tmp_path / "x.md"
    doc.write_text(page)
    assert list(_links(doc)) == ["#keys-and-trust", "#nothing", "NOPE.md"]
    assert _slug("`make_plan` — one builder") == "make_plan--one-builder"
    assert not _exists("docs/NOPE.md") and not _exists("tests/test_nope.py")
    assert _exists("edgedp_sim/audit_plans.Setting") and _exists("edgedp/families/FAMILY/NAME.py")
    assert _slug("5. Resume, and what to do when an agent refuses") == (
        "5-resume-and-what-to-do-when-an-agent-refuses"
    )
