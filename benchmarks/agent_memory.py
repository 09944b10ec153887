"""Resident memory of one agent process with d = 10^6 and batch 32, for each temporal factor.

Each factor runs in a fresh subprocess: it loads its data (32 examples × 10^6 features) and
the neighbour's message (random, resident), builds an Agent for a 2-node plan as a device
does (``keep_gradient=False``) and runs 8 rounds, feeding the neighbour's message
in-process. Measured: the Agent's peak RSS above the process before the Agent existed
(VmHWM, reset through /proc/self/clear_refs once the data is loaded; Linux only). Printed in
MB and in model-sized vectors: (peak − the same run's peak at d = 1,000, i.e. the code and
imports the first round loads) / 8d; and the factor's own streaming state.

Three ways, in the same run:
* "whole batch": the agent as it ran before per-example gradients were clipped in chunks —
  the (batch, d) array at once (``agent.CHUNK_FLOATS`` unbounded) and the round's gradient
  kept after the round (``keep_gradient=True``);
* "glibc": today's agent with the C library's default allocator settings: glibc raises its
  mmap threshold after the first large free, so later model-sized arrays come from the heap
  and freed ones stay resident (about one vector more);
* "unit": the same with ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072``, which the
  systemd unit offers (commented out; the daemon otherwise keeps up to 64 MiB of freed
  memory for the next round, ``firmware_py.resources.keep_freed_memory``): every large array
  is mapped and returned when freed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

TUNABLE = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}

CHILD = r"""
import json, sys

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
import edgedp_topologies
from edgedp import factors, rng
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.models.linear import LinearModel
from edgedp.plan import make_plan

from edgedp import agent as agent_mod
from edgedp.plan import TaskSpec
kind, d, mode, steps, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], 8, 32
x = np.random.default_rng(0).standard_normal((batch, d - 1))
y = np.arange(batch, dtype=np.float64) % 2
peer = np.random.default_rng(1).standard_normal(d) * 1e-3
if mode == "whole":
    agent_mod.CHUNK_FLOATS = 1 << 62
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
base = status("VmRSS:")
C = np.tril(np.full((steps, steps), 0.3)) + np.eye(steps)
factor = {"identity": None, "antipgd": None,
          "banded": factors.Banded.from_matrix(np.tril(C) - np.tril(C, -4), 4),
          "dense": factors.Dense(C), "blt": factors.BLT((0.9, 0.5), (0.3, 0.2))}[kind]
mech = {"identity": "dp-dsgd"}.get(kind, kind)
plan = make_plan(mech, edgedp_topologies.parse("complete:2"), steps=steps,
                 participation=Participation(steps, 1), clip_norm=1.0, learning_rate=0.1,
                 noise_multiplier=1.0, factor=factor, task=TaskSpec(batch_size=batch))
secret = rng.seed_secret(0)
agent = Agent(plan.share(0), model=LinearModel("logistic", d - 1), x=x, y=y,
              noise_key=rng.derive_key(secret, "n"), batch_key=rng.derive_key(secret, "b"),
              keep_gradient=mode == "whole")
for r in range(steps):
    agent.begin_round()
    agent.inbox.setdefault(r, {})[1] = peer
    agent.end_round()
peak = status("VmHWM:")
print(json.dumps({"base_kb": base, "peak_kb": peak, "state": plan.factor.state_bytes(d)}))
"""


def _peak_mb(kind: str, d: int, mode: str) -> tuple[float, float]:
    env = {**os.environ, **(TUNABLE if mode == "unit" else {})}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(d), mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    r = json.loads(out.stdout)
    return (r["peak_kb"] - r["base_kb"]) / 1024, r["state"] / 2**20


def main() -> None:
    d = 1_000_000
    model = 8 * d / 2**20
    print(
        f"d = {d:,}, batch 32; one model = {model:.1f} MB (float64); load {os.getloadavg()[0]:.1f}"
    )
    print("MB above the process before the agent (vectors = (MB - MB at d = 1,000) / model)")
    modes = ("whole", "glibc", "unit")
    cols = ["factor", *[f"{m} MB" for m in modes], *[f"{m} vec" for m in modes], "state vec"]
    print(f"{cols[0]:<10}" + "".join(f"{c:>12}" for c in cols[1:]))
    for kind in ["identity", "antipgd", "banded", "dense", "blt"]:
        mb, vec = [], []
        for mode in modes:
            fixed, _ = _peak_mb(kind, 1000, mode)
            peak, state = _peak_mb(kind, d, mode)
            mb.append(peak)
            vec.append((peak - fixed) / model)
        print(
            f"{kind:<10}"
            + "".join(f"{v:>12.1f}" for v in mb)
            + "".join(f"{v:>12.2f}" for v in vec)
            + f"{state / model:>12.2f}"
        )
    print("target: unit vec <= 4 + state vec (BLT: its buffers are rebuilt beside the old)")


if __name__ == "__main__":
    main()
