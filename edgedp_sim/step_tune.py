"""``edgedp tune step-size``: search the step size in simulation, per mechanism.

Protocol (printed with the result and recorded in every plan it writes):

* **data** — by default a *public proxy*: a synthetic task of the private task's shape
  (:func:`public_proxy`: the same features, training examples, nodes and partition, drawn
  from public randomness), so no private example is read and the step size costs no
  privacy. ``proxy=NAME`` tunes on another named dataset the user declares public;
  ``proxy="task"`` on the task's own data — then the step size depends on the private
  data, its selection is not covered by the plan's ε and the test split that scores it is
  no longer held out: the output says so, and the plan records it.
* **runs** — the scenario's topology, privacy and network (its engine; ``engine="batch"``
  drops latency and bandwidth to run as round masks, and says so), each step size over
  ``seeds`` noise draws (the plan's trials 0..seeds-1).
* **grid** — factors of √2 around the planner's noise-budget rule (:mod:`edgedp.planning.
  step_rule`), nine values, extended by up to two values at an edge that wins; a run that
  diverges scores ∞.
* **criterion** — the mean final test loss over the seeds.
* **comparison** — ``protocol="own"`` (default): each mechanism at the step size best for
  it; ``"shared"``: one step size for all, the one minimising the mean over mechanisms of
  final loss / starting loss.

:func:`tune` returns the report; :func:`tuned_plan` builds a mechanism's plan on the real
task with the tuned step size and its ``step_size`` section.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgedp import mechanisms
from edgedp.errors import NonFiniteMessageError
from edgedp.planning import request as request_mod
from edgedp.step_size import StepSizeChoice
from edgedp_sim import datasets, scenarios

__all__ = ["PROTOCOLS", "Tuned", "public_proxy", "tune", "tuned_plan"]

PROTOCOLS = ("own", "shared")
#: The grid: CENTRE * RATIO**i for i in -HALF..HALF, then up to EXTEND more at a winning edge.
RATIO, HALF, EXTEND = math.sqrt(2.0), 4, 2


@dataclass(frozen=True, slots=True)
class Tuned:
    """One mechanism's search: the losses (mean and spread over seeds) at each step size."""

    mechanism: str
    rule: float | None  # the noise-budget rule's step size on the proxy (None: no rule)
    start_loss: float
    grid: tuple[float, ...]
    loss: tuple[float, ...]
    loss_std: tuple[float, ...]
    best: float  # the step size chosen under the protocol


def public_proxy(task, nodes: int) -> str:
    """The synthetic dataset of ``task``'s shape (features, training examples) for a public
    proxy; ValueError when there is none (classification with more than two classes)."""
    data = datasets.load(task.dataset, seed=0)
    f, train = data.x_train.shape[1], len(data.y_train)
    if data.task == "logistic":
        kind = "logistic"
    elif data.task == "linear":
        kind = "regression"  # standardised targets, like the bundled regression sets
    else:
        raise ValueError(
            f"no synthetic proxy for {task.dataset} ({data.task}, {data.classes} classes): name "
            "a public dataset (--proxy NAME) or tune on the task's data (--proxy task)"
        )
    total = math.ceil(train / 0.8) - 3
    while total - int(round(0.2 * total)) != train:  # the 80/20 split of datasets.load
        total += 1
    return f"synthetic-{kind}:{f}:{total}"


def _assumption(proxy: str, dataset: str, public: bool) -> str:
    if proxy == dataset:
        return (
            f"tuned on the private task's own data ({dataset}; its test split scored the step "
            "sizes): the step size depends on the private data, its selection is NOT covered "
            "by the plan's epsilon, and the test split is no longer held out; the tuned step "
            "size is treated as public"
        )
    if public:
        return (
            f"tuned on {proxy}, a synthetic task of the private task's shape drawn from "
            "public randomness; no private example was read: it costs no privacy"
        )
    return (
        f"tuned on {proxy}, declared public by the user; no example of {dataset} was read "
        "(if it is not public, the selection is not covered by epsilon)"
    )


def _raw_for(raw: dict, mechanism: str, dataset: str, learning_rate: float | None) -> dict:
    """The scenario tables with ``mechanism`` (its family's privacy options only), the
    dataset and the step size (None: the planner's rule)."""
    out = copy.deepcopy(raw)
    priv = out.setdefault("privacy", {})
    family = mechanisms.get(mechanism).family
    own = {
        *request_mod.SHARED_OPTIONS,
        *request_mod.FAMILY_OPTIONS[family],
        "mechanism",
        "seed",
        "target_epsilon",
    }
    for key in [k for k in priv if k not in own]:
        del priv[key]
    priv["mechanism"] = mechanism
    priv.pop("learning_rate", None)
    if learning_rate is not None:
        priv["learning_rate"] = learning_rate
    out.setdefault("task", {})["dataset"] = dataset
    return out


def _untimed(raw: dict) -> dict:
    out = copy.deepcopy(raw)
    net = out.get("network", {})
    for key in ("latency", "bandwidth_mbps"):
        net.pop(key, None)
    out["engine"] = "batch"
    return out


def tune(
    raw: dict,
    *,
    base: Path = Path("."),
    compare: Sequence[str] | None = None,
    seeds: int = 3,
    proxy: str = "public",
    protocol: str = "own",
    engine: str = "auto",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Search the step size of each mechanism (module docstring); returns the report.

    ``raw``: a scenario's tables with ``[topology]``, ``[task]`` and ``[privacy]`` (not a
    plan file: a plan fixes its step size). ``compare``: the mechanisms (default the
    scenario's own).
    ``proxy``: ``"public"``, ``"task"`` or a dataset name. ``engine``: ``"auto"`` (the
    scenario's), ``"batch"`` (latency and bandwidth dropped) or ``"event"``.
    """
    _check_options(raw, protocol=protocol, engine=engine, seeds=seeds)
    base_sc = scenarios.parse(raw, base=base)  # checks every table before any run
    task = base_sc.plan.task
    mechs = tuple(compare or (base_sc.plan.mechanism,))
    _check_mechanisms(mechs)
    data_name, public = _proxy_dataset(proxy, task, base_sc.plan.n)
    run_raw = _untimed(raw) if engine == "batch" else raw
    run_engine = "auto" if engine == "batch" else engine
    # one plan per mechanism on the proxy (the rule's step size); the grid only changes η
    proxies = {m: scenarios.parse(_raw_for(run_raw, m, data_name, None), base=base) for m in mechs}
    search = _Search(proxies, seeds=seeds, engine=run_engine, say=progress or (lambda line: None))
    centres = {m: search.rules[m] or _fallback_centre() for m in mechs}
    if protocol == "shared":
        common = math.exp(float(np.mean([math.log(c) for c in centres.values()])))
        centres = dict.fromkeys(mechs, common)
    for m in mechs:
        search.say(f"tuning {m} on {data_name} ({seeds} seeds per step size) ...")
        for i in range(-HALF, HALF + 1):
            search.evaluate(m, centres[m] * RATIO**i)
        if protocol == "own":
            _extend(search.curves[m], lambda eta, m=m: search.evaluate(m, eta))
    best = search.shared_best() if protocol == "shared" else search.own_best()
    engine_note = (
        "the batch engine with the scenario's latency and bandwidth dropped (dropouts and "
        "loss as round masks)"
        if engine == "batch"
        else f"the {' and '.join(sorted(search.engines)) or run_engine} engine on the "
        "scenario's network"
    )
    how = (
        "each mechanism at its own best step size"
        if protocol == "own"
        else "one step size shared by all mechanisms (best mean of final / starting loss)"
    )
    return {
        "scenario": base_sc.name,
        "dataset": task.dataset,
        "proxy": data_name,
        "assumption": _assumption(data_name, task.dataset, public),
        "protocol": protocol,
        "comparison_protocol": f"comparison protocol: {how}",
        "engine": engine_note,
        "seeds": seeds,
        "criterion": f"mean final test loss over {seeds} seeds on {data_name}'s test split",
        "grid": f"factors of sqrt(2) around the noise-budget rule ({2 * HALF + 1} values, "
        f"extended by up to {EXTEND} at a winning edge)",
        "results": [_row(t) for t in search.tuned(best)],
    }


def _check_options(raw: dict, *, protocol: str, engine: str, seeds: int) -> None:
    """Refuse what :func:`tune` cannot search, before anything is parsed or run."""
    if "plan" in raw:
        raise scenarios.ScenarioError(
            "tune needs a scenario with [topology], [task] and [privacy] tables; a plan file "
            "fixes its step size"
        )
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}; expected one of {PROTOCOLS}")
    if engine not in ("auto", "batch", "event"):
        raise ValueError(f"engine={engine!r}; expected auto, batch or event")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"Expected seeds={seeds!r} to be an integer >= 1.")


def _check_mechanisms(mechs: Sequence[str]) -> None:
    for m in mechs:
        mech = mechanisms.get(m)
        if not mech.noisy or mech.noise != "gaussian":
            raise ValueError(
                f"tune step-size is for Gaussian private mechanisms; {m!r} is not one "
                "(sr-gt/dpop: `edgedp tune sr-gt`)"
            )


def _proxy_dataset(proxy: str, task, nodes: int) -> tuple[str, bool]:
    """(the dataset the search runs on, whether it is the public synthetic proxy)."""
    if proxy == "public":
        return public_proxy(task, nodes), True
    if proxy == "task":
        return task.dataset, False
    datasets.load(proxy, seed=0)  # a bad name fails here
    return proxy, False


class _Search:
    """The losses found so far: per mechanism, step size → (mean, std) of the final test loss
    over the seeds, the starting loss and the engines that ran."""

    def __init__(self, proxies: dict, *, seeds: int, engine: str, say: Callable[[str], None]):
        self.proxies, self.seeds, self.engine, self.say = proxies, seeds, engine, say
        self.curves: dict[str, dict[float, tuple[float, float]]] = {m: {} for m in proxies}
        self.starts: dict[str, float] = {}
        self.engines: set[str] = set()
        self.rules: dict[str, float | None] = {}
        for m, sc in proxies.items():
            choice = sc.plan.step_size
            noise_budget = choice is not None and choice.method == "noise-budget"
            self.rules[m] = sc.plan.learning_rate if noise_budget else None

    def _loss_at(self, m: str, eta: float):
        from edgedp import api

        sc = self.proxies[m]
        plan = sc.plan.with_step_size(eta, None)
        try:
            res = api.simulate(
                plan, dataclasses.replace(sc, plan=plan), engine=self.engine, trials=self.seeds
            )
        except (FloatingPointError, NonFiniteMessageError):
            return math.inf, 0.0, math.nan, "diverged"
        final = res.test_loss[:, -1]
        start = float(res.test_loss[:, 0].mean())
        return float(final.mean()), float(final.std()), start, res.engine

    def evaluate(self, m: str, eta: float) -> None:
        eta = float(f"{eta:.3g}")
        if eta in self.curves[m]:
            return
        mean, std, start, used = self._loss_at(m, eta)
        self.curves[m][eta] = (mean, std)
        if math.isfinite(start):
            self.starts.setdefault(m, start)
        if used != "diverged":
            self.engines.add(used)
        self.say(f"  {m} step size {eta:g}: final test loss {mean:.4f}")

    def own_best(self) -> dict[str, float]:
        return {m: min(c, key=lambda e, c=c: c[e][0]) for m, c in self.curves.items()}

    def shared_best(self) -> dict[str, float]:
        """The step size on every mechanism's grid with the best mean of final / starting
        loss, the common grid extended by up to EXTEND values at a winning edge."""
        mechs = tuple(self.curves)

        def grid() -> list[float]:
            return sorted(set.intersection(*(set(self.curves[m]) for m in mechs)))

        def score(eta: float) -> float:
            return float(np.mean([self.curves[m][eta][0] / self.starts.get(m, 1.0) for m in mechs]))

        common = grid()
        shared = min(common, key=score)
        for _ in range(EXTEND):
            if shared not in (common[0], common[-1]):
                break
            nxt = shared / RATIO if shared == common[0] else shared * RATIO
            for m in mechs:
                self.evaluate(m, nxt)
            common = grid()
            shared = min(common, key=score)
        return dict.fromkeys(mechs, shared)

    def tuned(self, best: dict[str, float]) -> list[Tuned]:
        out = []
        for m, curve in self.curves.items():
            grid = sorted(curve)
            out.append(
                Tuned(
                    mechanism=m,
                    rule=self.rules[m],
                    start_loss=self.starts.get(m, math.nan),
                    grid=tuple(grid),
                    loss=tuple(curve[e][0] for e in grid),
                    loss_std=tuple(curve[e][1] for e in grid),
                    best=best[m],
                )
            )
        return out


def _row(t: Tuned) -> dict[str, Any]:
    return {
        "mechanism": t.mechanism,
        "rule_step_size": t.rule,
        "tuned_step_size": t.best,
        "start_loss": t.start_loss,
        "grid": list(t.grid),
        "final_test_loss": list(t.loss),
        "final_test_loss_std": list(t.loss_std),
    }


def _fallback_centre() -> float:
    """The grid's centre when the rule does not cover a plan: the noiseless default."""
    from edgedp.planning import step_rule

    return step_rule.MAX_STEP


def _extend(curve: dict[float, tuple[float, float]], evaluate: Callable[[float], None]) -> None:
    """Try up to EXTEND more values beyond an edge of the grid that wins."""
    for _ in range(EXTEND):
        grid = sorted(curve)
        best = min(grid, key=lambda e: curve[e][0])
        if best == grid[0]:
            evaluate(best / RATIO)
        elif best == grid[-1]:
            evaluate(best * RATIO)
        else:
            return


def tuned_plan(raw: dict, report: dict[str, Any], mechanism: str, *, base: Path = Path(".")):
    """``mechanism``'s plan on the scenario's real task with its tuned step size and a
    ``step_size`` section stating the protocol and its privacy assumption."""
    row = next(r for r in report["results"] if r["mechanism"] == mechanism)
    eta = float(row["tuned_step_size"])
    sc = scenarios.parse(_raw_for(raw, mechanism, report["dataset"], eta), base=base)
    choice = StepSizeChoice(
        "tuned",
        report["assumption"],
        {
            "proxy": report["proxy"],
            "protocol": report["protocol"],
            "seeds": report["seeds"],
            "criterion": report["criterion"],
            "engine": report["engine"],
            "grid": [float(g) for g in row["grid"]],
            "scenario": report["scenario"],
        },
    )
    return sc.plan.with_step_size(eta, choice)
