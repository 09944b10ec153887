"""What a curious neighbour and an eavesdropper learn, next to the formal epsilon."""

import edgedp

# --- constants (seeded: the output is reproducible) ---
TRIALS, SEED = 120, 0  # Monte Carlo trials; seed of the estimator's tie-breaking noise

plan = edgedp.make_plan(
    "dp-dsgd", "ring:6", steps=8, target_epsilon=4.0, delta=1e-6, dataset="breast-cancer"
)
result = edgedp.leak(plan, ["hbc:1", "eavesdropper:all"], trials=TRIALS, victim=0, seed=SEED)
print(f"{result.mechanism}, victim {result.victim}, {result.trials} trials")
for a in result.attackers:
    print(
        f"{a.attacker:<18} M-NMI {a.m_nmi:.3f}  cosine {a.cosine:.3f}  "
        f"formal epsilon {a.epsilon:.2f} (delta {a.delta:g}, {a.adjacency})"
    )
    for warning in a.warnings:
        print(f"  warning: {warning}")
