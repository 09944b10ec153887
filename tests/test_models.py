"""Model backends: numpy dense networks, ONNX training graphs on onnxruntime, the importer."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import edgedp_topologies
from edgedp import models, streams
from edgedp.accounting.participation import Participation
from edgedp.models import graph, importer
from edgedp.models.dense import DenseModel
from edgedp.models.linear import LinearModel
from edgedp.models.onnx_backend import OnnxModel
from edgedp.models.spec import init_params, parse
from edgedp.plan import TaskSpec, make_plan
from edgedp_cli.main import main as cli
from edgedp_sim import batch, datasets

F = 4
#: (model name, loss): every architecture and loss the backends support
CASES = [
    ("softmax:3", ""),
    ("mlp:4-6-3:relu", ""),
    ("mlp:4-6-5-3:tanh", ""),
    ("mlp:4-5-3:sigmoid", ""),
    ("mlp:4-5-4-3:relu,identity", ""),
    ("mlp:4-5-1:tanh", "bce"),
    ("mlp:4-5-1:relu", "mse"),
    ("logistic", ""),
    ("linear", ""),
]
IDS = [f"{m}/{loss or 'default'}" for m, loss in CASES]


def _data(spec, rng, batch=7, lead=()):
    x = rng.standard_normal(lead + (batch, spec.features))
    if spec.loss == "ce":
        y = rng.integers(0, spec.outputs, lead + (batch,)).astype(float)
    elif spec.loss == "bce":
        y = (rng.random(lead + (batch,)) > 0.5).astype(float)
    else:
        y = rng.standard_normal(lead + (batch,))
    return x, y


def _numpy(name, loss):
    return models.for_task(TaskSpec(model=name, loss=loss), F)


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _fd_gradient(model, theta, x, y, eps=1e-6):
    return np.array(
        [
            (model.loss(theta + eps * e, x, y) - model.loss(theta - eps * e, x, y)) / (2 * eps)
            for e in np.eye(len(theta))
        ]
    )


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory):
    """Training graphs of every case in float64 and float32."""
    root = tmp_path_factory.mktemp("onnx")
    files = {}
    for name, loss in CASES:
        spec = parse(name, features=F, loss=loss)
        for dtype in ("float64", "float32"):
            out = root / f"{spec.name.replace(':', '_')}_{spec.loss}_{dtype}.onnx"
            graph.write(spec, out, dtype=dtype)
            files[name, loss, dtype] = out
    return files


@pytest.mark.parametrize("name,loss", CASES, ids=IDS)
def test_numpy_gradients_match_finite_differences(name, loss, rng):
    model = _numpy(name, loss)
    spec = parse(name, features=F, loss=loss)
    theta = rng.standard_normal(model.dim)
    x, y = _data(spec, rng)
    grad = model.per_example_gradients(theta, x, y).mean(axis=0)
    assert _rel(grad, _fd_gradient(model, theta, x, y)) <= 1e-5


@pytest.mark.parametrize("name,loss", CASES, ids=IDS)
def test_onnx_gradients_match_numpy_and_finite_differences(name, loss, onnx_files, rng):
    spec = parse(name, features=F, loss=loss)
    numpy_model = _numpy(name, loss)
    theta = rng.standard_normal(spec.dim)
    x, y = _data(spec, rng)
    want = numpy_model.per_example_gradients(theta, x, y)
    for dtype, tol in (("float64", 1e-5), ("float32", 1e-3)):
        m = OnnxModel(onnx_files[name, loss, dtype])
        assert m.dim == spec.dim and m.loss_name == spec.loss
        assert m.init_params().tobytes() == numpy_model.init_params().tobytes()
        got = m.per_example_gradients(theta, x, y)
        assert got.shape == (7, spec.dim) and got.dtype == np.float64
        assert _rel(got, want) <= tol, dtype
        assert abs(float(m.loss(theta, x, y) - numpy_model.loss(theta, x, y))) <= tol
        if dtype == "float64":
            assert _rel(got.mean(axis=0), _fd_gradient(m, theta, x, y)) <= 1e-5
        if spec.classifier:
            np.testing.assert_array_equal(
                m.accuracy(theta, x, y), numpy_model.accuracy(theta, x, y)
            )


def test_mlp_init_is_seeded_from_the_spec_and_bounded():
    a, b = parse("mlp:8-16-10:tanh", features=8), parse("mlp:8-16-10:relu", features=8)
    assert init_params(a).tobytes() == init_params(a).tobytes()
    assert not np.array_equal(init_params(a), init_params(b))  # the name is the seed
    w0 = a.unflatten(init_params(a))[0]
    assert np.abs(w0).max() <= 1 / np.sqrt(8) and w0.std() > 0.1
    assert not np.any(init_params(parse("softmax:10", features=8)))


def test_dense_layout_with_one_output_is_the_linear_models():
    lin = LinearModel("logistic", F)
    dense = DenseModel(parse("mlp:4-1", features=F, loss="bce"))
    rng = np.random.default_rng(0)
    theta, x = rng.standard_normal(lin.dim), rng.standard_normal((5, F))
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(
        dense.per_example_gradients(theta, x, y), lin.per_example_gradients(theta, x, y), 1e-12
    )


def test_onnx_backend_loads_without_the_onnx_package(onnx_files):
    path = onnx_files["mlp:4-6-3:relu", "", "float32"]
    code = (
        "import json, sys\n"
        "from edgedp.models import for_task\n"
        "from edgedp.plan import TaskSpec\n"
        f"m = for_task(TaskSpec(model='onnx:{path}'), 4)\n"
        "print(json.dumps([m.dim, 'onnx' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [parse("mlp:4-6-3:relu", features=F).dim, False]


def test_training_graph_layout_and_metadata(onnx_files):
    model = onnx.load(str(onnx_files["mlp:4-6-3:relu", "", "float32"]))
    onnx.checker.check_model(model, full_check=True)
    assert [o.version for o in model.opset_import] == [graph.OPSET]
    names = [i.name for i in model.graph.input]
    assert names == ["dense0.weight", "dense0.bias", "dense1.weight", "dense1.bias", "x", "y"]
    outs = [o.name for o in model.graph.output]
    assert outs[:3] == ["loss", "losses", "output"]
    assert set(outs[3:]) == {f"grad_{n}" for n in names[:4]}
    meta = json.loads({p.key: p.value for p in model.metadata_props}["edgedp.model"])
    assert meta["params"][0] == ["dense0.weight", [6, 4]] and meta["loss"] == "ce"
    allowed = {"Gemm", "Relu", "Unsqueeze", "Mul", "MatMul", "Cast", "Greater", "Identity"}
    allowed |= {"Equal", "LogSoftmax", "Softmax", "ReduceSum", "ReduceMean", "Neg", "Sub"}
    assert {n.op_type for n in model.graph.node} <= allowed  # standard ops only


def test_leading_axes_are_looped_not_blas_batched(onnx_files, rng):
    m = OnnxModel(onnx_files["mlp:4-6-5-3:tanh", "", "float32"])
    theta = rng.standard_normal((2, 3, m.dim))
    x, y = _data(parse("mlp:4-6-5-3:tanh", features=F), rng, lead=(2, 3))
    both = m.per_example_gradients(theta, x, y)
    assert both[1, 2].tobytes() == m.per_example_gradients(theta[1, 2], x[1, 2], y[1, 2]).tobytes()
    big_x, big_y = _data(parse("mlp:4-6-5-3:tanh", features=F), rng, batch=1100)
    np.testing.assert_allclose(  # evaluation runs in chunks of EVAL_CHUNK
        m.loss(theta[0, 0], big_x, big_y), np.mean(m.per_example_losses(theta[0, 0], big_x, big_y))
    )


# ---------------------------------------------------------------- the batch engine
@pytest.mark.parametrize("dtype,tol", [("float64", 1e-9), ("float32", 1e-3)])
def test_dp_dsgd_batch_run_with_onnx_models_matches_numpy(dtype, tol, tmp_path):
    data = datasets.partition(datasets.load("digits", seed=0), 6, seed=0)
    path = tmp_path / "mlp.onnx"
    graph.write(parse("mlp:64-16-10:tanh", features=64), path, dtype=dtype)
    bs, steps = 32, 12
    per_epoch = data.local_size // bs

    def plan(model):
        return make_plan(
            "dp-dsgd",
            edgedp_topologies.parse("ring:6"),
            steps=steps,
            participation=Participation(-(-steps // per_epoch), per_epoch),
            clip_norm=1.0,
            learning_rate=0.5,
            noise_multiplier=1.0,
            task=TaskSpec(model=model, dataset="digits", batch_size=bs),
            seed=3,
        )

    reference = plan("mlp:64-16-10:tanh")
    same_draws = streams.RunKeys.simulation(reference)  # keys are bound to each plan's hash
    ref = batch.run(reference, data, trials=2, eval_every=6)
    got = batch.run(plan(f"onnx:{path}"), data, trials=2, eval_every=6, keys=same_draws)
    diff = float(np.max(np.abs(got.models - ref.models)))
    print(f"ONNX {dtype} vs numpy DP-D-SGD final models: max |diff| = {diff:.3g}")
    assert diff <= tol
    assert np.max(np.abs(ref.models - ref.models[:, :1])) > 0  # the run did move the models
    np.testing.assert_allclose(got.test_loss[-1], ref.test_loss[-1], atol=tol)
    assert len(got.test_accuracy) == len(ref.test_accuracy) == 3


# ---------------------------------------------------------------- the importer
def _torch_like(nodes, inits, x_shape, out="output", dtype=TensorProto.FLOAT):
    g = oh.make_graph(
        nodes,
        "main_graph",
        [oh.make_tensor_value_info("input", dtype, x_shape)],
        [oh.make_tensor_value_info(out, dtype, None)],
        [nh.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _mlp_weights(rng, sizes=(4, 5, 3)):
    return [
        (rng.standard_normal((o, i)), rng.standard_normal(o))
        for i, o in zip(sizes[:-1], sizes[1:], strict=True)
    ]


def test_import_gemm_relu_softmax_round_trips_to_the_numpy_model(rng, tmp_path):
    (w0, b0), (w1, b1) = _mlp_weights(rng)
    nodes = [
        oh.make_node("Identity", ["input"], ["i"], name="/Identity"),
        oh.make_node("Gemm", ["i", "fc1.weight", "fc1.bias"], ["g"], name="/fc1/Gemm", transB=1),
        oh.make_node("Relu", ["g"], ["r"], name="/relu/Relu"),
        oh.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["l"], name="/fc2/Gemm", transB=1),
        oh.make_node("Softmax", ["l"], ["output"], name="/Softmax", axis=1),
    ]
    inits = {"fc1.weight": w0, "fc1.bias": b0, "fc2.weight": w1, "fc2.bias": b1}
    src = tmp_path / "fwd.onnx"
    onnx.save(_torch_like(nodes, inits, ["batch", 4]), str(src))
    train, fwd, spec = importer.import_model(src, loss="ce", out=tmp_path / "t.onnx")
    assert spec.name == "mlp:4-5-3:relu"
    m = OnnxModel(train)
    theta = m.init_params()
    np.testing.assert_allclose(theta[:20], w0.astype(np.float32).reshape(-1))
    x, y = _data(spec, rng)
    np.testing.assert_allclose(
        m.per_example_gradients(theta, x, y),
        DenseModel(spec).per_example_gradients(theta, x, y),
        rtol=1e-3,
        atol=1e-5,
    )
    again = importer.read_forward(onnx.load(str(fwd)), loss="ce")  # our forward graph
    assert again[0] == spec and np.array_equal(again[1], theta)


def test_import_matmul_add_tanh_flatten_reshape_logsoftmax(rng, tmp_path):
    (w0, b0), (w1, b1), (w2, _) = _mlp_weights(rng, (4, 6, 5, 3))
    nodes = [
        oh.make_node("Flatten", ["input"], ["f"], name="/Flatten", axis=1),
        oh.make_node("Constant", [], ["shape"], value=nh.from_array(np.array([-1, 4]))),
        oh.make_node("Reshape", ["f", "shape"], ["r"], name="/Reshape"),
        oh.make_node("MatMul", ["r", "w0"], ["m0"], name="/l0/MatMul"),
        oh.make_node("Add", ["b0", "m0"], ["a0"], name="/l0/Add"),
        oh.make_node("Tanh", ["a0"], ["t0"], name="/Tanh"),
        oh.make_node("MatMul", ["t0", "w1"], ["m1"], name="/l1/MatMul"),
        oh.make_node("Add", ["m1", "b1"], ["a1"], name="/l1/Add"),
        oh.make_node("Sigmoid", ["a1"], ["s1"], name="/Sigmoid"),
        oh.make_node("Gemm", ["s1", "w2"], ["l2"], name="/l2/Gemm", transB=1),  # no bias
        oh.make_node("LogSoftmax", ["l2"], ["output"], name="/LogSoftmax", axis=-1),
    ]
    inits = {"w0": w0.T, "b0": b0, "w1": w1.T, "b1": b1, "w2": w2}
    model = _torch_like(nodes, inits, ["batch", 2, 2])
    spec, theta, source = importer.read_forward(model, loss="ce")
    assert spec.sizes == (4, 6, 5, 3) and spec.activations == ("tanh", "sigmoid")
    assert source["params"]["dense0.weight"] == {"from": "w0", "transposed": True}
    assert source["params"]["dense2.bias"] == {"from": None} and not np.any(theta[-3:])
    train, fwd, _ = importer.import_model(model, loss="ce", out=tmp_path / "t.onnx")
    import onnxruntime as ort

    x = rng.standard_normal((5, 4))
    orig = ort.InferenceSession(model.SerializeToString()).run(
        None, {"input": x.reshape(5, 2, 2).astype(np.float32)}
    )[0]
    mine = ort.InferenceSession(str(fwd)).run(None, {"x": x.astype(np.float32)})[0]
    np.testing.assert_allclose(np.exp(orig), mine, rtol=1e-5, atol=1e-6)


def test_import_sigmoid_output_is_the_bce_link(rng):
    (w0, b0), (w1, b1) = _mlp_weights(rng, (4, 3, 1))
    nodes = [
        oh.make_node("Gemm", ["input", "a", "b"], ["g"], transB=1),
        oh.make_node("Relu", ["g"], ["r"]),
        oh.make_node("Gemm", ["r", "c", "d"], ["l"], transB=1),
        oh.make_node("Sigmoid", ["l"], ["output"]),
    ]
    model = _torch_like(nodes, {"a": w0, "b": b0, "c": w1, "d": b1}, ["batch", 4])
    assert importer.read_forward(model, loss="bce")[0].name == "mlp:4-3-1:relu"
    with pytest.raises(ValueError, match="Sigmoid, which fits --loss bce, not mse"):
        importer.read_forward(model, loss="mse")


_BAD = [
    ("Conv", ["input", "a"], {}, "unsupported op Conv in node 'bad'"),
    ("Gemm", ["input", "a"], {"alpha": 2.0}, "node 'bad' \\(Gemm\\): only alpha"),
    ("Relu", ["input"], {}, "node 'bad' \\(Relu\\): an activation must follow"),
    ("Add", ["input", "b"], {}, "node 'bad' \\(Add\\): only a bias Add"),
]


@pytest.mark.parametrize("op,inputs,attrs,message", _BAD, ids=[b[0] for b in _BAD])
def test_import_rejects_unsupported_graphs_naming_op_and_node(op, inputs, attrs, message):
    node = oh.make_node(op, inputs, ["output"], name="bad", **attrs)
    model = _torch_like([node], {"a": np.ones((3, 4)), "b": np.ones(4)}, ["batch", 4])
    with pytest.raises(ValueError, match=message):
        importer.read_forward(model, loss="ce")


def test_import_rejects_a_branching_graph():
    nodes = [
        oh.make_node("Gemm", ["input", "a"], ["g"], name="g1", transB=1),
        oh.make_node("Gemm", ["input", "a"], ["output"], name="g2", transB=1),
    ]
    model = _torch_like(nodes, {"a": np.ones((4, 4))}, ["batch", 4])
    with pytest.raises(ValueError, match="node 'g2' \\(Gemm\\) does not continue the layer chain"):
        importer.read_forward(model, loss="ce")


# ---------------------------------------------------------------- for_task and the CLI
@pytest.mark.parametrize(
    "model,loss,message",
    [
        ("mlp", "", "Unknown model='mlp'"),
        ("resnet:5", "", "Unknown model='resnet:5'"),
        ("mlp:4-x-3", "", "Bad layer sizes"),
        ("mlp:5-3", "", "IN=5 features but the data has 4"),
        ("mlp:4-3-1", "", "one output: set the task's loss"),
        ("mlp:4-3-1", "ce", "'ce' needs OUT >= 2"),
        ("mlp:4-3-3", "mse", "'mse' needs OUT = 1"),
        ("mlp:4-3-3:gelu", "", "Unknown activation 'gelu'"),
        ("mlp:4-3-3-3:relu,tanh,relu", "", "3 activations for 2 layers"),
        ("softmax:1", "", "CLASSES >= 2"),
        ("softmax:3", "mse", "loss 'ce'"),
        ("logistic", "mse", "trained with loss 'bce'"),
        ("mlp:4-3-3", "hinge", "Unknown loss='hinge'"),
        ("onnx:", "", "onnx:PATH"),
        ("onnx:/nonexistent/m.onnx", "", "does not exist"),
    ],
)
def test_for_task_errors_name_the_value(model, loss, message):
    with pytest.raises(ValueError, match=message):
        models.for_task(TaskSpec(model=model, loss=loss), F)


def test_for_task_checks_the_onnx_file_against_the_task(onnx_files):
    path = onnx_files["mlp:4-6-3:relu", "", "float32"]
    assert models.for_task(TaskSpec(model=f"onnx:{path}", loss="ce"), F).dim == 51
    with pytest.raises(ValueError, match="takes 4 features but the data has 5"):
        models.for_task(TaskSpec(model=f"onnx:{path}"), 5)
    with pytest.raises(ValueError, match="for loss 'ce', not 'mse'"):
        models.for_task(TaskSpec(model=f"onnx:{path}", loss="mse"), F)
    forward = path.with_name(path.name.removesuffix(".onnx") + ".forward.onnx")
    with pytest.raises(ValueError, match="expected a format-1 training graph"):
        models.for_task(TaskSpec(model=f"onnx:{forward}"), F)


def test_task_loss_round_trips_and_keeps_old_plan_hashes():
    assert "loss" not in TaskSpec().to_dict()
    assert TaskSpec.from_dict(TaskSpec().to_dict()) == TaskSpec()
    t = TaskSpec(model="mlp:4-3-1", loss="bce")
    assert TaskSpec.from_dict(t.to_dict()) == t


def test_cli_model_build_and_import(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert cli(["model", "build", "--arch", "mlp:8-16-10:tanh", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dim"] == 314 and report["loss"] == "ce" and report["opset"] == graph.OPSET
    fwd = report["forward_out"]
    args = ["model", "import", fwd, "--loss", "ce", "--out", str(tmp_path / "i.onnx"), "--json"]
    assert cli(args) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "mlp:8-16-10:tanh"
    softmax = "model build --arch softmax --classes 3 --features 5 --dtype float64 --out"
    assert cli([*softmax.split(), str(tmp_path / "s.onnx")]) == 0
    capsys.readouterr()
    bad = [
        ("build --arch linear", "needs --features"),
        ("build --arch softmax --features 3", "--classes"),
        ("build --arch mlp:8-1", "set the task's loss"),
        (f"import {fwd} --loss bce", "fits --loss ce"),
        (f"import {tmp_path / 'no.onnx'} --loss ce", "no such"),
    ]
    for command, message in bad:
        argv = ["model", *command.split(), "--out", str(out)]
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_plans_pin_the_onnx_file_they_were_made_for(tmp_path):
    import shutil

    from edgedp import models
    from edgedp.accounting.participation import Participation
    from edgedp.plan import TaskSpec, make_plan

    path = tmp_path / "m.onnx"
    subprocess_build = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgedp_cli",
            "model",
            "build",
            "--arch",
            "logistic",
            "--loss",
            "bce",
            "--features",
            "20",
            "--out",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert subprocess_build.returncode == 0, subprocess_build.stderr
    p = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("ring:4"),
        steps=3,
        participation=Participation(3, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
        task=TaskSpec(model=f"onnx:{path}", dataset="synthetic-logistic"),
    )
    assert p.task.model.startswith(f"onnx:{path}@") and len(p.task.model.split("@")[1]) == 64
    assert models.for_task(p.task, 20).dim == 21
    copy = tmp_path / "device-copy.onnx"
    shutil.copy(path, copy)
    assert models.for_task(p.task, 20, model_file=str(copy)).dim == 21  # a device's own copy
    copy.write_bytes(copy.read_bytes() + b"\x00")
    with pytest.raises(ValueError, match="not the model the plan was made for"):
        models.for_task(p.task, 20, model_file=str(copy))
