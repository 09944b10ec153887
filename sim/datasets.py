"""Datasets available offline and their partition across nodes.

``digits-parity`` is scikit-learn's bundled 8×8 handwritten digits (1,797 images, shipped
inside the package, no download) with the label "digit is odd"; ``breast-cancer`` is the
bundled Wisconsin diagnostic set; ``synthetic-logistic`` and ``synthetic-linear`` are drawn
from a known model. Features are standardised with training-set statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DATASETS", "Dataset", "FederatedData", "load", "partition"]


@dataclass(frozen=True, slots=True, eq=False)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str  # "logistic" or "linear"


@dataclass(frozen=True, slots=True, eq=False)
class FederatedData:
    """Equal-size local datasets: x ``(n, m, f)``, y ``(n, m)``, plus a shared test set."""

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str

    @property
    def nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def local_size(self) -> int:
        return int(self.x.shape[1])

    @property
    def features(self) -> int:
        return int(self.x.shape[2])


def _split(name, x, y, task, rng, test_fraction=0.2) -> Dataset:
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean = x[train].mean(axis=0)
    std = x[train].std(axis=0)
    std[std == 0] = 1.0
    xs = (x - mean) / std
    return Dataset(name, xs[train], y[train].astype(float), xs[test], y[test].astype(float), task)


def _digits(rng):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return _split("digits-parity", x.astype(float), (y % 2 == 1), "logistic", rng)


def _breast_cancer(rng):
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return _split("breast-cancer", x.astype(float), y == 1, "logistic", rng)


def _synthetic(task: str, rng, n=4000, f=20):
    x = rng.standard_normal((n, f))
    w = rng.standard_normal(f) / np.sqrt(f) * 3.0
    m = x @ w
    if task == "logistic":
        y = rng.random(n) < 1.0 / (1.0 + np.exp(-m))
    else:
        y = m + 0.5 * rng.standard_normal(n)
    return _split(f"synthetic-{task}:{f}:{n}", x, y, task, rng)


DATASETS = {
    "digits-parity": _digits,
    "breast-cancer": _breast_cancer,
    "synthetic-logistic": lambda rng: _synthetic("logistic", rng),
    "synthetic-linear": lambda rng: _synthetic("linear", rng),
}


def load(name: str, *, seed: int = 0) -> Dataset:
    """Load a dataset by name with a seeded train/test split (20% test).

    Synthetic sets take optional sizes: ``synthetic-logistic:FEATURES:EXAMPLES``.
    """
    base, _, sizes = name.partition(":")
    if base.startswith("synthetic-") and sizes and base in DATASETS:
        try:
            parts = [int(v) for v in sizes.split(":")]
            f, n = (parts + [4000])[:2] if len(parts) == 1 else parts
        except ValueError:
            msg = f"Bad dataset sizes in {name!r}; use {base}:FEATURES[:EXAMPLES]."
            raise ValueError(msg) from None
        if f < 1 or n < 10:
            raise ValueError(f"Expected FEATURES >= 1 and EXAMPLES >= 10 in {name!r}.")
        return _synthetic(base.removeprefix("synthetic-"), np.random.default_rng(seed), n=n, f=f)
    if name not in DATASETS:
        raise ValueError(f"Unknown dataset={name!r}; expected one of {sorted(DATASETS)}.")
    return DATASETS[name](np.random.default_rng(seed))


def partition(data: Dataset, nodes: int, *, scheme: str = "iid", seed: int = 0) -> FederatedData:
    """Split the training set into ``nodes`` equal local datasets (the remainder is dropped)."""
    if scheme != "iid":
        raise NotImplementedError(
            f"partition scheme {scheme!r}: only 'iid' exists so far; non-IID (Dirichlet) "
            "partitions come with the models-and-datasets work."
        )
    m = len(data.y_train) // nodes
    if m < 1:
        raise ValueError(
            f"Expected at most {len(data.y_train)} nodes for {data.name}, got {nodes}."
        )
    order = np.random.default_rng(seed).permutation(len(data.y_train))[: nodes * m]
    x = data.x_train[order].reshape(nodes, m, -1)
    y = data.y_train[order].reshape(nodes, m)
    return FederatedData(x, y, data.x_test, data.y_test, data.task)
