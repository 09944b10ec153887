"""The learning task a plan was made for, and the batch schedule it certifies.

:class:`TaskSpec` (model, dataset, partition, batch size, loss) is part of every plan's
encoding and hash (:class:`edgedp.plan.NoisePlan`); the defaults are the demo's task.
:func:`batch_schedule` turns a local dataset size into the batches a plan (or a device's
:class:`~edgedp.node_share.NodeShare`) certifies, and refuses a task the plan does not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from edgedp import _validate
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError
from edgedp.families.laplace import accounting as laplace_acc

__all__ = ["TaskSpec", "batch_schedule"]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """The learning task a plan was made for (defaults: the demo's task).

    ``batch_size = 0`` means every step uses the node's whole local dataset, i.e. every
    example participates at every step: participation (T, 1).
    """

    model: str = "logistic"
    dataset: str = "digits-parity"
    partition: str = "iid"
    batch_size: int = 0
    loss: str = ""  # "" = the model's default (bce logistic, mse linear, ce softmax/mlp)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "model": self.model,
            "dataset": self.dataset,
            "partition": self.partition,
            "batch_size": self.batch_size,
        }
        if self.loss:  # only when set, so plans without a loss keep their hashes
            d["loss"] = self.loss
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskSpec:
        return cls(
            str(d["model"]),
            str(d["dataset"]),
            str(d["partition"]),
            int(d["batch_size"]),
            str(d.get("loss", "")),
        )

    def pinned(self) -> TaskSpec:
        """The task with an ``onnx:PATH`` model pinned to the file's hash (``models.pin_onnx``)."""
        if not self.model.startswith("onnx:"):
            return self
        from edgedp import models

        return replace(self, model=models.pin_onnx(self.model))


def batch_schedule(plan: Any, local_size: int, *, dim: int | None = None) -> tuple[int, int]:
    """``(batch_size, batches_per_epoch)`` for a local dataset, checked against the plan.

    Step t uses batch ``t mod batches_per_epoch`` of a fixed keyed permutation, so every
    example participates exactly every ``batches_per_epoch`` steps. A noisy plan must certify
    that participation: ``b`` equal to batches per epoch and ``k ≥ ⌈T / b⌉``. A Laplace plan
    with example adjacency must certify the task's gradient bound: δ ≥ 2Δ√d/B, which needs
    the model dimension ``dim`` (engines always pass it).
    """
    _validate.integer(minimum=1, local_size=local_size)
    batch = plan.task.batch_size or local_size
    if batch > local_size:
        raise PlanError(f"batch_size={batch} exceeds the local dataset size {local_size}.")
    needed = Participation.for_task(plan.steps, local_size=local_size, batch_size=batch)
    needed_k, per_epoch = needed.k, needed.b
    part = plan.participation
    noisy = getattr(plan, "noise_multiplier", None)
    noisy = (plan.noise_std > 0) if noisy is None else noisy > 0
    laplace = getattr(plan, "laplace", None)
    if laplace is not None:
        if dim is None and laplace.adjacency == "example":
            raise PlanError("A Laplace plan with example adjacency needs the model dimension.")
        try:
            laplace_acc.check_task(laplace, clip_norm=plan.clip_norm, dim=dim, batch_size=batch)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
    if noisy and not part.covers(needed):
        raise PlanError(
            f"The plan certifies participation (k,b)=({part.k},{part.b}) but this task runs "
            f"({needed_k},{per_epoch}) (local size {local_size}, batch {batch}); re-plan with "
            f"--participation {needed_k},{per_epoch}."
        )
    return batch, per_epoch
