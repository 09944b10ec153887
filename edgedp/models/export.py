"""Offline tooling: a trained model taken home as an ONNX inference graph and a flat vector.

A run ends with one flat θ per node (the simulator's ``final_models``, a device's
``final.npy``). :func:`export` writes the model a plan's task names at that θ as the forward
graph of :mod:`edgedp.models.graph` (input ``x`` ``(batch, F)``, output ``output``: class
probabilities (softmax), P(y = 1) (sigmoid) or the regression value; float32 unless asked
otherwise) and the θ itself as ``.npy`` (float64, the layout of
:meth:`edgedp.models.spec.DenseSpec.layout`). Every trainable model has a dense-chain
layout: ``logistic``/``linear`` are one dense layer F → 1 (θ = weights then bias, the
layer's own order), ``softmax:C`` and ``mlp:...`` their spec, ``onnx:PATH`` the spec in the
training graph's metadata (the chain it was imported from). ``least-squares`` (paper 004's
sensor fusion) has no inference graph and is refused.

Several nodes' models: ``node=U`` exports node U's; the default exports their average, the
consensus the gossip drives them towards.
This module needs the ``onnx`` package (the ``onnx-build`` extra).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgedp.extras import need_extra
from edgedp.models.spec import DenseSpec

__all__ = ["choose_params", "export", "spec_for"]


def spec_for(task, features: int) -> DenseSpec:
    """The dense-chain spec of a task's model on ``features`` inputs (ValueError if none)."""
    from edgedp.models import spec as spec_mod

    model, loss = task.model, getattr(task, "loss", "")
    if model in ("logistic", "linear"):
        return DenseSpec((features, 1), (), "bce" if model == "logistic" else "mse", family="mlp")
    if model.startswith("onnx:"):
        onnx = need_extra("onnx", user="exporting a model")
        path = model.removeprefix("onnx:").partition("@")[0]
        try:
            props = {p.key: p.value for p in onnx.load(path).metadata_props}
            meta = json.loads(props["edgedp.model"])
        except (OSError, KeyError, ValueError) as exc:
            msg = f"{path}: not a training graph with edgedp.model metadata ({exc})"
            raise ValueError(msg) from None
        spec = DenseSpec(
            tuple(int(s) for s in meta["sizes"]),
            tuple(str(a) for a in meta["activations"]),
            str(meta["loss"]),
        )
    elif model == "least-squares":
        raise ValueError("Model 'least-squares' (sensor fusion) has no inference graph to export.")
    else:
        spec = spec_mod.parse(model, features=features, loss=loss)
    if spec.features != features:
        raise ValueError(f"{model} takes {spec.features} features, the data has {features}.")
    return spec


def choose_params(params, *, node: int | None = None) -> np.ndarray:
    """One flat θ from ``(d,)``, ``(nodes, d)`` or ``(trials, nodes, d)`` (trial 0): node
    ``node``'s, or (None) the average over nodes."""
    theta = np.asarray(params, dtype=np.float64)
    if theta.ndim == 3:
        theta = theta[0]
    if theta.ndim == 1:
        if node not in (None, 0):
            raise ValueError(f"node={node}: one model given, not one per node.")
        return theta
    if theta.ndim != 2:
        raise ValueError(
            f"Expected parameters (d,), (nodes, d) or (trials, nodes, d), got {theta.shape}."
        )
    if node is None:
        return theta.mean(axis=0)
    if not 0 <= node < len(theta):
        raise ValueError(f"node={node}: expected 0 <= node < {len(theta)}.")
    return theta[node]


def export(task, features: int, params, out, *, node: int | None = None,
           dtype: str = "float32") -> tuple[Path, Path]:  # fmt: skip
    """Write ``OUT`` (the ONNX inference graph at θ) and ``OUT`` with ``.npy`` (θ itself).

    Returns the two paths. Raises ValueError for a θ of the wrong length or a model without
    an inference graph.
    """
    onnx = need_extra("onnx", user="exporting a model")
    from edgedp.models import graph

    spec = spec_for(task, features)
    theta = choose_params(params, node=node)
    if theta.shape != (spec.dim,):
        raise ValueError(
            f"Expected {spec.dim} parameters for {spec.architecture}, got {theta.size}."
        )
    if not np.all(np.isfinite(theta)):
        raise ValueError("The parameters hold NaN or infinite values: nothing to export.")
    out = Path(out)
    if out.suffix != ".onnx":
        raise ValueError(f"Expected an .onnx path, got {str(out)!r}.")
    onnx.save_model(graph.forward_model(spec, init=theta, dtype=dtype), str(out))
    flat = out.with_suffix(".npy")
    np.save(flat, theta)
    return out, flat
