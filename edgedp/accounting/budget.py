"""What a device's privacy budget is compared with: the ε of its whole plan, per adversary.

A device's ``run.max_epsilon`` must bind the strongest adversary it faces (DESIGN §6):

* Gaussian plans with node-private noise (DP-D-SGD, MF-D-SGD, DOME, Zip-DL, Muffliato): the
  LDP guarantee holds against every adversary (all messages seen, no secret known).
* Whisper / DECOR: the eavesdropper's ε is the plan's, but a curious neighbour holds the
  device's pairwise secrets (and, for shared-seed forms, the seed), and a colluding
  neighbourhood more (:func:`edgedp.families.cross.accounting.trust_report`). ``worst`` is the
  largest of the three.
* sr-gt / DPOP: pure ε against every adversary, counting the noised final release the
  device publishes (:func:`edgedp.families.laplace.accounting.epsilon_spent`).

All numbers are under the plan's own adjacency (``plan.adjacency``) and, unless the device
names another δ (``run.delta``), at the plan's own δ (``plan.delta``). Numpy only: devices
run it.
"""

from __future__ import annotations

import math

from edgedp import mechanisms
from edgedp.families.cross import accounting as cross_acc
from edgedp.families.laplace import accounting as laplace

__all__ = ["ADVERSARIES", "device_epsilon"]

#: ``worst`` or one named adversary (Whisper/DECOR trust models).
ADVERSARIES = ("worst", "eavesdropper", "insider", "neighbourhood")


def device_epsilon(
    plan, *, delta: float | None = None, adversary: str = "worst"
) -> tuple[float, str]:
    """(ε, description) of the whole plan against ``adversary`` at ``delta`` (default the
    plan's δ; ValueError outside (0, 1)).

    Returns ``inf`` for a plan without noise. The description names the adversary the number
    binds, the adjacency and δ, for the device's log.
    """
    if adversary not in ADVERSARIES:
        raise ValueError(f"Expected adversary={adversary!r} in {ADVERSARIES}.")
    delta = plan.delta if delta is None else delta
    if not 0 < delta < 1:
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    adj = plan.adjacency
    if plan.laplace is not None:
        eps = laplace.epsilon_spent(plan.laplace, plan.steps, final_release=True)
        return eps, f"every adversary (pure epsilon, final release included; {adj})"
    if plan.noise_multiplier == 0:
        return math.inf, "no noise: no guarantee"
    spec = plan.cross_agent
    if spec is None or not mechanisms.get(spec.kind).has("correlated"):
        eps = plan.guarantee().epsilon(delta)
        return eps, f"every adversary (LDP; {adj}, delta={delta:g})"
    report = cross_acc.trust_report(plan, delta=delta)
    if adversary == "worst":
        name = max(report, key=lambda k: report[k])
        return report[name], f"worst adversary: {name} ({adj}, delta={delta:g})"
    return report[adversary], f"{adversary} as configured ({adj}, delta={delta:g})"
