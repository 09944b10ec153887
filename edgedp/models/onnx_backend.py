"""The onnxruntime backend: a training graph file as a model with per-example gradients.

The file is one written by :mod:`edgedp.models.graph` (``edgedp model build`` or ``edgedp
model import``). Everything the backend needs is read through onnxruntime alone (no
``onnx`` package on the device): the ``edgedp.model`` metadata JSON names the parameter
inputs, their shapes, the data inputs and the outputs; ``edgedp.init`` holds the initial θ
(base64 float64, checked against ``edgedp.init_sha256``).

Hot path: one ``InferenceSession`` per model, created once, with one intra-op and one
inter-op thread and sequential execution (the same reduction order on every call); per
batch size one ``IOBinding`` whose inputs and outputs are bound once to preallocated numpy
buffers (``OrtValue`` wraps them without a copy), so a call copies θ, x and y in, runs,
and copies the gradients out into the flat ``(B, d)`` array. A call with
leading axes (θ ``(..., d)``, x ``(..., B, f)``, y ``(..., B)``) loops over the leading
index and runs the session once per node with that node's B examples, so a node's numbers
are the same alone or inside a batch. θ stays float64 outside the graph; a float32 graph
receives a float32 copy, and gradients come back as float64.

onnxruntime executes the whole graph whatever outputs are requested, so ``loss`` and
``accuracy`` cost a gradient pass; evaluation runs in chunks of at most
:data:`EVAL_CHUNK` examples to bound that memory.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np

from edgedp import _validate
from edgedp.extras import need_extra
from edgedp.models.dense import _accuracy

__all__ = ["EVAL_CHUNK", "OnnxModel"]

EVAL_CHUNK = 512
_FORMAT = 1
_MAX_BUFFERS = 4  # batch sizes whose output buffers are kept


class OnnxModel:
    """A training-graph file on onnxruntime; the same protocol as the numpy backends.

    Args:
      path: the training graph (``.onnx``).
      threads: onnxruntime intra-op threads (1: deterministic and light on a small board).
    """

    def __init__(self, path: str | Path, *, threads: int = 1) -> None:
        ort = need_extra("onnxruntime", user="an onnx: model")

        _validate.integer(minimum=1, threads=threads)
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"ONNX model file {str(self.path)!r} does not exist.")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ValueError(f"onnxruntime cannot load {str(self.path)!r}: {exc}") from None
        props = self._session.get_modelmeta().custom_metadata_map
        if "edgedp.model" not in props:
            raise ValueError(
                f"{self.path} has no edgedp.model metadata: write training graphs with "
                "`edgedp model build` or `edgedp model import`."
            )
        meta = json.loads(props["edgedp.model"])
        if meta.get("format") != _FORMAT or meta.get("role") != "training":
            raise ValueError(
                f"{self.path}: expected a format-{_FORMAT} training graph, got "
                f"format={meta.get('format')!r} role={meta.get('role')!r}."
            )
        self.meta = meta
        self.loss_name = str(meta["loss"])
        self.name = str(meta["name"])
        self.features = int(meta["features"])
        self._dtype = np.dtype(meta["dtype"])
        self._params = [(str(n), tuple(int(s) for s in shape)) for n, shape in meta["params"]]
        self._sizes = [int(np.prod(shape)) for _, shape in self._params]
        self._offsets = np.concatenate([[0], np.cumsum(self._sizes)]).astype(int).tolist()
        self.dim = int(self._offsets[-1])
        self._x, self._y = meta["inputs"]["x"], meta["inputs"]["y"]
        outs = meta["outputs"]
        self._grad_names = list(outs["grads"])
        self._losses, self._output = outs["losses"], outs["output"]
        self._classes = int(meta.get("outputs_dim", 0))
        if len(self._grad_names) != len(self._params):
            raise ValueError(f"{self.path}: expected one gradient output per parameter.")
        self._slots = [
            (name, grad, shape, lo, hi)
            for (name, shape), grad, lo, hi in zip(
                self._params, self._grad_names, self._offsets[:-1], self._offsets[1:], strict=True
            )
        ]
        have = {i.name for i in self._session.get_inputs()} | {
            o.name for o in self._session.get_outputs()
        }
        need = [n for n, _ in self._params] + [self._x, self._y, self._losses, self._output]
        missing = [n for n in need + self._grad_names if n not in have]
        if missing or self.dim != int(meta["dim"]):
            raise ValueError(f"{self.path}: graph and metadata disagree (missing {missing}).")
        raw = base64.b64decode(props.get("edgedp.init", ""))
        if len(raw) != 8 * self.dim or hashlib.sha256(raw).hexdigest() != props.get(
            "edgedp.init_sha256"
        ):
            raise ValueError(f"{self.path}: edgedp.init is missing or fails its sha256.")
        self._init = np.frombuffer(raw, dtype="<f8").astype(np.float64)
        self._ort = ort
        self._bindings: dict[int, tuple] = {}

    # ------------------------------------------------------------ properties
    kind = "onnx"

    @property
    def classifier(self) -> bool:
        return self.loss_name in ("ce", "bce")

    def init_params(self) -> np.ndarray:
        return self._init.copy()

    # ------------------------------------------------------------ one session call
    def _bound(self, batch: int) -> tuple:
        """Input and output buffers for ``batch`` examples, bound once to an IOBinding.

        The buffers are wrapped (not copied) by ``OrtValue``s, so a call only copies θ, x
        and y into them, runs, and reads the outputs where onnxruntime wrote them.
        """
        cached = self._bindings.get(batch)
        if cached is not None:
            return cached
        if len(self._bindings) >= _MAX_BUFFERS:
            self._bindings.pop(next(iter(self._bindings)))
        dt = self._dtype
        flat = np.empty(self.dim, dt)
        inputs = {name: flat[lo:hi].reshape(shape) for name, _, shape, lo, hi in self._slots}
        x, y = np.empty((batch, self.features), dt), np.empty((batch,), dt)
        inputs.update({self._x: x, self._y: y})
        outputs = {
            self._losses: np.empty((batch,), dt),
            self._output: np.empty((batch, self._classes), dt),
        }
        for _, grad, shape, _, _ in self._slots:
            outputs[grad] = np.empty((batch, *shape), dt)
        binding = self._session.io_binding()
        for name, arr in inputs.items():
            binding.bind_ortvalue_input(name, self._ort.OrtValue.ortvalue_from_numpy(arr))
        for name, arr in outputs.items():
            binding.bind_ortvalue_output(name, self._ort.OrtValue.ortvalue_from_numpy(arr))
        cached = (binding, flat, x, y, outputs, inputs)  # inputs: keep the buffers alive
        self._bindings[batch] = cached
        return cached

    def _run(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray, grads_out) -> dict:
        """Run the graph for one node; write gradients into ``grads_out`` (B, d) if given."""
        batch = x.shape[0]
        binding, flat, xb, yb, outputs, _ = self._bound(batch)
        np.copyto(flat, theta, casting="same_kind")
        np.copyto(xb, x, casting="same_kind")
        np.copyto(yb, y, casting="same_kind")
        self._session.run_with_iobinding(binding)
        if grads_out is not None:
            for _, grad, _, lo, hi in self._slots:
                grads_out[:, lo:hi] = outputs[grad].reshape(batch, hi - lo)
        return outputs

    def _check_labels(self, y: np.ndarray) -> None:
        if self.loss_name == "ce":
            yi = y.astype(np.intp)
            if np.any((yi != y) | (yi < 0) | (yi >= self._classes)):
                raise ValueError(
                    f"Expected class labels y in 0..{self._classes - 1} (held as floats)."
                )

    def _each_node(self, theta, x, y, *, grads: bool):
        theta = np.asarray(theta, dtype=np.float64)
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.shape[-1] != self.features:
            raise ValueError(f"Expected x with {self.features} features, got shape {x.shape}.")
        if theta.shape[-1] != self.dim:
            raise ValueError(f"Expected theta with d={self.dim} entries, got shape {theta.shape}.")
        self._check_labels(y)
        batch = x.shape[-2]
        lead = np.broadcast_shapes(theta.shape[:-1], x.shape[:-2], y.shape[:-1])
        th = np.broadcast_to(theta, lead + theta.shape[-1:])
        xs = np.broadcast_to(x, lead + x.shape[-2:])
        ys = np.broadcast_to(y, lead + y.shape[-1:])
        losses = np.empty(lead + (batch,))
        outputs = np.empty(lead + (batch, self._classes))
        gr = np.empty(lead + (batch, self.dim)) if grads else None
        chunk = batch if grads else max(1, min(batch, EVAL_CHUNK))
        for idx in np.ndindex(*lead):
            for s in range(0, batch, chunk):
                sl = slice(s, min(s + chunk, batch))
                bufs = self._run(th[idx], xs[idx][sl], ys[idx][sl], None if gr is None else gr[idx])
                losses[idx][sl] = bufs[self._losses]
                outputs[idx][sl] = bufs[self._output]
        return losses, outputs, gr

    # ------------------------------------------------------------ the backend protocol
    def per_example_gradients(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradients of each example's loss, shape ``(..., batch, d)`` (float64)."""
        return self._each_node(theta, x, y, grads=True)[2]

    def per_example_losses(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self._each_node(theta, x, y, grads=False)[0]

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mean loss over the batch axis, shape ``(...)``."""
        return np.mean(self.per_example_losses(theta, x, y), axis=-1)

    def accuracy(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Fraction of correctly classified examples, shape ``(...)`` (classifiers only)."""
        if not self.classifier:
            raise ValueError(f"accuracy is defined for classifiers, not loss={self.loss_name!r}.")
        y = np.asarray(y, dtype=np.float64)
        outputs = self._each_node(theta, x, y, grads=False)[1]
        return _accuracy(self.loss_name, outputs, y)
