"""Regenerate the stored experiment results, tell which are stale, and write docs/RESULTS.md's
generated tables from them.

    python experiments/results.py run [--quick] [--stale] [NAME ...]   (make results)
    python experiments/results.py check [--quick]
    python experiments/results.py doc [--check]
    python experiments/results.py times

``run`` runs each experiment script (all of them, the NAMEs given, or with ``--stale`` those
whose stored output is stale or missing) in its own traced interpreter
(:mod:`edgedp_sim.tracing`), so the output's code record lists every project file any of its
processes imported or read; ``--quick`` runs the small versions into experiments/out/quick.
``check`` lists the stale outputs and why (exit 1 if any). ``doc`` rewrites the blocks between
``<!-- generated: NAME -->`` and ``<!-- end -->`` in docs/RESULTS.md and README.md from the
stored outputs (:mod:`results_doc`); ``--check`` only says whether the file is up to date. ``times``
prints how long each experiment's full and quick version took when last run
(experiments/durations.json, which ``run`` updates and reads for its expected time left).

An output is stale when a file its code record lists has changed or gone (its sha256 differs),
when it was not written by a traced run, or when it is missing. tests/test_results.py fails on
a stale output, re-runs the quick versions marked ``ci`` and compares them with the stored ones
(:func:`compare`), and checks that docs/RESULTS.md equals what ``doc`` generates.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgedp_sim import provenance, tracing

from common import OUT, QUICK_OUT

ROOT = tracing.ROOT
HERE = Path(__file__).resolve().parent
DOC = ROOT / "docs" / "RESULTS.md"
README = ROOT / "README.md"
#: relative tolerance of :func:`compare` on numbers (integers, strings and booleans: exact)
RTOL = 1e-9
#: the measured durations of the last run of each experiment, full and quick (written by run)
DURATIONS = HERE / "durations.json"
DURATIONS_ABOUT = (
    "Wall and CPU seconds of the last run of each experiment's full and quick version, the "
    "1-minute load average when it started (a shared 2-core machine), its date and revision. "
    "Written by python experiments/results.py run (make results); read for its progress line "
    "and by python experiments/results.py times."
)


@dataclass(frozen=True, slots=True)
class Experiment:
    """One script of experiments/ and how it is run.

    ``ci``: the tests re-run the quick version and compare it with the stored one (the
    quick versions that take more than about a minute are left to ``make results QUICK=1``).
    How long each version takes is measured, not declared: :data:`DURATIONS`."""

    name: str
    ci: bool = True

    @property
    def script(self) -> Path:
        return HERE / f"{self.name}.py"

    def output(self, *, quick: bool = False) -> Path:
        return (QUICK_OUT if quick else OUT) / f"{self.name}.json"

    def command(self, *, quick: bool = False, out_dir: Path | None = None) -> list[str]:
        cmd = [sys.executable, str(self.script.relative_to(ROOT))]
        if quick:
            cmd.append("--quick")
        if out_dir is not None:
            cmd += ["--out-dir", str(out_dir)]
        return cmd


EXPERIMENTS = (
    Experiment("audit_power", ci=False),
    Experiment("audit_table"),
    Experiment("cross_agent_dropout"),
    Experiment("cross_agent_side_by_side"),
    Experiment("demo_run", ci=False),
    Experiment("dome_tradeoff", ci=False),
    Experiment("event_faults"),
    Experiment("ksg_vs_gaussian"),
    Experiment("leakage_table"),
    Experiment("leakage_table4"),
    Experiment("mafalda_comparison"),
    Experiment("mafalda_protocol"),
    Experiment("mf_multi_epoch"),
    Experiment("pndp_distance"),
    Experiment("pndp_fig2"),
    Experiment("sr_gt_digits"),
    Experiment("sr_gt_sensor_fusion"),
    Experiment("sr_gt_table4_fit"),
    Experiment("step_size", ci=False),
    Experiment("whisper_agent_level"),
    Experiment("whisper_fig1"),
    Experiment("whisper_tasks"),
)
BY_NAME = {e.name: e for e in EXPERIMENTS}


# ---------------------------------------------------------------- running
def traced(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Run ``command`` (a Python script) from the repository with every Python process it
    starts traced (:mod:`edgedp_sim.tracing`); ``kwargs`` go to :func:`subprocess.run`."""
    with tempfile.TemporaryDirectory(prefix="edgedp-trace-") as tmp:
        env = {**os.environ, **tracing.environment(Path(tmp) / "trace.log", tmp)}
        return subprocess.run(command, cwd=ROOT, env=env, check=True, **kwargs)


def run_one(experiment: Experiment, *, quick: bool = False, out_dir: Path | None = None) -> float:
    """Run ``experiment`` traced (its output records every process's files); returns the wall
    seconds. Raises CalledProcessError when the script fails."""
    start = time.perf_counter()
    traced(experiment.command(quick=quick, out_dir=out_dir))
    return time.perf_counter() - start


def _mode(quick: bool) -> str:
    return "quick" if quick else "full"


def durations() -> dict[str, dict[str, dict[str, Any]]]:
    """{experiment: {"full"|"quick": {"wall_seconds", "cpu_seconds", "load", "measured",
    "git_revision"}}}: the last measured run of each version (:data:`DURATIONS`)."""
    if not DURATIONS.exists():
        return {}
    return json.loads(DURATIONS.read_text())["experiments"]


def record_duration(experiment: Experiment, *, quick: bool, load: float) -> None:
    """Store in :data:`DURATIONS` how long the run that wrote ``experiment``'s stored output
    took (its environment's wall and CPU seconds) and the load average when it started."""
    env = json.loads(experiment.output(quick=quick).read_text())["environment"]
    with open(DURATIONS.with_suffix(".lock"), "a") as lock:  # runs in parallel lanes
        fcntl.flock(lock, fcntl.LOCK_EX)
        _store_duration(experiment, quick=quick, load=load, env=env)


def _store_duration(
    experiment: Experiment, *, quick: bool, load: float, env: dict[str, Any]
) -> None:
    table = durations()
    table.setdefault(experiment.name, {})[_mode(quick)] = {
        "wall_seconds": round(env["wall_seconds"], 1),
        "cpu_seconds": round(env["cpu_seconds"], 1),
        "load": round(load, 1),
        "measured": env["started_at"][:10],
        "git_revision": (env.get("git_revision") or "")[:10],
    }
    # registry order first; entries of experiments this process does not know (another
    # checkout's run writing the same file) are kept, not dropped
    ordered = {e.name: table[e.name] for e in EXPERIMENTS if e.name in table}
    ordered |= {name: entry for name, entry in table.items() if name not in ordered}
    provenance.write_json(DURATIONS, {"about": DURATIONS_ABOUT, "experiments": ordered})


def expected_seconds(experiment: Experiment, *, quick: bool) -> float | None:
    """The wall seconds of the last measured run of this version (None: never measured)."""
    entry = durations().get(experiment.name, {}).get(_mode(quick))
    return None if entry is None else float(entry["wall_seconds"])


def _clock(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def run(experiments: Iterable[Experiment], *, quick: bool) -> None:
    """Run each experiment in turn, showing progress and the expected time left (from the
    last measured durations), and record the durations measured now."""
    todo = list(experiments)
    expected = [expected_seconds(e, quick=quick) for e in todo]
    started = time.perf_counter()
    for i, (e, guess) in enumerate(zip(todo, expected, strict=True), 1):
        elapsed = time.perf_counter() - started
        left = expected[i - 1 :]
        known = sum(x for x in left if x is not None)
        unknown = sum(x is None for x in left)
        eta = f"~{_clock(known)} left" + (f" + {unknown} never measured" if unknown else "")
        this = "never measured" if guess is None else f"last took {_clock(guess)}"
        print(
            f"== [{i}/{len(todo)}] {e.name} ({_mode(quick)}; {this}); {_clock(elapsed)} "
            f"elapsed, {eta}",
            file=sys.stderr,
            flush=True,
        )
        load = os.getloadavg()[0]
        seconds = run_one(e, quick=quick)
        record_duration(e, quick=quick, load=load)
        print(f"== {e.name}: {_clock(seconds)}", file=sys.stderr, flush=True)
    total = _clock(time.perf_counter() - started)
    print(f"== {len(todo)} experiment(s) in {total}", file=sys.stderr)


def timing_table() -> str:
    """How long each experiment took, full and quick (from :data:`DURATIONS`)."""
    table = durations()
    lines = [
        f"{'experiment':<26}{'full wall':>11}{'full CPU':>11}{'load':>6}"
        f"{'quick wall':>12}{'quick CPU':>11}{'load':>6}  in CI"
    ]
    total = {"full": 0.0, "quick": 0.0}
    for e in EXPERIMENTS:
        cells = []
        for mode in ("full", "quick"):
            m = table.get(e.name, {}).get(mode)
            if m is None:
                cells += ["–", "–", "–"]
                continue
            total[mode] += m["wall_seconds"]
            cells += [_clock(m["wall_seconds"]), _clock(m["cpu_seconds"]), f"{m['load']:.1f}"]
        lines.append(
            f"{e.name:<26}{cells[0]:>11}{cells[1]:>11}{cells[2]:>6}{cells[3]:>12}"
            f"{cells[4]:>11}{cells[5]:>6}  {'yes' if e.ci else 'no'}"
        )
    lines.append(
        f"{'all (wall)':<26}{_clock(total['full']):>11}{'':>17}{_clock(total['quick']):>12}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------- staleness
def stale(path: Path, *, root: Path = ROOT) -> list[str]:
    """Why the output at ``path`` does not come from the current code ([] if it does)."""
    if not path.exists():
        return [f"{path.name} is missing"]
    data = json.loads(path.read_text())
    env = (data.get("environment") if isinstance(data, dict) else None) or {}
    code = env.get("code")
    if not code:
        return ["no code record (written before outputs recorded their code)"]
    reasons = []
    if code.get("traced") != "every process":
        reasons.append("not written by a traced run (python experiments/results.py run)")
    files = code.get("files") or {}
    if provenance.digest(files) != code.get("digest"):
        reasons.append("its code digest does not match its file list")
    for rel, sha in sorted(files.items()):
        current = root / rel
        if not current.is_file():
            reasons.append(f"{rel} is gone")
        elif provenance.file_sha256(current) != sha:
            reasons.append(f"{rel} changed")
    return reasons


def stale_outputs(*, quick: bool) -> dict[str, list[str]]:
    """{experiment name: reasons} for every stale output of the given mode."""
    found = {e.name: stale(e.output(quick=quick)) for e in EXPERIMENTS}
    return {name: why for name, why in found.items() if why}


# ---------------------------------------------------------------- comparison
def volatile(key: str) -> bool:
    """Keys that differ between two runs of the same code: where and how long it ran."""
    return key == "environment" or "seconds" in key or key.endswith("per_second")


def compare(stored: Any, fresh: Any, *, rtol: float = RTOL, where: str = "") -> list[str]:
    """Differences between two outputs, volatile keys left out: floats within ``rtol``
    (relative; NaN equals NaN), everything else exactly.

    >>> compare({"a": 1.0, "seconds": 3}, {"a": 1.0 + 1e-12, "seconds": 4})
    []
    >>> compare({"a": [1, 2]}, {"a": [1, 3]})
    ['a[1]: 2 != 3']
    """
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(stored) | set(fresh), key=str):
            if volatile(str(key)):
                continue
            sub = f"{where}.{key}" if where else str(key)
            if key not in stored or key not in fresh:
                out.append(f"{sub}: only in the {'fresh' if key in fresh else 'stored'} output")
            else:
                out += compare(stored[key], fresh[key], rtol=rtol, where=sub)
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{where}: {len(stored)} items != {len(fresh)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(stored, fresh, strict=True))
            for d in compare(a, b, rtol=rtol, where=f"{where}[{i}]")
        ]
    if isinstance(stored, bool) or isinstance(fresh, bool):
        same = type(stored) is type(fresh) and stored == fresh
        return [] if same else [f"{where}: {stored!r} != {fresh!r}"]
    if _real(stored) and _real(fresh) and (isinstance(stored, float) or isinstance(fresh, float)):
        a, b = float(stored), float(fresh)
        if (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= rtol * max(abs(a), abs(b)):
            return []
        return [f"{where}: {stored!r} != {fresh!r}"]
    return [] if stored == fresh else [f"{where}: {stored!r} != {fresh!r}"]


def _real(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


# ---------------------------------------------------------------- command line
def _select(names: list[str]) -> Iterator[Experiment]:
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown experiment(s) {unknown}; choose from {sorted(BY_NAME)}")
    return (BY_NAME[n] for n in names) if names else iter(EXPERIMENTS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p_run = sub.add_parser("run", help="run experiments (all, or the NAMEs given)")
    p_run.add_argument("names", nargs="*", metavar="NAME")
    p_run.add_argument("--quick", action="store_true", help="the small versions (out/quick)")
    p_run.add_argument("--stale", action="store_true", help="only stale or missing outputs")
    p_check = sub.add_parser("check", help="list stale outputs (exit 1 if any)")
    p_check.add_argument("--quick", action="store_true")
    sub.add_parser("times", help="how long each experiment took, full and quick")
    p_doc = sub.add_parser("doc", help="write docs/RESULTS.md's and README's generated blocks")
    p_doc.add_argument("--check", action="store_true", help="exit 1 if it is not up to date")
    args = ap.parse_args(argv)
    if args.verb == "run":
        todo = list(_select(args.names))
        if args.stale:
            todo = [e for e in todo if stale(e.output(quick=args.quick))]
        run(todo, quick=args.quick)
        return 0
    if args.verb == "check":
        found = stale_outputs(quick=args.quick)
        for name, why in found.items():
            print(f"{name}: stale ({'; '.join(why)})")
        if not found:
            print(f"every {'quick ' if args.quick else ''}output comes from the current code")
        return 1 if found else 0
    if args.verb == "times":
        print(timing_table())
        return 0
    import results_doc

    stale_docs = []
    for path, blocks in ((DOC, results_doc.BLOCKS), (README, results_doc.README_BLOCKS)):
        text = path.read_text()
        fresh = results_doc.render(text, blocks)
        name = path.relative_to(ROOT)
        if args.check:
            print(f"{name} is {'up to date' if fresh == text else 'stale'}")
            stale_docs += [name] if fresh != text else []
        elif fresh != text:
            path.write_text(fresh)
            print(f"wrote {name}", file=sys.stderr)
    return 1 if stale_docs else 0


if __name__ == "__main__":
    sys.exit(main())
