"""Dataset files of your own: the ``.npz`` and ``.csv`` layouts and the plan's pin on a file.

Files are used as given (no standardisation: scale features yourself) and split over the
nodes by :func:`edgedp_sim.datasets.partition`, like the named sets; :func:`load` states
the layouts.
"""

from __future__ import annotations

import numpy as np

from edgedp_sim.dataset_record import CLASSIFICATION, TEST_FRACTION, Dataset

__all__ = ["CSV_LAYOUT", "NPZ_LAYOUT", "load", "pin", "save"]


def _infer_task(y: np.ndarray) -> str:
    """logistic (labels 0/1), softmax (labels 0..C-1, C > 2 and at most 1000), else linear."""
    whole = np.all(y == np.round(y)) and y.min() >= 0
    if whole and y.max() <= 1:
        return "logistic"
    return "softmax" if whole and y.max() < 1000 else "linear"


def _file_path(name: str) -> tuple[str, str]:
    path, _, want = name.partition("@")
    return path, want


def _file_sha256(path: str) -> str:
    from edgedp import models

    return models.file_sha256(path, what="dataset")


def pin(name: str) -> str:
    """``PATH.npz`` -> ``PATH.npz@SHA256`` (a dataset file's hash), so a plan certifies the
    data it was sized for; other names unchanged, a pinned name checked."""
    path, want = _file_path(name)
    digest = _file_sha256(path)
    if want and want != digest:
        raise ValueError(f"{path} has sha256 {digest[:12]}…, the dataset name pins {want[:12]}…")
    return f"{path}@{digest}"


def _read_csv(path: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path) as fh:
            first = fh.readline()
    except OSError as exc:
        raise ValueError(f"Cannot read dataset file {path}: {exc.strerror}") from None
    try:
        [float(v) for v in first.split(",")]
        skip = 0
    except ValueError:
        skip = 1  # a header line
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2, dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{path}: not a table of numbers ({exc}); layout: {CSV_LAYOUT}") from None
    if table.shape[1] < 2:
        raise ValueError(f"{path}: {table.shape[1]} column; layout: {CSV_LAYOUT}")
    return table[:, :-1], table[:, -1]


CSV_LAYOUT = "one example per row, comma-separated features, the label last; a header allowed"
NPZ_LAYOUT = "arrays x (N, F) and y (N,), or x_train, y_train, x_test, y_test; optional task"


def load(name: str, *, seed: int = 0) -> Dataset:
    """A dataset from a file of your own, used as given (no standardisation).

    Layouts:
      ``.npz``: arrays ``x`` ``(N, F)`` and ``y`` ``(N,)`` (20% held out by a split seeded
      with ``seed``), or ``x_train``, ``y_train``, ``x_test``, ``y_test`` (your split, kept);
      optionally ``task``, one of ``logistic`` (labels 0/1), ``softmax`` (labels
      0..C-1) or ``linear`` (regression).
      ``.csv``: one example per row, comma-separated numbers, the label in the last column;
      a first line that is not numbers is a header. 20% held out as for ``x``/``y``.
    Without ``task``: labels all 0/1 are logistic, other whole labels ≥ 0 (below 1000)
    softmax, anything else linear. ``PATH@SHA256`` also checks the file's hash.

    Raises:
      ValueError: an unreadable file, another layout, non-finite values, or a file whose
        hash is not the one pinned (the message names the file and the layout).
    """
    path, want = _file_path(name)
    if want and _file_sha256(path) != want:
        raise ValueError(f"{path} is not the dataset the plan was made for (sha256 differs).")
    task = None
    split = None
    if path.lower().endswith(".csv"):
        x, y = _read_csv(path)
    else:
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as exc:
            raise ValueError(f"Cannot read dataset file {path}: {exc}") from None
        if "task" in arrays:
            task = str(arrays.pop("task"))
        if {"x_train", "y_train", "x_test", "y_test"} <= set(arrays):
            split = tuple(np.asarray(arrays[k], dtype=np.float64)
                          for k in ("x_train", "y_train", "x_test", "y_test"))  # fmt: skip
            x, y = np.concatenate([split[0], split[2]]), np.concatenate([split[1], split[3]])
        elif {"x", "y"} <= set(arrays):
            x, y = (np.asarray(arrays[k], dtype=np.float64) for k in ("x", "y"))
        else:
            raise ValueError(f"{path}: arrays {sorted(arrays)}; layout: {NPZ_LAYOUT}")
    if x.ndim != 2 or y.shape != (len(x),) or len(x) < 2:
        raise ValueError(f"{path}: x {x.shape} and y {y.shape}; expected x (N, F) and y (N,)")
    for label, values in (("features", x), ("labels", y)):
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{path}: its {label} hold NaN or infinite values")
    task = task or _infer_task(y)
    if task not in ("logistic", "softmax", "linear"):
        raise ValueError(f"{path}: task {task!r}; expected logistic, softmax or linear")
    whole = bool(np.all(y == np.round(y)) and y.min() >= 0)
    if task in CLASSIFICATION and not whole or task == "logistic" and y.max() > 1:
        labels = "0 and 1" if task == "logistic" else "whole labels 0..C-1"
        raise ValueError(f"{path}: task {task} needs {labels} as labels")
    if split is not None:
        return Dataset(path, *split, task)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(TEST_FRACTION * len(y)))
    test, train = order[:n_test], order[n_test:]
    return Dataset(path, x[train], y[train], x[test], y[test], task)


def save(path, x, y, *, x_test=None, y_test=None, task: str | None = None) -> str:
    """Write numpy arrays as a dataset file (the ``.npz`` layout of :func:`load_file`) and
    return its name for a plan's ``dataset``. Without ``x_test``/``y_test`` 20% of the
    examples are held out by the seeded split.

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> name = save(os.path.join(folder, "d.npz"), np.eye(10), np.arange(10) % 2)
    >>> load(name).x_train.shape
    (8, 10)
    """
    path = str(path)
    if not path.lower().endswith(".npz"):
        raise ValueError(f"Expected a .npz path, got {path!r}.")
    arrays = {}
    if (x_test is None) != (y_test is None):
        raise ValueError("Give both x_test and y_test, or neither.")
    if x_test is None:
        arrays.update(x=np.asarray(x, dtype=np.float64), y=np.asarray(y, dtype=np.float64))
    else:
        arrays.update(
            x_train=np.asarray(x, dtype=np.float64),
            y_train=np.asarray(y, dtype=np.float64),
            x_test=np.asarray(x_test, dtype=np.float64),
            y_test=np.asarray(y_test, dtype=np.float64),
        )
    if task is not None:
        arrays["task"] = np.asarray(task)
    np.savez(path, **arrays)
    load(path)  # the same checks as a plan's: refuse now, not on a device
    return path
