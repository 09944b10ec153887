"""What a plan is built from: one :class:`PlanRequest` for the command line, scenario files
and the Python API.

A request holds every option of every mechanism family under the name of its
``edgedp plan`` flag (``--target-eps`` is ``target_eps``); the defaults are the command
line's. :func:`edgedp.planning.build.build` turns it into a certified plan. Each front end
only maps its own spelling onto the request:

* ``edgedp plan FAMILY OUT --flag ...``: the parsed flags (:meth:`PlanRequest.from_namespace`);
* a scenario's ``[topology]``, ``[task]`` and ``[privacy]`` tables (:mod:`edgedp_sim.scenarios`);
* :func:`edgedp.make_plan`'s keywords.

A request refuses an option of another family set away from its default (a ``rank`` for
``dp-dsgd`` would be silently ignored otherwise).

>>> r = PlanRequest(mechanism="whisper", topology="ring:8", steps=10, rank=4)
>>> r.family, r.rank
('cross', 4)
>>> PlanRequest(mechanism="dp-dsgd", topology="ring:8", steps=10, rank=4)
Traceback (most recent call last):
...
ValueError: rank is not an option of mechanism 'dp-dsgd' (family sgd); its family's options: ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgedp import mechanisms

__all__ = ["FAMILY_OPTIONS", "SHARED_OPTIONS", "PlanRequest"]

#: Options every family takes (``edgedp plan FAMILY``'s shared flags).
SHARED_OPTIONS = (
    "target_eps",
    "delta",
    "clip_norm",
    "weighting",
    "model",
    "loss",
    "dataset",
    "partition",
    "batch_size",
    "seed",
)
_GAUSSIAN = ("participation", "noise_multiplier", "learning_rate")
_SKETCH = (
    "sketch_dim",
    "sketch_basis",
    "sketch_energy",
    "sketch_probes",
    "sketch_mean_removal",
    "sketch_lag",
    "sketch_clip",
    "sketch_refresh",
    "sketch_seed",
    "optimizer",
    "noise_aware",
)
#: family -> the options of that family beyond :data:`SHARED_OPTIONS`.
FAMILY_OPTIONS: dict[str, tuple[str, ...]] = {
    "sgd": _GAUSSIAN,
    "mf": (*_GAUSSIAN, "bandwidth", "buffers", "tolerance", "max_iterations"),
    "laplace": ("gamma", "beta", "q1", "q2", "delta_grad", "adjacency"),
    "cross": (
        *_GAUSSIAN,
        "form",
        "rank",
        "ridge",
        "message_variance",
        "gossip_rounds",
        *_SKETCH,
    ),
    "dome": (*_GAUSSIAN, *_SKETCH, "sketch_temporal"),
}


_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "True or False"}


def _check_type(name: str, value: Any, annotation: str) -> None:
    """TypeError naming ``name=value`` unless it is of the field's annotated type (Python
    values: a bool is not a number, ``"4"`` is not 4)."""
    kinds = [k.strip() for k in annotation.split("|")]
    ok = {
        "None": value is None,
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "str": isinstance(value, str),
    }
    if not any(ok.get(k, True) for k in kinds):
        wanted = " or ".join(_WORDS[k] for k in kinds if k != "None")
        raise TypeError(f"Expected {name}={value!r} to be {wanted}, got {type(value).__name__}.")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """Every option of ``edgedp plan`` (``--flag-name`` is ``flag_name``), with its defaults.

    Shared: ``mechanism``, ``topology`` (a spec or an edge-list file), ``steps``,
    ``target_eps`` (Gaussian: with ``delta``; Laplace: the pure ε), ``delta``, ``clip_norm``,
    ``weighting``, the task (``model``, ``loss``, ``dataset``, ``partition``,
    ``batch_size``) and ``seed``. Gaussian families: ``participation`` (``"k,b"``; None:
    what the task runs), ``noise_multiplier`` (instead of ``target_eps``),
    ``learning_rate`` (None: the noise-budget rule of :mod:`edgedp.planning.step_rule` for
    private plans, 0.5 without noise). mf: the planner's ``bandwidth``, ``buffers``,
    ``tolerance``, ``max_iterations``. laplace (paper 004 Eq. 5): ``gamma``, ``beta``,
    ``q1``, ``q2``, ``delta_grad``, ``adjacency``. cross: ``form``, ``rank``, ``ridge``,
    ``message_variance``, ``gossip_rounds`` and (whisper/decor) the sketch options. dome:
    ``sketch_*``, ``optimizer``, ``noise_aware``, ``sketch_temporal``.
    ``edgedp plan FAMILY --help`` documents each.
    """

    mechanism: str
    topology: str
    steps: int
    target_eps: float | None = None
    delta: float | None = None
    clip_norm: float = 1.0
    weighting: str = "metropolis-hastings"
    model: str = "logistic"
    loss: str | None = None
    dataset: str = "digits-parity"
    partition: str = "iid"
    batch_size: int = 0
    seed: int = 0
    participation: str | None = None
    noise_multiplier: float | None = None
    learning_rate: float | None = None
    bandwidth: int | None = None
    buffers: int | None = None
    tolerance: float = 1e-4
    max_iterations: int = 1000
    gamma: float | None = None
    beta: float | None = None
    q1: float | None = None
    q2: float | None = None
    delta_grad: float | None = None
    adjacency: str = "zero-out"
    form: str = "local"
    rank: int = 8
    ridge: float = 1e-6
    message_variance: float = 1.0
    gossip_rounds: int = 1
    sketch_dim: int | None = None
    sketch_basis: str = "block"
    sketch_energy: float = 0.9
    sketch_probes: int = 1
    sketch_mean_removal: bool = False
    sketch_lag: int = 0
    sketch_clip: str = "sketch"
    sketch_refresh: int = 1
    sketch_seed: int = 0
    optimizer: str = "sgd"
    noise_aware: bool = False
    sketch_temporal: str = "identity"

    def __post_init__(self) -> None:
        try:
            mechanism = mechanisms.get(self.mechanism)
        except (KeyError, ValueError):
            known = mechanisms.names(command_line=True)
            raise ValueError(
                f"mechanism={self.mechanism!r}; expected one of {sorted(known)}"
            ) from None
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), str(f.type))
        if self.steps < 1:
            raise ValueError(f"Expected steps={self.steps!r} to be an integer >= 1.")
        own = set(SHARED_OPTIONS) | set(FAMILY_OPTIONS[mechanism.family])
        for f in dataclasses.fields(self):
            if f.name in own or f.name in ("mechanism", "topology", "steps"):
                continue
            if getattr(self, f.name) != f.default:
                raise ValueError(
                    f"{f.name} is not an option of mechanism {self.mechanism!r} (family "
                    f"{mechanism.family}); its family's options: "
                    f"{', '.join(FAMILY_OPTIONS[mechanism.family])}"
                )

    @property
    def family(self) -> str:
        """The mechanism's family (``edgedp plan FAMILY``)."""
        return mechanisms.get(self.mechanism).family

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PlanRequest:
        """A request from ``values`` with only the names it knows (others: TypeError)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unknown plan option {unknown[0]!r}; valid: {sorted(known)}")
        return cls(**dict(values))

    @classmethod
    def from_namespace(cls, args: Any) -> PlanRequest:
        """The request of parsed ``edgedp plan FAMILY`` flags (the CLI's own entries, such
        as ``out`` or ``json``, are left out; absent options take their defaults)."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: getattr(args, n) for n in names if hasattr(args, n)})
