"""Trials per second and peak memory of a privacy audit, with ratios measured in the same run.

1. **Memory and speed of one audit** (``--memory``, default on): the demo's 16-node re-plan
   of MAFALDA (smallworld:16:4:0.1:7, logistic regression on digits-parity with d = 65, local
   batches of 22, ε = 4 at δ = 1e-6; :func:`edgedp_sim.demo_plans.make_plans`) at each horizon of
   ``--steps``, audited with N = 1,000 trials by the demo's attackers (the victim's two
   neighbours colluding, every link tapped, every link tapped but encrypted). Each audit runs
   in its own child process, which reports its peak resident memory (``ru_maxrss``: the
   interpreter and imports included) and time: this tree with its default chunk (a memory
   budget, :func:`edgedp_sim.audit.chunk_for`), this tree with the former fixed chunk of
   1,000 trials, and with ``--before TREE`` the audit of another checkout (e.g.
   ``git archive main | tar -x -C /tmp/before``). Ratios are against the first row.
2. **Trials per second per mechanism** (``--mechanisms``): the audit table's setting
   (:mod:`edgedp_sim.audit_plans`, ring:8, T = 20, d = 2, three attackers: eavesdropper:all,
   one link, hbc neighbours; gradient canary), N trials of ``edgedp_sim.audit.run`` split
   into the simulation (batch engine with the canary and three probes) and the statistics
   (linear view, regenerated secrets, tests); beside it the plain batch engine on the same
   plan and trials (no canary, no probes), and their ratio. With ``--before TREE`` the same
   audits run in child processes of this tree and of that checkout, alternating, ``--repeats``
   times each in the same run; ``x before`` is this tree's fastest audit/s over the other's.

Run: python benchmarks/audit.py [--before TREE] [--steps 20,100] [--trials 2000]
     [--mechanisms dp-dsgd,antipgd,...] [--no-memory]
"""

from __future__ import annotations

import edgedp  # noqa: F401  (first: the numpy dispatch every edgedp process uses)

# isort: split
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgedp_sim import adversary, audit, audit_plans, batch, scenarios

HERE = Path(__file__).resolve().parents[1]
ATTACKERS = ("eavesdropper:all", "eavesdropper:0-1", "hbc:1,7")

CHILD = r"""
import edgedp  # noqa
import json, resource, sys, time
from edgedp.plan import NoisePlan
from edgedp_sim import adversary, audit, scenarios
try:  # the demo's setting moved to demo_plans; a baseline tree may predate it
    from edgedp_sim.demo_plans import DemoConfig, attackers as demo_attackers
except ImportError:
    from edgedp_sim.demo import DemoConfig, _attackers as demo_attackers

path, trials, chunk = sys.argv[1], int(sys.argv[2]), sys.argv[3]
plan = NoisePlan.from_bytes(open(path, "rb").read())
attackers = [adversary.parse_attacker(a) for a in demo_attackers(DemoConfig().leak_topology)]
kw = {} if chunk == "default" else {"chunk": int(chunk)}
started = time.perf_counter()
rep = audit.run(scenarios.from_plan(plan), attackers, trials=trials, delta=1e-6, **kw)
print(json.dumps({
    "seconds": time.perf_counter() - started,
    "simulation": rep["simulation_seconds"],
    "statistic": rep["statistic_seconds"],
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "chunk": rep.get("chunk", 1000),
}))
"""


def memory(args) -> None:
    from edgedp_sim import demo_plans

    cfg = demo_plans.DemoConfig()
    variants = [("this tree, default chunk", str(HERE), "default")]
    variants.append(("this tree, chunk 1000", str(HERE), "1000"))
    if args.before:
        variants.append(("before (--before)", str(Path(args.before).resolve()), "default"))
    print(
        f"audit of the demo's 16-node MAFALDA re-plan ({cfg.leak_topology}, d = 65, batch "
        f"{cfg.leak_batch_size}), N = {args.memory_trials} trials, 3 attackers (hbc pair, "
        f"every link, every link encrypted); load average {os.getloadavg()[0]:.1f}"
    )
    head = f"{'T':>4}  {'code':<26}{'peak MB':>9}{'x first':>8}{'trials/s':>10}{'x first':>8}"
    head += f"{'sim s':>8}{'stats s':>8}{'chunk':>7}"
    print(head)
    print("-" * len(head))
    with tempfile.TemporaryDirectory(prefix="edgedp-bench-audit-") as tmp:
        for steps in (int(s) for s in args.steps.split(",")):
            plan = demo_plans.make_plans(
                cfg,
                topology=cfg.leak_topology,
                steps=steps,
                batch_size=cfg.leak_batch_size,
                mechanisms=("mafalda",),
            )["mafalda"]["plan"]
            path = Path(tmp) / f"mafalda-{steps}.plan"
            path.write_bytes(plan.to_bytes())
            first = None
            for name, tree, chunk in variants:
                env = dict(os.environ, PYTHONPATH=tree)
                cmd = [sys.executable, "-c", CHILD, str(path), str(args.memory_trials), chunk]
                # cwd = the tree: ``python -c`` puts the working folder first on sys.path
                done = subprocess.run(
                    cmd, capture_output=True, text=True, env=env, cwd=tree, check=True
                )
                r = json.loads(done.stdout.strip().splitlines()[-1])
                rate = args.memory_trials / r["seconds"]
                first = first or (r["peak_mb"], rate)
                print(
                    f"{steps:>4}  {name:<26}{r['peak_mb']:>9.0f}{r['peak_mb'] / first[0]:>8.2f}"
                    f"{rate:>10.1f}{rate / first[1]:>8.2f}{r['simulation']:>8.1f}"
                    f"{r['statistic']:>8.1f}{r['chunk']:>7}"
                )


MECH_CHILD = r"""
import edgedp  # noqa
import sys
from edgedp_sim import adversary, audit, audit_plans, scenarios
mech, trials, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(";")
plan = audit_plans.build(mech)
rep = audit.run(scenarios.from_plan(plan), [adversary.parse_attacker(a) for a in names],
                trials=trials)
print(rep["trials_per_second"])
"""


def audit_rate(tree: Path, mech: str, trials: int) -> float:
    """Trials per second of one whole audit of ``mech`` by the code of ``tree`` (a child)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-c", MECH_CHILD, mech, str(trials), ";".join(ATTACKERS)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def mechanisms(args) -> None:
    attackers = [adversary.parse_attacker(a) for a in ATTACKERS]
    print(
        f"audit on the batch engine, N = {args.trials} trials, 3 attackers (ring:8, T = 20); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    head = f"{'mechanism':<11}{'audit/s':>9}{'sim/s':>9}{'stats/s':>9}{'plain/s':>9}{'ratio':>7}"
    if args.before:
        head += f"{'this/s':>9}{'before/s':>9}{'x before':>9}"
    print(head)
    print("-" * len(head))
    for mech in args.mechanisms.split(","):
        plan = audit_plans.build(mech)
        sc = scenarios.from_plan(plan)
        rep = audit.run(sc, attackers, trials=args.trials)
        data = sc.data()
        t0 = time.perf_counter()
        done = 0
        while done < args.trials:
            count = min(rep["chunk"], args.trials - done)
            batch.run(plan, data, trials=count, first_trial=done, eval_every=plan.steps)
            done += count
        plain = args.trials / (time.perf_counter() - t0)
        rate = rep["trials_per_second"]
        row = (
            f"{mech:<11}{rate:>9.0f}{args.trials / rep['simulation_seconds']:>9.0f}"
            f"{args.trials / rep['statistic_seconds']:>9.0f}{plain:>9.0f}{rate / plain:>7.2f}"
        )
        if args.before:
            before = Path(args.before).resolve()
            pairs = [  # alternating, so a burst of load hits both trees alike
                (audit_rate(HERE, mech, args.trials), audit_rate(before, mech, args.trials))
                for _ in range(args.repeats)
            ]
            now, then = max(p[0] for p in pairs), max(p[1] for p in pairs)  # least disturbed
            row += f"{now:>9.0f}{then:>9.0f}{now / then:>9.2f}"
        print(row, flush=True)
    print(
        "audit/s: whole audit (simulation + statistics); sim/s: the batch engine with the "
        "canary and probes; stats/s: linear views, regenerated secrets and tests; plain/s: the "
        "batch engine alone in the audit's chunks; ratio = audit/s / plain/s; this/s, before/s: "
        "the fastest of --repeats whole audits in child processes of this tree and of --before, "
        "alternating"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="", help="another checkout to audit the same plans with")
    ap.add_argument("--steps", default="20,100", help="horizons T of the memory measurement")
    ap.add_argument("--memory-trials", type=int, default=1000)
    ap.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3, help="whole audits per tree (--before)")
    ap.add_argument("--mechanisms", default="dp-dsgd,antipgd,mafalda,whisper,zipdl,dome,sr-gt")
    args = ap.parse_args()
    if not args.no_memory:
        memory(args)
        print()
    if args.mechanisms:
        mechanisms(args)


if __name__ == "__main__":
    main()
