"""One dataset as the engines load it: train and test arrays and the task they are for.

:mod:`edgedp_sim.datasets` (named and synthetic sets) and :mod:`edgedp_sim.datafiles`
(files of your own) both build it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CLASSIFICATION", "TEST_FRACTION", "Dataset"]

#: Dataset.task values whose labels are class indices.
CLASSIFICATION = ("logistic", "softmax")


@dataclass(frozen=True, slots=True, eq=False)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str  # "logistic" (binary), "softmax" (multi-class) or "linear" (regression)

    @property
    def classes(self) -> int:
        """Number of classes (0 for regression)."""
        if self.task not in CLASSIFICATION:
            return 0
        return int(max(self.y_train.max(), self.y_test.max())) + 1


#: The share of a dataset held out as its test set (seeded split).
TEST_FRACTION = 0.2
