"""(ε, δ) of the Laplace schedules from a privacy-loss distribution (offline; dp-accounting).

Users compare mechanisms at a common δ, but sr-gt and DPOP are certified in pure ε
(:mod:`edgedp.families.laplace.accounting`). Round t's message is ε_t-DP given everything released
before it (Lemma 4.4), with ε_t = :func:`~edgedp.families.laplace.accounting.release_epsilons`.
Any ε_t-DP mechanism is dominated by randomized response with parameter ε_t (its privacy
loss is ±ε_t with probabilities e^{ε_t}/(1 + e^{ε_t}) and 1/(1 + e^{ε_t})), whatever the
dimension of the message, so the adaptive composition of the rounds is dominated by the
composition of those two-point privacy-loss distributions. dp-accounting's
``from_privacy_parameters`` builds exactly that distribution (pessimistically discretized)
and composes it; the tail of rounds whose ε_t are below ``tail`` × ε is added to ε at the
end (basic composition, conservative). This ignores that the multi-dimensional Laplace
noise is smoother than randomized response: the (ε, δ) printed is valid, not tight.

Offline only (scipy and dp-accounting are allowed here, never on devices).

>>> from edgedp.families.laplace.accounting import LaplaceSchedule
>>> s = LaplaceSchedule(gamma=0.001, beta=1000, q1=0.97, q2=0.99, delta_grad=1.0, epsilon=1.0)
>>> round(epsilon_at(s, 300, delta=1e-6), 2)
0.41
"""

from __future__ import annotations

import math

from edgedp.families.laplace import accounting as laplace

__all__ = ["epsilon_at"]

#: Discretization of the privacy-loss grid (dp-accounting's default).
DISCRETIZATION = 1e-4


def epsilon_at(
    schedule: laplace.LaplaceSchedule,
    rounds: int,
    *,
    delta: float,
    final_release: bool = False,
    tail: float = 1e-6,
) -> float:
    """Smallest ε with (ε, δ)-DP for the messages of ``rounds`` rounds (module docstring).

    Args:
      schedule: the plan's Laplace schedule.
      rounds: K, the rounds whose messages are released.
      delta: δ in (0, 1).
      final_release: also count the noised final model (``epsilon_spent`` likewise).
      tail: rounds with ε_t < tail·ε_K are not composed in the distribution but added.

    Returns:
      ε ≤ the pure ε of the same rounds (``inf`` without noise).

    Raises:
      ImportError: dp-accounting is not installed (``pip install 'edgedp[plan]'``).
    """
    if not 0 < delta < 1:
        raise ValueError(f"Expected 0 < delta={delta!r} < 1.")
    from dp_accounting.pld import common, privacy_loss_distribution

    terms = laplace.release_epsilons(schedule, rounds + 1 if final_release else rounds)
    pure = math.fsum(terms)
    if pure == 0 or not math.isfinite(pure):
        return pure
    pld, rest = None, 0.0
    for eps_t in sorted(terms, reverse=True):
        if eps_t < tail * pure:
            rest += eps_t
            continue
        step = privacy_loss_distribution.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps_t, 0.0),
            value_discretization_interval=DISCRETIZATION,
        )
        pld = step if pld is None else pld.compose(step)
    composed = pld.get_epsilon_for_delta(delta) if pld is not None else 0.0
    return min(pure, max(0.0, composed) + rest)
