"""Offline tooling: write ONNX training and forward graphs for a :class:`DenseSpec`.

This module needs the ``onnx`` package (imported lazily); devices never import it — they
only load the files it writes, with onnxruntime (:mod:`edgedp.models.onnx_backend`).

Training graph (standard ONNX ops, opset :data:`OPSET`, IR version :data:`IR_VERSION`, checked
with ``onnx.checker`` in full-check mode):

* inputs: every parameter ``dense{l}.weight`` ``(out, in)`` and ``dense{l}.bias`` ``(out,)``,
  then ``x`` ``(batch, IN)`` and ``y`` ``(batch,)`` (class indices as floats for ce);
* outputs: ``loss`` (scalar mean), ``losses`` ``(batch,)``, ``output`` (logits
  ``(batch, OUT)``) and for each parameter P ``grad_P`` ``(batch, *shape(P))``: the gradient
  of each example's loss, computed by backpropagation written into the graph — forward with
  ``Gemm(transB=1)``, δ_L from ``Softmax``/``Sigmoid``/``Sub``, the per-example outer product
  ``grad_W = Unsqueeze(δ, 2) · Unsqueeze(h, 1)`` (broadcast ``Mul``), ``δ_{l−1} =
  MatMul(δ, W) · act′(z)``.

Forward graph: input ``x``, parameters as initializers (the initial values), output
``output`` = ``Softmax`` (ce), ``Sigmoid`` (bce) or the identity (mse) of the logits — the
shape of file ``torch.onnx.export`` writes, so :mod:`edgedp.models.importer` reads it back.

Both carry ``metadata_props``: ``edgedp.model`` (JSON: format, role, name, sizes,
activations, loss, dtype, features, dim, the parameter list with shapes, input and output
names) and, in the training graph, ``edgedp.init`` — the initial flat θ as base64 of
float64 little-endian bytes (exact bits, readable with onnxruntime alone) — and
``edgedp.init_sha256``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from edgedp.extras import need_extra
from edgedp.models.spec import DenseSpec, init_params

__all__ = [
    "FORMAT",
    "IR_VERSION",
    "OPSET",
    "forward_model",
    "metadata",
    "training_model",
    "write",
]

OPSET = 17  # onnxruntime >= 1.13 runs it; Reduce* still take axes as attributes here
IR_VERSION = 8
FORMAT = 1
DTYPES = ("float32", "float64")


def metadata(spec: DenseSpec, *, dtype: str, role: str, source: Any = None) -> dict[str, Any]:
    """The ``edgedp.model`` JSON object of a graph of ``spec``."""
    layout = spec.layout()
    meta = {
        "format": FORMAT,
        "role": role,
        "name": spec.architecture,
        "sizes": list(spec.sizes),
        "activations": list(spec.activations),
        "loss": spec.loss,
        "dtype": dtype,
        "features": spec.features,
        "outputs_dim": spec.outputs,
        "dim": spec.dim,
        "params": [[name, list(shape)] for name, shape, _ in layout],
        "inputs": {"x": "x", "y": "y"},
        "outputs": {
            "loss": "loss",
            "losses": "losses",
            "output": "output",
            "grads": [f"grad_{name}" for name, _, _ in layout],
        },
        "opset": OPSET,
    }
    if source is not None:
        meta["source"] = source
    return meta


class _Graph:
    """Collects nodes and constant initializers with unique names."""

    def __init__(self, onnx, dtype: str) -> None:
        self.onnx = onnx
        self.np_dtype = np.dtype(dtype)
        self.elem = onnx.helper.np_dtype_to_tensor_dtype(self.np_dtype)
        self.nodes: list = []
        self.inits: list = []
        self._count = 0

    def const(self, name: str, value, dtype=None) -> str:
        arr = np.asarray(value, dtype=self.np_dtype if dtype is None else dtype)
        self.inits.append(self.onnx.numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        self._count += 1
        out = out or f"t{self._count}_{op_type.lower()}"
        self.nodes.append(
            self.onnx.helper.make_node(
                op_type, inputs, [out], name=f"n{self._count}_{op_type}", **attrs
            )
        )
        return out


def _forward(g: _Graph, spec: DenseSpec, names: list[str], x: str):
    """Gemm + activation chain; returns (pre-activations z_l, activations h_l with h_0 = x)."""
    zs, hs = [], [x]
    layers = len(spec.sizes) - 1
    for layer in range(layers):
        last = layer == layers - 1
        z = g.op(
            "Gemm",
            [hs[-1], names[2 * layer], names[2 * layer + 1]],
            "logits" if last else None,
            transB=1,
        )
        zs.append(z)
        if not last:
            act = spec.activations[layer]
            op = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}.get(act)
            hs.append(g.op(op, [z]) if op else z)
    return zs, hs


def _derivative(g: _Graph, act: str, z: str, h: str) -> str | None:
    if act == "relu":
        return g.op("Cast", [g.op("Greater", [z, "zero"])], to=g.elem)
    if act == "tanh":
        return g.op("Sub", ["one", g.op("Mul", [h, h])])
    if act == "sigmoid":
        return g.op("Mul", [h, g.op("Sub", ["one", h])])
    return None


def _head(g: _Graph, spec: DenseSpec, z: str) -> tuple[str, str]:
    """Per-example losses ``(batch,)`` and δ_L = ∂ℓ/∂z ``(batch, OUT)``."""
    y1 = g.op("Unsqueeze", ["y", "axis1"])
    if spec.loss == "ce":
        g.const("classes", np.arange(spec.outputs))
        onehot = g.op("Cast", [g.op("Equal", [y1, "classes"])], to=g.elem)
        picked = g.op("Mul", [onehot, g.op("LogSoftmax", [z], axis=1)])
        losses = g.op("Neg", [g.op("ReduceSum", [picked, "axis1"], keepdims=0)])
        return losses, g.op("Sub", [g.op("Softmax", [z], axis=1), onehot])
    if spec.loss == "bce":
        # softplus(z) − y·z with softplus(z) = relu(z) + log(1 + exp(−|z|))
        tail = g.op("Log", [g.op("Add", ["one", g.op("Exp", [g.op("Neg", [g.op("Abs", [z])])])])])
        per = g.op("Sub", [g.op("Add", [g.op("Relu", [z]), tail]), g.op("Mul", [y1, z])])
        delta = g.op("Sub", [g.op("Sigmoid", [z]), y1])
    else:
        delta = g.op("Sub", [z, y1])
        per = g.op("Mul", ["half", g.op("Mul", [delta, delta])])
    return g.op("Squeeze", [per, "axis1"]), delta


def _finish(g: _Graph, name: str, inputs, outputs, meta: dict, extra: dict | None = None):
    onnx = g.onnx
    graph = onnx.helper.make_graph(g.nodes, name, inputs, outputs, g.inits)
    model = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid("", OPSET)],
        producer_name="edgedp",
        ir_version=IR_VERSION,
    )
    props = {"edgedp.model": json.dumps(meta, sort_keys=True), **(extra or {})}
    onnx.helper.set_model_props(model, props)
    onnx.checker.check_model(model, full_check=True)
    return model


def _check(spec: DenseSpec, init, dtype: str) -> np.ndarray:
    if dtype not in DTYPES:
        raise ValueError(f"Expected dtype={dtype!r} to be one of {DTYPES}.")
    theta = init_params(spec) if init is None else np.asarray(init, dtype=np.float64)
    if theta.shape != (spec.dim,) or not np.all(np.isfinite(theta)):
        raise ValueError(f"Expected init to be {spec.dim} finite numbers, got {theta.shape}.")
    return theta


def training_model(spec: DenseSpec, *, init=None, dtype: str = "float32", source=None):
    """The ONNX training graph of ``spec`` (an ``onnx.ModelProto``).

    Args:
      spec: the architecture and loss.
      init: the initial flat θ (default: :func:`~edgedp.models.spec.init_params`).
      dtype: ``"float32"`` or ``"float64"``: the graph's tensor type.
      source: optional JSON-able provenance (the importer records the original names).
    """
    onnx = need_extra("onnx", user="building or reading ONNX graphs")

    theta = _check(spec, init, dtype)
    g = _Graph(onnx, dtype)
    g.const("one", 1.0)
    g.const("half", 0.5)
    g.const("zero", 0.0)
    for axis in (1, 2):
        g.const(f"axis{axis}", [axis], dtype=np.int64)
    names = [name for name, _, _ in spec.layout()]
    shapes = [shape for _, shape, _ in spec.layout()]
    zs, hs = _forward(g, spec, names, "x")
    losses, delta = _head(g, spec, zs[-1])
    g.op("Identity", [losses], "losses")
    g.op("ReduceMean", [losses], "loss", keepdims=0)
    g.op("Identity", [zs[-1]], "output")
    for layer in range(len(zs) - 1, -1, -1):
        column = g.op("Unsqueeze", [delta, "axis2"])  # (batch, out, 1)
        row = g.op("Unsqueeze", [hs[layer], "axis1"])  # (batch, 1, in)
        outer = g.op("Mul", [column, row])  # per-example outer product (batch, out, in)
        g.op("Identity", [outer], f"grad_{names[2 * layer]}")
        g.op("Identity", [delta], f"grad_{names[2 * layer + 1]}")
        if layer > 0:
            back = g.op("MatMul", [delta, names[2 * layer]])
            dact = _derivative(g, spec.activations[layer - 1], zs[layer - 1], hs[layer])
            delta = back if dact is None else g.op("Mul", [back, dact])
    vi = onnx.helper.make_tensor_value_info
    inputs = [vi(n, g.elem, list(s)) for n, s in zip(names, shapes, strict=True)]
    inputs += [vi("x", g.elem, ["batch", spec.features]), vi("y", g.elem, ["batch"])]
    outputs = [
        vi("loss", g.elem, []),
        vi("losses", g.elem, ["batch"]),
        vi("output", g.elem, ["batch", spec.outputs]),
    ]
    outputs += [vi(f"grad_{n}", g.elem, ["batch", *s]) for n, s in zip(names, shapes, strict=True)]
    raw = np.ascontiguousarray(theta, dtype="<f8").tobytes()
    extra = {
        "edgedp.init": base64.b64encode(raw).decode("ascii"),
        "edgedp.init_sha256": hashlib.sha256(raw).hexdigest(),
    }
    meta = metadata(spec, dtype=dtype, role="training", source=source)
    return _finish(g, "edgedp_training", inputs, outputs, meta, extra)


def forward_model(spec: DenseSpec, *, init=None, dtype: str = "float32"):
    """The ONNX inference graph of ``spec``: ``x`` → ``output``, parameters as initializers."""
    onnx = need_extra("onnx", user="building or reading ONNX graphs")

    theta = _check(spec, init, dtype)
    g = _Graph(onnx, dtype)
    names = []
    for (name, _, _), value in zip(spec.layout(), spec.unflatten(theta), strict=True):
        names.append(g.const(name, value))
    zs, _ = _forward(g, spec, names, "x")
    link = {"ce": "Softmax", "bce": "Sigmoid"}.get(spec.loss)
    if link == "Softmax":
        g.op("Softmax", [zs[-1]], "output", axis=1)
    else:
        g.op(link or "Identity", [zs[-1]], "output")
    vi = onnx.helper.make_tensor_value_info
    meta = metadata(spec, dtype=dtype, role="forward")
    return _finish(
        g,
        "edgedp_forward",
        [vi("x", g.elem, ["batch", spec.features])],
        [vi("output", g.elem, ["batch", spec.outputs])],
        meta,
    )


def forward_path(out: str | Path) -> Path:
    """Where :func:`write` puts the forward graph next to ``out``: ``NAME.forward.onnx``."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".onnx") + ".forward.onnx")


def write(
    spec: DenseSpec,
    out: str | Path,
    *,
    init=None,
    dtype: str = "float32",
    forward_out: str | Path | None = None,
    source=None,
) -> tuple[Path, Path]:
    """Write the training graph to ``out`` and the forward graph beside it; return both paths."""
    onnx = need_extra("onnx", user="building or reading ONNX graphs")

    out = Path(out)
    fwd = Path(forward_out) if forward_out is not None else forward_path(out)
    train = training_model(spec, init=init, dtype=dtype, source=source)
    forward = forward_model(spec, init=init, dtype=dtype)
    onnx.save_model(train, str(out))
    onnx.save_model(forward, str(fwd))
    return out, fwd
