"""Long horizons: ``edgedp plan`` of every compact factor at T = 5,000 and 20,000.

For each factor — identity (dp-dsgd), AntiPGD, banded (p = 4), BLT (2 buffers) — on
``ring:8``, digits-parity in batches of 10 (b = 17 batches per epoch, k = ⌈T/17⌉), one
``edgedp plan`` process of this tree and one of a baseline tree (``--baseline DIR``, e.g. a
``git worktree`` of main), each child's wall and CPU seconds and peak resident memory
(``os.wait4``), and the ratios. The baseline runs under a time limit (``--baseline-timeout``)
and an address-space limit (``--baseline-memory-gb``) so that its T × T work cannot take the
shared machine down; a baseline that hits either is reported as such. Prints the load
average before and after (2 shared cores).

Run: ``PYTHONPATH=. python benchmarks/long_horizon.py --baseline /path/to/main``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = str(Path(__file__).resolve().parent.parent)
FACTORS = {
    "identity": ["sgd", "--mechanism", "dp-dsgd"],
    "antipgd": ["mf", "--mechanism", "antipgd"],
    "banded": ["mf", "--mechanism", "banded", "--bandwidth", "4"],
    "blt": ["mf", "--mechanism", "blt", "--buffers", "2"],
}


def _run(tree: str, argv: list[str], *, timeout: float | None, memory_gb: float | None) -> dict:
    """One ``edgedp`` child: wall, CPU, peak RSS, its JSON report (or why it stopped)."""

    def limit() -> None:
        if memory_gb is not None:
            cap = int(memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "edgedp_cli", *argv],
            env=env,
            stdout=out,
            stderr=err,
            preexec_fn=limit,
            cwd=tempfile.gettempdir(),
        )
        status, usage, stopped = None, None, None
        while status is None:
            pid, code, ru = os.wait4(child.pid, os.WNOHANG)
            if pid:
                status, usage = code, ru
                break
            if timeout is not None and time.perf_counter() - start > timeout:
                child.kill()
                _, status, usage = os.wait4(child.pid, 0)
                stopped = f"stopped after {timeout:.0f} s"
            time.sleep(0.05)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    row = {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "ok": status == 0 and stopped is None,
    }
    if row["ok"]:
        row["report"] = json.loads(text)
    else:
        row["stopped"] = stopped or (
            "out of memory (address-space limit)"
            if "MemoryError" in errors
            else errors.strip().splitlines()[-1:]
        )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="a tree of the code to compare with (e.g. main)")
    ap.add_argument("--steps", default="5000,20000", help="horizons, comma-separated")
    ap.add_argument("--baseline-timeout", type=float, default=180.0)
    ap.add_argument("--baseline-memory-gb", type=float, default=4.0)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in (int(s) for s in args.steps.split(",")):
            for name, family in FACTORS.items():
                argv = ["plan", *family, str(Path(tmp) / "p.plan"), "--topology", "ring:8"]
                argv += ["--steps", str(T), "--batch-size", "10", "--noise-multiplier", "1"]
                argv += ["--participation", f"{-(-T // 17)},17", "--json"]
                ours = _run(HERE, argv, timeout=None, memory_gb=None)
                base = None
                if args.baseline:
                    base = _run(
                        args.baseline,
                        argv,
                        timeout=args.baseline_timeout,
                        memory_gb=args.baseline_memory_gb,
                    )
                rows.append({"factor": name, "steps": T, "ours": ours, "baseline": base})
                _print(rows[-1])
    print(f"load average {os.getloadavg()[0]:.1f} after")
    if args.json:
        from edgedp_sim import provenance

        provenance.write_json(Path(args.json), {"rows": rows})


def _print(row: dict) -> None:
    ours, base = row["ours"], row["baseline"]
    report = ours.get("report", {})
    line = (
        f"T = {row['steps']:>6} {row['factor']:<9} this tree: {ours['wall_s']:6.1f} s wall, "
        f"{ours['cpu_s']:6.1f} s CPU, {ours['peak_mb']:7.0f} MB"
    )
    if not ours["ok"]:
        line += f" FAILED: {ours['stopped']}"
    if base is not None:
        if base["ok"]:
            line += (
                f" | baseline: {base['cpu_s']:6.1f} s CPU, {base['peak_mb']:7.0f} MB | ratio "
                f"CPU {ours['cpu_s'] / base['cpu_s']:.3f}, memory "
                f"{ours['peak_mb'] / base['peak_mb']:.3f}"
            )
            same = base["report"].get("plan_hash") == report.get("plan_hash")
            line += f", same plan: {same}"
        else:
            line += f" | baseline: {base['stopped']} ({base['peak_mb']:.0f} MB at the end)"
    print(line, flush=True)
    print(
        f"         loss ratio to dp-dsgd {report.get('loss_ratio_to_dp_dsgd')}, skipped: "
        f"{report.get('skipped', [])}",
        flush=True,
    )


if __name__ == "__main__":
    main()
