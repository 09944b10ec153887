"""Resident memory of one agent process with d = 10^6, for each temporal factor.

Each factor runs in a fresh subprocess: it loads its data (4 examples × 10^6 features),
builds an Agent for a 2-node plan and runs 8 rounds, feeding the neighbour's messages
in-process. Printed: peak RSS of the process, the RSS before the Agent existed (Python,
numpy, data) as the baseline measured in the same run, the Agent's increment, and the
factor's own streaming-state bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import numpy as np
import topologies
from edgedp import factors, rng
from edgedp.accounting.participation import Participation
from edgedp.agent import Agent
from edgedp.models.linear import LinearModel
from edgedp.plan import make_plan

kind, d, steps = sys.argv[1], int(sys.argv[2]), 8
x = np.random.default_rng(0).standard_normal((4, d - 1))
y = np.array([0.0, 1.0, 0.0, 1.0])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
C = np.tril(np.full((steps, steps), 0.3)) + np.eye(steps)
factor = {"identity": None, "antipgd": None,
          "banded": factors.Banded.from_matrix(np.tril(C) - np.tril(C, -4), 4),
          "dense": factors.Dense(C)}[kind]
mech = {"identity": "dp-dsgd", "antipgd": "antipgd", "banded": "banded", "dense": "dense"}[kind]
plan = make_plan(mech, topologies.parse("complete:2"), steps=steps,
                 participation=Participation(steps, 1), clip_norm=1.0, learning_rate=0.1,
                 noise_multiplier=1.0, factor=factor)
secret = rng.seed_secret(0)
agent = Agent(plan.share(0), model=LinearModel("logistic", d - 1), x=x, y=y,
              noise_key=rng.derive_key(secret, "n"), batch_key=rng.derive_key(secret, "b"))
peer = np.zeros(d)
for r in range(steps):
    agent.begin_round()
    agent.inbox.setdefault(r, {})[1] = peer
    agent.end_round()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base_kb": base, "peak_kb": peak, "state": plan.factor.state_bytes(d)}))
"""


def main() -> None:
    d = 1_000_000
    print(f"d = {d:,}; one model = {8 * d / 1e6:.0f} MB (float64)")
    cols = ("factor", "peak RSS MB", "baseline MB", "agent MB", "factor state MB")
    print(f"{cols[0]:<10}{cols[1]:>13}{cols[2]:>13}{cols[3]:>10}{cols[4]:>17}")
    for kind in ["identity", "antipgd", "banded", "dense"]:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, kind, str(d)], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout)
        peak, base = r["peak_kb"] / 1024, r["base_kb"] / 1024
        print(f"{kind:<10}{peak:>13.1f}{base:>13.1f}{peak - base:>10.1f}{r['state'] / 1e6:>17.1f}")


if __name__ == "__main__":
    main()
