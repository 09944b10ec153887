"""Cost of the command line's structure: ``edgedp plan`` start-up and the strict JSON writer.

* ``plan``: wall time of one ``edgedp plan`` process (a small dp-dsgd plan, ``--json``) of
  this tree against the single ``edgedp plan --mechanism ... --out`` of a baseline tree
  (``--baseline DIR``, e.g. a checkout of main), runs alternated, median of ``--repeats``;
  both write the same plan bytes (checked).
* ``json``: :func:`edgedp.strict_json.dumps` of a leak-sized report (a 500-point curve per
  attacker, a few infinities and NaNs) against ``json.dumps`` of the same report with NaN and
  ∞ already replaced (the cheapest writer that is also strict JSON).

Run: ``PYTHONPATH=. python benchmarks/cli.py --baseline /path/to/main``. Prints the machine's
load (os.getloadavg) with the ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import median_seconds  # noqa: E402

ARGS = ["--topology", "ring:8", "--steps", "20", "--participation", "20,1"]
ARGS += ["--noise-multiplier", "1", "--json"]


def _plan_seconds(tree: str, out: Path, *, new: bool) -> float:
    argv = ["plan", "sgd", str(out), *ARGS] if new else ["plan", *ARGS, "--mechanism"]
    if not new:
        argv += ["dp-dsgd", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=tree)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "edgedp_cli", *argv],
        env=env,
        check=True,
        capture_output=True,
        cwd=out.parent,
    )  # fmt: skip (cwd: not either tree)
    return time.perf_counter() - start


def bench_plan(baseline: str, repeats: int) -> dict:
    here = str(Path(__file__).resolve().parent.parent)
    ours, base = [], []
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "new.plan", Path(tmp) / "old.plan"
        for _ in range(repeats):
            ours.append(_plan_seconds(here, a, new=True))
            base.append(_plan_seconds(baseline, b, new=False))
        same = hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    return {
        "plan_seconds": statistics.median(ours),
        "baseline_plan_seconds": statistics.median(base),
        "ratio": statistics.median(ours) / statistics.median(base),
        "same_plan_bytes": same,
    }


def bench_json(repeats: int) -> dict:
    from edgedp import strict_json

    curve = [math.sin(i) for i in range(500)]
    curve[3], curve[7] = math.nan, math.inf
    report = {
        "attackers": [
            {"attacker": f"hbc:{u}", "nmi_curve": curve, "epsilon": math.inf, "mu": -math.inf}
            for u in range(8)
        ],
        "n_trials": 1000,
    }
    plain = strict_json.clean(report)  # the same report, already strict
    ours = median_seconds(lambda: strict_json.dumps(report, sort_keys=True), repeats)
    base = median_seconds(lambda: json.dumps(plain, sort_keys=True), repeats)
    return {"strict_json_ms": ours * 1e3, "json_dumps_ms": base * 1e3, "ratio": ours / base}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="a checkout with the single `edgedp plan` (e.g. main)")
    ap.add_argument("--repeats", type=int, default=5, help="plan processes per tree")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    js = bench_json(200)
    print(
        f"json  strict_json.dumps {js['strict_json_ms']:.2f} ms, json.dumps of the cleaned "
        f"report {js['json_dumps_ms']:.2f} ms: ratio {js['ratio']:.2f}"
    )
    if args.baseline:
        pl = bench_plan(args.baseline, args.repeats)
        print(
            f"plan  edgedp plan sgd {pl['plan_seconds']:.2f} s, baseline edgedp plan "
            f"{pl['baseline_plan_seconds']:.2f} s: ratio {pl['ratio']:.2f}; same plan bytes: "
            f"{pl['same_plan_bytes']}"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
