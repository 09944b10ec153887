"""Model backends and the model digest every engine reports.

A backend exposes ``dim`` (the flat parameter count d), ``init_params() -> (d,)``,
``per_example_gradients(θ, x, y) -> (..., B, d)``, ``loss(θ, x, y) -> (...)`` (mean over the
batch), ``classifier`` and, for classifiers, ``accuracy``; all broadcast over leading axes.
:func:`for_task` is the one factory every engine (batch, event, device) builds its model
with, so they all run the same one:

==================================  ========================================  ==============
``task.model``                      backend                                   default loss
==================================  ========================================  ==============
``logistic`` / ``linear``           :class:`linear.LinearModel` (numpy)       bce / mse
``least-squares``                   :class:`least_squares.LeastSquaresModel`  (xᵀθ − y)²
``softmax:C``                       :class:`dense.DenseModel` (numpy)         ce
``mlp:IN-H1-..-OUT[:relu|tanh]``    :class:`dense.DenseModel` (numpy)         ce if OUT ≥ 2
``onnx:PATH``                       :class:`onnx_backend.OnnxModel`           the file's
==================================  ========================================  ==============

``task.loss`` empty means the default; otherwise it must be one the model supports.
A backend whose ``clips_fused`` is true (``softmax``/``mlp`` names ending in ``:gemm``) also
has ``clipped_gradient_sum(θ, x, y, *, clip_norm) -> (sum, clipped, nonfinite)``: every
engine and the agent then take a node's clipped sum from it, one call with the whole batch.
"""

import hashlib

import numpy as np

__all__ = ["file_sha256", "for_task", "model_digest", "pin_onnx"]


def model_digest(models: np.ndarray) -> str:
    """sha256 of the final models stacked in node order as float64 little-endian.

    >>> model_digest(np.zeros((2, 3)))[:12]
    '17b0761f87b0'
    """
    return hashlib.sha256(np.ascontiguousarray(models, dtype="<f8").tobytes()).hexdigest()


_LINEAR_LOSS = {"logistic": "bce", "linear": "mse"}


def pin_onnx(model: str) -> str:
    """``onnx:PATH`` -> ``onnx:PATH@SHA256`` (the file's hash), so a plan certifies its model.

    Other model names are returned unchanged; an already pinned name is checked.
    """
    if not model.startswith("onnx:"):
        return model
    path, _, want = model.removeprefix("onnx:").partition("@")
    digest = file_sha256(path)
    if want and want != digest:
        raise ValueError(f"{path} has sha256 {digest[:12]}…, the model name pins {want[:12]}…")
    return f"onnx:{path}@{digest}"


def file_sha256(path: str, *, what: str = "model") -> str:
    """The SHA-256 (hex) of a file a plan pins; ValueError naming it when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        raise ValueError(f"Cannot read {what} file {path}: {exc.strerror}") from None


def for_task(task, features: int, *, model_file: str | None = None):
    """The model backend a plan's task names, for ``features`` input features.

    Raises:
      ValueError: the model name, its loss or its input size does not fit (the message names
        the value and the accepted forms).

    >>> from edgedp.plan import TaskSpec
    >>> for_task(TaskSpec(model="mlp:8-16-10:tanh"), 8).dim
    314
    """
    from edgedp.models.linear import KINDS, LinearModel

    loss = getattr(task, "loss", "")
    model = task.model
    if model == "least-squares":
        if loss:
            raise ValueError(f"Model 'least-squares' has one loss, (x.theta - y)^2, not {loss!r}.")
        from edgedp.models.least_squares import LeastSquaresModel

        return LeastSquaresModel(features)
    if model in KINDS:
        if loss not in ("", _LINEAR_LOSS[model]):
            raise ValueError(
                f"Model {model!r} is trained with loss {_LINEAR_LOSS[model]!r}, not {loss!r}; "
                "use softmax:C or mlp:... for other losses."
            )
        return LinearModel(model, features)
    if model.startswith("onnx:"):
        from edgedp.models.onnx_backend import OnnxModel

        path, _, pinned = model.removeprefix("onnx:").partition("@")
        path = model_file or path
        if not path:
            raise ValueError("Expected onnx:PATH with the path of a training graph.")
        if pinned and file_sha256(path) != pinned:
            raise ValueError(f"{path} is not the model the plan was made for (sha256 differs).")
        m = OnnxModel(path)
        if loss not in ("", m.loss_name):
            raise ValueError(f"{path} is a training graph for loss {m.loss_name!r}, not {loss!r}.")
        if m.features != features:
            raise ValueError(f"{path} takes {m.features} features but the data has {features}.")
        return m
    from edgedp.models.dense import DenseModel
    from edgedp.models.spec import parse

    return DenseModel(parse(model, features=features, loss=loss))
