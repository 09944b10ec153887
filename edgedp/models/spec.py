"""Dense-network architectures: parsing model names, the flat parameter layout, the init.

One :class:`DenseSpec` describes every network the numpy backend, the ONNX graph builder and
the importer share: layer sizes ``(IN, H1, …, OUT)``, one activation per hidden layer and a
loss. Names a plan's task can use:

=====================================  =====================================================
``logistic`` / ``linear``              one output, bce / mse, zero init (the layout of
                                       ``LinearModel``; engines use that numpy class)
``softmax:C``                          multinomial logistic regression, C ≥ 2 classes, ce
``mlp:IN-H1-…-OUT[:ACT]``              ACT = relu (default), tanh, sigmoid or identity, for
                                       every hidden layer, or ``ACT1,ACT2,…`` one per layer
``…:blas`` (after softmax/mlp names)   the same network, its matrix products through BLAS
                                       (:data:`PRODUCTS`; fast, bits fixed per machine only)
``…:gemm`` (after softmax/mlp names)   BLAS products over the whole batch and the clipped
                                       gradient sum without per-example gradients (faster)
=====================================  =====================================================

Losses: ``ce`` (softmax cross-entropy, labels are class indices 0…OUT−1 held as floats),
``bce`` (sigmoid binary cross-entropy, OUT = 1, labels 0/1) and ``mse`` (½(f(x) − y)², OUT = 1,
the same halved square as :class:`~edgedp.models.linear.LinearModel`). The default loss of
``softmax``/``mlp`` with OUT ≥ 2 is ``ce``; OUT = 1 needs an explicit loss.

Flat layout: θ is the concatenation, layer by layer, of the weight ``dense{l}.weight`` of
shape ``(out, in)`` (row-major; torch's ``Linear`` and ONNX ``Gemm(transB=1)`` convention) and
the bias ``dense{l}.bias`` of shape ``(out,)``. ``mlp:F-1`` therefore has the layout of
``LinearModel`` (weights, then the bias last).

Initialization: ``logistic``, ``linear`` and ``softmax`` start at zero (convex problems).
``mlp`` draws every weight and bias uniformly from ±1/√fan_in (torch's default ``Linear``
range) from the keyed stream ``rng.derive_key(b"edgedp.models.init.v1", name)`` at step 0,
``name`` the canonical model name without ``:blas``/``:gemm`` (e.g. ``mlp:64-128-10:relu``; the loss
is not part of it), so the same architecture has the same initial θ, bit for bit, on every
device and in every engine, whichever way its products are computed.

>>> spec = parse("mlp:4-3-2:tanh", features=4)
>>> spec.name, spec.loss, spec.dim
('mlp:4-3-2:tanh', 'ce', 23)
>>> parse("mlp:4-3-2:tanh:blas", features=4).products, parse("softmax:3:gemm", features=4).name
('blas', 'softmax:3:gemm')
>>> [(name, shape) for name, shape, _ in spec.layout()]
[('dense0.weight', (3, 4)), ('dense0.bias', (3,)), ('dense1.weight', (2, 3)), ('dense1.bias', (2,))]
>>> init_params(spec)[:3].round(4).tolist()
[0.4211, -0.261, -0.236]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp import rng

__all__ = ["ACTIVATIONS", "LOSSES", "PRODUCTS", "DenseSpec", "init_params", "parse"]

ACTIVATIONS = ("relu", "tanh", "sigmoid", "identity")
LOSSES = ("ce", "bce", "mse")
#: How :class:`~edgedp.models.dense.DenseModel` computes matrix products: ``exact``
#: (elementwise products summed by numpy in a fixed order: the same bits on every machine)
#: or ``blas`` (one BLAS matrix-vector product per example: the same bits on one machine)
#: or ``gemm`` (one BLAS matrix product per node and layer over the whole batch, and the
#: clipped gradient sum computed from per-layer factors: the same bits on one machine for
#: the same batch size; :mod:`edgedp.models.fused`).
PRODUCTS = ("exact", "blas", "gemm")
_GLM_LOSS = {"logistic": "bce", "linear": "mse"}


@dataclass(frozen=True, slots=True)
class DenseSpec:
    """A fully connected network: sizes ``(IN, …, OUT)``, hidden activations, loss, init."""

    sizes: tuple[int, ...]
    activations: tuple[str, ...]
    loss: str
    init: str = "uniform"  # "uniform" (seeded, ±1/√fan_in) or "zeros"
    family: str = "mlp"  # how the name is written: "mlp" or "softmax"
    products: str = "exact"  # one of PRODUCTS; "blas"/"gemm" add ":blas"/":gemm" to the name

    def __post_init__(self) -> None:
        if len(self.sizes) < 2 or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in self.sizes
        ):
            raise ValueError(f"Expected sizes={self.sizes!r}: at least two integers >= 1.")
        if len(self.activations) != len(self.sizes) - 2:
            raise ValueError(
                f"Expected {len(self.sizes) - 2} hidden activations, got {self.activations!r}."
            )
        for a in self.activations:
            if a not in ACTIVATIONS:
                raise ValueError(f"Unknown activation {a!r}; expected one of {ACTIVATIONS}.")
        if self.loss not in LOSSES:
            raise ValueError(f"Unknown loss={self.loss!r}; expected one of {LOSSES}.")
        out = self.sizes[-1]
        if self.loss == "ce" and out < 2:
            raise ValueError(f"Loss 'ce' needs OUT >= 2 classes, got OUT={out}.")
        if self.loss in ("bce", "mse") and out != 1:
            raise ValueError(f"Loss {self.loss!r} needs OUT = 1, got OUT={out}.")
        if self.init not in ("uniform", "zeros"):
            raise ValueError(f"Unknown init={self.init!r}; expected 'uniform' or 'zeros'.")
        if self.products not in PRODUCTS:
            raise ValueError(f"Unknown products={self.products!r}; expected one of {PRODUCTS}.")

    @property
    def features(self) -> int:
        return int(self.sizes[0])

    @property
    def outputs(self) -> int:
        return int(self.sizes[-1])

    @property
    def classifier(self) -> bool:
        return self.loss in ("ce", "bce")

    @property
    def dim(self) -> int:
        return sum(o * i + o for i, o in zip(self.sizes[:-1], self.sizes[1:], strict=True))

    @property
    def name(self) -> str:
        """The canonical model name (what ``parse`` reads back)."""
        return self.architecture + ("" if self.products == "exact" else ":" + self.products)

    @property
    def architecture(self) -> str:
        """The canonical name without ``:blas``/``:gemm``: what the seeded init is keyed by."""
        if self.family == "softmax":
            return f"softmax:{self.outputs}"
        if self.family in _GLM_LOSS:
            return self.family
        text = "mlp:" + "-".join(str(s) for s in self.sizes)
        if self.activations:
            acts = set(self.activations)
            text += ":" + (self.activations[0] if len(acts) == 1 else ",".join(self.activations))
        return text

    def layout(self) -> list[tuple[str, tuple[int, ...], int]]:
        """``(name, shape, offset)`` of every parameter in the flat θ, in order."""
        out: list[tuple[str, tuple[int, ...], int]] = []
        off = 0
        for layer, (i, o) in enumerate(zip(self.sizes[:-1], self.sizes[1:], strict=True)):
            out.append((f"dense{layer}.weight", (int(o), int(i)), off))
            off += o * i
            out.append((f"dense{layer}.bias", (int(o),), off))
            off += o
        return out

    def unflatten(self, theta: np.ndarray) -> list[np.ndarray]:
        """Views ``[W0, b0, W1, b1, …]`` of a flat ``(..., d)`` θ (no copies).

        >>> spec = parse("softmax:3", features=2)
        >>> [p.shape for p in spec.unflatten(np.zeros(spec.dim))]
        [(3, 2), (3,)]
        """
        lead = theta.shape[:-1]
        return [
            theta[..., off : off + int(np.prod(shape))].reshape(lead + shape)
            for _, shape, off in self.layout()
        ]


def _sizes(text: str, model: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split("-"))
    except ValueError:
        sizes = ()
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(
            f"Bad layer sizes in model={model!r}; use mlp:IN-H1-..-OUT with positive "
            "integers, e.g. mlp:64-128-10:relu."
        )
    return sizes


def parse(model: str, *, features: int, loss: str = "") -> DenseSpec:
    """The :class:`DenseSpec` a model name describes, for ``features`` inputs.

    Args:
      model: ``logistic``, ``linear``, ``softmax:C`` or ``mlp:IN-H1-..-OUT[:ACT]``; the last
        two may end in ``:blas`` or ``:gemm`` (matrix products through BLAS, see
        :data:`PRODUCTS`).
      features: the number of input features of the data (IN must equal it).
      loss: ``""`` for the default (``ce``), or one of :data:`LOSSES`.

    Raises:
      ValueError: naming the part of ``model`` or ``loss`` that is wrong.

    >>> parse("softmax:10", features=64).dim
    650
    >>> parse("mlp:3-1", features=3, loss="bce").name
    'mlp:3-1'
    """
    family, _, rest = model.partition(":")
    products = "exact"
    for mode in PRODUCTS[1:]:
        if family in ("softmax", "mlp") and rest.endswith(":" + mode):
            products, rest = mode, rest.removesuffix(":" + mode)
    if model in _GLM_LOSS:  # the layout of LinearModel: weights, then the bias
        if loss not in ("", _GLM_LOSS[model]):
            raise ValueError(f"Model {model!r} is trained with loss {_GLM_LOSS[model]!r}.")
        return DenseSpec((int(features), 1), (), _GLM_LOSS[model], init="zeros", family=model)
    if family == "softmax":
        try:
            classes = int(rest)
        except ValueError:
            classes = 0
        if classes < 2:
            raise ValueError(f"Bad model={model!r}; use softmax:CLASSES with CLASSES >= 2.")
        if loss not in ("", "ce"):
            raise ValueError(f"Model {model!r} is trained with loss 'ce', not {loss!r}.")
        return DenseSpec(
            (int(features), classes), (), "ce", init="zeros", family="softmax", products=products
        )
    if family != "mlp" or not rest:
        raise ValueError(
            f"Unknown model={model!r}; expected logistic, linear, softmax:C, "
            "mlp:IN-H1-..-OUT[:relu|tanh] or onnx:PATH."
        )
    size_text, _, act_text = rest.partition(":")
    sizes = _sizes(size_text, model)
    if sizes[0] != features:
        raise ValueError(
            f"Model {model!r} takes IN={sizes[0]} features but the data has {features}."
        )
    hidden = len(sizes) - 2
    acts = tuple(act_text.split(",")) if act_text else ("relu",)
    if len(acts) == 1:
        acts = acts * hidden
    elif len(acts) != hidden:
        raise ValueError(f"Model {model!r} names {len(acts)} activations for {hidden} layers.")
    for a in acts:
        if a not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {a!r} in {model!r}; expected {ACTIVATIONS}.")
    if not loss:
        if sizes[-1] == 1:
            raise ValueError(
                f"Model {model!r} has one output: set the task's loss to 'bce' or 'mse'."
            )
        loss = "ce"
    return DenseSpec(sizes, acts, loss, products=products)


def init_params(spec: DenseSpec) -> np.ndarray:
    """The initial flat θ of ``spec`` (float64): zeros, or the seeded uniform init.

    >>> spec = parse("mlp:2-2-2", features=2)
    >>> bool(np.array_equal(init_params(spec), init_params(spec)))
    True
    >>> bool(np.abs(init_params(spec)).max() <= 1 / np.sqrt(2))
    True
    """
    if spec.init == "zeros":
        return np.zeros(spec.dim)
    gen = rng.generator(rng.derive_key(b"edgedp.models.init.v1", spec.architecture), 0)
    theta = np.empty(spec.dim)
    fan_in = 0
    for _, shape, off in spec.layout():
        if len(shape) == 2:
            fan_in = shape[1]  # the bias that follows uses its weight's fan-in
        size = int(np.prod(shape))
        theta[off : off + size] = gen.uniform(-1.0 / np.sqrt(fan_in), 1.0 / np.sqrt(fan_in), size)
    return theta
