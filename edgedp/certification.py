"""Certification of a plan: load it, verify its hash and signature, re-derive its guarantee.

Every plan is certified when it is made (:func:`edgedp.plan.make_plan`) and again when it
is loaded (:func:`load`, behind :meth:`edgedp.plan.NoisePlan.from_bytes`). Its sections fit
its two axes by construction (:mod:`edgedp.plan_axes`); the mechanism's registry record
(:mod:`edgedp.mechanisms`) says whether it must add noise and which adjacency its
accountant certifies; the sensitivity is recomputed from the factor and must equal the
stored one. Devices do it without T×T matrices (:mod:`edgedp.accounting.factor_sensitivity`:
O(T) or O(T·p²) for identity, AntiPGD, banded and BLT factors). When the exact value needs
the T×T Gram matrix (a dense C with negative entries, or a signed BLT, beyond
``factor_sensitivity.DENSE_STEPS``) the device checks the stored value against two cheap
bounds on it: below the lower bound it is refused; at or above the upper bound it is
accepted (it is certainly enough noise); in between it is accepted only inside a plan
signed by the device's trusted planning key, whose planner computed it from the Gram
matrix (:func:`edgedp.plan.make_plan`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from edgedp import _codec, footprint, mechanisms, signing
from edgedp.accounting import factor_sensitivity
from edgedp.errors import PlanError
from edgedp.families.cross import accounting as cross_acc
from edgedp.families.laplace import accounting as laplace_acc

#: A plan record: :class:`edgedp.plan.NoisePlan`, which imports this module (so this module
#: reads the record's fields and never imports it).
NoisePlan = Any

__all__ = ["DEFAULT_DELTA", "GAUSSIAN_ADJACENCY", "PLAN_VERSION", "certify", "load"]

#: The plan format this module reads and :class:`~edgedp.plan.NoisePlan` writes.
PLAN_VERSION = 3

#: The δ a plan is reported at when it was planned without one (:mod:`edgedp.plan`).
DEFAULT_DELTA = 1e-6

#: The adjacency every Gaussian plan certifies (module docstring of :mod:`edgedp.plan`).
GAUSSIAN_ADJACENCY = "zero-out"


def load(
    data: bytes,
    from_dict: Callable[[dict[str, Any]], NoisePlan],
    *,
    trusted_key: str | None = None,
    max_memory: int | None = None,
    gram: bool = False,
) -> NoisePlan:
    """Decode a plan file, check version, hash and signature, size, rebuild, and re-certify.

    A signature, when present, must verify; with ``trusted_key`` (the operator's planning
    public key, hex) the plan must be signed by it (PlanError otherwise). With
    ``max_memory`` (bytes) a plan whose load would need more is refused
    (:class:`edgedp.footprint.PlanTooLargeError`) before its factor is built. ``gram``
    (planner-side tools) recomputes a sensitivity that needs the T×T Gram matrix
    instead of checking it by bounds and signature. ``from_dict`` rebuilds the record
    from the decoded fields (:meth:`edgedp.plan.NoisePlan.from_dict`).
    """
    footprint.check(2 * len(data), max_memory, f"a plan file of {len(data):,} bytes")
    try:
        outer = _codec.decode(data)
        d = outer["plan"]
        stored_hash = outer["hash"]
        envelope = outer.get("signature")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PlanError(f"Not a NoisePlan file: {exc}") from None
    if envelope is not None or trusted_key is not None:
        if envelope is None:
            raise PlanError(
                "The plan is not signed, but this device trusts only plans signed by its "
                "planning key (sign it with `edgedp sign PLAN --key planner.key`)."
            )
        try:
            signing.verify(envelope, str(stored_hash), trusted_key)
        except signing.SignatureError as exc:
            raise PlanError(str(exc)) from None
    if d.get("version") == 1:
        raise PlanError(
            "Plan version 1 predates stated adjacencies and the corrected Laplace noise "
            "scale; re-create it with `edgedp plan` (same arguments)."
        )
    if d.get("version") == 2:
        raise PlanError(
            "Plan version 2 does not record the delta its epsilon is reported at (it was "
            "read at delta 1e-6 whatever delta it was planned for); re-create it with "
            "`edgedp plan` (same arguments), which records it."
        )
    if d.get("version") != PLAN_VERSION:
        raise PlanError(
            f"Plan version {d.get('version')!r} is not supported (expected {PLAN_VERSION})."
        )
    try:
        needed, what = footprint.plan_bytes(d, len(data))
    except (TypeError, ValueError, AttributeError) as exc:
        raise PlanError(f"Malformed NoisePlan field: {exc}") from None
    footprint.check(needed, max_memory, what)
    try:
        plan = from_dict(d)
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"Malformed NoisePlan field: {exc}") from None
    if plan.plan_hash != stored_hash:
        raise PlanError("NoisePlan hash mismatch: the file was modified or corrupted.")
    certify(plan, trusted=trusted_key is not None, gram=gram)
    if mechanisms.get(plan.mechanism).noisy and not plan.private:
        raise PlanError(
            f"This {plan.mechanism} plan adds no noise (noise_multiplier 0 or epsilon inf): "
            "a private mechanism never runs without noise; plan 'dsgd' for a run "
            "without privacy."
        )
    return plan


def certify(plan: NoisePlan, *, trusted: bool = False, gram: bool = False) -> None:
    """Refuse ``plan`` (PlanError naming why) unless its accountant re-derives what it states.

    ``trusted``: the plan came signed by the device's planning key (or from the planner),
    so a sensitivity only the Gram matrix can check is accepted between the cheap bounds;
    ``gram``: compute that Gram-matrix value here (planner side, O(T³)). A recorded
    ``target_epsilon`` must be what the accountant certifies at the plan's ``delta``.
    """
    _certify_noise(plan, trusted=trusted, gram=gram)
    _certify_target(plan)


def _certify_target(plan: NoisePlan) -> None:
    """The recorded calibration target (ε at the plan's δ) is what the accountant gives."""
    target = plan.target_epsilon
    if target is None:
        return
    if plan.laplace is not None or plan.noise_multiplier == 0.0:
        raise PlanError(
            f"A {plan.mechanism} plan records no target_epsilon (Laplace plans carry it in "
            "their schedule; plans without noise have none)."
        )
    eps = plan.guarantee().epsilon(plan.delta)
    if not eps <= target * (1.0 + 1e-9):
        raise PlanError(
            f"Plan target_epsilon {target!r} at delta {plan.delta:g} is below the "
            f"accountant's epsilon {eps!r} for its noise; re-create the plan."
        )


def _certify_noise(plan: NoisePlan, *, trusted: bool, gram: bool) -> None:
    """The sections, the noise and the sensitivity (:func:`certify`)."""
    if plan.message_bound is not None and not 0 < plan.message_bound < math.inf:
        raise PlanError(f"Expected 0 < message_bound={plan.message_bound!r} < inf.")
    try:
        mech = mechanisms.get(plan.mechanism)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if not (isinstance(plan.delta, float) and 0 < plan.delta < 1):
        raise PlanError(f"Plan delta {plan.delta!r} must be in (0, 1).")
    want = plan.laplace.adjacency if plan.laplace is not None else GAUSSIAN_ADJACENCY
    if plan.adjacency != want:
        raise PlanError(
            f"Plan adjacency {plan.adjacency!r} is not what its accountant certifies ({want!r})."
        )
    _certify_cross_agent(plan)
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
    spec = plan.cross_agent  # fits the plan's axes (edgedp.plan_axes.axes)
    if spec is None:
        return
    sketched = plan.message_kind.sketched
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
