"""Scenario files (TOML): what to run and on which simulated network.

```toml
# --- constants (the seed makes the run reproducible) ---
name = "lan-100"
seed = 1                 # network and fault draws; the plan seed drives noise and data
steps = 60
eval_every = 5
initial_state = "model"  # or "normal[:STD]": x_i(0) ~ N(0, STD² I) per node and trial
engine = "auto"          # batch unless timing matters (latency, bandwidth); or batch | event

[topology]               # or: plan = "run.plan" instead of [topology], [task], [privacy]
spec = "er:100:0.05:1"
weighting = "metropolis-hastings"

[task]
model = "logistic"
dataset = "digits-parity"
batch_size = 0           # 0 = whole local dataset per step

[privacy]
mechanism = "dp-dsgd"    # dsgd | dp-dsgd | antipgd
target_epsilon = 8.0     # or noise_multiplier = 1.2
delta = 1e-6             # the plan's δ: its ε is calibrated and reported at it
clip_norm = 1.0
learning_rate = 0.5      # omit: the planner's noise-budget rule picks it (plan's step_size)

# sr-gt / dpop (paper 004, pure eps): mechanism = "sr-gt", target_epsilon, gamma, beta, q1,
# q2, delta_grad, adjacency ("problem" | "zero-out" | "replace-one"), clip_norm (default
# inf); the task may be dataset = "sensor-fusion:N:M:P:SEED" (Eq. 42) with
# model = "least-squares".

[network]
latency = { kind = "lognormal", median_ms = 40, sigma = 0.6 }   # constant | uniform | table
bandwidth_mbps = 20
loss = 0.01
round_timeout_s = 2.0
startup_timeout_s = 5.0
compute_s = 0.0

[faults]
dropout = 0.1            # per node and round
dropout_rule = "renormalize"
crashes = [{ node = 4, at_s = 3.0, down_s = 2.0 }]   # omit down_s: permanent departure
churn = { rate_per_s = 0.01, down_s = 3.0, horizon_s = 60.0 }

[leakage]                # read by `edgedp leak` (defaults for its options)
victim = 0
trials = 5000
attackers = ["hbc:1,2", "eavesdropper:all"]
```
Every error names the field (``network.loss = 2 must be in [0, 1)``). Every table and key
is checked: an unknown one is refused naming the closest valid key
(``unknown key privacy.clip_nrom (did you mean privacy.clip_norm?)``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgedp import _validate, mechanisms
from edgedp import plan as plan_mod
from edgedp.accounting.participation import Participation
from edgedp.agent import DROPOUT_RULES
from edgedp.errors import PlanError
from edgedp.planning import build, step_rule
from edgedp.planning import request as request_mod
from edgedp.planning.request import PlanRequest
from edgedp_sim import datasets, initial
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.links import Latency, Network

__all__ = ["ENGINES", "Scenario", "ScenarioError", "from_plan", "load", "parse", "read_toml"]

# The keys each table may hold (a key added to the parser is added here too).
_TOP = (
    "name",
    "seed",
    "steps",
    "eval_every",
    "plan",
    "topology",
    "task",
    "privacy",
    "network",
    "faults",
    "leakage",
    "initial_state",
    "engine",
)
ENGINES = ("auto", "batch", "event")
_LAPLACE_KEYS = request_mod.FAMILY_OPTIONS["laplace"]
_TOPOLOGY_KEYS = ("spec", "weighting")
_TASK_KEYS = ("model", "dataset", "partition", "batch_size", "loss")
# request fields that a scenario sets from elsewhere ([topology], [task], top-level keys)
_NOT_PRIVACY = ("mechanism", "topology", "steps", "target_eps", "weighting", "seed", *_TASK_KEYS)
# [privacy]: the mechanism, the plan seed, and every plan option (edgedp.planning.request)
# under its request name but target_epsilon (the request's target_eps)
_REQUEST_NAME = {"target_epsilon": "target_eps"}
_PRIVACY_KEYS = (
    "mechanism",
    "seed",
    "target_epsilon",
    *(k for k in request_mod.PlanRequest.__dataclass_fields__ if k not in _NOT_PRIVACY),
)
_NUMBERS = (
    "target_epsilon",
    "noise_multiplier",
    "delta",
    "clip_norm",
    "learning_rate",
    "gamma",
    "beta",
    "q1",
    "q2",
    "delta_grad",
)
_NETWORK_KEYS = (
    "latency",
    "bandwidth_mbps",
    "loss",
    "round_timeout_s",
    "startup_timeout_s",
    "compute_s",
)
_FAULTS_KEYS = ("dropout", "dropout_rule", "crashes", "churn")
_CRASH_KEYS = ("node", "at_s", "down_s")
_CHURN_KEYS = ("rate_per_s", "down_s", "horizon_s")
_LEAKAGE_KEYS = ("victim", "trials", "attackers")  # read by `edgedp leak`
_TABLES = {
    "topology": _TOPOLOGY_KEYS,
    "task": _TASK_KEYS,
    "privacy": _PRIVACY_KEYS,
    "network": _NETWORK_KEYS,
    "faults": _FAULTS_KEYS,
    "leakage": _LEAKAGE_KEYS,
}


class ScenarioError(ValueError):
    """A bad scenario file; the message names the field."""


@dataclass(frozen=True, slots=True, eq=False)
class Scenario:
    name: str
    seed: int
    plan: plan_mod.NoisePlan
    network: Network = field(default_factory=Network)
    faults: Faults = field(default_factory=Faults)
    eval_every: int = 10
    leakage: dict = field(default_factory=dict)  # [leakage] table, read by ``edgedp leak``
    # "model" or "normal[:STD]": x_i(0) per node and trial (edgedp_sim.initial)
    initial_state: str = "model"
    engine: str = "auto"  # "batch"/"event" override edgedp_sim.engine_choice.choose_engine

    def data(self) -> datasets.FederatedData:
        t = self.plan.task
        if t.dataset.startswith("sensor-fusion:"):  # paper 004 Eq. 42: sensor-fusion:N:M:P:SEED
            from edgedp_sim import sensor_fusion

            try:
                n, m, p, seed = sensor_fusion.parse_spec(t.dataset)
            except ValueError as exc:
                raise ScenarioError(str(exc)) from None
            if n != self.plan.n:
                raise ScenarioError(
                    f"task.dataset {t.dataset!r} has {n} sensors, not {self.plan.n}"
                )
            return sensor_fusion.generate(n, observations=m, dim=p, seed=seed).federated()
        return datasets.partition(
            datasets.load(t.dataset, seed=self.plan.seed),
            self.plan.n,
            scheme=t.partition,
            seed=self.plan.seed,
        )


def _table(raw: dict, key: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ScenarioError(f"[{key}] must be a table")
    return value


def _only(section: dict, name: str, allowed: tuple[str, ...]) -> None:
    """Refuse keys of ``section`` (the table ``name``; "" for the top level) not in allowed."""
    _validate.known_keys(section, allowed, where=name, error=ScenarioError)


def _check_keys(raw: dict) -> None:
    """Every table and key of a scenario (except the latency table, whose keys depend on its
    kind: ``Latency.from_dict``), before any work is done."""
    _only(raw, "", _TOP)
    for name, keys in _TABLES.items():
        _only(_table(raw, name), name, keys)
    faults = raw.get("faults", {})
    crashes = faults.get("crashes", [])
    for i, c in enumerate(crashes if isinstance(crashes, list) else []):
        if isinstance(c, dict):
            _only(c, f"faults.crashes[{i}]", _CRASH_KEYS)
    churn = faults.get("churn", {})
    if isinstance(churn, dict):
        _only(churn, "faults.churn", _CHURN_KEYS)


def _number(section: dict, name: str, key: str, default: Any) -> Any:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{name}.{key} = {value!r} must be a number")
    return value


def from_plan(
    plan: plan_mod.NoisePlan, *, seed: int = 0, eval_every: int | None = None
) -> Scenario:
    """A bare plan on its own task over an ideal network (no latency, loss or faults)."""
    return Scenario(
        name=f"plan-{plan.plan_hash[:8]}",
        seed=seed,
        plan=plan,
        eval_every=eval_every or max(1, plan.steps // 20),
    )


def _build_plan(raw: dict, base: Path, steps: int | None) -> plan_mod.NoisePlan:
    if "plan" in raw:
        if any(k in raw for k in ("topology", "task", "privacy")):
            raise ScenarioError("give either plan = FILE or [topology]/[task]/[privacy], not both")
        path = Path(raw["plan"])
        path = path if path.is_absolute() else base / path
        try:
            return plan_mod.NoisePlan.from_bytes(path.read_bytes(), gram=True)
        except OSError as exc:
            raise ScenarioError(f"plan = {str(path)!r}: {exc.strerror}") from None
        except PlanError as exc:
            raise ScenarioError(f"plan = {str(path)!r}: {exc}") from None
    if steps is None:
        raise ScenarioError("steps is required when the scenario builds its own plan")
    topo, task_t, priv = _table(raw, "topology"), _table(raw, "task"), _table(raw, "privacy")
    if "spec" not in topo:
        raise ScenarioError('topology.spec is required (e.g. "er:100:0.05:1")')
    mech = str(priv.get("mechanism", "dp-dsgd"))
    try:
        laplace = mechanisms.get(mech).family == "laplace"
    except ValueError as exc:
        raise ScenarioError(f"privacy.mechanism: {exc}") from None
    values: dict[str, Any] = {
        "mechanism": mech,
        "topology": str(topo["spec"]),
        "steps": steps,
        "weighting": str(topo.get("weighting", "metropolis-hastings")),
        "seed": int(priv.get("seed", raw.get("seed", 0))),
        "model": str(task_t.get("model", "logistic")),
        "dataset": str(task_t.get("dataset", "digits-parity")),
        "partition": str(task_t.get("partition", "iid")),
        "batch_size": int(task_t.get("batch_size", 0)),
        "loss": str(task_t.get("loss", "")) or None,
    }
    for key, value in priv.items():
        if key in _NUMBERS:
            value = _number(priv, "privacy", key, 0)
        if key == "delta" and not 0 < value < 1:
            raise ScenarioError(f"privacy.delta = {value!r} must be in (0, 1)")
        if key not in ("mechanism", "seed"):
            values[_REQUEST_NAME.get(key, key)] = value
    if laplace:  # paper 004's setting: Definition 1 adjacency, no clipping
        needed = ("gamma", "q1", "q2", "target_epsilon")
        if priv.get("adjacency", "problem") == "problem":  # else from the clip norm and task
            needed += ("delta_grad",)
        missing = [k for k in needed if k not in priv]
        if missing:
            raise ScenarioError(f"privacy.{missing[0]} is required for mechanism = {mech!r}")
        values.setdefault("clip_norm", math.inf)
        values.setdefault("adjacency", "problem")
    else:
        if set(_LAPLACE_KEYS) & set(priv):
            raise ScenarioError(
                f"privacy.{sorted(set(_LAPLACE_KEYS) & set(priv))} are for sr-gt/dpop"
            )
        noisy = mechanisms.get(mech).noisy
        if noisy and "target_epsilon" in priv:
            values.setdefault("delta", plan_mod.DEFAULT_DELTA)
        elif noisy and "noise_multiplier" not in priv:
            raise ScenarioError("privacy needs target_epsilon (with delta) or noise_multiplier")
        values["participation"] = _participation(priv, mech, values, steps)
    try:
        request = PlanRequest.from_mapping(values)
        plan = build.build(request, report=False).plan
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"[privacy]/[task]: {exc}") from None
    dropout = _number(_table(raw, "faults"), "faults", "dropout", 0.0)
    if request.learning_rate is None and plan.step_size is not None and 0 < dropout < 1:
        # the noise-budget rule for this network: nodes sitting out leave noise uncancelled
        model, local = build.task_model(plan.task, plan.n)
        plan = step_rule.apply(plan, dim=model.dim, local_size=local, dropout=float(dropout))
    return plan


def _participation(priv: dict, mech: str, values: dict, steps: int) -> str:
    """``"k,b"``: privacy.participation if given (refused unless it covers what the task
    runs), else the task's own (datasets.task_participation)."""
    import edgedp_topologies

    try:
        graph = edgedp_topologies.parse(values["topology"])
    except (ValueError, OSError) as exc:
        raise ScenarioError(f"topology.spec: {exc}") from None
    keys = ("model", "dataset", "partition", "batch_size")
    task = plan_mod.TaskSpec(**{k: values[k] for k in keys}, loss=values["loss"] or "")
    try:
        run = datasets.task_participation(task, nodes=graph.n, steps=steps)
    except ValueError as exc:
        raise ScenarioError(f"[task]: {exc}") from None
    if "participation" not in priv:
        return f"{run.k},{run.b}"
    try:
        part = Participation.from_string(str(priv["participation"]))
    except ValueError as exc:
        raise ScenarioError(f"privacy.participation: {exc}") from None
    noisy = mechanisms.get(mech).noisy and priv.get("noise_multiplier", 1) != 0
    if noisy and not part.covers(run):  # refused as `edgedp plan` refuses it
        try:
            datasets.check_participation(
                part, task, nodes=graph.n, steps=steps, name="privacy.participation"
            )
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None
    return f"{part.k},{part.b}"


def parse(
    raw: dict[str, Any], *, base: Path = Path("."), plan: plan_mod.NoisePlan | None = None
) -> Scenario:
    """Build a Scenario from parsed TOML; ``base`` resolves relative file names.

    ``plan``: run this plan (``raw`` then holds no ``plan``, ``[topology]``, ``[task]`` or
    ``[privacy]``: only the network, faults and run settings).
    """
    _check_keys(raw)
    if plan is not None:
        given = [k for k in ("plan", "topology", "task", "privacy") if k in raw]
        if given:
            raise ScenarioError(f"{', '.join(given)}: the plan is given; drop these keys")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or seed < 0:
        raise ScenarioError(f"seed = {seed!r} must be a non-negative integer")
    steps = raw.get("steps")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ScenarioError(f"steps = {steps!r} must be a positive integer")
    plan = _build_plan(raw, base, steps) if plan is None else plan
    if steps is not None and steps != plan.steps:
        raise ScenarioError(f"steps = {steps} but the plan has {plan.steps}")
    net_t = _table(raw, "network")
    leakage = _table(raw, "leakage")
    try:
        network = Network(
            latency=Latency.from_dict(
                net_t.get("latency", {"kind": "constant", "ms": 0}), base=base
            ),
            bandwidth_mbps=_number(net_t, "network", "bandwidth_mbps", math.inf),
            loss=_number(net_t, "network", "loss", 0.0),
            round_timeout_s=_number(net_t, "network", "round_timeout_s", 1.0),
            startup_timeout_s=_number(net_t, "network", "startup_timeout_s", 5.0),
            compute_s=_number(net_t, "network", "compute_s", 0.0),
        )
        faults = _faults(_table(raw, "faults"))
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    initial_state = raw.get("initial_state", "model")
    try:
        initial.parse(initial_state)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    engine = raw.get("engine", "auto")
    if engine not in ENGINES:
        raise ScenarioError(f"engine = {engine!r}; choose one of {list(ENGINES)}")
    eval_every = raw.get("eval_every", max(1, plan.steps // 20))
    if not isinstance(eval_every, int) or eval_every < 1:
        raise ScenarioError(f"eval_every = {eval_every!r} must be a positive integer")
    return Scenario(
        name=str(raw.get("name", "scenario")),
        seed=seed,
        plan=plan,
        network=network,
        faults=faults,
        eval_every=eval_every,
        leakage=leakage,
        initial_state=str(initial_state),
        engine=engine,
    )


def _faults(t: dict) -> Faults:
    rule = str(t.get("dropout_rule", "renormalize"))
    if rule not in DROPOUT_RULES:
        raise ScenarioError(
            f"faults.dropout_rule = {rule!r}; choose one of {sorted(DROPOUT_RULES)}"
        )
    crashes = []
    for i, c in enumerate(t.get("crashes", [])):
        if not isinstance(c, dict) or not {"node", "at_s"} <= set(c):
            raise ScenarioError(f"faults.crashes[{i}] needs node and at_s (and optional down_s)")
        crashes.append(Crash(int(c["node"]), float(c["at_s"]), float(c.get("down_s", math.inf))))
    churn = t.get("churn", {})
    if not isinstance(churn, dict):
        raise ScenarioError("faults.churn takes rate_per_s, down_s, horizon_s")
    return Faults(
        dropout=_number(t, "faults", "dropout", 0.0),
        dropout_rule=rule,
        crashes=tuple(crashes),
        churn_rate_per_s=float(churn.get("rate_per_s", 0.0)),
        churn_down_s=float(churn.get("down_s", 1.0)),
        churn_horizon_s=float(churn.get("horizon_s", 0.0)),
    )


def read_toml(path: str | Path) -> dict:
    """The tables of a scenario file; an unreadable file or bad TOML is a one-line
    :class:`ScenarioError`."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    path = Path(path)
    raw = read_toml(path)
    try:
        return parse(raw, base=path.parent)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}") from None
