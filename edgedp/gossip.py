"""The algorithm protocol every engine drives, and the shared D-SGD-family rules.

A rules module (one per mechanism, or group of mechanisms, in its family's package under
:mod:`edgedp.families`) exposes (CONVENTIONS C4), besides ``NAME``, ``TRUST_MODEL``,
``check_plan(plan)`` and its ``MECHANISMS`` records (:mod:`edgedp.mechanisms`):

* ``init_state(theta0) -> state`` — a dict of arrays shaped like ``theta0``, i.e. ``(d,)`` on a
  device or ``(trials, nodes, d)`` in the batch engine;
* ``send(state, ctx) -> (state, message)`` — the local computation of a round and the vector
  every neighbour receives;
* ``receive(state, weights, gathered, ctx) -> state`` — ``gathered[..., j, :]`` is the message
  of the j-th entry of the node's padded mixing row (its own message at its own position and
  at padding, whose weight is 0), ``weights[..., j]`` its weight; a device passes the m
  messages as a sequence of vectors instead of stacking them (:func:`mix_gathered` takes
  both);
* ``model(state) -> theta`` — the parameters the node would deploy;
* ``message_bound(share, *, dim, theta0) -> (B, ...)`` — for each array a message carries,
  a bound no honest sender's entries exceed except with probability 10⁻¹² over the run's
  noise (:mod:`edgedp.bounds`); receivers reject larger entries.

``ctx`` is a :class:`StepContext`: the round, the hyper-parameters and two callables,
``gradient(point)`` (sum of per-example clipped gradients on the round's batch) and
``noise()`` (the round's correlated Gaussian noise of std ν, None when the plan has none),
plus one typed ``extra`` for the plan's family (:func:`extra` reads it, naming what is
missing): :class:`LaplaceExtra` (sr-gt, dpop), :class:`CrossExtra` (noise correlated
across agents) or :class:`SketchExtra` (DOME); None for the D-SGD and MF families. The node
runtime (:mod:`edgedp.runtime`) builds every engine's contexts.
Everything is elementwise or summed in a fixed order, never through BLAS, so one node's
numbers have the same bits on a device, in the event engine and in the batch engine
(DESIGN §2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from edgedp import bounds, mechanisms

__all__ = [
    "CrossExtra",
    "LaplaceExtra",
    "SketchExtra",
    "StepContext",
    "extra",
    "init_state",
    "local_step",
    "message_bound",
    "mix",
    "mix_gathered",
    "mix_node",
    "model",
    "receive",
    "rules",
    "send",
]


@dataclass(frozen=True, slots=True, eq=False)
class LaplaceExtra:
    """What Laplace plans (sr-gt, dpop) read besides the common fields.

    ``laplace(scale)`` returns Laplace(0, scale) draws shaped like the model state, a pure
    function of (node key, round): calling it twice in a round gives the same draws, never
    fresh noise. ``schedule`` is the plan's
    :class:`~edgedp.families.laplace.accounting.LaplaceSchedule` (α_k, β, ν_k).
    """

    laplace: Callable[[float], np.ndarray]
    schedule: Any


@dataclass(frozen=True, slots=True, eq=False)
class CrossExtra:
    """Plans with noise correlated across agents: ``cross_agent`` is the plan's section
    (batch engine) or the node's share of it (devices); both expose ``gossip_rounds``.
    ``noise()`` already returns the node's full correlated noise, per padded-row slot
    ``(..., m, d)`` for message-wise noise (Zip-DL), whose ``send`` then returns one message
    per slot."""

    cross_agent: Any


@dataclass(frozen=True, slots=True, eq=False)
class SketchExtra:
    """DOME plans: ``sketch`` is the plan's :class:`~edgedp.families.dome.sketch.SketchSpec`;
    ``noise()`` is k-dimensional and ``noise_std`` ν, the std of its coordinates;
    ``sketch_gradient(point, project)`` returns Σ_b clip(project(g_b), Δ) — per-example
    gradients projected, then clipped and summed in order (paper 002 Alg. 1 lines 10-11).
    With an adaptive sketch (``sketch.basis == "adaptive"``) the engine also passes
    ``basis``, the round's shared basis
    (:class:`~edgedp.families.dome.sketch_adaptive.AdaptiveSketch`), ``release(c)``, which hands
    the node's released coefficients to the aggregate, and ``mean`` (m̄ of the window with
    ``mean_removal``, else None; ``(trials, d)`` in the batch engine)."""

    sketch: Any
    noise_std: float
    sketch_gradient: Callable[[np.ndarray, Callable], np.ndarray]
    basis: Any = None
    mean: np.ndarray | None = None
    release: Callable[[np.ndarray], None] | None = None


Extra = LaplaceExtra | CrossExtra | SketchExtra
_E = TypeVar("_E", LaplaceExtra, CrossExtra, SketchExtra)


@dataclass(frozen=True, slots=True, eq=False)
class StepContext:
    """What ``send`` and ``receive`` may use in one round (built by :mod:`edgedp.runtime`):
    the common fields and the plan family's ``extra`` (None for D-SGD and MF plans)."""

    round: int
    learning_rate: float
    clip_norm: float
    batch_size: int
    gradient: Callable[[np.ndarray], np.ndarray]
    noise: Callable[[], np.ndarray | None]
    extra: Extra | None = None


def extra(ctx: StepContext, kind: type[_E]) -> _E:
    """``ctx.extra`` if it is a ``kind``; ValueError naming what the rules need otherwise."""
    if not isinstance(ctx.extra, kind):
        section = {LaplaceExtra: "laplace", CrossExtra: "cross_agent", SketchExtra: "sketch"}
        raise ValueError(
            f"Expected a {kind.__name__} in the step context of round {ctx.round}, got "
            f"{type(ctx.extra).__name__}: the rules need the plan's {section[kind]} section."
        )
    return ctx.extra


def local_step(
    theta: np.ndarray,
    gradient_sum: np.ndarray,
    noise: np.ndarray | None,
    *,
    learning_rate: float,
    batch_size: int,
) -> np.ndarray:
    """θ_{t+½} = θ_t − η (Σ_b clip(g_b) + noise) / B   (paper 000, Alg. 1 line 4).

    The noise is added to the *sum* of clipped per-example gradients, whose sensitivity to
    adding or removing one example is the clip norm Δ; dividing by the public batch size B
    afterwards is post-processing.
    """
    # θ − η·((g + n)/B), each operation in place on one new array: the same bits as the
    # expression, with one model-sized temporary instead of four
    total = np.divide(gradient_sum, batch_size) if noise is None else gradient_sum + noise
    if noise is not None:
        np.divide(total, batch_size, out=total)
    np.multiply(learning_rate, total, out=total)
    return np.subtract(theta, total, out=total)


#: Elements per block when :func:`mix_gathered` mixes a node's separate vectors.
MIX_BLOCK = 1 << 15


def mix_gathered(weights: np.ndarray, gathered: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Σ_j weights[..., j] · gathered[..., j, :], accumulated in j order (one multiply-add each).

    ``gathered`` is an ``(..., m, d)`` array, or (one node, as on a device) a sequence of m
    vectors of shape ``(d,)``: these are mixed block by block, so the only model-sized
    array allocated is the result — the same bits, since every element is computed alone.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if isinstance(gathered, np.ndarray) or any(np.ndim(v) != 1 for v in gathered):
        gathered = np.asarray(gathered) if not isinstance(gathered, np.ndarray) else gathered
        out: np.ndarray = np.zeros(gathered.shape[:-2] + gathered.shape[-1:])
        for j in range(gathered.shape[-2]):
            out = out + weights[..., j, None] * gathered[..., j, :]
        return out
    if weights.shape != (len(gathered),) or not gathered:
        raise ValueError(
            f"Expected one weight per vector, got weights {weights.shape} for {len(gathered)}."
        )
    dim = gathered[0].shape[-1]
    out = np.empty(dim)
    term = np.empty(min(MIX_BLOCK, dim))
    for lo in range(0, dim, MIX_BLOCK):
        hi = min(lo + MIX_BLOCK, dim)
        acc, tmp = out[lo:hi], term[: hi - lo]
        acc[...] = 0.0
        for w, vec in zip(weights, gathered, strict=True):
            np.multiply(w, vec[lo:hi], out=tmp)
            np.add(acc, tmp, out=acc)
    return out


def mix(index: np.ndarray, weight: np.ndarray, values: np.ndarray) -> np.ndarray:
    """θ[u] = Σ_j weight[u, j] · values[..., index[u, j], :] for every node u at once."""
    return mix_gathered(weight, values[..., index, :])


def mix_node(weights: Sequence[float], vectors: Sequence[np.ndarray]) -> np.ndarray:
    """One node's mixing of ``vectors`` (its padded row's messages) with ``weights``."""
    if len(weights) != len(vectors) or not vectors:
        raise ValueError(
            f"Expected as many vectors as weights, got {len(vectors)} and {len(weights)}."
        )
    return mix_gathered(np.asarray(weights, dtype=np.float64), list(vectors))


# ---------------------------------------------------------------- the D-SGD family
def init_state(theta0: np.ndarray) -> dict[str, np.ndarray]:
    return {"theta": theta0}


def send(state: dict[str, np.ndarray], ctx: StepContext):
    """Noisy local step; the half-step model is the message (paper 000 Alg. 1)."""
    gsum = ctx.gradient(state["theta"])
    half = local_step(
        state["theta"],
        gsum,
        ctx.noise(),
        learning_rate=ctx.learning_rate,
        batch_size=ctx.batch_size,
    )
    return {"theta": state["theta"]}, half


def receive(state, weights, gathered, ctx: StepContext) -> dict[str, np.ndarray]:
    """θ_{t+1} = Σ_v W[u, v] θ_{t+½}^v in fixed order."""
    return {"theta": mix_gathered(weights, gathered)}


def model(state: dict[str, np.ndarray]) -> np.ndarray:
    return state["theta"]


def message_bound(share, *, dim: int, theta0: np.ndarray) -> tuple[float]:
    """B with |entry| ≤ B for every honest message of the D-SGD family (bounds module).

    Let M_t bound every entry of every node's θ_t (M_0 = max|θ₀|, the common initial model).
    A local step moves an entry by at most η(‖Σ_b clip(g_b)‖ + |noise|)/B ≤ η(Δ + z s_t/B)
    with s_t the largest noise std of round t (``share.network.noise_std``; the message-wise
    part of Zip-DL included) and z the Gaussian tail of the per-coordinate budget; mixing is
    a convex combination and cannot increase M. So the message of round t is bounded by
    M_{t+1} ≤ M_T = M_0 + η(TΔ + z Σ_t s_t / B). Muffliato's gossip-only rounds move nothing,
    so the same bound holds.
    """
    facts = share.network
    if facts.stated is not None:
        return (facts.stated,)
    spec = share.cross_agent
    per_message = spec is not None and mechanisms.get(spec.kind).has("message_noise")
    budget = bounds.coordinate_budget(
        facts, steps=share.steps, width=dim, slots=len(share.neighbours) if per_message else 1
    )
    z = bounds.gaussian_tail(budget)
    noise = float(np.sum(facts.noise_std[: share.steps]))
    step = share.steps * share.clip_norm + z * noise / bounds.batch_floor(share)
    return (bounds.rounded(float(np.max(np.abs(theta0))) + share.learning_rate * step),)


def rules(check_plan: Callable[[Any], None], *, send=send) -> mechanisms.Rules:
    """The D-SGD family's round rules (these functions) with a mechanism's own plan check
    (and, for Muffliato, its own ``send``)."""
    return mechanisms.Rules(init_state, send, receive, model, check_plan, message_bound)
