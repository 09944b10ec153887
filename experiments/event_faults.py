"""Faults vs fault-free: the example scenarios in the event engine, each run as written and
with its faults and message loss removed (same graph, plan, latency and bandwidth).

The plan — and therefore the certified guarantee — is the same object in both runs; nodes
that sit out a round still draw and discard that round's noise (noise is never reduced or
reused). Writes experiments/out/event_faults.json and .png.
Run: python experiments/event_faults.py [--quick] [--out-dir DIR] (``--quick``: 10 rounds each)
"""

import dataclasses
import math
import time
from pathlib import Path

from edgedp_sim import provenance, runner, scenarios
from edgedp_sim.churn import Faults

import common

# --- constants ---
SCENARIOS = ("lan_er100", "wan_smallworld300", "churn_er50")
QUICK_STEPS = 10  # rounds of each scenario in the quick run (the files' own otherwise)


def main() -> None:
    args = common.parser(__doc__).parse_args()
    out = common.out_dir(args)
    rows = []
    base = Path(scenarios.__file__).parent
    for name in SCENARIOS:
        raw = scenarios.read_toml(base / f"{name}.toml")
        if args.quick:
            raw.update(steps=QUICK_STEPS, eval_every=QUICK_STEPS // 2)
        sc = scenarios.parse(raw, base=base)
        clean = dataclasses.replace(
            sc, faults=Faults(), network=dataclasses.replace(sc.network, loss=0.0)
        )
        t = time.perf_counter()
        faulty = runner.run_scenario(sc, engine_name="event")
        ideal = runner.run_scenario(clean, engine_name="event")
        print(
            f"{name}: faulty {faulty['final_test_loss']:.4f} vs fault-free "
            f"{ideal['final_test_loss']:.4f} ({time.perf_counter() - t:.1f} s)",
            flush=True,
        )
        g = sc.plan.guarantee() if sc.plan.noise_multiplier > 0 else None
        rows.append(
            {
                "scenario": name,
                "nodes": sc.plan.n,
                "rounds": sc.plan.steps,
                "mu": g.mu if g else math.inf,
                "epsilon": g.epsilon(1e-6) if g else math.inf,
                "faulty_final_test_loss": faulty["final_test_loss"],
                "fault_free_final_test_loss": ideal["final_test_loss"],
                "faulty": {
                    k: faulty[k]
                    for k in (
                        "dropped_messages",
                        "lost_messages",
                        "offline_drops",
                        "late_or_rejected",
                        "missing",
                        "skipped_rounds",
                        "crashes",
                        "simulated_seconds",
                    )
                },
                "fault_free_simulated_seconds": ideal["simulated_seconds"],
            }
        )
    provenance.write_json(out / "event_faults.json", {"rows": rows, "quick": args.quick})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(rows))
    ax.bar(
        [x - 0.2 for x in xs],
        [r["fault_free_final_test_loss"] for r in rows],
        0.4,
        label="fault-free",
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [r["faulty_final_test_loss"] for r in rows],
        0.4,
        label="with faults (as written)",
    )
    ax.set_xticks(list(xs), [r["scenario"] for r in rows])
    ax.set_ylabel("final test loss (mean over nodes)")
    ax.set_title("Event engine: example scenarios, same plan and privacy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "event_faults.png", dpi=110)
    plt.close(fig)
    print(f"{'scenario':<22}{'fault-free':>12}{'faulty':>10}{'missing':>9}{'crashes':>9}")
    for r in rows:
        print(
            f"{r['scenario']:<22}{r['fault_free_final_test_loss']:>12.4f}"
            f"{r['faulty_final_test_loss']:>10.4f}{r['faulty']['missing']:>9}"
            f"{r['faulty']['crashes']:>9}"
        )


if __name__ == "__main__":
    main()
