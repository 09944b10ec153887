"""Three mechanisms at one certified guarantee: DP-D-SGD, MAFALDA and Whisper."""

import edgedp

# --- constants (seeded: the output is reproducible) ---
TOPOLOGY = "er:24:0.25:1"  # 24 nodes, Erdős–Rényi, seed 1
STEPS, EPSILON, DELTA, TRIALS = 40, 4.0, 1e-6, 3
ATTACKERS = ("eavesdropper:all", "hbc:1")  # a tap on every link; one curious node

print(f"epsilon at delta {DELTA:g}, zero-out adjacency, against each attacker (column)")
print(f"{'mechanism':<10}{'tap':>7}{'hbc:1':>7}{'step':>6}{'final test loss':>18}{'accuracy':>10}")
methods = []  # how each step size was chosen (plan.step_size)
for mechanism in ("dsgd", "dp-dsgd", "mafalda", "whisper"):
    private = mechanism != "dsgd"
    plan = edgedp.make_plan(
        mechanism,
        TOPOLOGY,
        steps=STEPS,
        target_epsilon=EPSILON if private else None,
        delta=DELTA if private else None,
    )
    methods.append(f"{mechanism} {plan.step_size.method if plan.step_size else 'noiseless 0.5'}")
    eps = [edgedp.account(plan, attacker=a).epsilon for a in ATTACKERS]
    run = edgedp.simulate(plan, trials=TRIALS)
    print(
        f"{mechanism:<10}{eps[0]:>7.2f}{eps[1]:>7.2f}{plan.learning_rate:>6g}"
        f"{run.final_test_loss:>11.4f} ± "
        f"{run.final_test_loss_std:.4f}{run.final_test_accuracy:>10.3f}"
    )
print("protocol: each mechanism at its own step size:", ", ".join(methods))
