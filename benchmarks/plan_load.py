"""Time and memory of loading a plan on a device, for each temporal factor and horizon T.

What a device does at start (``firmware_py.daemon``): decode and re-certify the plan
(``NoisePlan.from_bytes``), take its share (which derives the per-round message bound) and
compare its ε with the budget (``budget.device_epsilon``). Each measurement runs in a fresh
subprocess; memory is the peak RSS (VmHWM, reset after the imports through
/proc/self/clear_refs) above the RSS after the imports. Linux only.

"before" is the dense path devices ran until plan load became linear in T, measured in the
same run: the sensitivity from the T×T strategy through ``accounting.sensitivity`` (what
``accounting.mf.ldp_guarantee`` does; once to certify, once for the budget), the row norms
of a banded C⁻¹ by streaming T-long unit impulses, and the windows of Muffliato's
participation as explicit patterns. That dense path stays in the code as the planner's
reference, so it is called, not copied. "before" times only those T-dependent steps (not
the decode, hash and share that both paths do), so its ratios for cross-agent plans, whose
old path was already cheap, are below 1. ``--before-max-steps`` skips it above a horizon
(at T = 20,000 it needs ~10 GB and minutes).

Run: ``PYTHONPATH=. python benchmarks/plan_load.py [--steps 1000,10000,20000]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from edgedp import factors
from edgedp.accounting import budget, mf
from edgedp.plan import NoisePlan
mode, path = sys.argv[1], sys.argv[2]
import edgedp.accounting.sensitivity, edgedp.families.cross.accounting  # noqa: imports first
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # reset the peak (VmHWM) to the current RSS: the imports are not counted
base = status("VmRSS:")
t0 = time.perf_counter()
data = open(path, "rb").read()
if mode == "after":
    plan = NoisePlan.from_bytes(data)
    plan.share(0)
    budget.device_epsilon(plan, delta=1e-6)
else:
    from edgedp import _codec
    from edgedp.accounting.participation import Participation
    d = _codec.decode(data)["plan"]
    factor = factors.from_dict(d["factor"])
    part = Participation(*d["participation"])
    T = int(d["steps"])
    if "cross_agent" in d:
        [p for p in part.patterns(T)]  # participations(): explicit windows
    else:
        for _ in range(2):  # certify, then the budget
            mf.ldp_guarantee(factor.strategy(T), participation=part, noise_multiplier=1.0)
        if d["factor"]["kind"] == "banded":
            factors._streamed_row_norms(factor, T)
        else:
            factor.noise_row_norms(T)
seconds = time.perf_counter() - t0
peak = status("VmHWM:")
print(json.dumps({"seconds": seconds, "mb": (peak - base) / 1024}))
"""

FACTORS = ("identity", "antipgd", "banded", "blt", "whisper", "muffliato", "dense")


def _plan(kind: str, steps: int):
    import numpy as np

    import edgedp_topologies
    from edgedp import factors
    from edgedp.accounting.participation import Participation
    from edgedp.families.cross import planning as cross_agent
    from edgedp.plan import make_plan

    graph = edgedp_topologies.parse("ring:8")
    part = Participation(-(-steps // 50), 50)
    common = dict(steps=steps, participation=part, clip_norm=1.0, learning_rate=0.1)
    if kind in ("whisper", "muffliato"):
        extra = {"gossip_rounds": 4} if kind == "muffliato" else {}
        out = cross_agent.plan_cross_agent(kind, graph, noise_multiplier=1.0, **common, **extra)
        return getattr(out, "plan", out)
    if kind == "banded":
        p = 8
        bands = np.zeros((steps, p))
        bands[:, 0] = 1.0
        for j in range(1, p):
            bands[j:, j] = 0.5**j
        factor = factors.Banded(bands)
    elif kind == "blt":
        factor = factors.BLT((0.9, 0.5), (0.3, 0.1))
    elif kind == "dense":
        factor = factors.Dense(np.tril(np.full((steps, steps), 0.01)) + np.eye(steps))
    else:
        factor = None
    mech = {"identity": "dp-dsgd", "antipgd": "antipgd", "banded": "banded", "blt": "blt"}
    mech["dense"] = "dense"
    kw = {} if factor is None else {"factor": factor}
    return make_plan(mech[kind], graph, noise_multiplier=1.0, **common, **kw)


def _measure(mode: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1]}
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="1000,10000,20000")
    ap.add_argument("--factors", default=",".join(FACTORS))
    ap.add_argument("--before-max-steps", type=int, default=10_000)
    ap.add_argument("--dense-max-steps", type=int, default=2_000, help="dense plans hold 8T² B")
    args = ap.parse_args()
    print("plan load on the device path: seconds and MB above the interpreter")
    head = ("factor", "T", "before s", "before MB", "after s", "after MB", "speed-up")
    print(
        f"{head[0]:<10}{head[1]:>7}{head[2]:>11}{head[3]:>11}{head[4]:>10}{head[5]:>10}{head[6]:>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.factors.split(","):
            for steps in (int(s) for s in args.steps.split(",")):
                if kind == "dense" and steps > args.dense_max_steps:
                    print(f"{kind:<10}{steps:>7}  skipped: the plan file alone is 8·T² bytes")
                    continue
                path = Path(tmp) / f"{kind}-{steps}.plan"
                path.write_bytes(_plan(kind, steps).to_bytes())
                after = _measure("after", path)
                before = _measure("before", path) if steps <= args.before_max_steps else {"skip": 1}
                row = f"{kind:<10}{steps:>7}"
                if "seconds" in before:
                    row += f"{before['seconds']:>11.2f}{before['mb']:>11.1f}"
                else:
                    row += f"{'-':>11}{'-':>11}"
                if "seconds" in after:
                    row += f"{after['seconds']:>10.3f}{after['mb']:>10.1f}"
                    if "seconds" in before:
                        row += f"{before['seconds'] / after['seconds']:>9.3g}x"
                else:
                    row += f"  after failed: {after['error']}"
                print(row, flush=True)


if __name__ == "__main__":
    main()
