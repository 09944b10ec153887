"""Datasets available offline, their partition across nodes, and per-node shard files.

Real sets ship inside scikit-learn's package files (no download at run time):
``digits-parity`` (the 8×8 handwritten digits, 1,797 images, label "digit is odd"),
``digits`` (the same images, the 10 digit classes), ``breast-cancer`` (Wisconsin
diagnostic, binary) and ``diabetes`` (442 patients, 10 features, regression of disease
progression). Synthetic sets are drawn from a known model: ``synthetic-logistic``,
``synthetic-linear`` and ``synthetic-regression`` (linear plus a sine of a second direction:
a target an MLP can fit better than a line), each with optional ``:FEATURES[:EXAMPLES]``.
Features are standardised with training-set statistics; regression targets of
``diabetes`` and ``synthetic-regression`` too. Classification labels are class indices
held as float64 (shards and the wire are float); model backends convert.

Your own data: a path to a file (``my.npz`` or ``my.csv``; layouts in
:mod:`edgedp_sim.datafiles`; numpy arrays written as one by :func:`save`), used as given
(not standardised) and split over the nodes by the same partitioners. A plan pins the
file's SHA-256 (``my.npz@SHA256``): another file under that name is refused.

Partition schemes (:func:`partition`): ``iid`` and ``dirichlet:ALPHA`` (label-skewed,
non-IID). Every node gets the same number of examples m = ⌊N / nodes⌋ (the engines stack
local sets as ``(nodes, m, f)``), and every training example is used at most once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp import _validate
from edgedp.accounting.participation import Participation
from edgedp_sim import datafiles
from edgedp_sim.dataset_record import CLASSIFICATION, TEST_FRACTION, Dataset

__all__ = [
    "DATASETS",
    "Dataset",
    "FederatedData",
    "PerTrialData",
    "check_participation",
    "load",
    "load_file",
    "local_size",
    "partition",
    "pin",
    "save",
    "shape",
    "standardized",
    "task_participation",
    "write_shards",
]


@dataclass(frozen=True, slots=True, eq=False)
class FederatedData:
    """Equal-size local datasets: x ``(n, m, f)``, y ``(n, m)``, plus a shared test set.

    Every array must be finite (ValueError naming it otherwise): a NaN or inf example would
    reach the messages of the engines.
    """

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str

    def __post_init__(self) -> None:
        for name in ("x", "y", "x_test", "y_test"):
            if getattr(self, name) is not None or name in ("x", "y"):
                _validate.finite_array(name, getattr(self, name))

    # indexed from the end: PerTrialData adds a leading trial axis
    @property
    def nodes(self) -> int:
        return int(self.x.shape[-3])

    @property
    def local_size(self) -> int:
        return int(self.x.shape[-2])

    @property
    def features(self) -> int:
        return int(self.x.shape[-1])


@dataclass(frozen=True, slots=True, eq=False)
class PerTrialData(FederatedData):
    """A different federated dataset in every batch-engine trial: x ``(trials, n, m, f)``,
    y ``(trials, n, m)`` (trial i of a run with ``first_trial`` f uses row f + i); the test
    set is shared (e.g. the first instance's). For Monte Carlo over private data, e.g. a
    fresh problem instance per trial in leakage experiments."""

    @property
    def trials(self) -> int:
        return int(self.x.shape[0])


def _split(name, x, y, task, rng, test_fraction=0.2, scale_y=False) -> Dataset:
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean = x[train].mean(axis=0)
    std = x[train].std(axis=0)
    std[std == 0] = 1.0
    xs = (x - mean) / std
    y = y.astype(float)
    if scale_y:
        y = (y - y[train].mean()) / y[train].std()
    return Dataset(name, xs[train], y[train], xs[test], y[test], task)


def _digits(rng):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return _split("digits-parity", x.astype(float), (y % 2 == 1), "logistic", rng)


def _digits10(rng):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return _split("digits", x.astype(float), y, "softmax", rng)


def _diabetes(rng):
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True, scaled=False)
    return _split("diabetes", x.astype(float), y, "linear", rng, scale_y=True)


def _breast_cancer(rng):
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return _split("breast-cancer", x.astype(float), y == 1, "logistic", rng)


def _synthetic(task: str, rng, n=4000, f=20):
    if task == "regression":
        x = rng.standard_normal((n, f))
        w, v = rng.standard_normal((2, f)) / np.sqrt(f)
        y = x @ w + np.sin(2.0 * (x @ v)) + 0.1 * rng.standard_normal(n)
        return _split(f"synthetic-regression:{f}:{n}", x, y, "linear", rng, scale_y=True)
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
    "digits": _digits10,
    "breast-cancer": _breast_cancer,
    "diabetes": _diabetes,
    "synthetic-logistic": lambda rng: _synthetic("logistic", rng),
    "synthetic-linear": lambda rng: _synthetic("linear", rng),
    "synthetic-regression": lambda rng: _synthetic("regression", rng),
}


#: (examples, features) of the named sets that ship in scikit-learn, so planning needs no
#: scikit-learn (a test loads each and compares).
SIZES = {
    "digits-parity": (1797, 64),
    "digits": (1797, 64),
    "breast-cancer": (569, 30),
    "diabetes": (442, 10),
}
#: Suffixes of dataset files (:func:`load_file`).
FILE_SUFFIXES = (".npz", ".csv")


def _synthetic_sizes(name: str) -> tuple[str, int, int] | None:
    """(kind, features, examples) of a ``synthetic-KIND[:F[:N]]`` name, else None."""
    base, _, sizes = name.partition(":")
    if not (base.startswith("synthetic-") and base in DATASETS):
        return None
    f, n = 20, 4000
    if sizes:
        try:
            parts = [int(v) for v in sizes.split(":")]
            f, n = (parts + [4000])[:2] if len(parts) == 1 else parts
        except ValueError:
            msg = f"Bad dataset sizes in {name!r}; use {base}:FEATURES[:EXAMPLES]."
            raise ValueError(msg) from None
        if f < 1 or n < 10:
            raise ValueError(f"Expected FEATURES >= 1 and EXAMPLES >= 10 in {name!r}.")
    return base.removeprefix("synthetic-"), f, n


def is_file(name: str) -> bool:
    """Whether a dataset name is a file's path (``PATH.npz`` / ``PATH.csv``, maybe pinned)."""
    return name.partition("@")[0].lower().endswith(FILE_SUFFIXES)


def load(name: str, *, seed: int = 0) -> Dataset:
    """Load a dataset by name with a seeded train/test split (20% test), or a file
    (:func:`load_file`).

    Synthetic sets take optional sizes: ``synthetic-logistic:FEATURES:EXAMPLES``.
    """
    if is_file(name):
        return load_file(name, seed=seed)
    synthetic = _synthetic_sizes(name)
    if synthetic is not None and ":" in name:
        kind, f, n = synthetic
        return _synthetic(kind, np.random.default_rng(seed), n=n, f=f)
    if name not in DATASETS:
        raise ValueError(
            f"Unknown dataset={name!r}; expected one of {sorted(DATASETS)} or a file "
            f"(PATH{' or PATH'.join(FILE_SUFFIXES)})."
        )
    return DATASETS[name](np.random.default_rng(seed))


def shape(name: str) -> tuple[int, int]:
    """(training examples, features) of a dataset, without loading a named one.

    >>> shape("digits-parity")
    (1438, 64)
    """
    if name in SIZES:
        n, f = SIZES[name]
        return n - int(round(TEST_FRACTION * n)), f
    synthetic = _synthetic_sizes(name)
    if synthetic is not None:
        _, f, n = synthetic
        return n - int(round(TEST_FRACTION * n)), f
    data = load(name, seed=0)
    return len(data.y_train), int(data.x_train.shape[1])


def load_file(name: str, *, seed: int = 0) -> Dataset:
    """A dataset file of your own (:func:`edgedp_sim.datafiles.load`)."""
    return datafiles.load(name, seed=seed)


def pin(name: str) -> str:
    """A dataset file's name with its SHA-256 (:func:`edgedp_sim.datafiles.pin`); others as is."""
    return datafiles.pin(name) if is_file(name) else name


def save(path, x, y, *, x_test=None, y_test=None, task: str | None = None) -> str:
    """Write numpy arrays as a dataset file (:func:`edgedp_sim.datafiles.save`)."""
    return datafiles.save(path, x, y, x_test=x_test, y_test=y_test, task=task)


#: Datasets whose regression targets are standardised too (:func:`_split`'s ``scale_y``).
_STANDARDIZED_TARGETS = ("diabetes", "synthetic-regression")


def standardized(name: str) -> tuple[bool, bool]:
    """(features, targets) standardised with training-set statistics by :func:`load`:
    the features of every named set (E‖x‖² = f over the training set), the regression
    targets of ``diabetes`` and ``synthetic-regression``. Other names (e.g.
    ``sensor-fusion:...``): neither.

    >>> standardized("digits-parity"), standardized("synthetic-linear:8"), standardized("x")
    ((True, False), (True, False), (False, False))
    """
    base = name.partition(":")[0]
    if base not in DATASETS:
        return False, False
    return True, base in _STANDARDIZED_TARGETS


def local_size(dataset: str | Dataset, nodes: int) -> int:
    """m = ⌊N / nodes⌋, every node's number of examples under :func:`partition` (N training
    examples; the same for every seed and scheme).

    >>> local_size("digits-parity", 4)
    359
    """
    _validate.integer(minimum=1, nodes=nodes)
    if isinstance(dataset, str):
        n, label = shape(dataset)[0], dataset
    else:
        n, label = len(dataset.y_train), dataset.name
    if n < nodes:
        raise ValueError(f"Expected at most {n} nodes for {label}, got {nodes}.")
    return n // nodes


def task_participation(task, *, nodes: int, steps: int) -> Participation:
    """The (k, b) the engines run for ``task`` (a :class:`~edgedp.plan.TaskSpec`) on
    ``nodes`` nodes over ``steps`` steps (``Participation.for_task`` of its local size)."""
    m = local_size(task.dataset, nodes)
    return Participation.for_task(steps, local_size=m, batch_size=task.batch_size)


def check_participation(
    participation: Participation, task, *, nodes: int, steps: int, name: str = "--participation"
) -> Participation:
    """Refuse a certified ``participation`` that does not cover what ``task`` runs.

    An ε computed for another participation certifies nothing that can run: the engines
    would refuse the plan (``edgedp.plan.batch_schedule``). ``name`` is how the caller's
    user sets it (a CLI option or a scenario key), used in the fix the message gives.

    Returns:
      The task's participation.

    Raises:
      ValueError: naming the requested and the needed (k, b) and the fix.

    >>> from edgedp.plan import TaskSpec
    >>> check_participation(  # doctest: +ELLIPSIS
    ...     Participation(3, 4), TaskSpec(batch_size=0), nodes=4, steps=10
    ... )
    Traceback (most recent call last):
    ...
    ValueError: --participation 3,4 does not cover this task: ... --participation 10,1
    """
    needed = task_participation(task, nodes=nodes, steps=steps)
    if participation.covers(needed):
        return needed
    m = local_size(task.dataset, nodes)
    fix = f"{needed.k},{needed.b}"
    fix = f"{name} {fix}" if name.startswith("--") else f'{name} = "{fix}"'
    raise ValueError(
        f"{name} {participation.k},{participation.b} does not cover this task: {m} examples "
        f"per node ({task.dataset} on {nodes} nodes) and batch {task.batch_size or m} give "
        f"b = {needed.b} batches per epoch, so every example takes part every b steps, "
        f"k = ⌈{steps}/{needed.b}⌉ = {needed.k} times; re-plan with {fix}"
    )


def partition(data: Dataset, nodes: int, *, scheme: str = "iid", seed: int = 0) -> FederatedData:
    """Split the training set into ``nodes`` equal local datasets (the remainder is dropped).

    Args:
      data: a loaded :class:`Dataset`.
      nodes: the number of nodes n.
      scheme: ``iid`` (a seeded random split) or ``dirichlet:ALPHA`` (see
        :func:`dirichlet_indices`; classification datasets only).
      seed: the partition's seed.

    >>> data = load("digits", seed=0)
    >>> fed = partition(data, 8, scheme="dirichlet:0.1", seed=0)
    >>> fed.x.shape, fed.y.shape
    ((8, 179, 64), (8, 179))
    """
    m = local_size(data, nodes)
    if scheme == "iid":
        order = np.random.default_rng(seed).permutation(len(data.y_train))[: nodes * m]
    elif scheme.startswith("dirichlet:"):
        try:
            alpha = float(scheme.removeprefix("dirichlet:"))
        except ValueError:
            alpha = -1.0
        if not alpha > 0:
            raise ValueError(f"Bad partition {scheme!r}; use dirichlet:ALPHA with ALPHA > 0.")
        if data.task not in CLASSIFICATION:
            raise ValueError(
                f"partition {scheme!r} skews labels; {data.name} is a regression dataset (use iid)."
            )
        labels = data.y_train.astype(np.int64)
        order = dirichlet_indices(labels, nodes, m, alpha=alpha, seed=seed).reshape(-1)
    else:
        raise ValueError(f"Unknown partition scheme={scheme!r}; expected iid or dirichlet:ALPHA.")
    x = data.x_train[order].reshape(nodes, m, -1)
    y = data.y_train[order].reshape(nodes, m)
    return FederatedData(x, y, data.x_test, data.y_test, data.task)


def _nearest_available(label: int, left: np.ndarray) -> int:
    """The label closest to ``label`` that still has examples (ties: the smaller one)."""
    avail = np.flatnonzero(left > 0)
    return int(avail[np.argmin(np.abs(avail - label))])


def dirichlet_indices(
    labels: np.ndarray, nodes: int, m: int, *, alpha: float, seed: int = 0
) -> np.ndarray:
    """Indices ``(nodes, m)`` of a Dirichlet(α) label-skewed partition, no example twice.

    Node by node: draw label proportions p ~ Dirichlet(α · q), where q is the training
    set's label distribution (so α → ∞ gives every node the global mix, i.e. IID, and
    ``alpha=inf`` uses q exactly; small α gives each node few labels), then label counts
    ~ Multinomial(m, p), then take that many examples of each label without replacement
    from a shuffled pool shared by all nodes. When a label's pool runs out, the remaining
    draws of that label come from the nearest label (by index) that still has examples; the
    total n·m ≤ N always fits. Later nodes therefore see more fallback when α is small.

    >>> idx = dirichlet_indices(np.repeat([0, 1, 2], 10), 3, 10, alpha=0.01, seed=1)
    >>> sorted(np.unique(idx).tolist()) == list(range(30))
    True
    """
    _validate.integer(minimum=1, nodes=nodes, m=m)
    if not alpha > 0:
        raise ValueError(f"Expected alpha={alpha!r} > 0.")
    labels = np.asarray(labels, dtype=np.int64)
    if nodes * m > len(labels):
        raise ValueError(f"Expected nodes*m={nodes * m} <= {len(labels)} examples.")
    rng = np.random.default_rng(seed)
    classes = int(labels.max()) + 1
    counts = np.bincount(labels, minlength=classes)
    prior = counts / counts.sum()
    present = prior > 0
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(classes)]
    left = counts.copy()
    out = np.empty((nodes, m), dtype=np.int64)
    for u in range(nodes):
        p = np.zeros(classes)
        if np.isinf(alpha):
            p = prior
        else:
            p[present] = rng.dirichlet(alpha * prior[present])
            if not (np.all(np.isfinite(p)) and p.sum() > 0):  # all-underflow at tiny α
                p = np.eye(classes)[rng.choice(classes, p=prior)]
        want = rng.multinomial(m, p / p.sum())
        taken = []
        for c in range(classes):
            need = int(want[c])
            while need > 0:
                src = c if left[c] > 0 else _nearest_available(c, left)
                k = min(need, int(left[src]))
                start = counts[src] - left[src]
                taken.append(pools[src][start : start + k])
                left[src] -= k
                need -= k
        out[u] = rng.permutation(np.concatenate(taken))
    return out


def write_shards(data: FederatedData, out) -> list:
    """Write node u's local set to ``out/node-U.npz`` (arrays ``x`` (m, f) and ``y`` (m,)),
    with the held-out ``x_test`` and ``y_test`` the simulator evaluates on (the agent
    reports its published model's loss on them; they never enter training).

    The format ``edgedp-agent`` reads (``data.shard`` in node.toml). Returns the paths.
    """
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for u in range(data.nodes):
        p = out / f"node-{u}.npz"
        held_out = {}
        if data.x_test is not None and data.y_test is not None:
            held_out = {"x_test": data.x_test, "y_test": data.y_test}
        np.savez(p, x=data.x[u], y=data.y[u], **held_out)
        paths.append(p)
    return paths
