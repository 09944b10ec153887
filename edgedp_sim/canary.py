"""Canaries for privacy audits: two neighbouring inputs under the plan's certified adjacency.

An audit (:mod:`edgedp_sim.audit`) runs every trial in one of two worlds and asks an attacker which
one it is in. The worlds differ in one example ``j`` of the victim node's local data, in the
way the plan's adjacency allows (:data:`edgedp.plan.ADJACENCIES`):

* ``zero-out`` (every Gaussian plan; Laplace plans that say so): present — the canary's
  gradient; absent — an example whose gradient is zero. The batch schedule depends only on
  the local dataset size, so it is the same in both worlds (add/remove would reshuffle it);
* ``replace-one`` (Laplace plans): the canary (world 1) or its opposite / the original
  example (world 0);
* ``problem`` (Laplace plans on analytic costs, e.g. sensor fusion): the victim's cost gains
  a linear term, its gradient shifts by a constant of L1 norm δ (Definition 1 of paper 004).

Two kinds of canary:

* **gradient** (white-box, the audit of DP-SGD with crafted gradients): example ``j``'s
  per-example gradient is replaced by a fixed vector of L2 norm Δ (the clip norm) in every
  round it takes part in — for Laplace plans the entries are equal with L1 norm δ·B after
  clipping allows it. Its per-round signs follow the worst participation pattern of the
  plan's temporal factor (:func:`worst_pattern`), and DOME's canary lies in the round's
  public sketch basis, so nothing is lost to the projection.
* **example** (black-box): a crafted input example (:func:`craft_example`: far along the
  direction in which the data vary least, with the label that maximizes its gradient at the
  initial model) replaces example ``j`` of the victim's shard in world 1; in world 0 that
  example's gradient is zero (zero-out) or it is the original example (replace-one). The
  batch engine's data are shared by all trials, so the replacement acts on the gradient
  rows: the crafted example's gradient is computed at the node's model in world 1.

``background="zero"`` zeroes every other per-example gradient (the worst-case dataset of
the DP definition: the attacker knows all other data exactly, and nothing but the canary
and the noise moves the models); ``"data"`` keeps the real data (natural, weaker audit).

The canary acts through the engines' ``gradient_transform`` hook on per-example gradients,
before projection and clipping (:func:`edgedp_sim.batch.run`, :class:`edgedp.agent.Agent`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from edgedp import runtime, streams
from edgedp.families.dome import sketch
from edgedp.plan import NoisePlan, batch_schedule

__all__ = [
    "BACKGROUNDS",
    "KINDS",
    "Canary",
    "craft_example",
    "for_plan",
    "worst_pattern",
]

KINDS = ("gradient", "example")
BACKGROUNDS = ("zero", "data")


@dataclass(frozen=True, slots=True, eq=False)
class Canary:
    """What differs between the two worlds of an audit (module docstring).

    ``steps`` are the rounds the canary takes part in (its batch slot's rounds), ``signs``
    its sign in each round (±1, gradient canary), ``rows1`` / ``rows0`` ``(T, d)`` the
    gradient-canary rows of world 1 / 0 (zero rows outside ``steps``), ``shift`` ``(T, q)``
    their difference in the space the mechanism privatizes (ℝᵈ, or ℝᵏ for DOME's sketch
    clipping) — what the attacker's test looks for. ``slot`` is the batch slot (residue
    mod b) the canary example sits in, ``example`` the crafted (x, y) for the example canary.
    """

    kind: str
    victim: int
    background: str
    adjacency: str
    batch_size: int
    per_epoch: int
    slot: int
    steps: tuple[int, ...]
    signs: tuple[float, ...]
    rows1: np.ndarray
    rows0: np.ndarray
    shift: np.ndarray
    example: tuple[np.ndarray, np.ndarray] | None = None

    def position(self, keys: streams.RunKeys, trial: int, local_size: int) -> int:
        """Index in the victim's shard of the example in the canary's batch slot, this trial
        (the first example of slot ``slot`` in the trial's keyed batch permutation; example
        0 when every example is in every batch)."""
        if self.per_epoch == 1:
            return 0
        key = runtime.node_keys(keys, self.victim, trial=trial).batch  # the Agent's order
        schedule = runtime.BatchSchedule(
            self.batch_size, self.per_epoch, runtime.batch_order(key, local_size)
        )
        return int(schedule.select(self.slot)[0])

    # ---------------------------------------------------------------- batch engine
    def batch_transform(self, model, present: np.ndarray, positions: np.ndarray):
        """The batch engine's ``gradient_transform`` for trials with ``present`` (bool
        ``(trials,)``: world 1) and canary ``positions`` ``(trials,)``."""
        present = np.asarray(present, dtype=bool)
        positions = np.asarray(positions, dtype=np.int64)
        u = self.victim

        def transform(step, point, sel, rows):
            out = rows.copy() if self.background == "data" else np.zeros_like(rows)
            hit = sel[:, u, :] == positions[:, None]  # (trials, B): at most one per trial
            if not hit.any():
                return out
            trial, col = np.nonzero(hit)
            mine = present[trial]
            if self.kind == "gradient":
                value = np.where(mine[:, None], self.rows1[step], self.rows0[step])
            else:  # world 1: the crafted example; world 0: zero, or the original example
                value = self._crafted(model, point[trial, u])
                absent = rows[trial, u, col] if self.adjacency == "replace-one" else 0.0
                value = np.where(mine[:, None], value, absent)
            out[trial, u, col] = value
            return out

        return transform

    # ---------------------------------------------------------------- one node (event engine)
    def node_transform(self, model, present: bool, position: int):
        """The victim Agent's ``gradient_transform`` in one trial (event engine)."""

        def transform(step, point, sel, rows):
            out = rows.copy() if self.background == "data" else np.zeros_like(rows)
            col = np.flatnonzero(np.asarray(sel) == position)
            if col.size == 0:
                return out
            if self.kind == "gradient":
                out[col[0]] = self.rows1[step] if present else self.rows0[step]
            elif present:
                out[col[0]] = self._crafted(model, np.asarray(point)[None])[0]
            elif self.adjacency == "replace-one":
                out[col[0]] = rows[col[0]]
            else:
                out[col[0]] = 0.0
            return out

        return transform

    def _crafted(self, model, points: np.ndarray) -> np.ndarray:
        """The crafted example's gradient at ``points`` ``(m, d)`` (world 1)."""
        x, y = self.example
        xs = np.broadcast_to(x, (len(points), 1, x.size))
        ys = np.broadcast_to(np.asarray(y, dtype=np.float64), (len(points), 1))
        return model.per_example_gradients(points, xs, ys)[:, 0]


def worst_pattern(
    plan: NoisePlan, per_epoch: int
) -> tuple[int, tuple[int, ...], tuple[float, ...]]:
    """``(slot, steps, signs)``: the batch slot whose rounds, with the best ±1 signs, carry
    the most privacy loss against the attacker who sees every message.

    Gaussian plans: maximize σᵀX[π, π]σ with X = CᵀC of the temporal factor (paper 000
    Thm 7: sens² = max_π Σ|X[π, π]|; equal when the signs can make every term positive,
    always when X ≥ 0); cross-agent plans (identity factor): the most gradient rounds
    (Muffliato releases data every K-th round only); Laplace plans: Σ α_t / ν_{t+1} over the
    rounds with a next message (the earliest slot wins).
    """
    T = plan.steps  # noqa: N806
    best = (-math.inf, 0, (), ())
    X = None  # noqa: N806
    if plan.laplace is None and plan.cross_agent is None:
        C = plan.factor.strategy(T)  # noqa: N806
        X = C.T @ C  # noqa: N806
    for slot in range(min(per_epoch, T)):
        steps = tuple(runtime.BatchSchedule.rounds(slot, per_epoch=per_epoch, steps=T))
        if plan.laplace is not None:
            s = plan.laplace
            value = sum(s.stepsize(t) / s.noise_scale(t + 1) for t in steps if t + 1 < T)
            signs = (1.0,) * len(steps)
        elif X is None:
            k = plan.cross_agent.gossip_rounds
            value = float(sum(1 for t in steps if t % k == 0))
            signs = (1.0,) * len(steps)
        else:
            signs, value = _best_signs(X[np.ix_(steps, steps)])
        if value > best[0]:
            best = (value, slot, steps, signs)
    return best[1], best[2], best[3]


def _best_signs(X: np.ndarray) -> tuple[tuple[float, ...], float]:  # noqa: N803
    """max over σ ∈ {±1}^k of σᵀXσ: exhaustive up to k = 12, else the leading eigenvector's
    signs improved by single flips (a local maximum)."""
    k = len(X)
    if np.all(X >= 0):
        return (1.0,) * k, float(X.sum())
    if k <= 12:
        best = max(
            (np.array((1.0, *s)) for s in itertools.product((1.0, -1.0), repeat=k - 1)),
            key=lambda s: float(s @ X @ s),
        )
        return tuple(best.tolist()), float(best @ X @ best)
    s = np.sign(np.linalg.eigh(X)[1][:, -1])
    s[s == 0] = 1.0
    improved = True
    while improved:
        improved = False
        for i in range(k):
            gain = -4 * s[i] * (X[i] @ s - X[i, i] * s[i])
            if gain > 1e-12:
                s[i] = -s[i]
                improved = True
    return tuple(s.tolist()), float(s @ X @ s)


def _direction(dim: int) -> np.ndarray:
    return np.full(dim, 1.0 / math.sqrt(dim))


def for_plan(
    plan: NoisePlan,
    *,
    victim: int,
    local_size: int,
    dim: int,
    kind: str = "gradient",
    background: str | None = None,
    model=None,
    data=None,
) -> Canary:
    """The canary of an audit of ``plan`` (module docstring).

    Args:
      plan: the audited plan (its adjacency decides the worlds).
      victim: the node whose example is the canary.
      local_size: m, the victim's number of examples (the batch schedule).
      dim: d, the model dimension.
      kind: ``"gradient"`` or ``"example"``.
      background: ``"zero"`` or ``"data"`` (default: zero for the gradient canary, data for
        the example canary).
      model, data: the model backend and federated data (example canary: crafted from them).

    Raises:
      ValueError: an unknown kind or background, or an example canary where the plan's
        adjacency bounds gradient differences over the whole domain (``problem``).
    """
    if kind not in KINDS:
        raise ValueError(f"Unknown canary kind={kind!r}; expected one of {KINDS}.")
    background = background or ("zero" if kind == "gradient" else "data")
    if background not in BACKGROUNDS:
        raise ValueError(f"Unknown background={background!r}; expected one of {BACKGROUNDS}.")
    if not 0 <= victim < plan.n:
        raise ValueError(f"victim={victim} is not a node of the {plan.n}-node plan.")
    adjacency = plan.adjacency
    if kind == "example" and adjacency == "problem":
        raise ValueError(
            "An example canary needs per-example clipping: the plan's 'problem' adjacency "
            "bounds ‖∇f − ∇f′‖₁ by δ over the whole domain, which a real example's gradient "
            "does not satisfy. Use the gradient canary."
        )
    if plan.sketch is not None and plan.sketch.basis == "adaptive":
        raise ValueError(
            "An adaptive dome basis depends on the releases of every trial; the audit's "
            "canary and linear view need a public basis (block or gaussian)."
        )
    batch, per_epoch = batch_schedule(plan, local_size, dim=dim)
    slot, steps, signs = worst_pattern(plan, per_epoch)
    T = plan.steps  # noqa: N806
    sketched = plan.sketch is not None and plan.sketch.clip == "sketch"
    q = plan.sketch.dim if sketched else dim
    rows1, rows0, shift = np.zeros((T, dim)), np.zeros((T, dim)), np.zeros((T, q))
    for t, sign in zip(steps, signs, strict=True):
        if plan.laplace is not None:
            s = plan.laplace
            share = 2.0 if adjacency == "replace-one" else 1.0
            a = s.delta_grad * batch / (share * dim)
            if math.isfinite(plan.clip_norm):
                a = min(a, plan.clip_norm / math.sqrt(dim))
            c = np.full(dim, a)
            c0 = -c if adjacency == "replace-one" else np.zeros(dim)
            rows1[t], rows0[t], shift[t] = c, c0, c - c0
        elif plan.sketch is not None:
            S = sketch.basis(plan.sketch, t, dim)  # noqa: N806
            coef = sign * plan.clip_norm * _direction(plan.sketch.dim)
            rows1[t] = S.lift(coef)
            shift[t] = coef if sketched else rows1[t]
        else:
            rows1[t] = sign * plan.clip_norm * _direction(dim)
            shift[t] = rows1[t]
    example = None
    if kind == "example":
        if model is None or data is None:
            raise ValueError("An example canary needs the model and the data to craft it.")
        example = craft_example(model, data)
        shift = _example_shift(plan, model, example, steps, q, sketched)
    return Canary(
        kind=kind,
        victim=victim,
        background=background,
        adjacency=adjacency,
        batch_size=batch,
        per_epoch=per_epoch,
        slot=slot,
        steps=steps,
        signs=signs,
        rows1=rows1,
        rows0=rows0,
        shift=shift,
        example=example,
    )


def _example_shift(plan, model, example, steps, q, sketched) -> np.ndarray:
    """The example canary's clipped gradient at the initial model in every round it takes
    part in: the attacker's template (its real gradient moves with the model; under
    replace-one the original example it replaces is not known in advance either)."""
    from edgedp import clipping

    theta0 = np.asarray(model.init_params(), dtype=np.float64)
    x, y = example
    g = model.per_example_gradients(theta0, x[None], np.array([y]))
    out = np.zeros((plan.steps, q))
    for t in steps:
        a = g
        if sketched:
            a = sketch.basis(plan.sketch, t, theta0.size).project(a)
        out[t] = clipping.clip_l2(a, plan.clip_norm)[0][0]
    return out


def craft_example(model, data) -> tuple[np.ndarray, np.ndarray]:
    """A canary input: far along the direction in which the training features vary least,
    labelled so that its gradient at the initial model is largest (its clipped gradient is
    then as long as clipping allows and points away from the other examples' gradients).

    Returns ``(x (f,), y ())``.
    """
    x = np.asarray(data.x, dtype=np.float64).reshape(-1, data.x.shape[-1])
    y = np.asarray(data.y, dtype=np.float64).reshape(-1)
    centred = x - x.mean(axis=0)
    _, vecs = np.linalg.eigh(centred.T @ centred / max(1, len(x) - 1))
    reach = float(np.max(np.linalg.norm(centred, axis=1))) if len(x) else 1.0
    xc = x.mean(axis=0) + 3.0 * max(reach, 1.0) * vecs[:, 0]
    labels = np.unique(y)
    if not model.classifier:
        spread = float(np.max(np.abs(y))) if y.size else 1.0
        labels = np.array([-3.0 * max(spread, 1.0), 3.0 * max(spread, 1.0)])
    theta0 = np.asarray(model.init_params(), dtype=np.float64)
    norms = [
        float(np.linalg.norm(model.per_example_gradients(theta0, xc[None], np.array([lab]))))
        for lab in labels
    ]
    return xc, np.asarray(labels[int(np.argmax(norms))], dtype=np.float64)
