"""A small MLP as an ONNX training graph, trained privately by the same agents."""

import os
import tempfile

import edgedp
from edgedp.models import graph, spec
from edgedp.models.onnx_backend import OnnxModel

# --- constants (seeded: the output is reproducible) ---
ARCH, FEATURES = "mlp:30-8-1:tanh", 30  # breast-cancer has 30 features; binary label
TOPOLOGY, STEPS, SEED = "ring:8", 25, 0

with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)  # the plan names the model by relative path (and pins its hash)
    graph.write(spec.parse(ARCH, features=FEATURES, loss="bce"), "mlp.onnx")
    print(f"ONNX training graph: {OnnxModel('mlp.onnx').dim} parameters")
    plan = edgedp.make_plan(
        "dp-dsgd",
        TOPOLOGY,
        steps=STEPS,
        target_epsilon=8.0,
        delta=1e-6,
        model="onnx:mlp.onnx",
        dataset="breast-cancer",
        seed=SEED,
    )
    run = edgedp.simulate(plan, trials=2)
print(f"epsilon {edgedp.account(plan).epsilon:.2f}; test loss {run.final_test_loss:.3f}")
print(f"test accuracy {run.final_test_accuracy:.3f} after {STEPS} rounds on {TOPOLOGY}")
