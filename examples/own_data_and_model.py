"""Your own arrays and PyTorch model trained privately, and the model taken home as ONNX.
Needs PyTorch and onnx: pip install torch 'edgedp[onnx,onnx-build]'."""

import os, tempfile, warnings  # noqa: E401

import edgedp
import numpy as np
try:
    import onnxruntime as ort
    import torch
    from edgedp.models.importer import import_model
except ModuleNotFoundError as exc:
    raise SystemExit(f"this example needs {exc.name}: pip install torch 'edgedp[onnx,onnx-build]'")
# --- constants (seeded: the output is reproducible); your data: any (N, F) and (N,) arrays ---
rng, _ = np.random.default_rng(0), torch.manual_seed(0)
x = rng.standard_normal((1200, 6))
y = (x[:, 0] + np.tanh(2 * x[:, 1]) > 0).astype(float)
net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1), torch.nn.Sigmoid())
warnings.simplefilter("ignore", DeprecationWarning)  # torch's notice on its TorchScript exporter
with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)  # the plan names the files by relative path (and pins their hashes)
    torch.onnx.export(net, (torch.zeros(1, 6),), "net.onnx", input_names=["x"], dynamic_axes={"x": {0: "n"}}, dynamo=False)
    import_model("net.onnx", loss="bce", out="net.train.onnx")  # = edgedp model import
    data = edgedp.save_dataset("mine.npz", x[:1000], y[:1000])  # 20% of it held out
    plan = edgedp.make_plan("dp-dsgd", "ring:8", steps=40, target_epsilon=8.0, delta=1e-6, model="onnx:net.train.onnx", dataset=data, learning_rate=1.0)
    run = edgedp.simulate(plan)
    model, _ = edgedp.export_model(plan, run.final_models, "trained.onnx")  # and trained.npy
    p = ort.InferenceSession(str(model)).run(None, {"x": x[1000:].astype(np.float32)})[0][:, 0]
print(f"epsilon {edgedp.account(plan).epsilon:.2f} at delta 1e-06; held-out loss {run.final_test_loss:.3f}")
print(f"the exported ONNX model on 200 new examples: accuracy {np.mean((p > 0.5) == y[1000:]):.3f}")
