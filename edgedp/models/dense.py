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

* ``gemm`` (names ending in ``:gemm``): forward passes (``loss``, ``outputs``, the
  clipped sum) as one BLAS matrix product per node and layer over the whole batch, and
  :meth:`DenseModel.clipped_gradient_sum` — the per-example clipped sum computed from each
  layer's inputs and output gradients (:mod:`edgedp.models.fused`), never materialising
  the ``(B, d)`` per-example gradients. Its bits depend on the batch size, so engines and
  devices call it once per node with the whole batch. ``per_example_gradients`` (audits,
  sketched plans) computes rows as ``blas`` does, so a device may still chunk them.

Either way (``exact``/``blas``) each example's row is computed independently, so a node's
numbers have the same bits alone, inside a ``(trials, nodes, …)`` batch, on a device or in
a simulator; ``gemm`` keeps that for nodes (one BLAS call per node and layer), not for rows.

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

import math
from dataclasses import dataclass

import numpy as np

from edgedp.models import fused
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

    @property
    def clips_fused(self) -> bool:
        """Whether engines take the clipped sum from :meth:`clipped_gradient_sum` (``gemm``)."""
        return self.spec.products == "gemm"

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
        """Pre-activations z_l and activations h_l (h_0 = x) of a ``(G, B, f)`` stack."""
        hs, zs = [x], []
        layers = len(params) // 2
        for layer in range(layers):
            z = self._matvec(params[2 * layer], hs[-1]) + params[2 * layer + 1][:, None, :]
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

    def _blocks(self, nodes: int, batch: int):
        """``(node slice, example slice)`` pairs covering ``nodes × batch``: ``exact`` runs
        as many nodes at once as keep the ``(nodes, examples, out, in)`` temporaries under
        :data:`_CHUNK_ELEMENTS` (a node whose batch alone is over it goes in example chunks);
        ``blas`` one node at a time (one ``gemv`` per example, as a device calls it)."""
        if self.spec.products != "exact":
            return [(slice(n, n + 1), slice(0, batch)) for n in range(nodes)]
        widest = max(o * i for i, o in zip(self.spec.sizes[:-1], self.spec.sizes[1:], strict=True))
        per_node = max(1, batch) * widest
        if per_node <= _CHUNK_ELEMENTS:
            step = _CHUNK_ELEMENTS // per_node
            return [
                (slice(n, min(n + step, nodes)), slice(0, batch)) for n in range(0, nodes, step)
            ]
        rows = max(1, _CHUNK_ELEMENTS // widest)
        return [
            (slice(n, n + 1), slice(r, min(r + rows, batch)))
            for n in range(nodes)
            for r in range(0, batch, rows)
        ]

    def _nodes(self, theta, x, y, losses_out, grads_out, outputs_out) -> None:
        """The 2-D computation of every node of a stack: θ ``(G, d)``, x ``(G, B, f)``, y
        ``(G, B)``; outputs written into ``(G, B, …)`` arrays. Each product is an
        elementwise product reduced over its contiguous last axis (``exact``) or one
        ``gemv`` per example of one node (``blas``), so a node's bits do not depend on G."""
        params = self.spec.unflatten(theta)
        layout = self.spec.layout()
        acts = self.spec.activations
        zs, hs = self._forward(params, x)
        if outputs_out is not None:
            outputs_out[...] = zs[-1]
        if losses_out is None and grads_out is None:
            return
        losses, delta = self._gemm_head(zs[-1], y, grads_out is not None)
        if losses_out is not None:
            losses_out[...] = losses
        if grads_out is None:
            return
        g = grads_out
        for layer in range(len(zs) - 1, -1, -1):
            (_, (o, i), w_off), (_, _, b_off) = layout[2 * layer], layout[2 * layer + 1]
            rows = np.reshape(g[..., w_off : w_off + o * i], delta.shape[:2] + (o, i), copy=False)
            np.multiply(delta[..., :, None], hs[layer][..., None, :], out=rows)  # δ_b h_bᵀ
            g[..., b_off : b_off + o] = delta
            if layer > 0:
                if self.spec.products == "exact":
                    w_t = np.ascontiguousarray(np.swapaxes(params[2 * layer], -1, -2))
                    back = self._matvec(w_t, delta)
                else:
                    back = _vecmat_blas(params[2 * layer][0], delta[0])[None]
                dact = _derivative(acts[layer - 1], zs[layer - 1], hs[layer])
                delta = back if dact is None else back * dact

    def _matvec(self, w: np.ndarray, h: np.ndarray) -> np.ndarray:
        """``h @ wᵀ`` per node: w ``(G, o, i)``, h ``(G, B, i)`` → ``(G, B, o)``."""
        if self.spec.products == "exact":
            return np.sum(w[:, None, :, :] * h[:, :, None, :], axis=-1)
        return _matvec_blas(w[0], h[0])[None]

    def _each_node(self, theta, x, y, *, losses=False, grads=False, outputs=False):
        theta, x = np.asarray(theta, dtype=np.float64), np.asarray(x, dtype=np.float64)
        if x.shape[-1] != self.features:
            raise ValueError(f"Expected x with {self.features} features, got shape {x.shape}.")
        if theta.shape[-1] != self.dim:
            raise ValueError(f"Expected theta with d={self.dim} entries, got shape {theta.shape}.")
        y = np.zeros(x.shape[:-1]) if y is None else np.asarray(y, dtype=np.float64)
        batch = x.shape[-2]
        lead = np.broadcast_shapes(theta.shape[:-1], x.shape[:-2], y.shape[:-1])
        size = math.prod(lead)
        grid = lead or (1,)  # one node: a stack of one
        th = np.broadcast_to(theta, grid + theta.shape[-1:])
        xs = np.broadcast_to(x, grid + x.shape[-2:])
        ys = np.broadcast_to(y, grid + y.shape[-1:])
        lo = np.empty((size, batch)) if losses else None
        gr = np.empty((size, batch, self.dim)) if grads else None
        ou = np.empty((size, batch, self.spec.outputs)) if outputs else None
        for nodes, rows in self._blocks(size, batch):
            # gather this block's nodes from the (possibly broadcast) inputs: no full copy
            at = np.unravel_index(np.arange(nodes.start, nodes.stop), grid)
            self._nodes(
                th[at],
                xs[at][:, rows],
                ys[at][:, rows],
                None if lo is None else lo[nodes, rows],
                None if gr is None else gr[nodes, rows],
                None if ou is None else ou[nodes, rows],
            )
        return tuple(None if a is None else a.reshape(lead + a.shape[1:]) for a in (lo, gr, ou))

    # ------------------------------------------------------------ gemm: stacks of nodes
    def _stacked(self, theta, x, y):
        """``(lead, θ (G, d), x (G, B, f), y (G, B))``: the leading axes flattened to G."""
        theta, x = np.asarray(theta, dtype=np.float64), np.asarray(x, dtype=np.float64)
        if x.shape[-1] != self.features:
            raise ValueError(f"Expected x with {self.features} features, got shape {x.shape}.")
        if theta.shape[-1] != self.dim:
            raise ValueError(f"Expected theta with d={self.dim} entries, got shape {theta.shape}.")
        y = np.zeros(x.shape[:-1]) if y is None else np.asarray(y, dtype=np.float64)
        lead = np.broadcast_shapes(theta.shape[:-1], x.shape[:-2], y.shape[:-1])
        size = int(np.prod(lead))
        th = np.ascontiguousarray(np.broadcast_to(theta, lead + theta.shape[-1:]))
        xs = np.broadcast_to(x, lead + x.shape[-2:])
        ys = np.broadcast_to(y, lead + y.shape[-1:])
        return lead, th.reshape(size, -1), xs.reshape(size, *x.shape[-2:]), ys.reshape(size, -1)

    def _gemm_forward(self, params: list[np.ndarray], x: np.ndarray):
        """z_l and h_l (h_0 = x) of a ``(G, B, f)`` stack: one gemm per node and layer."""
        hs, zs = [x], []
        layers = len(params) // 2
        for layer in range(layers):
            w, b = params[2 * layer], params[2 * layer + 1]
            z = fused.matmul(hs[-1], np.swapaxes(w, -1, -2)) + b[:, None, :]
            zs.append(z)
            if layer < layers - 1:
                hs.append(_activate(self.spec.activations[layer], z))
        return zs, hs

    def _gemm_head(self, z: np.ndarray, y: np.ndarray, need_delta: bool):
        """:meth:`_head` of a ``(G, B, OUT)`` stack (its rows are computed independently)."""
        losses, delta = self._head(z.reshape(-1, z.shape[-1]), y.reshape(-1), need_delta)
        return losses.reshape(z.shape[:-1]), None if delta is None else delta.reshape(z.shape)

    def _gemm_backprop(self, theta, x, y, what: str):
        """``(lead, θ, [a_l], [δ_l])``: each layer's inputs and output gradients, stacked."""
        if self.spec.products != "gemm":
            raise ValueError(f"{what} needs a model name ending in ':gemm', not {self.name!r}.")
        lead, th, xs, ys = self._stacked(theta, x, y)
        params = self.spec.unflatten(th)
        zs, hs = self._gemm_forward(params, xs)
        _, delta = self._gemm_head(zs[-1], ys, True)
        deltas: list[np.ndarray] = [delta] * len(zs)
        for layer in range(len(zs) - 1, 0, -1):
            deltas[layer] = delta
            back = fused.matmul(delta, params[2 * layer])
            dact = _derivative(self.spec.activations[layer - 1], zs[layer - 1], hs[layer])
            delta = back if dact is None else back * dact
        deltas[0] = delta
        return lead, th, hs, deltas

    def clip_factors(
        self, theta: np.ndarray, x: np.ndarray, y: np.ndarray, *, clip_norm: float
    ) -> np.ndarray:
        """The factor c_b ∈ [0, 1] :meth:`clipped_gradient_sum` scales example b's gradient
        by (0: left out, non-finite), shape ``(..., batch)`` (``gemm`` only)."""
        lead, _, hs, deltas = self._gemm_backprop(theta, x, y, "clip_factors")
        factors = fused.clip_factors(fused.squared_norms(hs, deltas), clip_norm)[0]
        return factors.reshape(lead + factors.shape[-1:])

    def clipped_gradient_sum(
        self, theta: np.ndarray, x: np.ndarray, y: np.ndarray, *, clip_norm: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Σ_b clip(g_b, Δ) over the batch without per-example gradients (``gemm`` only).

        The sum of :func:`edgedp.clipping.clipped_sum` of :meth:`per_example_gradients`, to
        rounding; each example's contribution has L2 norm ≤ Δ exactly
        (:mod:`edgedp.models.fused`). One call per node with its whole batch: its bits
        depend on the batch size.

        Returns:
          ``(sum, clipped_count, nonfinite_count)`` shaped ``(..., d)``, ``(...)``, ``(...)``.

        Raises:
          ValueError: the model's products are not ``gemm``, or a bad clip norm or shape.
        """
        lead, th, hs, deltas = self._gemm_backprop(theta, x, y, "clipped_gradient_sum")
        factors, hit, bad = fused.clip_factors(fused.squared_norms(hs, deltas), clip_norm)
        out = np.empty(th.shape)
        layout = self.spec.layout()
        for layer, (a, d) in enumerate(zip(hs, deltas, strict=True)):
            (_, (o, i), w_off), (_, _, b_off) = layout[2 * layer], layout[2 * layer + 1]
            weights, bias = fused.layer_sum(a, d, factors, bad)
            out[:, w_off : w_off + o * i] = weights.reshape(len(th), o * i)
            out[:, b_off : b_off + o] = bias
        shape = lead + (self.dim,)
        return out.reshape(shape), hit.sum(axis=-1).reshape(lead), bad.sum(axis=-1).reshape(lead)

    # ------------------------------------------------------------ the backend protocol
    def per_example_losses(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Each example's loss, shape ``(..., batch)``."""
        if self.spec.products == "gemm":
            lead, th, xs, ys = self._stacked(theta, x, y)
            zs, _ = self._gemm_forward(self.spec.unflatten(th), xs)
            return self._gemm_head(zs[-1], ys, False)[0].reshape(lead + xs.shape[1:2])
        return self._each_node(theta, x, y, losses=True)[0]

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mean loss over the batch axis, shape ``(...)``."""
        return np.mean(self.per_example_losses(theta, x, y), axis=-1)

    def per_example_gradients(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradients of each example's loss, shape ``(..., batch, d)``."""
        return self._each_node(theta, x, y, grads=True)[1]

    def outputs(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The last layer's pre-activations (logits), shape ``(..., batch, OUT)``."""
        if self.spec.products == "gemm":
            lead, th, xs, _ = self._stacked(theta, x, None)
            z = self._gemm_forward(self.spec.unflatten(th), xs)[0][-1]
            return z.reshape(lead + z.shape[1:])
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
