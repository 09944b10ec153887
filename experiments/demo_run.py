"""The demo's stored run: `edgedp demo`'s default (``make demo``) as README shows it.

Runs :func:`edgedp_sim.demo.run_demo` with the embedded default (``--quick``: the small
setting of ``edgedp demo --quick``) in a temporary folder and keeps its summary — every
number of README's demo table and of docs/RESULTS.md's demo block — as
experiments/out/demo_run.json, and a full-page picture of its report (headless Chromium,
``scripts/report_screenshot.py``) as experiments/out/demo_run.png, the picture
README shows. Without a headless browser the picture is not written and the run says so.

Run: python experiments/demo_run.py [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import subprocess
import sys
import tempfile
from pathlib import Path

from edgedp_sim import demo, demo_plans, provenance

import common

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "scripts" / "report_screenshot.py"


def screenshot(report: Path, picture: Path) -> str | None:
    """Write a full-page picture of ``report`` (scripts/report_screenshot.py, in a fresh
    process: the demo's pools and sockets have left this one's descriptors in use); the
    reason it was not written, or None."""
    run = subprocess.run(
        [sys.executable, str(SCREENSHOT), str(report), str(picture)],
        capture_output=True,
        text=True,
    )
    return None if run.returncode == 0 else run.stderr.strip() or f"exit {run.returncode}"


def main() -> int:
    args = common.parser(__doc__).parse_args()
    out = common.out_dir(args)
    config = demo_plans.QUICK if args.quick else demo_plans.DemoConfig()
    with tempfile.TemporaryDirectory(prefix="edgedp-demo-run-") as tmp:
        summary = demo.run_demo(tmp, config, progress=lambda line: print(line, flush=True))
        missing = screenshot(Path(tmp) / "report.html", out / "demo_run.png")
    summary.pop("environment", None)
    summary["files"] = [Path(f).name for f in summary["files"]]
    summary["picture"] = "demo_run.png" if missing is None else None
    provenance.write_json(out / "demo_run.json", summary)
    print(f"wrote {out / 'demo_run.json'}" + ("" if missing else " and demo_run.png"))
    if missing:
        print(f"picture not written: {missing}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
