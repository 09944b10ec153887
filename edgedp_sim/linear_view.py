"""What an attacker's view is, as a linear function of the gradients and the noise sources.

Every non-adaptive mechanism of edgedp is affine in its inputs once every per-example
gradient is fixed: the messages are ``o₀ + R_g g + R_n n`` with g the nodes' clipped-gradient
sums per round and n the noise each node adds (its composed noise, per recipient slot for
Zip-DL). :func:`trace` obtains R_g and R_n by running the algorithm's own ``send`` /
``receive`` rules on unit impulses — the "trials" axis of the state holds one impulse each —
so the attacker's model of the mechanism is the code itself, not a second derivation.
Isotropic mechanisms (every one except DOME, whose sketch mixes coordinates) are traced in
one coordinate: each model coordinate is an independent copy.

:func:`sources` writes each node's noise over independent standard sources (paper 000
Def. 4, paper 001 Remark 1): its own stream through the temporal factor (ν C⁻¹ z), the
shared-seed streams (ν U s), the per-edge streams (±ν√c_e e), Zip-DL's message streams and
the Laplace draws of sr-gt / DPOP. An attacker regenerates the sources it holds
(:func:`known`: a curious node's own streams, its edges, the shared seed for insiders) —
:func:`regenerate` draws them from the same keyed streams as the engines — and what is
left is the noise covariance it cannot remove.
"""

# Paper letters (T, C, U, D, R, W) inside; see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp import families, rng, runtime
from edgedp.families.cross import noise as cross_agent
from edgedp.noise import laplace_draw

__all__ = [
    "MAX_IMPULSES",
    "Sources",
    "Trace",
    "known",
    "regenerate",
    "sources",
    "trace",
]

#: Largest number of unknowns (gradient and noise entries) :func:`trace` follows.
MAX_IMPULSES = 12000


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """Impulse responses of one plan's messages.

    ``messages[t]`` ``(I, n, [slots,] width)``: round t's messages for impulse i; impulse 0
    is the initial model (θ₀ = 1 per coordinate when ``isotropic``, the real θ₀ otherwise),
    then every gradient entry (``grad_offset[t, u] + c``, c < ``gdim``) and every noise entry
    (``noise_offset[t, u, s] + c``, c < ``ndim``), each with the value 1.
    """

    isotropic: bool
    steps: int
    n: int
    slots: int
    gdim: int
    ndim: int
    grad_offset: np.ndarray
    noise_offset: np.ndarray
    messages: list
    impulses: int
    per_slot: bool


def trace(plan, *, batch_size: int, dim: int, theta0: np.ndarray) -> Trace:
    """Run ``plan``'s update rules on impulses (module docstring).

    Raises:
      ValueError: the mechanism is not affine in its inputs (DOME with Adam or an adaptive
        basis) or has more than :data:`MAX_IMPULSES` unknowns.
    """
    algo = families.for_mechanism(plan.mechanism)
    T, n = plan.steps, plan.n
    spec = plan.sketch
    isotropic = spec is None
    if spec is not None and (spec.optimizer != "sgd" or spec.basis == "adaptive"):
        raise ValueError(
            "The audit's linear view needs an affine mechanism: a dome plan with the sgd "
            f"optimizer and a public basis (got optimizer={spec.optimizer!r}, "
            f"basis={spec.basis!r})."
        )
    width = 1 if isotropic else dim
    gdim = 1 if isotropic else (spec.dim if spec.clip == "sketch" else dim)
    ndim = 1 if isotropic else spec.dim
    per_slot = plan.cross_agent is not None and plan.cross_agent.message_variance > 0
    slots = plan.mixing_index.shape[1] if per_slot else 1
    grad_offset = 1 + gdim * np.arange(T * n).reshape(T, n)
    base = 1 + gdim * T * n
    noise_offset = base + ndim * np.arange(T * n * slots).reshape(T, n, slots)
    impulses = base + ndim * T * n * slots
    if impulses > MAX_IMPULSES:
        raise ValueError(
            f"The audit's linear view of this plan has {impulses} unknowns (> {MAX_IMPULSES}); "
            "audit a smaller graph, horizon or sketch."
        )
    state0 = np.zeros((impulses, n, width))
    state0[0] = 1.0 if isotropic else np.asarray(theta0, dtype=np.float64)
    state = algo.init_state(state0)
    back = cross_agent.reverse_slots(plan.mixing_index) if per_slot else None
    messages = []
    for t in range(T):

        def unit(offsets, size, shape):
            out = np.zeros((impulses, *shape, size))
            idx = np.indices(shape).reshape(len(shape), -1)
            flat = offsets.reshape(-1)
            for c in range(size):
                out[(flat + c, *idx, np.full(flat.size, c))] = 1.0
            return out

        grads = unit(grad_offset[t], gdim, (n,))
        if per_slot:
            noise = unit(noise_offset[t], ndim, (n, slots))
        else:
            noise = unit(noise_offset[t, :, 0], ndim, (n,))
        ctx = runtime.step_context(  # the engines' contexts, impulses for gradient and noise
            plan,
            t,
            batch_size=batch_size,
            gradient=lambda point, g=grads: g,
            noise=lambda z=noise: z,
            laplace=lambda scale, z=noise: z,
            sketch_gradient=lambda point, project, g=grads: g,
        )
        state, message = algo.send(state, ctx)
        if per_slot:
            gathered = message[:, plan.mixing_index, back, :]
        else:
            gathered = message[:, plan.mixing_index, :]
        state = algo.receive(state, plan.mixing_weight, gathered, ctx)
        messages.append(message)
    return Trace(
        isotropic, T, n, slots, gdim, ndim, grad_offset, noise_offset, messages, impulses, per_slot
    )


@dataclass(frozen=True, slots=True, eq=False)
class Sources:
    """Each node's noise over independent sources: noise entry (t, u, s) (scalar index
    ``(t·n + u)·slots + s``) = Σ_j ``coef[entry, j]`` · source_j, every source of variance
    ``var[j]`` (standard normals: 1; Laplace draws: 2b²). ``what[j]`` names the source:
    ``("own", τ, u)``, ``("laplace", t, u)``, ``("shared", t, k)``, ``("edge", t, lo, hi)``
    or ``("message", t, u, r)`` (r-th recipient slot of u)."""

    coef: np.ndarray
    var: np.ndarray
    what: tuple


def sources(plan, *, slots: int) -> Sources:
    """The source map of ``plan``'s noise (module docstring)."""
    T, n = plan.steps, plan.n
    entries = T * n * slots

    def entry(t, u):
        return [(t * n + u) * slots + s for s in range(slots)]

    cols, var, what = [], [], []

    def add(kind, weights: dict, variance=1.0):
        col = np.zeros(entries)
        for e, w in weights.items():
            col[e] += w
        cols.append(col)
        var.append(variance)
        what.append(kind)

    nu = float(plan.noise_std)
    if plan.laplace is not None:
        for t in range(T):
            b = plan.laplace.noise_scale(t)
            for u in range(n):
                add(("laplace", t, u), {e: 1.0 for e in entry(t, u)}, 2.0 * b * b)
        return Sources(np.array(cols).T, np.array(var), tuple(what))
    spec = plan.cross_agent
    Cinv = np.asarray(plan.factor.materialize(T), dtype=np.float64)[:T, :T]
    diag = np.ones(n) if spec is None else np.sqrt(spec.diag)
    for tau in range(T):
        for u in range(n):
            w = {}
            for t in range(tau, T):
                if Cinv[t, tau] != 0:
                    for e in entry(t, u):
                        w[e] = nu * diag[u] * Cinv[t, tau]
            add(("own", tau, u), w)
    if spec is None:
        return Sources(np.array(cols).T, np.array(var), tuple(what))
    shares = [plan.share(u).cross_agent for u in range(n)]
    for t in range(T):
        for k in range(spec.rank):
            add(
                ("shared", t, k), {e: nu * spec.factor[u, k] for u in range(n) for e in entry(t, u)}
            )
        edges: dict[tuple[int, int], dict] = {}
        for u, sh in enumerate(shares):
            for v, c in sh.edge_terms:
                key = (min(u, v), max(u, v))
                for e in entry(t, u):
                    edges.setdefault(key, {})[e] = nu * c
        for (lo, hi), w in sorted(edges.items()):
            add(("edge", t, lo, hi), w)
        if slots > 1:
            ms = nu * float(np.sqrt(spec.message_variance))
            for u, sh in enumerate(shares):
                rec = np.flatnonzero(sh.recipients)
                w = np.asarray(sh.recipient_weights, dtype=np.float64)
                wsq = float(np.sum(w * w))
                for r, slot_r in enumerate(rec):
                    coef = {}
                    for j in rec:
                        value = ms * ((1.0 if j == slot_r else 0.0) - w[j] * w[slot_r] / wsq)
                        coef[(t * n + u) * slots + int(j)] = value
                    add(("message", t, u, r), coef)
    return Sources(np.array(cols).T, np.array(var), tuple(what))


def known(src: Sources, *, members, knows_seed: bool) -> np.ndarray:
    """Which sources an attacker regenerates: its members' own streams (noise, Laplace,
    messages), the edges touching a member, the shared seed when it ``knows_seed``."""
    members = {int(u) for u in members}
    out = np.zeros(len(src.what), dtype=bool)
    for j, w in enumerate(src.what):
        kind = w[0]
        if kind in ("own", "laplace", "message"):
            out[j] = w[2] in members
        elif kind == "edge":
            out[j] = w[2] in members or w[3] in members
        elif kind == "shared":
            out[j] = knows_seed
    return out


def regenerate(plan, src: Sources, which: np.ndarray, keys, *, dim: int) -> np.ndarray:
    """Values of the sources ``which`` (indices) in every trial, ``(trials, len(which), dim)``.

    ``keys``: one ``(RunKeys, trial)`` per trial — the streams the engines drew from
    (:func:`edgedp.runtime.simulation_keys` of the plan each trial ran).
    """
    which = [int(j) for j in which]
    out = np.empty((len(keys), len(which), dim))
    cache: dict = {}

    def stacked(label, ids, make):
        if (label, ids) not in cache:
            arr = np.empty(len(keys), dtype=object)
            arr[:] = [make(k, tr) for k, tr in keys]
            cache[(label, ids)] = arr
        return cache[(label, ids)]

    for pos, j in enumerate(which):
        w = src.what[j]
        kind, t = w[0], w[1]
        if kind == "own":
            arr = stacked(
                "noise", w[2], lambda k, tr, u=w[2]: runtime.node_key(k, "noise", u, trial=tr)
            )
            out[:, pos] = cross_agent.gaussian_draws(arr, t, (dim,))
        elif kind == "laplace":
            arr = stacked(
                "noise", w[2], lambda k, tr, u=w[2]: runtime.node_key(k, "noise", u, trial=tr)
            )
            out[:, pos] = laplace_draw(arr, t, dim, plan.laplace.noise_scale(t))
        elif kind == "shared":
            arr = stacked("shared", 0, lambda k, tr: runtime.node_key(k, "shared", 0, trial=tr))
            out[:, pos] = cross_agent.gaussian_draws(arr, t, (plan.cross_agent.rank, dim))[:, w[2]]
        elif kind == "edge":
            arr = stacked(
                "pair",
                w[2:],
                lambda k, tr, a=w[2], b=w[3]: runtime.node_key(k, "pair", a, trial=tr, peer=b),
            )
            out[:, pos] = cross_agent.gaussian_draws(arr, t, (dim,))
        else:  # Zip-DL message stream: the r-th of the node's recipient draws
            u, r = w[2], w[3]
            arr = stacked(
                "message", u, lambda k, tr, u=u: runtime.node_key(k, "messages", u, trial=tr)
            )
            if ("draws", u, t) in cache:  # one draw per (node, round) serves every slot
                out[:, pos] = cache[("draws", u, t)][:, r]
                continue
            count = int(np.count_nonzero(plan.share(u).cross_agent.recipients))
            draws = rng.stacked(
                arr, t, (count, dim), lambda g, s=(count, dim): g.standard_normal(s)
            )
            cache[("draws", u, t)] = draws
            out[:, pos] = draws[:, r]
    return out
