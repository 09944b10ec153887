"""An audit's trials on a local Dask cluster against one process, in the same run.

The audit of DP-D-SGD on ``ring:8`` (10 steps, synthetic-logistic, a gradient canary on node
0; attackers ``hbc:1`` and ``eavesdropper:all``): first ``--subset`` trials in this process
(the baseline: trials/s, peak resident memory), then ``--trials`` trials on a local cluster
of ``--workers`` worker processes in blocks of ``--block-trials``. Prints both rates, their
ratio, the wall time, each worker's peak memory, and whether the merged statistics of the
first ``--subset`` trials equal the single-process ones bit for bit (they must: every trial
is keyed by its index). Prints the load average before and after (2 shared cores).

Run: ``python benchmarks/audit_cluster.py --trials 100000`` (the default; about 30 min on
two loaded cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from edgedp_sim import adversary, audit, provenance, scenarios, shards

SCENARIO = {
    "name": "audit-bench",
    "steps": 10,
    "topology": {"spec": "ring:8"},
    "task": {"dataset": "synthetic-logistic:10:400"},
    "privacy": {"mechanism": "dp-dsgd", "noise_multiplier": 1.0, "participation": "10,1"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--subset", type=int, default=2_000, help="trials of the baseline")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--block-trials", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=250, help="trials per batch-engine call")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared)", flush=True)
    sc = scenarios.parse(SCENARIO)
    attackers = [adversary.parse_attacker("hbc:1"), adversary.tap_all()]
    t0 = time.perf_counter()
    one = audit.run(sc, attackers, trials=args.subset, chunk=args.chunk, keep_scores=True)
    one_s = time.perf_counter() - t0
    one_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"one process: {args.subset} trials in {one_s:.1f} s ({args.subset / one_s:.1f} trials/s)"
        f", peak {one_mb:.0f} MB",
        flush=True,
    )
    t0 = time.perf_counter()
    with shards.connect(None, args.workers) as client:
        many = audit.run(
            sc,
            attackers,
            trials=args.trials,
            chunk=args.chunk,
            keep_scores=True,
            client=client,
            block_trials=args.block_trials,
            block_progress=_every_tenth(args.trials),
        )
    many_s = time.perf_counter() - t0
    same = all(
        a["scores"].tobytes() == b["scores"][: args.subset].tobytes()
        for a, b in zip(one["attackers"], many["attackers"], strict=True)
    )
    per_worker: dict[str, float] = {}
    for b in many["blocks"]:
        per_worker[b["worker"]] = max(per_worker.get(b["worker"], 0.0), b["peak_mb"])
    rate_one, rate_many = args.subset / one_s, args.trials / many_s
    print(
        f"{args.workers} workers: {args.trials} trials in {many_s:.1f} s ({rate_many:.1f} "
        f"trials/s, cluster start included); ratio to one process {rate_many / rate_one:.2f}"
    )
    print(f"peak memory per worker (MB): {json.dumps(per_worker)}")
    print(f"first {args.subset} trials' statistics equal to one process's: {same}")
    for e in many["attackers"]:
        print(
            f"  {e['attacker']}: eps_lb {e['epsilon_lb']:.3f} (certified {e['epsilon']:.3f}), "
            f"mu_hat {e['mu_hat']:.3f} [{e['mu_low']:.3f}, {e['mu_high']:.3f}] (mu {e['mu']:.3f})"
        )
    print(f"load average {os.getloadavg()[0]:.1f} after")
    if args.json:
        provenance.write_json(
            Path(args.json),
            {
                "trials": args.trials,
                "subset": args.subset,
                "seconds_one": one_s,
                "seconds_cluster": many_s,
                "ratio": rate_many / rate_one,
                "peak_mb_one": one_mb,
                "peak_mb_workers": per_worker,
                "same": same,
            },
        )
    if not same:
        raise SystemExit("the merged statistics differ from the single process's")


def _every_tenth(total: int):
    line = shards.block_lines("audit")
    step = max(1, total // 10)
    mark = [step]

    def progress(done: int, trials: int, info) -> None:
        if done >= mark[0] or done == trials:
            mark[0] += step
            line(done, trials, info)

    return progress


if __name__ == "__main__":
    main()
