"""``:gemm`` products: the per-example clipped gradient sum of dense layers without
per-example gradients.

For a dense layer l with input a_{l,i} (h_{l−1} of example i) and output gradient
δ_{l,i} = ∂ℓ_i/∂z_l, example i's gradient is the outer product δ_{l,i} a_{l,i}ᵀ (weights)
and δ_{l,i} (bias), so its squared L2 norm over the whole network is exactly

    ‖g_i‖² = Σ_l ‖δ_{l,i}‖² (‖a_{l,i}‖² + 1),

and the clipped sum Σ_i c_i g_i is, per layer, one matrix product Σ_i c_i δ_{l,i} a_{l,i}ᵀ =
(diag(c) Δ_l)ᵀ A_l plus the bias Σ_i c_i δ_{l,i} — never the ``(B, d)`` per-example array.

Clipping bound. c_i = min(1, Δ'/n_i) with n_i the computed norm and Δ' = Δ(1 − 2⁻⁴⁰)
(:data:`CLIP_MARGIN`): n_i is a short chain of float64 sums, products and a square root, so
it is within a relative 2⁻⁴⁵ of the exact norm of example i's gradient (the outer products
of the a_{l,i} and δ_{l,i} that the sum uses; pairwise sums of up to 2³⁰ terms, up to 100
layers), so the contribution the sum adds, (c_i δ_{l,i} rounded) a_{l,i}ᵀ, has exact norm
≤ Δ — the sensitivity the accountant assumes. An example whose squared norm is not finite (a NaN or
±inf among its a/δ entries, or a norm beyond the float range) contributes zero
(c_i = 0 and its rows zeroed), as :func:`edgedp.clipping.clipped_sum` does for a
non-finite gradient; whether it does depends on that example only.

Bits. Every product is one BLAS call per node (:func:`matmul`: numpy's stacked ``matmul``
calls ``gemm`` once per leading index on C-contiguous operands, so a node's bits are the
same alone or inside a stack — tested); the bias sums add examples one at a time in order.
The result depends on the batch size (a gemm's rows are not computed independently of
their number), so every engine and the device make one call per node with its whole batch.

>>> factors, hit, bad = clip_factors(np.array([4.0, 0.25, np.inf]), 1.0)
>>> factors.round(6).tolist(), hit.tolist(), bad.tolist()
([0.5, 1.0, 0.0], [True, False, False], [False, False, True])
"""

from __future__ import annotations

import numpy as np

from edgedp import _validate

__all__ = ["CLIP_MARGIN", "clip_factors", "layer_sum", "matmul", "squared_norms"]

#: Relative margin under the clip norm Δ that absorbs the rounding of the computed norms.
CLIP_MARGIN = 2.0**-40


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` over a stack ``(G, m, k) @ (G, k, n)``: one BLAS call per leading index.

    Operands are made C-contiguous in their last two axes first (a copy changes no bit), so
    whether numpy hands a slice to BLAS — and which routine — depends on shapes only.
    """
    return np.matmul(_blas_ready(a), _blas_ready(b))


def _blas_ready(a: np.ndarray) -> np.ndarray:
    """``a`` itself or a copy whose last two axes are C- or Fortran-contiguous and aligned."""
    s = a.strides
    item = a.itemsize
    rows_c = s[-1] == item and s[-2] == item * a.shape[-1]
    cols_f = s[-2] == item and s[-1] == item * a.shape[-2]
    if a.flags.aligned and (rows_c or cols_f):
        return a
    return np.ascontiguousarray(a)


def squared_norms(inputs: list[np.ndarray], deltas: list[np.ndarray]) -> np.ndarray:
    """Σ_l ‖δ_l‖² (‖a_l‖² + 1) per example: ``inputs[l]`` ``(..., B, in_l)`` (a_l) and
    ``deltas[l]`` ``(..., B, out_l)`` (δ_l); shape ``(..., B)``. Layers in order.

    >>> float(squared_norms([np.array([[3.0, 4.0]])], [np.array([[1.0, 2.0]])])[0])  # 5*26
    130.0
    """
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.zeros(deltas[0].shape[:-1])
        for a, d in zip(inputs, deltas, strict=True):
            total += np.sum(d * d, axis=-1) * (np.sum(a * a, axis=-1) + 1.0)
    return total


def clip_factors(sq_norms: np.ndarray, clip_norm: float):
    """Per-example clip factors from squared gradient norms.

    Returns:
      ``(factors, was_clipped, nonfinite)``: c = min(1, Δ(1 − 2⁻⁴⁰)/‖g‖) for a finite
      squared norm and 0 otherwise; which examples were scaled down; which left out.
    """
    if clip_norm != np.inf:
        _validate.positive(clip_norm=clip_norm)
    bound = clip_norm * (1.0 - CLIP_MARGIN)
    bad = ~np.isfinite(sq_norms)
    norms = np.sqrt(np.where(bad, 0.0, sq_norms))
    hit = norms > bound
    factors = np.where(hit, bound / np.where(hit, norms, 1.0), 1.0)
    factors[bad] = 0.0
    return factors, hit, bad


def layer_sum(
    inputs: np.ndarray, delta: np.ndarray, factors: np.ndarray, bad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One layer's clipped sums over the batch: Σ_i c_i δ_i a_iᵀ and Σ_i c_i δ_i.

    ``inputs`` ``(G, B, in)``, ``delta`` ``(G, B, out)``, ``factors``/``bad`` ``(G, B)``;
    returns ``(G, out, in)`` and ``(G, out)``. Left-out examples' rows are zeroed first
    (0 · inf would be NaN).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = factors[..., None] * delta
    if np.any(bad):
        scaled[bad] = 0.0
        inputs = np.where(bad[..., None], 0.0, inputs)
    weights = matmul(np.swapaxes(scaled, -1, -2), inputs)
    bias = np.zeros(scaled.shape[:-2] + scaled.shape[-1:])
    for b in range(scaled.shape[-2]):  # examples added one at a time, in order
        np.add(bias, scaled[..., b, :], out=bias)
    return weights, bias
