"""How a plan's step size was chosen: the plan's ``step_size`` section (public, hashed).

A plan whose learning rate was given by its author has no section. A plan whose learning
rate the planner chose records how, so every run of it can say so and a reader can check
what it assumed about privacy:

* ``noise-budget`` — the planner's default rule (:mod:`edgedp.planning.step_rule`): the
  largest step η ≤ the noiseless default such that the noise the final models carry costs
  at most a stated fraction of the starting loss, from public quantities only (the plan's
  noise, topology and horizon, the model's dimension and starting loss, the batch size);
* ``fixed-default`` — the rule has no public curvature bound for the task (an MLP, an ONNX
  graph, unstandardised targets ...): the noiseless default is kept, and runs say it may
  be too large for the noise;
* ``tuned`` — chosen by simulation (``edgedp tune step-size``), on the proxy data named in
  ``inputs``; ``assumption`` says what that costs in privacy.

The device path reads plans, so this module imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["METHODS", "StepSizeChoice", "line"]

#: The ways a planner or tuner chooses a step size (module docstring).
METHODS = ("noise-budget", "fixed-default", "tuned")


@dataclass(frozen=True, slots=True)
class StepSizeChoice:
    """The ``step_size`` section of a plan.

    Attributes:
      method: one of :data:`METHODS`.
      assumption: the sentence printed with every run of the plan: what was assumed public
        when the step size was chosen.
      inputs: the numbers and names it was chosen from (rule: ``budget``, ``start_loss``,
        ``curvature_trace``, ``noise_variance``, ``cap``, ``unrounded``; tuned: ``proxy``,
        ``grid``, ``seeds``, ``protocol`` ...). Values are numbers or strings.
    """

    method: str
    assumption: str
    inputs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"Unknown step-size method={self.method!r}; expected one of {METHODS}."
            )
        if not isinstance(self.assumption, str) or not self.assumption:
            raise ValueError("Expected a non-empty assumption for the step-size choice.")
        for key, value in self.inputs.items():
            plain = isinstance(value, (int, float, str)) and not isinstance(value, bool)
            if not isinstance(key, str) or not (plain or _number_list(value)):
                raise ValueError(
                    f"step_size input {key!r}={value!r}: expected a number, a string or a "
                    "list of numbers."
                )
        object.__setattr__(self, "inputs", MappingProxyType(dict(self.inputs)))

    def describe(self, learning_rate: float) -> str:
        """One line: the step size, how it was chosen, and the privacy assumption."""
        how = {
            "noise-budget": "the planner's noise-budget rule",
            "fixed-default": "the noiseless default (no rule for this task)",
            "tuned": f"tuned in simulation ({self.inputs.get('protocol', 'own')} protocol)",
        }[self.method]
        return f"step size {learning_rate:g} from {how}: {self.assumption}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "assumption": self.assumption,
            "inputs": {k: list(v) if isinstance(v, tuple) else v for k, v in self.inputs.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepSizeChoice:
        inputs = d.get("inputs", {})
        if not isinstance(inputs, Mapping):
            raise ValueError("step_size.inputs must be a mapping")
        return cls(str(d["method"]), str(d["assumption"]), dict(inputs))


def line(learning_rate: float, choice: StepSizeChoice | None, *, private: bool = True) -> str:
    """Where a step size came from, in one line (``choice`` None: set in the plan — by its
    author for a private plan, which the planner's rule always records)."""
    if choice is not None:
        return choice.describe(learning_rate)
    if private:
        return f"step size {learning_rate:g} given by the plan's author"
    return f"step size {learning_rate:g} set in the plan (no noise to adapt it to)"


def _number_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    )
