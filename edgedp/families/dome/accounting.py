"""LDP accountant for DOME's sketched messages on a gossip graph (paper 002 §3.4, on gossip).

Node u releases, at each step t, c_t = Σ_b clip(S_tᵀg_b, Δ) + ν (C_local⁻¹ Z)[t] ∈ ℝᵏ (or
S_tᵀ Σ_b clip(g_b, Δ) + ν (C_local⁻¹ Z)[t] with ``clip="model"``) with
S_t ∈ ℝ^{d×k} a public basis with orthonormal columns (:mod:`edgedp.families.dome.sketch`).
Everything else a node sends is post-processing of these releases and of the messages it received
(:mod:`edgedp.families.dome.rules`). Stacked over T steps this is the MF mechanism
C_local⁻¹(C_local X + Z) on the k-dimensional stream x_t of clipped sketched gradients. For
two neighbouring datasets (one example added or removed) the difference rows
d_t = x_t − x_t' are clip(S_tᵀg, Δ) or S_tᵀ clip(g, Δ), of norm ≤ Δ (‖S_tᵀy‖ ≤ ‖y‖), on the
example's participations and vanish elsewhere, so with X = C_localᵀ C_local

    ‖C_local D‖_F² = Σ_{s,t} X[s,t] ⟨d_s, d_t⟩ ≤ Σ_{s,t∈π} |X[s,t]| Δ²,

which is paper 000 Thm 7 with the square — it never uses the coordinates of ℝᵏ, so it holds
although S_t changes with t, and also for adaptively chosen S_t and gradients (C_local
lower-triangular). The guarantee is therefore *exactly* MF-D-SGD's (identity factor:
DP-D-SGD's) for the same σ and participation: μ = 1/σ-GDP per node and example against an
attacker who sees every message. What changes is the noise energy per message:
k ν² instead of d ν².

An adaptive basis (:mod:`edgedp.families.dome.sketch_adaptive`: paper 002 Alg. 2 and mean removal
fed by the spanning-tree sum of the releases c_u) is a function of released values only, hence
post-processing: S_t and m̄ are chosen adaptively, which the bound above already allows (the
mean m̄ is fixed before the round's examples are clipped, so each example still moves
Σ_b clip(S_tᵀ(g_b − m̄), Δ) by at most Δ). Same guarantee.

Not covered: the paper's server-side guarantee with Secure Aggregation (distributed DP,
noise of B clients summed) — there is no server here, every message is released.
Plans with Whisper / DECOR noise in the sketched space are certified by
:mod:`edgedp.families.cross.accounting` (its per-step bounds are coordinate-free likewise).
"""

from __future__ import annotations

from edgedp.accounting import mf
from edgedp.families.cross import accounting as cross_agent

__all__ = ["guarantee", "noise_energy"]


def guarantee(plan, *, steps_done: int | None = None) -> mf.LDPGuarantee:
    """The μ-GDP LDP guarantee of a DOME plan, re-derived from its factor.

    >>> import edgedp_topologies
    >>> from edgedp.accounting.participation import Participation
    >>> from edgedp.plan import make_plan
    >>> from edgedp.families.dome.sketch import SketchSpec
    >>> p = make_plan("dome", edgedp_topologies.parse("ring:6"), steps=20,
    ...               participation=Participation(4, 5), clip_norm=1.0, learning_rate=0.1,
    ...               noise_multiplier=2.0, sketch=SketchSpec(dim=4))
    >>> g = guarantee(p)
    >>> print(f"sens={g.sensitivity:.1f} mu={g.mu:.2f} eps={g.epsilon(1e-5):.4f}")
    sens=2.0 mu=0.50 eps=1.9931
    """
    if getattr(plan, "sketch", None) is None:
        raise ValueError("Expected a dome plan with a sketch section.")
    if getattr(plan, "cross_agent", None) is not None:  # Whisper / DECOR noise in ℝᵏ
        return cross_agent.guarantee(plan, steps_done=steps_done)
    return mf.plan_guarantee(plan, steps_done=steps_done)


def noise_energy(plan, *, model_dim: int) -> dict[str, float]:
    """Expected squared norm of one step's privacy noise, sketched vs. in ℝᵈ.

    E‖S z‖² = k ν² for the sketch (orthonormal S), d ν² for DP-D-SGD's noise at the same σ
    (identity factor; a temporal factor scales both by the same row norm of C_local⁻¹).

    >>> import edgedp_topologies
    >>> from edgedp.accounting.participation import Participation
    >>> from edgedp.plan import make_plan
    >>> from edgedp.families.dome.sketch import SketchSpec
    >>> p = make_plan("dome", edgedp_topologies.parse("ring:6"), steps=20,
    ...               participation=Participation(4, 5), clip_norm=1.0, learning_rate=0.1,
    ...               noise_multiplier=2.0, sketch=SketchSpec(dim=4))
    >>> noise_energy(p, model_dim=400)
    {'sketched': 64.0, 'full': 6400.0, 'ratio': 0.01}
    """
    k = plan.sketch.dim
    nu2 = plan.noise_std**2
    return {"sketched": k * nu2, "full": model_dim * nu2, "ratio": k / model_dim}
