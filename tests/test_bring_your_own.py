"""Your own data and model in, the trained model out: dataset files (npz, csv) and numpy
arrays split by the same partitioners, an ONNX model of your own, the trained model exported
back to ONNX from the simulator, the API and real agents (whose held-out loss, Prometheus
textfile and exported model are checked against the simulator's, computed another way)."""

import re

import numpy as np
import pytest

import edgedp
from edgedp.plan import NoisePlan
from edgedp_cli import main as cli
from edgedp_sim import datasets
from firmware_py import deploy

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def _arrays(seed=0, n=300, f=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, f))
    y = (x @ np.arange(1, f + 1) > 0).astype(float)
    return x, y


def test_dataset_files_and_arrays_follow_the_stated_layouts(tmp_path):
    x, y = _arrays()
    name = edgedp.save_dataset(tmp_path / "d.npz", x, y)
    data = datasets.load(name, seed=0)
    assert data.task == "logistic" and data.x_train.shape == (240, 5) and len(data.y_test) == 60
    together = np.concatenate([data.x_train, data.x_test])  # used as given, no scaling
    assert sorted(map(tuple, together)) == sorted(map(tuple, x))
    # a csv with a header, the label last; an npz with the user's own split kept
    rows = "\n".join(
        ",".join(f"{float(v)!r}" for v in (*xi, yi)) for xi, yi in zip(x, y, strict=True)
    )
    (tmp_path / "d.csv").write_text("a,b,c,d,e,label\n" + rows + "\n")
    assert datasets.shape(str(tmp_path / "d.csv")) == (240, 5)
    split = edgedp.save_dataset(
        tmp_path / "s.npz", x[:200], y[:200], x_test=x[200:], y_test=y[200:]
    )
    assert datasets.load(split).x_test.shape == (100, 5)
    # the partitioners of the named sets: iid and label-skewed
    fed = datasets.partition(datasets.load(name), 4, scheme="dirichlet:0.3", seed=1)
    assert fed.x.shape == (4, 60, 5)
    three = edgedp.save_dataset(tmp_path / "c.npz", x, (x[:, :2] > 0).sum(axis=1))
    assert datasets.load(three).task == "softmax"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"x": np.ones((5, 2))}, "layout"),
        ({"x": np.ones((5, 2)), "y": np.ones(4)}, "expected x"),
        ({"x": np.full((5, 2), np.nan), "y": np.ones(5)}, "NaN"),
        ({"x": np.ones((5, 2)), "y": np.arange(5.0), "task": np.asarray("logistic")}, "labels"),
    ],
)
def test_a_bad_dataset_file_is_refused_with_its_layout(tmp_path, content, message):
    np.savez(tmp_path / "bad.npz", **content)
    with pytest.raises(ValueError, match=message):
        datasets.load(str(tmp_path / "bad.npz"))


def test_a_plan_pins_its_dataset_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = _arrays()
    edgedp.save_dataset("d.npz", x, y)
    plan = edgedp.make_plan("dp-dsgd", "ring:4", steps=5, noise_multiplier=1.0, dataset="d.npz")
    assert re.fullmatch(r"d\.npz@[0-9a-f]{64}", plan.task.dataset)
    assert plan.participation.b == 1 and datasets.local_size(plan.task.dataset, 4) == 60
    edgedp.save_dataset("d.npz", x[::-1], y[::-1])  # other data under the same name
    with pytest.raises(ValueError, match="not the dataset the plan was made for"):
        edgedp.simulate(plan)


def _logistic_by_hand(theta, x):
    return 1.0 / (1.0 + np.exp(-(x @ theta[:-1] + theta[-1])))


def test_the_simulators_model_exported_to_onnx_predicts_as_computed_by_hand(tmp_path):
    x, y = _arrays()
    name = edgedp.save_dataset(tmp_path / "d.npz", x, y)
    plan = edgedp.make_plan("dp-dsgd", "ring:4", steps=8, noise_multiplier=0.5, dataset=name)
    run = edgedp.simulate(plan, trials=2)
    assert run.final_models.shape == (2, 4, 6)
    onnx_path, npy = edgedp.export_model(plan, run.final_models, tmp_path / "m.onnx")
    theta = np.load(npy)
    assert np.array_equal(theta, run.final_models[0].mean(axis=0))
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out = session.run(["output"], {"x": x.astype(np.float32)})[0][:, 0]
    assert out == pytest.approx(_logistic_by_hand(theta, x), abs=1e-5)
    _, npy1 = edgedp.export_model(plan, run.final_models, tmp_path / "n1.onnx", node=1)
    assert np.array_equal(np.load(npy1), run.final_models[0][1])
    with pytest.raises(ValueError, match="Expected 6 parameters"):
        edgedp.export_model(plan, np.zeros(5), tmp_path / "bad.onnx")


def test_a_softmax_model_exports_class_probabilities(tmp_path):
    x, _ = _arrays(f=4)
    y = (x[:, :2] > 0).sum(axis=1).astype(float)
    name = edgedp.save_dataset(tmp_path / "c.npz", x, y)
    plan = edgedp.make_plan(
        "dp-dsgd", "ring:3", steps=4, noise_multiplier=0.5, dataset=name, model="softmax:3"
    )
    theta = edgedp.simulate(plan).final_models[0, 0]
    onnx_path, _ = edgedp.export_model(plan, theta, tmp_path / "c.onnx")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    probs = session.run(["output"], {"x": x.astype(np.float32)})[0]
    w, b = theta[:12].reshape(3, 4), theta[12:]  # (out, in) then bias: the stated layout
    z = x @ w.T + b
    by_hand = np.exp(z - z.max(axis=1, keepdims=True))
    assert probs == pytest.approx(by_hand / by_hand.sum(axis=1, keepdims=True), abs=1e-5)


def _prom(path):
    values = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0] + ("{" + name.split("{")[1] if "reason" in name else "")] = (
                float(value)
            )
    return values


def test_real_agents_report_held_out_loss_write_a_textfile_and_export(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = _arrays(n=200)
    edgedp.save_dataset("d.npz", x, y)
    plan = edgedp.make_plan(
        "dp-dsgd", "complete:3", steps=4, noise_multiplier=1.0, dataset="d.npz", seed=3
    )
    (tmp_path / "run.plan").write_bytes(plan.to_bytes())
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=2.0)
    assert run.wait(timeout=120) == [0, 0, 0]
    done = [next(m for m in run.metrics(u) if m["event"] == "done") for u in range(3)]
    sim = edgedp.simulate(plan)
    assert run.final_models() == pytest.approx(sim.final_models[0], abs=0)  # same bits
    # the devices' held-out numbers are the simulator's, node by node
    data = datasets.load(plan.task.dataset, seed=plan.seed)
    for u in range(3):  # binary cross-entropy of node u's model, by hand
        theta = sim.final_models[0, u]
        margin = (2 * data.y_test - 1) * (data.x_test @ theta[:-1] + theta[-1])
        assert done[u]["test_loss"] == pytest.approx(np.mean(np.log1p(np.exp(-margin))), rel=1e-9)
    assert np.mean([d["test_loss"] for d in done]) == pytest.approx(sim.final_test_loss, rel=1e-9)
    log = (run.directory / "node-0.log").read_text()
    assert f"test loss {done[0]['test_loss']:.4f}" in log
    prom = _prom(run.directory / "configs/state/node-0/metrics.prom")
    assert prom["edgedp_done"] == 1.0 and prom["edgedp_round"] == 4.0
    assert prom["edgedp_test_loss"] == pytest.approx(done[0]["test_loss"])
    assert "edgedp_test_accuracy" in prom and prom["edgedp_rounds_planned"] == 4.0
    # the device's published model, exported from the command line
    final = run.directory / "configs/state/node-2/final.npy"
    argv = ["model", "export", str(tmp_path / "run.plan"), str(final), "--out", "dev.onnx"]
    assert cli.main(argv) == 0
    session = ort.InferenceSession("dev.onnx", providers=["CPUExecutionProvider"])
    out = session.run(["output"], {"x": x[:7].astype(np.float32)})[0][:, 0]
    assert out == pytest.approx(_logistic_by_hand(np.load(final), x[:7]), abs=1e-5)
    assert NoisePlan.from_bytes((tmp_path / "run.plan").read_bytes()).plan_hash == plan.plan_hash
