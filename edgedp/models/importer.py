"""Offline tooling: turn a forward graph exported by another tool into a training graph.

A forward graph (e.g. from ``torch.onnx.export`` of an MLP) is read as a chain of dense
layers and activations; the chain becomes a :class:`DenseSpec` plus the initial θ taken
from the graph's initializers, and :func:`edgedp.models.graph.write` writes the training
graph (so imported and built models have the same layout and gradients). Supported:

* ``Gemm`` (``alpha = beta = 1``, ``transA = 0``, ``transB`` 0 or 1), ``MatMul`` with a
  constant right-hand side followed by an optional bias ``Add`` — a dense layer; a layer
  without a bias gets a trainable bias initialised to zero (the function at θ₀ is unchanged);
* ``Relu``, ``Tanh``, ``Sigmoid`` after a dense layer (two dense layers in a row: identity);
* a final ``Softmax``/``LogSoftmax`` (loss ce) or ``Sigmoid`` (loss bce) — the link, which the
  training graph's loss absorbs;
* ``Flatten`` (axis 1), ``Reshape`` to ``(batch, features)``, ``Identity`` and ``Constant``.

Anything else — another op, a branch, a parameter computed at run time — is refused with an
error naming the op and the node. This module needs the ``onnx`` package (lazily imported).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgedp.extras import need_extra
from edgedp.models import graph
from edgedp.models.spec import DenseSpec

__all__ = ["SUPPORTED_OPS", "import_model", "read_forward"]

SUPPORTED_OPS = (
    "Gemm",
    "MatMul",
    "Add",
    "Relu",
    "Tanh",
    "Sigmoid",
    "Softmax",
    "LogSoftmax",
    "Flatten",
    "Reshape",
    "Identity",
    "Constant",
)
_ACTS = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid"}


class _Chain:
    """The dense layers read so far."""

    def __init__(self, features: int) -> None:
        self.width = features
        self.layers: list[dict] = []  # weight (out, in), bias, names, activation
        self.link: str | None = None
        self.after_matmul = False

    def dense(self, where: str, weight: np.ndarray, name: str, transposed: bool) -> None:
        if weight.ndim != 2 or weight.shape[1] != self.width:
            raise ValueError(
                f"{where}: weight {name!r} of shape {weight.shape} does not take "
                f"{self.width} inputs."
            )
        if self.layers and self.layers[-1]["act"] is None:
            self.layers[-1]["act"] = "identity"
        self.layers.append(
            {"W": weight, "b": None, "W_from": name, "b_from": None, "T": transposed, "act": None}
        )
        self.width = weight.shape[0]

    def bias(self, where: str, value: np.ndarray, name: str) -> None:
        out = self.layers[-1]["W"].shape[0]
        if value.size != out or value.ndim > 2 or (value.ndim == 2 and value.shape[0] != 1):
            raise ValueError(f"{where}: bias {name!r} of shape {value.shape} is not ({out},).")
        self.layers[-1]["b"], self.layers[-1]["b_from"] = value.reshape(out), name


def _where(node, index: int) -> str:
    return f"node {node.name or '#' + str(index)!r} ({node.op_type})"


def _attr(node, name: str, default):
    onnx = need_extra("onnx", user="building or reading ONNX graphs")

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _features(x) -> tuple[int, int | None]:
    dims = x.type.tensor_type.shape.dim
    if len(dims) < 2 or any(not d.HasField("dim_value") for d in dims[1:]):
        raise ValueError(
            f"input {x.name!r}: expected a static shape (batch, features...) to size the network."
        )
    batch = dims[0].dim_value if dims[0].HasField("dim_value") else None
    return int(np.prod([d.dim_value for d in dims[1:]])), batch


def read_forward(model, *, loss: str) -> tuple[DenseSpec, np.ndarray, dict]:
    """Read a forward graph (``onnx.ModelProto`` or path) as (spec, initial θ, provenance).

    Raises:
      ValueError: an unsupported op or structure, naming the op and the node.
    """
    onnx = need_extra("onnx", user="building or reading ONNX graphs")
    numpy_helper = onnx.numpy_helper

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
    data = [i for i in g.input if i.name not in consts]
    if len(data) != 1 or len(g.output) != 1:
        raise ValueError(
            f"Expected one data input and one output, got inputs {[i.name for i in data]} "
            f"and outputs {[o.name for o in g.output]}."
        )
    features, batch = _features(data[0])
    chain = _Chain(features)
    cur = data[0].name
    for index, node in enumerate(g.node):
        op, where = node.op_type, _where(node, index)
        if op not in SUPPORTED_OPS:
            raise ValueError(
                f"unsupported op {op} in node {node.name or '#' + str(index)!r}; supported: "
                + ", ".join(SUPPORTED_OPS)
            )
        if op == "Constant":
            consts[node.output[0]] = numpy_helper.to_array(_attr(node, "value", None))
            continue
        if chain.link is not None:
            raise ValueError(f"{where} follows the final {chain.link}; it must be the last op.")
        moving = [n for n in node.input if n and n not in consts]
        if moving != [cur]:
            raise ValueError(
                f"{where} does not continue the layer chain from {cur!r}: only sequential "
                "dense networks are supported."
            )
        const_in = [n for n in node.input if n and n in consts]
        matmul_bias = op == "Add" and chain.after_matmul
        chain.after_matmul = False
        if op in ("Gemm", "MatMul") and node.input[0] != cur:
            raise ValueError(f"{where}: the data must be the left operand.")
        if op == "Gemm":
            if (_attr(node, "alpha", 1.0), _attr(node, "beta", 1.0), _attr(node, "transA", 0)) != (
                1.0,
                1.0,
                0,
            ):
                raise ValueError(f"{where}: only alpha = beta = 1 and transA = 0 are supported.")
            w = consts[node.input[1]]
            trans_b = bool(_attr(node, "transB", 0))
            chain.dense(where, w if trans_b else w.T, node.input[1], not trans_b)
            if len(node.input) > 2 and node.input[2]:
                chain.bias(where, consts[node.input[2]], node.input[2])
        elif op == "MatMul":
            chain.dense(where, consts[node.input[1]].T, node.input[1], True)
            chain.after_matmul = True
        elif op == "Add":
            if not matmul_bias:
                raise ValueError(f"{where}: only a bias Add right after a MatMul is supported.")
            chain.bias(where, consts[const_in[0]], const_in[0])
        elif op in _ACTS:
            if not chain.layers or chain.layers[-1]["act"] is not None:
                raise ValueError(f"{where}: an activation must follow a dense layer.")
            chain.layers[-1]["act"] = _ACTS[op]
        elif op in ("Softmax", "LogSoftmax"):
            if not chain.layers or chain.layers[-1]["act"] is not None:
                raise ValueError(f"{where}: {op} must directly follow the last dense layer.")
            if _attr(node, "axis", -1) not in (1, -1):
                raise ValueError(f"{where}: {op} over axis {_attr(node, 'axis', -1)}; need 1.")
            chain.link = op
        elif op == "Flatten":
            if _attr(node, "axis", 1) != 1:
                raise ValueError(f"{where}: only Flatten(axis=1) is supported.")
        elif op == "Reshape":
            shape = [int(v) for v in np.asarray(consts[node.input[1]]).reshape(-1)]
            keeps_rows = len(shape) == 2 and (
                shape[1] == chain.width
                and shape[0] in (-1, 0, batch)
                or shape[1] == -1
                and shape[0] in (0, batch)
            )
            if not keeps_rows:
                raise ValueError(f"{where}: only a reshape to (batch, {chain.width}) is supported.")
        cur = node.output[0]
    if cur != g.output[0].name:
        raise ValueError(f"output {g.output[0].name!r} is not the end of the layer chain.")
    if not chain.layers:
        raise ValueError("the graph has no dense layer (Gemm or MatMul).")
    last = chain.layers[-1]
    link = chain.link or ("Sigmoid" if last["act"] == "sigmoid" else None)
    if last["act"] not in (None, "sigmoid"):
        raise ValueError(
            f"the output ends with {last['act']} after the last dense layer; edgedp's losses "
            "take the last layer's logits (allowed finals: Softmax, LogSoftmax, Sigmoid)."
        )
    want = {"Softmax": "ce", "LogSoftmax": "ce", "Sigmoid": "bce"}.get(link or "")
    if want is not None and loss != want:
        raise ValueError(f"the output ends with {link}, which fits --loss {want}, not {loss}.")
    sizes = (features,) + tuple(int(layer["W"].shape[0]) for layer in chain.layers)
    acts = tuple(layer["act"] or "identity" for layer in chain.layers[:-1])
    spec = DenseSpec(sizes, acts, loss)
    parts, params = [], {}
    for i, layer in enumerate(chain.layers):
        bias = np.zeros(layer["W"].shape[0]) if layer["b"] is None else layer["b"]
        parts += [layer["W"].reshape(-1), bias]
        params[f"dense{i}.weight"] = {"from": layer["W_from"], "transposed": layer["T"]}
        params[f"dense{i}.bias"] = {"from": layer["b_from"]}  # None: added, zero at init
    return spec, np.concatenate(parts).astype(np.float64), {"params": params, "link": link}


def import_model(
    src,
    *,
    loss: str,
    out: str | Path,
    dtype: str | None = None,
    forward_out: str | Path | None = None,
) -> tuple[Path, Path, DenseSpec]:
    """Read ``src`` (a forward graph) and write its training and forward graphs.

    Args:
      src: path of the forward ``.onnx`` file (or an ``onnx.ModelProto``).
      loss: ``ce``, ``bce`` or ``mse``.
      out: where to write the training graph (the forward graph goes beside it).
      dtype: ``float32``/``float64``; default: the input's element type.
    """
    onnx = need_extra("onnx", user="building or reading ONNX graphs")

    model = src if isinstance(src, onnx.ModelProto) else onnx.load(str(src))
    spec, theta, source = read_forward(model, loss=loss)
    if dtype is None:
        params = {t.name for t in model.graph.initializer}
        x = next(i for i in model.graph.input if i.name not in params)
        double = x.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
        dtype = "float64" if double else "float32"
    if not isinstance(src, onnx.ModelProto):
        source["file"] = Path(src).name
    train, fwd = graph.write(
        spec, out, init=theta, dtype=dtype, forward_out=forward_out, source=source
    )
    return train, fwd, spec
