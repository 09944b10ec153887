"""What ``edgedp plan`` and ``edgedp account`` report about a plan (one dict per plan).

:func:`plan_report` is the guarantee (μ, ε at δ, replace-one ε, the trust model; per trust
model for cross-agent plans; the Laplace fields for sr-gt/dpop), :func:`loss_ratio` the
expected loss relative to DP-D-SGD at the same guarantee, :func:`dome_report` a sketched
plan's message size and noise energy, :func:`step_size_report` the step size and how it
was chosen.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "LONG_HORIZON_NO_RATIO",
    "dome_report",
    "laplace_report",
    "loss_ratio",
    "plan_report",
    "step_size_report",
]

#: Why a long-horizon plan has no loss ratio to DP-D-SGD (its factor is not Toeplitz, or its
#: sensitivity only bounded, so the ratio would need T × T matrices).
LONG_HORIZON_NO_RATIO = (
    "loss_ratio_to_dp_dsgd (this factor is not Toeplitz with an exact sensitivity: the "
    "ratio needs T x T matrices, computed up to T = {limit})"
)


def plan_report(p, delta: float | None = None, steps_done: int | None = None) -> dict[str, Any]:
    """The certified guarantee of plan ``p`` after ``steps_done`` steps (default all), ε at
    ``delta`` (default the plan's own δ), with the attacker it holds against."""
    delta = p.delta if delta is None else delta
    if p.laplace is not None:
        return laplace_report(p, steps_done, delta=delta)
    if p.noise_multiplier > 0:
        from edgedp.accounting import gdp

        g = p.guarantee(steps_done=steps_done)
        mu, eps, exact = g.mu, g.epsilon(delta), g.exact
        eps_replace = gdp.epsilon(p.replace_one_factor * mu, delta=delta)
    else:
        mu, eps, exact, eps_replace = math.inf, math.inf, True, math.inf
    payload = {
        "mechanism": p.mechanism,
        "topology": p.topology,
        "n": p.n,
        "steps": p.steps,
        "participation": f"{p.participation.k},{p.participation.b}",
        "noise_multiplier": p.noise_multiplier,
        "sensitivity": p.sensitivity,
        "sensitivity_exact": exact,
        "noise_std": p.noise_std,
        "clip_norm": p.clip_norm,
        "adjacency": p.adjacency,
        "mu": mu,
        "epsilon": eps,
        "delta": delta,
        "epsilon_replace_one": eps_replace,
        "attacker": _attacker(p),
        "trust_model": _trust(p),
        **({"target_epsilon": p.target_epsilon} if p.target_epsilon is not None else {}),
        "plan_hash": p.plan_hash,
    }
    if p.cross_agent is not None and p.noise_multiplier > 0:
        from edgedp.families.cross import accounting as cross_acc

        report = cross_acc.trust_report(p, delta=delta, steps_done=steps_done)
        payload.update({f"epsilon_{name}": value for name, value in report.items()})
    return payload


def _trust(p) -> str:
    from edgedp import mechanisms

    return mechanisms.get(p.mechanism).trust_model


def _attacker(p) -> str:
    from edgedp import mechanisms

    return mechanisms.get(p.mechanism).attacker


def loss_ratio(p, gram=None) -> float | None:
    """The plan's expected loss over DP-D-SGD's at the same guarantee (1 for DP-D-SGD).

    ``gram``: ``(W, H)``, the MAFALDA workload Gram H of W (or its
    :class:`~edgedp.planning.workload.SpectralWorkload`) already computed for planning (used
    when W is the plan's mixing matrix). Above ``workload.DENSE_MAX_STEPS`` steps the ratio
    is computed without T × T matrices; None there for a factor that is not Toeplitz
    (:data:`LONG_HORIZON_NO_RATIO`)."""
    import numpy as np

    from edgedp import factors
    from edgedp.families.mf import factorization
    from edgedp.planning import workload

    if isinstance(p.factor, factors.Identity):  # C = I is DP-D-SGD: the ratio is 1 exactly
        return 1.0
    W = p.mixing_matrix()  # noqa: N806
    H = gram[1] if gram is not None and np.array_equal(gram[0], W) else None  # noqa: N806
    if p.steps > workload.DENSE_MAX_STEPS:
        return factorization.relative_loss_compact(
            p.factor,
            W,
            participation=p.participation,
            steps=p.steps,
            spectral=H if isinstance(H, workload.SpectralWorkload) else None,
        )
    return factorization.relative_loss(
        p.factor.strategy(p.steps), W, participation=p.participation, workload_gram=H
    )


def step_size_report(p) -> dict[str, Any]:
    """The plan's step size and how it was chosen (its ``step_size`` section, or given)."""
    from edgedp import step_size

    choice = p.step_size
    out: dict[str, Any] = {
        "learning_rate": p.learning_rate,
        "step_size": step_size.line(p.learning_rate, choice, private=p.private),
        "step_size_method": "given" if choice is None else choice.method,
    }
    if choice is not None:
        out.update({f"step_size_{k}": v for k, v in choice.inputs.items()})
    return out


def dome_report(p, model_dim: int) -> dict[str, Any]:
    """Message size and noise energy of a dome plan (paper 002 Lemma 3.1: k ν² per step
    instead of DP-D-SGD's d ν²)."""
    from edgedp.families.dome import accounting as dome_acc

    energy = dome_acc.noise_energy(p, model_dim=model_dim)
    return {
        "sketch_dim": p.sketch.dim,
        "model_dim": model_dim,
        "sketch_basis": p.sketch.basis,
        # adaptive: a k-float frame up and one down each spanning-tree edge per round
        **(
            {"sketch_lag": p.sketch.lag, "aggregate_floats_per_round": 2 * (p.n - 1) * p.sketch.dim}
            if p.sketch.basis == "adaptive"
            else {}
        ),
        "payload_bytes_per_message": 8 * p.sketch.dim,
        "payload_ratio_to_dp_dsgd": p.sketch.dim / model_dim,
        "noise_energy_ratio_to_dp_dsgd": energy["ratio"],
    }


def laplace_report(
    p, steps_done: int | None = None, *, delta: float | None = None
) -> dict[str, Any]:
    """An sr-gt/dpop plan's pure ε spent by the messages of ``steps_done`` rounds, with the
    final release, over the infinite horizon, under replace-one, and (ε, δ) from a PLD at
    ``delta`` (default the plan's δ)."""
    from edgedp.families.laplace import accounting as laplace

    delta = p.delta if delta is None else delta
    s = p.laplace
    done = p.steps if steps_done is None else steps_done
    spent = laplace.epsilon_spent(s, done)
    final = laplace.epsilon_spent(s, done, final_release=True)
    return {
        "mechanism": p.mechanism,
        "topology": p.topology,
        "n": p.n,
        "steps": p.steps,
        "gamma": s.gamma,
        "beta": s.beta,
        "q1": s.q1,
        "q2": s.q2,
        "delta_grad": s.delta_grad,
        "adjacency": s.adjacency,
        "clip_norm": p.clip_norm,
        "first_noise_scale": s.noise_scale(0),
        "last_noise_scale": s.noise_scale(p.steps - 1),
        "last_stepsize": s.stepsize(p.steps - 1),
        "epsilon_spent": spent,
        "epsilon_with_final_release": final,
        "epsilon": laplace.epsilon(s),
        "epsilon_replace_one": laplace.replace_one_epsilon(s, laplace.epsilon(s)),
        "delta": 0.0,
        "attacker": _attacker(p),
        **_pld_fields(s, done, delta),
        "final_model": (
            "the state x(K) carries one un-noised gradient step and is not covered; "
            "edgedp-agent publishes the noised release x(K) + Lap(nu_{K+1}) "
            "(epsilon_with_final_release)"
        ),
        "trust_model": _trust(p),
        "plan_hash": p.plan_hash,
    }


def _pld_fields(schedule, rounds: int, delta: float) -> dict[str, Any]:
    """(ε, δ) of the messages and final release from a privacy-loss distribution."""
    missing = {"pld_epsilon": None, "pld_note": "pip install 'edgedp[plan]' for (epsilon, delta)"}
    try:
        from edgedp.families.laplace import pld as laplace_pld

        eps = laplace_pld.epsilon_at(schedule, rounds, delta=delta, final_release=True)
    except ImportError:  # a device-only install has no dp-accounting
        return missing
    return {
        "pld_epsilon": eps,
        "pld_delta": delta,
        "pld_note": "messages and final release; randomized-response dominating pairs "
        "composed by dp-accounting's PLD (valid for any dimension, not tight)",
    }
