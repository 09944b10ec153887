"""A small MLP as an ONNX training graph, trained privately by the same agents. Needs
onnx and onnxruntime, which `make demo` does not install: pip install 'edgedp[onnx,onnx-build]'."""

import os
import tempfile

import edgedp
from edgedp.models import graph, spec
from edgedp.models.onnx_backend import OnnxModel

try:
    import onnx, onnxruntime  # noqa: E401, F401
except ModuleNotFoundError as exc:
    raise SystemExit(f"this example needs {exc.name}: pip install 'edgedp[onnx,onnx-build]'")

# --- constants (seeded: the output is reproducible; breast-cancer: 30 features) ---
ARCH, FEATURES, TOPOLOGY, STEPS, SEED = "mlp:30-8-1:tanh", 30, "ring:8", 25, 0

with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)  # the plan names the model by relative path (and pins its hash)
    graph.write(spec.parse(ARCH, features=FEATURES, loss="bce"), "mlp.onnx")
    print(f"ONNX training graph: {OnnxModel('mlp.onnx').dim} parameters")
    plan = edgedp.make_plan("dp-dsgd", TOPOLOGY, steps=STEPS, target_epsilon=8.0, delta=1e-6,
                            model="onnx:mlp.onnx", dataset="breast-cancer", seed=SEED)
    run = edgedp.simulate(plan, trials=2)
g = edgedp.account(plan)
print(f"epsilon {g.epsilon:.2f} at delta {g.delta:g} ({g.adjacency}) against {g.attacker}")
print(f"test loss {run.final_test_loss:.3f}, accuracy {run.final_test_accuracy:.3f}")
