"""DOME on a gossip graph: k-float messages, privacy noise in ℝᵏ (paper 002 §3, Alg. 1).

Round t at node u, with the shared basis S = S_t ∈ ℝ^{d×k} (:mod:`edgedp.families.dome.sketch`):

1. c_u = Σ_b clip(Sᵀg_b, Δ) + z_u,  z_u ~ ν·(C_local⁻¹ Z)[t] ∈ ℝᵏ (ν = σ·sens·Δ) — the
   node's privatized sketched gradient (Alg. 1 lines 10-14; with ``clip="model"``
   c_u = Sᵀ Σ_b clip(g_b, Δ) + z_u instead; with mean removal g_b − m̄, line 9);
2. ĝ_u = S c_u / B (+ m̄), the decoded private update (line 17); with ``optimizer="adam"`` the
   bias-corrected moments of ĝ_u (lines 18-20, optionally noise-aware: the second moment
   minus a²·Diag(S Sᵀ), a = ν/B, Lemma 3.2 with the basis that decoded ĝ — the paper
   prints S_{t−1} there); the step is η m̂/√max(v̂, γ') or η ĝ_u;
3. θ_{t+½} = θ_t − η·step; the message is m_u = Sᵀ θ_{t+½} ∈ ℝᵏ (k floats on the wire);
4. θ_{t+1} = θ_{t+½} + S(Σ_v W_uv m_v − m_u): the component of the model in span(S) is
   replaced by the neighbourhood average of the sketched models, the rest stays local.

**How this differs from the paper.** Paper 002 has a server: clients send c_i through
Secure Aggregation, the server decodes the *aggregate*, runs Adam and updates the sketch
by streaming PCA of the aggregate plus orthogonal random probes (Alg. 2), and broadcasts
θ and S. Here there is no server: each node mixes its neighbours' sketched *models*
(step 4) and runs its own optimizer on its own decoded update. The bases are shared
without a server in one of two ways. ``block`` / ``gaussian``: data-independent, a pure
function of the plan's public sketch seed and the round. ``adaptive``
(:mod:`edgedp.families.dome.sketch_adaptive`): Alg. 2 fed by the network sum of the released c_u's,
all-reduced along a public spanning tree (k-float frames piggybacked on the messages of
tree edges, fixed summation order) and used after a public lag of D windows, so every
node computes the same bits; optionally with the paper's mean removal (lines 9, 17; the
mean m̄, the paper's m̂, is the β₁-average of the same lagged aggregates, ``mean`` of the
context's :class:`~edgedp.gossip.SketchExtra`).
No Secure Aggregation: the aggregate is a sum of values already released. Consensus is
reached only inside the sketched subspaces, which change every ``refresh`` rounds. With
SGD the local step lies in span(S_t) (plus m̄, the same at every node, with mean
removal), so nodes that start from the common θ₀ only ever differ inside the subspaces
that were mixed; Adam's elementwise step leaves span(S_t), and that part of the model is
never averaged (measured: experiments/dome_tradeoff.py).

**Privacy (trust model LDP, every message is released).** Adding or removing one example
moves Σ_b clip(Sᵀg_b, Δ) by at most Δ, and also Sᵀ Σ_b clip(g_b, Δ), since ‖Sᵀx‖ ≤ ‖x‖ for
orthonormal columns: the per-step
query in ℝᵏ has the same sensitivity as DP-D-SGD's in ℝᵈ, with noise energy k ν² instead
of d ν². A node's whole state (θ, Adam moments) is a function of its own released c_u's
and of the messages it received, so every message is post-processing of the sequence of
Gaussian releases c_u, adaptively composed. With a temporal factor the release is the MF
mechanism on the stream x_t = S_tᵀ g_t ∈ ℝᵏ; paper 000 Thm 7's bound
Σ X[s,t]⟨d_s, d_t⟩ ≤ Σ|X[s,t]| Δ² only uses ‖d_t‖ ≤ Δ, which holds in any orthonormal
coordinates, so :mod:`edgedp.families.dome.accounting` certifies it with the same sensitivity as
MF-D-SGD. The noise then cancels in coefficient space: with a basis that changes
(``refresh ≥ 1``) the decoded noises live in different subspaces and do not cancel in the
model, so temporal factors are only useful with ``refresh=0``. Whisper / DECOR noise
(R̃ ⊗ I_k across nodes; a ``cross_agent`` section) is certified by
:mod:`edgedp.families.cross.accounting` unchanged: its per-step bounds are coordinate-free and
every node decodes with the same S_t, so the noise cancels in the mixing as in ℝᵈ.
"""

from __future__ import annotations

import math

import numpy as np

from edgedp import bounds, factors, mechanisms, topology
from edgedp.families.dome import accounting as dome
from edgedp.families.dome import sketch
from edgedp.gossip import SketchExtra, StepContext, extra, mix_gathered

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
    "init_state",
    "message_bound",
    "model",
    "receive",
    "send",
]

NAME = "dome"
TRUST_MODEL = (
    "LDP: every message (k floats) is private against an attacker who sees all messages; "
    "the shared sketch bases are public"
)


def check_plan(plan) -> None:
    """A DOME plan carries a sketch section; noise-aware moments need per-step independent noise."""
    spec = getattr(plan, "sketch", None)
    if spec is None:
        raise ValueError("A dome plan needs a sketch section (sketch=SketchSpec(dim=k)).")
    if spec.noise_aware and getattr(plan, "cross_agent", None) is not None:
        raise ValueError(
            "noise_aware moments assume each node's noise has variance ν² per coordinate; "
            "with cross-agent noise it is ν²·R̃_uu (not derived)."
        )
    if spec.basis == "adaptive":
        from edgedp.families.dome import sketch_adaptive

        if getattr(plan, "cross_agent", None) is not None:
            raise ValueError(
                "an adaptive basis sends subtree sums of other nodes' releases along the "
                "spanning tree; the cross-agent accountant's insider and neighbourhood views "
                "do not include them (only the all-messages view would hold): not combined."
            )

        tree = sketch_adaptive.spanning_tree(
            topology.neighbour_lists(plan.mixing_index, plan.mixing_weight)
        )
        need = sketch_adaptive.min_lag(tree.height, spec.refresh)
        if spec.lag < need:
            raise ValueError(
                f"sketch lag={spec.lag} is too short: the spanning tree has height "
                f"{tree.height}, so refresh={spec.refresh} needs lag >= {need}."
            )
    if spec.noise_aware and plan.factor.kind != "identity":
        raise ValueError(
            "noise_aware moments subtract the variance of independent per-step noise; "
            f"they are not derived for the temporal factor {plan.factor.kind!r}."
        )


def init_state(theta0: np.ndarray) -> dict[str, np.ndarray]:
    """θ and Adam's two moments (zero, and unused with ``optimizer="sgd"``)."""
    return {"theta": theta0, "m": np.zeros_like(theta0), "v": np.zeros_like(theta0)}


def _basis(theta: np.ndarray, ctx: StepContext) -> sketch.Basis:
    sk = extra(ctx, SketchExtra)  # dome needs the plan's sketch section
    if sk.sketch.basis == "adaptive":
        if sk.basis is None or sk.release is None:
            raise ValueError("an adaptive dome sketch needs the engine's basis and release.")
        return sk.basis
    return sketch.basis(sk.sketch, ctx.round, theta.shape[-1])


def send(state: dict[str, np.ndarray], ctx: StepContext):
    """Privatize the sketched gradient, take the local step, send Sᵀθ_{t+½} (k floats)."""
    sk = extra(ctx, SketchExtra)
    spec = sk.sketch
    theta = state["theta"]
    S = _basis(theta, ctx)  # noqa: N806 (paper letter)
    mean = sk.mean
    if mean is not None:  # mean removal (Alg. 1 line 9): project g_b − m̄, m̄ is public

        def project(g, mean=mean):
            shape = mean.shape[:-1] + (1,) * (g.ndim - mean.ndim) + mean.shape[-1:]
            return S.project(g - mean.reshape(shape))

        coef = sk.sketch_gradient(theta, project)
    elif spec.clip == "sketch":
        coef = sk.sketch_gradient(theta, S.project)
    else:
        coef = S.project(ctx.gradient(theta))
    noise = ctx.noise()
    if noise is not None:
        coef = coef + noise
    if sk.release is not None:  # the released c_u feeds the adaptive basis' aggregate
        sk.release(coef)
    update = S.lift(coef) / ctx.batch_size
    if mean is not None:  # ĝ = S c / B + m̄ (Alg. 1 line 17)
        update = update + mean.reshape(
            mean.shape[:-1] + (1,) * (theta.ndim - mean.ndim) + mean.shape[-1:]
        )
    m, v = state["m"], state["v"]
    if spec.optimizer == "adam":
        t = ctx.round + 1
        m = spec.beta1 * m + (1.0 - spec.beta1) * update
        second = update * update
        if spec.noise_aware and sk.noise_std > 0:
            a = sk.noise_std / ctx.batch_size
            second = second - (a * a) * S.row_energy()
        v = spec.beta2 * v + (1.0 - spec.beta2) * second
        m_hat = m / (1.0 - spec.beta1**t)
        v_hat = v / (1.0 - spec.beta2**t)
        step = m_hat / np.sqrt(np.maximum(v_hat, spec.floor))
    else:
        step = update
    half = theta - ctx.learning_rate * step
    return {"theta": half, "m": m, "v": v}, S.project(half)


def receive(state, weights, gathered, ctx: StepContext) -> dict[str, np.ndarray]:
    """θ_{t+1} = θ_{t+½} + S(Σ_v W_uv m_v − Sᵀθ_{t+½}), the mixing in fixed order."""
    half = state["theta"]
    S = _basis(half, ctx)  # noqa: N806
    mixed = mix_gathered(weights, gathered)
    theta = half + S.lift(mixed - S.project(half))
    return {"theta": theta, "m": state["m"], "v": state["v"]}


def model(state: dict[str, np.ndarray]) -> np.ndarray:
    return state["theta"]


def message_bound(share, *, dim: int, theta0: np.ndarray) -> tuple[float, ...]:
    """Bounds on the entries of an honest message m = Sᵀθ_{t+½} (and, with an adaptive
    basis, of a spanning-tree frame) (:mod:`edgedp.bounds`).

    ℓ₂ argument, S orthonormal and the same at every node: the decoded update has
    ‖S c / B‖ = ‖c‖/B ≤ g_t = Δ + √k z s_t / B; the step is that update (SGD) or, for Adam,
    m̂/√max(v̂, γ') with |m̂_i| ≤ max_{τ≤t} g_τ, so ‖step‖ ≤ √d max_{τ≤t} g_τ / √γ'. Mixing
    sets θ_u ← (I − SSᵀ)h_u + SSᵀ Σ_v W_uv h_v, so with E = Σ_u ‖θ_u‖² (Jensen, rows of W
    sum to 1) E_{t+1} ≤ c·E_{t+½}, c the largest column sum of W (1 if doubly stochastic),
    and √E_{t+½} ≤ √E_t + √n η ‖step‖. Every entry of m_u is at most ‖h_u‖ ≤ √E_{t+½}.
    A tree frame sums at most n released c's, |c_i| ≤ B_task Δ + z s_t: bounded only when
    the plan fixes the batch size. Mean removal (adaptive bases) adds the lagged mean of
    all nodes' decoded updates; no bound is derived for it (a plan may state one).
    """
    facts = share.network
    spec = share.sketch
    arrays = 2 if spec.basis == sketch.ADAPTIVE else 1
    if facts.stated is not None:
        return (facts.stated,) * arrays
    k, steps, n = spec.dim, share.steps, facts.nodes
    z = bounds.gaussian_tail(bounds.coordinate_budget(facts, steps=steps, width=k))
    noise = facts.noise_std[:steps]
    g = share.clip_norm + math.sqrt(k) * z * noise / bounds.batch_floor(share)
    if spec.optimizer == "adam":
        step = math.sqrt(dim) * np.maximum.accumulate(g) / math.sqrt(spec.floor)
    else:
        step = g
    model = math.inf
    if not spec.mean_removal:
        root, model = math.sqrt(n) * float(np.linalg.norm(theta0)), 0.0
        for t in range(steps):
            half = root + math.sqrt(n) * share.learning_rate * float(step[t])
            model = max(model, half)
            root = math.sqrt(facts.column_sum) * half
        model = bounds.rounded(model)
    if arrays == 1:
        return (model,)
    tree = math.inf
    if share.task.batch_size:
        tree = bounds.rounded(
            n * (share.task.batch_size * share.clip_norm + z * float(noise.max()))
        )
    return (model, tree)


#: The round rules.
RULES = mechanisms.Rules(init_state, send, receive, model, check_plan, message_bound)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "dome",
        RULES,
        family="dome",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=dome.guarantee,
        default_factor=factors.Identity,
        examples={
            "dome": {**mechanisms.GAUSSIAN_EXAMPLE, "sketch_dim": 8},
            "dome-gaussian-adam": {
                **mechanisms.GAUSSIAN_EXAMPLE,
                "sketch_dim": 5,
                "sketch_basis": "gaussian",
                "optimizer": "adam",
            },
        },
    ),
)
