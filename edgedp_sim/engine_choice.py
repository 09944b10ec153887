"""Which engine runs a scenario, and what no engine can run (refused before any work).

The batch engine unless timing matters (:func:`choose_engine`); :func:`check_engine` is
asked by every front end (the runner, trials blocks on workers, sweeps, the Python API and
``edgedp sim``) before it ships or starts anything.
"""

from __future__ import annotations

from dataclasses import replace

from edgedp_sim import round_faults
from edgedp_sim.scenarios import Scenario, ScenarioError

__all__ = ["ENGINES", "check_engine", "choose_engine"]

#: The engine names a caller may give (``auto``: :func:`choose_engine`).
ENGINES = ("auto", "event", "batch")


def choose_engine(sc: Scenario) -> tuple[str, str]:
    """(engine, why): the event engine only when timing matters — a latency that is not
    zero, a finite bandwidth, or crashes/churn without a round clock (``compute_s = 0``);
    the batch engine otherwise, faults included (:mod:`edgedp_sim.round_faults`). An explicit
    ``engine`` key wins."""
    if sc.engine != "auto":
        return sc.engine, "engine key of the scenario"
    net, f = sc.network, sc.faults
    why = round_faults.timing(net)
    if why is not None:
        return "event", why
    if (f.crashes or f.churn_rate_per_s) and not net.compute_s > 0:
        return "event", "crashes need a round clock (network.compute_s > 0) in the batch engine"
    return "batch", "zero latency and infinite bandwidth" + (
        " (faults as round masks)" if round_faults.faulty(f, net) else ""
    )


def check_engine(sc: Scenario, engine_name: str = "auto") -> tuple[str, str]:
    """(engine, why) that runs ``sc``: ``engine_name`` ``"auto"`` (the scenario's ``engine``
    key, else :func:`choose_engine`), ``"batch"`` or ``"event"``. Raises ScenarioError, before
    any work, for what the engine or the plan cannot run: the batch engine where timing
    matters (it has no clock: it would drop the latency or bandwidth without a word), faults
    with an adaptive dome basis, ``reuse-last`` with a refreshed dome sketch, a crash of a
    node the topology lacks, a sensor-fusion task for another n."""
    if engine_name == "auto":
        engine_name, why = choose_engine(sc)
    elif engine_name in ENGINES:
        why = "chosen by the caller"
    else:
        raise ScenarioError(f"unknown engine {engine_name!r}; use auto, event or batch")
    net, f, plan = sc.network, sc.faults, sc.plan
    if engine_name == "batch":
        auto, reason = choose_engine(replace(sc, engine="auto"))
        if auto == "event":
            raise ScenarioError(
                f"the batch engine cannot run this scenario: {reason} (it has no clock); "
                'use --engine event (engine = "event")'
            )
    refusal = round_faults.refusal(plan, f, net)
    if refusal is not None:
        raise ScenarioError(f"faults: {refusal}")
    for c in f.crashes:
        if not 0 <= c.node < plan.n:
            raise ScenarioError(f"faults.crashes: node {c.node} but the topology has {plan.n}")
    if plan.task.dataset.startswith("sensor-fusion:"):
        from edgedp_sim import sensor_fusion

        try:
            n = sensor_fusion.parse_spec(plan.task.dataset)[0]
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None
        if n != plan.n:
            raise ScenarioError(f"task.dataset {plan.task.dataset!r} has {n} sensors, not {plan.n}")
    return engine_name, why
