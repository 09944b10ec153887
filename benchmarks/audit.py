"""Trials per second of a privacy audit on the batch engine, and the audit table's wall time.

Setting: the audit table's (:mod:`edgedp_sim.audit_plans`, ring:8, T = 20, d = 2, three attackers:
eavesdropper:all, one link, hbc neighbours; gradient canary). For each mechanism measured,
N trials of ``edgedp_sim.audit.run`` split into the simulation (batch engine with the canary and
three probes) and the statistics (linear view, regenerated secrets, tests); beside it the
plain batch engine on the same plan and trials (no canary, no probes), measured in the same
run, and their ratio. The audit table's own wall time is read from
experiments/out/audit_table.json when it exists (measured when the table was produced) and
estimated from this run's rates (Σ N / rate over the mechanisms measured).

Run: python benchmarks/audit.py [--trials 2000] [--mechanisms dp-dsgd,antipgd,...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from edgedp_sim import adversary, audit, audit_plans, batch, scenarios

TABLE = Path(__file__).resolve().parents[1] / "experiments" / "out" / "audit_table.json"
ATTACKERS = ("eavesdropper:all", "eavesdropper:0-1", "hbc:1,7")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--mechanisms", default="dp-dsgd,antipgd,mafalda,whisper,zipdl,dome,sr-gt")
    args = ap.parse_args()
    attackers = [adversary.parse_attacker(a) for a in ATTACKERS]
    print(f"audit on the batch engine, N = {args.trials} trials, 3 attackers (ring:8, T = 20)")
    head = f"{'mechanism':<11}{'audit/s':>9}{'sim/s':>9}{'stats/s':>9}{'plain/s':>9}{'ratio':>7}"
    print(head)
    print("-" * len(head))
    estimate = 0.0
    for mech in args.mechanisms.split(","):
        plan = audit_plans.build(mech)
        sc = scenarios.from_plan(plan)
        rep = audit.run(sc, attackers, trials=args.trials)
        data = sc.data()
        t0 = time.perf_counter()
        done = 0
        while done < args.trials:
            count = min(1000, args.trials - done)
            batch.run(plan, data, trials=count, first_trial=done, eval_every=plan.steps)
            done += count
        plain = args.trials / (time.perf_counter() - t0)
        rate = rep["trials_per_second"]
        estimate += 10000 / rate
        print(
            f"{mech:<11}{rate:>9.0f}{args.trials / rep['simulation_seconds']:>9.0f}"
            f"{args.trials / rep['statistic_seconds']:>9.0f}{plain:>9.0f}{rate / plain:>7.2f}"
        )
    print(
        "audit/s: whole audit (simulation + statistics); edgedp_sim/s: the batch engine with the "
        "canary and probes; stats/s: linear views, regenerated secrets and tests; plain/s: the "
        "batch engine alone; ratio = audit/s / plain/s"
    )
    print(f"estimated 10^4-trial table over these mechanisms: {estimate:.0f} s")
    if TABLE.exists():
        table = json.loads(TABLE.read_text())
        print(
            f"experiments/out/audit_table.json: {len(table['gradient'])} mechanisms x 3 "
            f"attackers, N = {table['trials']}: {table['gradient_seconds']:.0f} s "
            f"(with the example canary, N = {table.get('example_trials')}: "
            f"{table['total_seconds']:.0f} s)"
        )


if __name__ == "__main__":
    main()
