"""Three mechanisms at one certified guarantee: DP-D-SGD, MAFALDA and Whisper."""

import edgedp

# --- constants (seeded: the output is reproducible) ---
TOPOLOGY = "er:24:0.25:1"  # 24 nodes, Erdős–Rényi, seed 1
STEPS, EPSILON, DELTA, TRIALS = 40, 4.0, 1e-6, 3

print(f"{'mechanism':<10}{'epsilon':>8}{'final test loss':>18}{'accuracy':>10}{'kB/run':>8}")
for mechanism in ("dsgd", "dp-dsgd", "mafalda", "whisper"):
    private = mechanism != "dsgd"
    plan = edgedp.make_plan(
        mechanism,
        TOPOLOGY,
        steps=STEPS,
        target_epsilon=EPSILON if private else None,
        delta=DELTA if private else None,
    )
    eps = f"{edgedp.account(plan, delta=DELTA).epsilon:.2f}" if private else "none"
    run = edgedp.simulate(plan, trials=TRIALS)
    print(
        f"{mechanism:<10}{eps:>8}{run.final_test_loss:>11.4f} ± {run.final_test_loss_std:.4f}"
        f"{run.final_test_accuracy:>10.3f}{run.bytes_sent / 1e3:>8.0f}"
    )
