"""DP-D-SGD on a lossy WAN: lognormal latency, 5% dropouts per round, 2% message loss."""

import edgedp

# --- constants (seeded: the output is reproducible) ---
SEED = 3  # network and fault draws
SCENARIO = {
    "name": "lossy-wan",
    "seed": SEED,
    "network": {
        "latency": {"kind": "lognormal", "median_ms": 40, "sigma": 0.6},
        "bandwidth_mbps": 20,
        "loss": 0.02,
        "round_timeout_s": 0.5,
    },
    "faults": {"dropout": 0.05},
}

plan = edgedp.make_plan("dp-dsgd", "er:16:0.3:2", steps=20, target_epsilon=4.0, delta=1e-6)
ideal = edgedp.simulate(plan, engine="event")
lossy = edgedp.simulate(plan, SCENARIO, trials=2)  # auto: the event engine
g = edgedp.account(plan)
print(f"epsilon {g.epsilon:.2f} at delta {g.delta:g} ({g.adjacency}) against {g.attacker}")
for label, run in (("ideal", ideal), ("lossy", lossy)):
    m = run.metrics
    print(
        f"{label:<6} test loss {run.final_test_loss:.4f}  dropped {m['dropped_messages']:>4}  "
        f"missing {m['missing']:>4}  simulated {run.simulated_seconds:6.2f} s"
    )
