"""MLP 64-128-10: per-step time of each backend, session memory, and batch-engine throughput.

    python benchmarks/models.py [--sim-only] [--before TREE] [--nodes 100] [--rounds 12]

A step here is what an agent does with its model each round: per-example gradients of a
batch of 32 examples (d = 9,610) and the per-example clipped sum. Backends: the numpy
``DenseModel`` (elementwise products reduced over the last axis — bit-reproducible, no
BLAS) and ``OnnxModel`` on the float32 and float64 training graphs (one thread, IOBinding
with preallocated outputs). For reference, the same float32 graph through a plain
``session.run`` (fresh output arrays each call). Resident memory is measured in a fresh
subprocess: RSS after importing numpy, after importing onnxruntime, after creating the
session and after 100 steps. ``peak_bytes`` counts Python/numpy allocations only, not
onnxruntime's own arena. The numpy backend is timed with ``exact`` products (the default),
``:blas`` products (one BLAS gemv per example) and ``:gemm`` products (the step is
``clipped_gradient_sum``: whole-batch gemm, no per-example gradients).

Batch engine: agent-rounds per second of DP-D-SGD with ``mlp:64-128-10`` on digits, 100
agents (er graph, mean degree 6), each round a batch of the whole local set (14 examples),
for the exact, ``:blas`` and ``:gemm`` models — and with ``--before TREE`` the exact and
``:blas`` models on the code of another checkout (e.g. a ``git worktree`` of an earlier
commit), each run in a fresh subprocess, the variants
interleaved ``--repeats`` times (the median is printed) so machine load hits them alike.
Rounds 2 … T−1 are timed (no evaluation in them), in wall time and in the process's CPU
time (less sensitive to other work on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds, peak_bytes

from edgedp import clipping
from edgedp.models import graph
from edgedp.models.dense import DenseModel
from edgedp.models.onnx_backend import OnnxModel
from edgedp.models.spec import parse

ARCH, BATCH, REPEATS = "mlp:64-128-10:relu", 32, 200

CHILD = r"""
import json, sys

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

import numpy as np
out = {"numpy": rss_kb()}
import onnxruntime
out["onnxruntime"] = rss_kb()
from edgedp.models.onnx_backend import OnnxModel
m = OnnxModel(sys.argv[1])
out["session"] = rss_kb()
rng = np.random.default_rng(0)
theta = m.init_params()
x, y = rng.standard_normal((32, m.features)), rng.integers(0, 10, 32).astype(float)
for _ in range(100):
    m.per_example_gradients(theta, x, y)
out["after_steps"] = rss_kb()
print(json.dumps(out))
"""


SIM_CHILD = r"""
import json, sys, time
import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets

model, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = datasets.partition(datasets.load("digits", seed=0), n, seed=0)
plan = make_plan(
    "dp-dsgd", edgedp_topologies.parse(f"er:{n}:{6 / n}:1"), steps=steps,
    participation=Participation(steps, 1), clip_norm=1.0, learning_rate=0.3,
    noise_multiplier=1.0, seed=3, task=TaskSpec(model=model, dataset="digits"),
)
marks = {}
def mark(t):
    marks.setdefault(t, (time.perf_counter(), time.process_time()))
r = batch.run(plan, data, eval_every=steps, progress=mark)
wall, cpu = (marks[steps - 1][i] - marks[1][i] for i in (0, 1))
print(json.dumps({"rate": n * (steps - 2) / wall, "cpu_rate": n * (steps - 2) / cpu,
                  "digest": r.digests[0]}))
"""


def sim_throughput(args) -> None:
    """Agent-rounds per second of the batch engine, variants interleaved in subprocesses."""
    here = str(Path(__file__).resolve().parents[1])
    variants = [
        ("exact (default)", here, ARCH),
        ("blas", here, ARCH + ":blas"),
        ("gemm", here, ARCH + ":gemm"),
    ]
    if args.before:
        before = str(Path(args.before).resolve())
        variants[:0] = [("exact, before", before, ARCH), ("blas, before", before, ARCH + ":blas")]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    cpu_rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    digests: dict[str, str] = {}
    for _ in range(args.repeats):
        for name, tree, model in variants:
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, "-c", SIM_CHILD, model, str(args.nodes), str(args.rounds)]
            out = json.loads(
                subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
            )
            rates[name].append(out["rate"])
            cpu_rates[name].append(out["cpu_rate"])
            digests[name] = out["digest"][:12]
    print(
        f"batch engine, dp-dsgd, {ARCH} on digits, {args.nodes} agents, {args.rounds} rounds; "
        f"median of {args.repeats}; load avg {os.getloadavg()[0]:.1f}"
    )
    base = statistics.median(rates[variants[0][0]])
    cpu_base = statistics.median(cpu_rates[variants[0][0]])
    head = ("model code", "agent-rounds/s", "vs first", "per CPU-s", "vs first")
    print(f"{head[0]:<28}{head[1]:>16}{head[2]:>10}{head[3]:>11}{head[4]:>10}  digest")
    for name, _, _ in variants:
        r, c = statistics.median(rates[name]), statistics.median(cpu_rates[name])
        print(
            f"{name:<28}{r:>16.0f}{r / base:>9.1f}x{c:>11.0f}{c / cpu_base:>9.1f}x  {digests[name]}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-only", action="store_true", help="only the batch-engine throughput")
    ap.add_argument(
        "--before", default="", help="another checkout to time the exact and :blas models on"
    )
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.nodes < 2 or args.rounds < 4 or args.repeats < 1:
        ap.error("needs --nodes >= 2, --rounds >= 4 and --repeats >= 1")
    print(f"load avg {os.getloadavg()[0]:.1f}")
    if not args.sim_only:
        per_step()
    sim_throughput(args)


def per_step() -> None:
    spec = parse(ARCH, features=64)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 64))
    y = rng.integers(0, 10, BATCH).astype(float)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {dt: Path(tmp) / f"mlp-{dt}.onnx" for dt in ("float32", "float64")}
        for dt, p in paths.items():
            graph.write(spec, p, dtype=dt)
        backends = {
            "numpy (float64)": DenseModel(spec),
            "numpy :blas (float64)": DenseModel(parse(ARCH + ":blas", features=64)),
            "numpy :gemm (float64)": DenseModel(parse(ARCH + ":gemm", features=64)),
            "onnxruntime float32": OnnxModel(paths["float32"]),
            "onnxruntime float64": OnnxModel(paths["float64"]),
        }
        theta = backends["numpy (float64)"].init_params()
        print(f"{ARCH}, d = {spec.dim:,}, batch {BATCH}; median of {REPEATS} steps")
        cols = ("backend", "grads ms", "step ms", "vs numpy", "py peak KB")
        print(f"{cols[0]:<24}{cols[1]:>10}{cols[2]:>10}{cols[3]:>10}{cols[4]:>12}")
        base = None
        for name, m in backends.items():

            def grads(m=m):
                return m.per_example_gradients(theta, x, y)

            def step(m=m):
                if getattr(m, "clips_fused", False):  # per-example gradients never formed
                    return m.clipped_gradient_sum(theta, x, y, clip_norm=1.0)
                return clipping.clipped_sum(m.per_example_gradients(theta, x, y), 1.0)

            grads()
            g = median_seconds(grads, REPEATS)
            s = median_seconds(step, REPEATS)
            base = base or s
            peak = peak_bytes(step) / 1024
            print(f"{name:<24}{g * 1e3:>10.3f}{s * 1e3:>10.3f}{base / s:>9.1f}x{peak:>12.0f}")
        sess = backends["onnxruntime float32"]._session
        feed = {
            p: v.astype(np.float32)
            for (p, _, _), v in zip(spec.layout(), spec.unflatten(theta), strict=True)
        }
        feed.update(x=x.astype(np.float32), y=y.astype(np.float32))
        raw = median_seconds(lambda: sess.run(None, feed), REPEATS)
        note = "(plain session.run of the same graph, no copy-out)"
        print(f"{'  session.run, float32':<24}{raw * 1e3:>10.3f}   {note}")
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(paths["float32"])],
            capture_output=True,
            text=True,
            check=True,
        )
        r = {k: v / 1024 for k, v in json.loads(out.stdout).items()}
        print("RSS MB (float32 graph, fresh process):")
        print(f"  numpy imported          {r['numpy']:>7.1f}")
        print(f"  + onnxruntime imported  {r['onnxruntime'] - r['numpy']:>7.1f}")
        print(f"  + session created       {r['session'] - r['onnxruntime']:>7.1f}")
        print(f"  + 100 steps             {r['after_steps'] - r['session']:>7.1f}")
        print(f"  total                   {r['after_steps']:>7.1f}")


if __name__ == "__main__":
    main()
