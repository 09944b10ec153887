"""Certification of a plan: its sections fit its mechanism and its accountant agrees.

Every plan is certified when it is made (:func:`edgedp.plan.make_plan`) and again when it
is loaded (:meth:`edgedp.plan.NoisePlan.from_bytes`): the mechanism's registry record
(:mod:`edgedp.mechanisms`) says which sections (Laplace schedule, cross-agent covariance,
sketch) it carries, whether it must add noise, and which adjacency its accountant
certifies; the sensitivity is recomputed from the factor and must equal the stored one.
Where only the T×T Gram matrix gives the exact value, the stored one is checked against
two cheap bounds and, between them, accepted only from a trusted (signed) plan — see the
module docstring of :mod:`edgedp.plan`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from edgedp import mechanisms
from edgedp.accounting import cross_agent as cross_acc
from edgedp.accounting import factor_sensitivity
from edgedp.accounting import laplace as laplace_acc
from edgedp.errors import PlanError

if TYPE_CHECKING:
    from edgedp.plan import NoisePlan

__all__ = ["GAUSSIAN_ADJACENCY", "certify"]

#: The adjacency every Gaussian plan certifies (module docstring of :mod:`edgedp.plan`).
GAUSSIAN_ADJACENCY = "zero-out"


def certify(plan: NoisePlan, *, trusted: bool = False, gram: bool = False) -> None:
    """Refuse ``plan`` (PlanError naming why) unless its accountant re-derives what it states.

    ``trusted``: the plan came signed by the device's planning key (or from the planner),
    so a sensitivity only the Gram matrix can check is accepted between the cheap bounds;
    ``gram``: compute that Gram-matrix value here (planner side, O(T³)).
    """
    if plan.message_bound is not None and not 0 < plan.message_bound < math.inf:
        raise PlanError(f"Expected 0 < message_bound={plan.message_bound!r} < inf.")
    try:
        mech = mechanisms.get(plan.mechanism)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if (plan.laplace is not None) != (mech.noise == "laplace"):
        raise PlanError(
            f"A laplace section belongs exactly to mechanisms {mechanisms.names(noise='laplace')}, "
            f"not {plan.mechanism!r}."
        )
    want = plan.laplace.adjacency if plan.laplace is not None else GAUSSIAN_ADJACENCY
    if plan.adjacency != want:
        raise PlanError(
            f"Plan adjacency {plan.adjacency!r} is not what its accountant certifies ({want!r})."
        )
    _certify_cross_agent(plan)
    if plan.sketch is not None and mech.family != "dome":
        raise PlanError(
            f"A sketch section belongs exactly to 'dome' plans, not {plan.mechanism!r}."
        )
    try:
        mech.rules.check_plan(plan)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if plan.laplace is not None:
        if plan.noise_multiplier != 0.0 or plan.factor.kind != "identity":
            raise PlanError(f"{plan.mechanism} plans carry no Gaussian noise (sigma 0, identity).")
        try:
            laplace_acc.check_task(plan.laplace, clip_norm=plan.clip_norm)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        return
    noisy = mech.noisy
    if noisy and not 0 < plan.noise_multiplier < math.inf:
        raise PlanError(
            f"A {plan.mechanism} plan needs a finite noise_multiplier > 0, got "
            f"{plan.noise_multiplier!r}; a private mechanism never runs without noise "
            "(plan 'dsgd' for a run without privacy)."
        )
    if not noisy and plan.noise_multiplier != 0.0:
        raise PlanError(f"A {plan.mechanism} plan adds no Gaussian noise: noise_multiplier 0.")
    if plan.noise_multiplier == 0.0:
        return
    if plan.cross_agent is not None:
        return
    try:
        fs = factor_sensitivity.sensitivity(plan.factor, plan.participation, steps=plan.steps)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if fs.value is None and gram:
        object.__setattr__(plan, "_gram", True)
        fs = factor_sensitivity.FactorSensitivity(
            _gram_sensitivity(plan.factor, plan.participation, plan.steps), 0.0, 0.0
        )
    if fs.value is not None:
        if not math.isclose(fs.value.value, plan.sensitivity, rel_tol=1e-9, abs_tol=1e-12):
            raise PlanError(
                f"Plan sensitivity {plan.sensitivity!r} does not match the accountant's "
                f"{fs.value.value!r} for its factor; re-create the plan."
            )
        return
    _check_bounds(plan, fs, trusted=trusted)


def _gram_sensitivity(factor, participation, steps: int):
    """The Thm 7 value from the T×T Gram matrix (planner side; O(T³))."""
    from edgedp.accounting import sensitivity as sens_lib

    return sens_lib.sensitivity(factor.strategy(steps), participation)


def _check_bounds(plan: NoisePlan, fs, *, trusted: bool) -> None:
    """Certify a stored sensitivity whose exact value needs the Gram matrix (module docstring)."""
    stated, tol = plan.sensitivity, 1e-9
    size = f"{plan.steps}x{plan.steps}"
    if not stated >= fs.lower * (1.0 - tol):
        raise PlanError(
            f"Plan sensitivity {stated!r} is below {fs.lower!r}, a lower bound for its "
            f"{plan.factor.kind} factor: refusing a plan that understates its noise."
        )
    if not (stated >= fs.upper * (1.0 - tol) or trusted):
        raise PlanError(
            f"Plan sensitivity {stated!r} of its {plan.factor.kind} factor can only be checked "
            f"against its {size} Gram matrix (cheap bounds [{fs.lower:.6g}, {fs.upper:.6g}]); "
            "this device accepts it only in a plan signed by its planning key "
            "(`edgedp plan --sign`, node.toml plan.public_key)."
        )
    object.__setattr__(plan, "_certificate", stated)


def _certify_cross_agent(plan: NoisePlan) -> None:
    spec = plan.cross_agent
    family = mechanisms.get(plan.mechanism).family
    sketched = family == "dome" and spec is not None
    if (
        spec is not None
        and sketched
        and (spec.kind not in mechanisms.names(sketchable=True) or plan.sketch is None)
    ):
        raise PlanError(
            "A dome plan may carry a cross_agent section of kind "
            f"{mechanisms.names(sketchable=True)}, not {spec.kind!r}."
        )
    if not sketched and (spec is not None) != (family == "cross"):
        raise PlanError(
            "A cross_agent section belongs exactly to mechanisms "
            f"{mechanisms.names(family='cross')}, not {plan.mechanism!r}; build them with "
            "edgedp.planning.cross_agent.make_plan."
        )
    if spec is None:
        return
    kind_ok = spec.kind == plan.mechanism or sketched
    if not kind_ok or spec.n != plan.n or plan.factor.kind != "identity":
        raise PlanError(
            f"cross_agent section ({spec.kind}, n={spec.n}) does not fit the plan "
            f"({plan.mechanism}, n={plan.n}, factor {plan.factor.kind})."
        )
    if spec.edge_variance.size not in (0, len(plan.edges)):
        raise PlanError("cross_agent edge_variance must have one entry per plan edge.")
    if plan.steps % spec.gossip_rounds:
        raise PlanError(f"steps={plan.steps} is not a multiple of K={spec.gossip_rounds}.")
    g = cross_acc.guarantee(plan)  # the cross-agent accountant, in ℝᵈ or sketched
    if not math.isfinite(g.sensitivity):
        raise PlanError("cross_agent covariance is not positive definite; re-create the plan.")
    if plan.noise_multiplier > 0 and not math.isclose(
        g.sensitivity, plan.sensitivity, rel_tol=1e-9, abs_tol=1e-12
    ):
        raise PlanError(
            f"Plan sensitivity {plan.sensitivity!r} does not match the accountant's "
            f"{g.sensitivity!r} for its factors; re-create the plan."
        )
