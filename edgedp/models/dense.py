"""The numpy backend for dense networks (softmax regression, MLPs) with per-example gradients.

Backpropagation is written out by hand, one node at a time: for a leading index of θ
``(..., d)``, x ``(..., B, f)`` and y ``(..., B)`` (broadcast together) the same 2-D
computation runs on that node's θ, examples and labels. Its matrix products are computed
one of two ways (:data:`~edgedp.models.spec.PRODUCTS`, chosen by the model name):

* ``exact`` (default): an elementwise product reduced over the contiguous last axis
  (``np.sum(W * h, axis=-1)``), never a BLAS call. Examples go in chunks that bound the
  temporary ``(chunk, out, in)`` products to about 8 MiB. numpy's pairwise summation has a
  fixed order, so the bits are the same on every machine with the same ``exp``/``tanh``.
* ``blas`` (names ending in ``:blas``): one BLAS matrix-vector product per example
  (``np.matmul`` of a ``(B, 1, in)`` stack, which numpy hands to ``gemv`` row by row), ~4×
  faster. Each example's product depends only on its own row, W and the BLAS kernel — not
  on the batch size, the chunking, the node stack or the thread count — so every engine
  on one machine has the same bits. Other BLAS builds or CPU kernels (x86-64 vs aarch64,
  AVX2 vs AVX-512) sum in other orders: the bits then differ by rounding.

Either way each example's row is computed independently, so a node's numbers have the
same bits alone, inside a ``(trials, nodes, …)`` batch, on a device or in a simulator.

Per example, with z_l = W_l h_{l−1} + b_l and h_l = act(z_l) (h_0 = x, no activation on the
last layer), δ_L = ∂ℓ/∂z_L is softmax(z) − onehot(y) (ce), σ(z) − y (bce) or z − y (mse);
∂ℓ/∂W_l = δ_l h_{l−1}ᵀ (an outer product), ∂ℓ/∂b_l = δ_l and
δ_{l−1} = (W_lᵀ δ_l) ⊙ act′(z_{l−1}).

>>> from edgedp.models.spec import parse
>>> model = DenseModel(parse("softmax:3", features=2))
>>> x, y = np.ones((4, 2)), np.array([0.0, 1.0, 2.0, 2.0])
>>> float(model.loss(model.init_params(), x, y).round(6))  # log 3 at θ = 0
1.098612
>>> model.per_example_gradients(model.init_params(), x, y).shape
(4, 9)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp.models.spec import DenseSpec, init_params

__all__ = ["DenseModel"]

_CHUNK_ELEMENTS = 1 << 20  # elements of one (chunk, out, in) temporary: 8 MiB of float64


def _sigmoid(m: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -m))


def _activate(kind: str, z: np.ndarray) -> np.ndarray:
    if kind == "relu":
        return np.maximum(z, 0.0)
    if kind == "tanh":
        return np.tanh(z)
    if kind == "sigmoid":
        return _sigmoid(z)
    return z


def _derivative(kind: str, z: np.ndarray, h: np.ndarray) -> np.ndarray | None:
    """act′(z) given z and h = act(z); None for the identity."""
    if kind == "relu":
        return (z > 0.0).astype(z.dtype)
    if kind == "tanh":
        return 1.0 - h * h
    if kind == "sigmoid":
        return h * (1.0 - h)
    return None


def _matvec(w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``h @ w.T`` for w ``(o, i)``, h ``(B, i)``: the product summed over the last axis."""
    return np.sum(w[None, :, :] * h[:, None, :], axis=-1)


def _blas_operand(a: np.ndarray) -> np.ndarray:
    """``a`` as an aligned C-contiguous array, the layout numpy hands to BLAS."""
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def _matvec_blas(w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``h @ w.T`` for w ``(o, i)``, h ``(B, i)``: one BLAS ``gemv`` per row of h."""
    w, h = _blas_operand(w), _blas_operand(h)
    return np.matmul(h[:, None, :], w.T)[:, 0, :]


def _vecmat_blas(w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``h @ w`` for w ``(o, i)``, h ``(B, o)``: one BLAS ``gemv`` per row of h."""
    w, h = _blas_operand(w), _blas_operand(h)
    return np.matmul(h[:, None, :], w)[:, 0, :]


@dataclass(frozen=True, slots=True)
class DenseModel:
    """A dense network of :class:`~edgedp.models.spec.DenseSpec` on numpy."""

    spec: DenseSpec

    @property
    def kind(self) -> str:
        return self.spec.family

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def classifier(self) -> bool:
        return self.spec.classifier

    @property
    def dim(self) -> int:
        return self.spec.dim

    @property
    def features(self) -> int:
        return self.spec.features

    def init_params(self) -> np.ndarray:
        return init_params(self.spec)

    # ------------------------------------------------------------ one node (2-D)
    def _labels(self, y: np.ndarray) -> np.ndarray:
        classes = self.spec.outputs
        yi = y.astype(np.intp)
        if np.any((yi != y) | (yi < 0) | (yi >= classes)):
            raise ValueError(f"Expected class labels y in 0..{classes - 1} (held as floats).")
        return yi

    def _forward(self, params: list[np.ndarray], x: np.ndarray):
        """Pre-activations z_l and activations h_l (h_0 = x) of one chunk of examples."""
        hs, zs = [x], []
        layers = len(params) // 2
        matvec = _matvec_blas if self.spec.products == "blas" else _matvec
        for layer in range(layers):
            z = matvec(params[2 * layer], hs[-1]) + params[2 * layer + 1]
            zs.append(z)
            if layer < layers - 1:
                hs.append(_activate(self.spec.activations[layer], z))
        return zs, hs

    def _head(self, z: np.ndarray, y: np.ndarray, need_delta: bool):
        """Per-example losses and δ_L = ∂ℓ/∂z for the output z ``(B, OUT)``."""
        loss = self.spec.loss
        if loss == "ce":
            yi = self._labels(y)
            rows = np.arange(len(yi))
            top = np.max(z, axis=-1, keepdims=True)
            e = np.exp(z - top)
            s = np.sum(e, axis=-1, keepdims=True)
            losses = (top + np.log(s))[:, 0] - z[rows, yi]
            if not need_delta:
                return losses, None
            delta = e / s
            delta[rows, yi] -= 1.0
            return losses, delta
        m = z[:, 0]
        if loss == "bce":
            losses = np.logaddexp(0.0, m) - y * m
            r = _sigmoid(m) - y
        else:
            losses = 0.5 * (m - y) ** 2
            r = m - y
        return losses, r[:, None]

    def _chunks(self, batch: int):
        if self.spec.products == "blas":  # no (chunk, out, in) temporaries
            return [slice(0, batch)]
        widest = max(o * i for i, o in zip(self.spec.sizes[:-1], self.spec.sizes[1:], strict=True))
        step = max(1, _CHUNK_ELEMENTS // widest)
        return [slice(s, min(s + step, batch)) for s in range(0, batch, step)]

    def _node(self, theta, x, y, losses_out, grads_out, outputs_out) -> None:
        params = self.spec.unflatten(theta)
        layout = self.spec.layout()
        acts = self.spec.activations
        for sl in self._chunks(x.shape[0]):
            zs, hs = self._forward(params, x[sl])
            if outputs_out is not None:
                outputs_out[sl] = zs[-1]
            if losses_out is None and grads_out is None:
                continue
            losses, delta = self._head(zs[-1], y[sl], grads_out is not None)
            if losses_out is not None:
                losses_out[sl] = losses
            if grads_out is None:
                continue
            g = grads_out[sl]
            for layer in range(len(zs) - 1, -1, -1):
                (_, (o, i), w_off), (_, _, b_off) = layout[2 * layer], layout[2 * layer + 1]
                rows = np.reshape(g[:, w_off : w_off + o * i], (len(delta), o, i), copy=False)
                np.multiply(delta[:, :, None], hs[layer][:, None, :], out=rows)  # δ_b h_bᵀ
                g[:, b_off : b_off + o] = delta
                if layer > 0:
                    if self.spec.products == "blas":
                        back = _vecmat_blas(params[2 * layer], delta)
                    else:
                        back = _matvec(np.ascontiguousarray(params[2 * layer].T), delta)
                    dact = _derivative(acts[layer - 1], zs[layer - 1], hs[layer])
                    delta = back if dact is None else back * dact

    def _each_node(self, theta, x, y, *, losses=False, grads=False, outputs=False):
        theta, x = np.asarray(theta, dtype=np.float64), np.asarray(x, dtype=np.float64)
        if x.shape[-1] != self.features:
            raise ValueError(f"Expected x with {self.features} features, got shape {x.shape}.")
        if theta.shape[-1] != self.dim:
            raise ValueError(f"Expected theta with d={self.dim} entries, got shape {theta.shape}.")
        y = np.zeros(x.shape[:-1]) if y is None else np.asarray(y, dtype=np.float64)
        batch = x.shape[-2]
        lead = np.broadcast_shapes(theta.shape[:-1], x.shape[:-2], y.shape[:-1])
        th = np.broadcast_to(theta, lead + theta.shape[-1:])
        xs = np.broadcast_to(x, lead + x.shape[-2:])
        ys = np.broadcast_to(y, lead + y.shape[-1:])
        lo = np.empty(lead + (batch,)) if losses else None
        gr = np.empty(lead + (batch, self.dim)) if grads else None
        ou = np.empty(lead + (batch, self.spec.outputs)) if outputs else None
        for idx in np.ndindex(*lead):
            self._node(
                th[idx],
                xs[idx],
                ys[idx],
                None if lo is None else lo[idx],
                None if gr is None else gr[idx],
                None if ou is None else ou[idx],
            )
        return lo, gr, ou

    # ------------------------------------------------------------ the backend protocol
    def per_example_losses(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Each example's loss, shape ``(..., batch)``."""
        return self._each_node(theta, x, y, losses=True)[0]

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mean loss over the batch axis, shape ``(...)``."""
        return np.mean(self.per_example_losses(theta, x, y), axis=-1)

    def per_example_gradients(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradients of each example's loss, shape ``(..., batch, d)``."""
        return self._each_node(theta, x, y, grads=True)[1]

    def outputs(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The last layer's pre-activations (logits), shape ``(..., batch, OUT)``."""
        return self._each_node(theta, x, None, outputs=True)[2]

    def accuracy(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Fraction of correctly classified examples, shape ``(...)`` (classifiers only)."""
        if not self.classifier:
            raise ValueError(f"accuracy is defined for classifiers, not loss={self.spec.loss!r}.")
        z = self.outputs(theta, x)
        return _accuracy(self.spec.loss, z, np.asarray(y, dtype=np.float64))


def _accuracy(loss: str, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Accuracy from logits: argmax for ce, sign for bce."""
    pred = np.argmax(z, axis=-1) if loss == "ce" else (z[..., 0] > 0.0)
    return np.mean(pred == (y if loss == "ce" else (y > 0.5)), axis=-1)
