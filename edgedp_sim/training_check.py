"""What a run's outputs say about its step size: the protocol line and the warning when a
run ends worse than it started.

:func:`step_size_line` states where a plan's step size came from (given, the planner's
noise-budget rule, the noiseless default, or tuned) and what that assumed about privacy.
:func:`worse_than_start` is the warning ``edgedp sim run``, ``edgedp sim sweep``,
:func:`edgedp.simulate` and the demo attach to a run whose final test loss is above the
starting model's: it names the likely cause — a step size too large for the noise, with
the expected loss the final models' noise alone costs — and the fix.
:func:`comparison_protocol` is the sentence printed wherever mechanisms are compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from edgedp import step_size

__all__ = [
    "comparison_protocol",
    "rule_for",
    "step_size_entry",
    "step_size_line",
    "worse_than_start",
]


def step_size_line(plan) -> str:
    """Where ``plan``'s step size came from, in one line."""
    return step_size.line(plan.learning_rate, plan.step_size, private=plan.private)


def rule_for(plan, *, dim: int, local_size: int, dropout: float = 0.0):
    """(rule step size, s²) for ``plan`` with nodes sitting out rounds with probability
    ``dropout`` (:func:`edgedp.planning.step_rule.choose`), or (None, None) for plans the
    rule does not cover (noiseless, Laplace, no public bound)."""
    from edgedp.planning import step_rule

    if plan.laplace is not None or not plan.private:
        return None, None
    eta, choice = step_rule.choose(plan, dim=dim, local_size=local_size, dropout=dropout)
    if choice.method != "noise-budget":
        return None, None
    return eta, float(choice.inputs["noise_variance"])


def worse_than_start(
    plan,
    start_loss: float,
    final_loss: float,
    *,
    dim: int,
    local_size: int,
    worse_trials: int | None = None,
    trials: int = 1,
    skipped_rounds: int = 0,
    dropout: float = 0.0,
) -> str | None:
    """The warning for a run whose final test loss is above its start, else None.

    ``start_loss``/``final_loss`` are the test loss (mean over nodes, and over trials when
    ``trials`` > 1) at round 0 and at the end; ``worse_trials`` how many trials ended above
    their own start; ``skipped_rounds`` the rounds nodes sat out (dropouts, crashes) and
    ``dropout`` the run's dropout probability (the noise is measured under it).
    """
    if math.isfinite(final_loss) and final_loss <= start_loss:
        return None
    eta = plan.learning_rate
    head = f"the final test loss {final_loss:.4g} is above the starting model's {start_loss:.4g}"
    if trials > 1 and worse_trials is not None:
        head += f" ({worse_trials} of {trials} trials)"
    if plan.laplace is not None:
        return (
            f"{head}. Likely cause: the Laplace schedule's stepsizes (gamma={eta:g}, q1) are "
            "too large for its noise; fix: `edgedp tune sr-gt` for gamma, beta, q1, q2."
        )
    if not plan.private:
        return (
            f"{head}. Likely cause: the step size {eta:g} is too large for this task (the plan "
            "adds no noise); fix: lower the learning rate."
        )
    rule, s2 = rule_for(plan, dim=dim, local_size=local_size, dropout=dropout)
    cause = f"the step size {eta:g} is too large for the noise"
    if s2 is not None:
        from edgedp.planning import step_rule

        scale = step_rule.task_scale(plan.task, dim)
        assert not isinstance(scale, str)  # the rule covered the plan
        cost = 0.5 * eta**2 * s2 * scale.curvature_trace
        cause += (
            f": the final models' noise alone costs up to {cost:.3g} in expected loss "
            f"(1/2 eta^2 s^2 tr H, s^2 = {s2:.3g}"
            + (f" with {dropout:.0%} dropouts)" if dropout else ")")
        )
    if skipped_rounds and (plan.factor.kind != "identity" or plan.cross_agent is not None):
        cause += (
            f"; {skipped_rounds} rounds were sat out, and a node that sits a round out "
            "discards that round's noise, so the noise that was to cancel it (over rounds or "
            "across agents) stays in the models: under dropouts prefer noise that needs no "
            "cancelling (dp-dsgd)"
        )
    where = " on this network" if dropout else ""
    if rule is not None and rule < 0.99 * eta:
        fix = (
            f"a smaller step size: the planner's noise-budget rule gives {rule:g} for this "
            f"plan{where} (omit the learning rate"
            + (" in a scenario file with these faults)" if dropout else ")")
            + ", or run `edgedp tune step-size`"
        )
    elif rule is not None:
        fix = (
            "the noise-budget rule assumed training can gain the whole starting loss; run "
            "`edgedp tune step-size` on a public proxy task, or set a smaller learning rate "
            f"(e.g. {eta / 2:g})"
        )
    else:
        fix = "run `edgedp tune step-size`, or set a smaller learning rate"
    return f"{head}. Likely cause: {cause}. Fix: {fix}."


def step_size_entry(plan) -> dict:
    """What :func:`comparison_protocol` reads of a plan (also kept in run summaries)."""
    choice = plan.step_size
    return {
        "mechanism": plan.mechanism,
        "learning_rate": plan.learning_rate,
        "private": bool(plan.private and plan.laplace is None),
        "step_size_method": "given" if choice is None else choice.method,
        "step_size_protocol": None if choice is None else choice.inputs.get("protocol"),
    }


def comparison_protocol(entries: Sequence[Mapping]) -> str:
    """How the step sizes of compared runs were set: each mechanism its own (rule or tuned,
    the default protocol) or one shared value — printed next to every comparison.

    ``entries``: :func:`step_size_entry` of each plan, or run summaries holding the same
    keys (one per mechanism is enough; repeats are merged).
    """
    seen: dict[str, Mapping] = {}
    for e in entries:
        seen.setdefault(str(e["mechanism"]), e)
    private = [e for e in seen.values() if e["private"]]
    each = ", ".join(f"{m} {e['learning_rate']:g}" for m, e in seen.items() if e["private"])
    if not private:
        return "comparison protocol: no private mechanism (step sizes as given)"
    methods = {e["step_size_method"] for e in private}
    rates = {e["learning_rate"] for e in private}
    if methods == {"noise-budget"}:
        how = "each private mechanism at its own step size from the planner's noise-budget rule"
    elif methods == {"tuned"}:
        if {e["step_size_protocol"] for e in private} == {"shared"}:
            how = "one shared step size, tuned in simulation for all mechanisms together"
        else:
            how = "each private mechanism at its own step size, tuned in simulation"
    elif methods == {"given"} and len(rates) == 1:
        how = "one shared step size given for every mechanism (not tuned per mechanism)"
    else:
        how = (
            "step sizes set per plan ("
            + ", ".join(f"{e['mechanism']} {e['step_size_method']}" for e in private)
            + ")"
        )
    return f"comparison protocol: {how}: {each}"
