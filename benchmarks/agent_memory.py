"""Resident memory of one agent process with d = 10^6 and batch 32, for each temporal factor.

Each factor runs in a fresh subprocess: it loads its data (32 examples × 10^6 features),
builds an Agent for a 2-node plan as a device does (``keep_gradient=False``) and runs 8
rounds, feeding the neighbour's messages in-process. Printed: the RSS before the Agent
existed (Python, numpy, data) as the baseline, the Agent's peak above it (VmHWM, reset
through /proc/self/clear_refs once the data is loaded; Linux only) in MB and in model-sized
vectors, and the factor's own streaming-state bytes.

"before" runs the same agent as it was before per-example gradients were clipped in
chunks: the whole (batch, d) array at once (``agent.CHUNK_FLOATS`` unbounded) and the
round's gradient kept after the round (``keep_gradient=True``), in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
import topologies
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
if mode == "before":
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
          "dense": factors.Dense(C)}[kind]
mech = {"identity": "dp-dsgd", "antipgd": "antipgd", "banded": "banded", "dense": "dense"}[kind]
plan = make_plan(mech, topologies.parse("complete:2"), steps=steps,
                 participation=Participation(steps, 1), clip_norm=1.0, learning_rate=0.1,
                 noise_multiplier=1.0, factor=factor, task=TaskSpec(batch_size=batch))
secret = rng.seed_secret(0)
agent = Agent(plan.share(0), model=LinearModel("logistic", d - 1), x=x, y=y,
              noise_key=rng.derive_key(secret, "n"), batch_key=rng.derive_key(secret, "b"),
              keep_gradient=mode == "before")
peer = np.zeros(d)
for r in range(steps):
    agent.begin_round()
    agent.inbox.setdefault(r, {})[1] = peer
    agent.end_round()
peak = status("VmHWM:")
print(json.dumps({"base_kb": base, "peak_kb": peak, "state": plan.factor.state_bytes(d)}))
"""


def main() -> None:
    d = 1_000_000
    model = 8 * d / 2**20
    print(f"d = {d:,}, batch 32; one model = {model:.1f} MB (float64)")
    cols = ("factor", "before MB", "vectors", "after MB", "vectors", "state MB", "ratio")
    print(f"{cols[0]:<10}" + "".join(f"{c:>11}" for c in cols[1:]))
    for kind in ["identity", "antipgd", "banded", "dense"]:
        row = {}
        for mode in ("before", "after"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, kind, str(d), mode],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout)
            row[mode] = (r["peak_kb"] - r["base_kb"]) / 1024
            state = r["state"] / 2**20
        b, a = row["before"], row["after"]
        print(
            f"{kind:<10}{b:>11.1f}{b / model:>11.1f}{a:>11.1f}{a / model:>11.1f}"
            f"{state:>11.1f}{b / a:>10.1f}x"
        )


if __name__ == "__main__":
    main()
