# ruff: noqa: N803, N806  (paper letters W, n: see docs/NOTATION.md)
"""Communication graphs, gossip matrices and their checks.

A :class:`Graph` is an immutable undirected graph on nodes ``0..n-1``. A gossip (mixing)
matrix ``W`` is an ``n x n`` float64 array with ``W[u, v] > 0`` only on edges and on the
diagonal; node ``u`` averages ``sum_v W[u, v] * x_v``. Every builder has the same signature
``f(graph) -> W`` and is listed in :data:`WEIGHTINGS`.

Engines mix in the fixed order given by :func:`mixing_table` (increasing neighbour id, self
at its sorted position) so that all engines produce bitwise-identical models.

This module depends on numpy only: it runs on devices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from edgedp import _validate
from edgedp.errors import TopologyError

__all__ = [
    "WEIGHTINGS",
    "Graph",
    "components",
    "custom",
    "is_connected",
    "max_degree",
    "metropolis_hastings",
    "mixing_table",
    "neighbour_lists",
    "spectral_gap",
    "uniform_neighbour",
    "validate",
    "weighting_table",
]


@dataclass(frozen=True, slots=True)
class Graph:
    """An undirected simple graph on nodes ``0..n-1``.

    Edges are normalized on construction: each becomes ``(u, v)`` with ``u < v``, the tuple is
    sorted and duplicates (also ``(v, u)``) are merged. Self loops and ids outside ``0..n-1``
    raise :class:`~edgedp.errors.TopologyError`.

    Attributes:
        n: number of nodes.
        edges: sorted tuple of ``(u, v)`` pairs with ``u < v``.
        name: free-form name, e.g. ``"ring:8"``.
        labels: optional node labels (empty, or one string per node).

    Example:
        >>> g = Graph(4, [(1, 0), (2, 1), (1, 2), (3, 2)], name="path")
        >>> g.edges
        ((0, 1), (1, 2), (2, 3))
        >>> print(int(g.degrees.sum()))
        6
    """

    n: int
    edges: tuple[tuple[int, int], ...]
    name: str = ""
    labels: tuple[str, ...] = ()
    _nbrs: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate.integer(minimum=1, n=self.n)
        n = int(self.n)
        norm = set()
        for edge in self.edges:
            pair = tuple(edge)
            if len(pair) != 2:
                raise TopologyError(f"Expected each edge to be a pair (u, v), got {edge!r}.")
            u, v = pair
            _validate.integer(u=u, v=v)
            u, v = int(u), int(v)
            if u == v:
                raise TopologyError(
                    f"Self loop ({u}, {v}) in edges: a Graph has no self loops "
                    "(the diagonal of W carries the self weight)."
                )
            for node in (u, v):
                if not 0 <= node < n:
                    raise TopologyError(
                        f"Edge ({u}, {v}) names node {node}, but n={n} (ids are 0..{n - 1})."
                    )
            norm.add((min(u, v), max(u, v)))
        labels = tuple(self.labels)
        if labels and len(labels) != n:
            raise ValueError(f"Expected {n} labels (one per node), got {len(labels)}.")
        if not all(isinstance(label, str) for label in labels):
            raise TypeError("Expected labels to be strings.")
        edges = tuple(sorted(norm))
        nbrs: list[list[int]] = [[] for _ in range(n)]
        for u, v in edges:
            nbrs[u].append(v)
            nbrs[v].append(u)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "_nbrs", tuple(tuple(sorted(x)) for x in nbrs))

    @classmethod
    def from_adjacency(cls, adjacency: Any, name: str = "") -> Graph:
        """Build a Graph from a square array; nonzero off-diagonal entries are edges.

        Example:
            >>> print(len(Graph.from_adjacency([[0, 1, 1], [1, 0, 0], [1, 0, 0]]).edges))
            2
        """
        A = _square(adjacency, "adjacency")
        u, v = np.nonzero((A != 0) | (A.T != 0))
        keep = u < v
        edges = zip(u[keep].tolist(), v[keep].tolist(), strict=True)
        return cls(A.shape[0], tuple(edges), name=name)

    @property
    def adjacency(self) -> np.ndarray:
        """Symmetric boolean ``n x n`` adjacency matrix (a fresh array)."""
        A = np.zeros((self.n, self.n), dtype=bool)
        e = self._edge_array()
        A[e[:, 0], e[:, 1]] = True
        A[e[:, 1], e[:, 0]] = True
        return A

    @property
    def degrees(self) -> np.ndarray:
        """Degree of each node, int64 array of length n."""
        return np.array([len(x) for x in self._nbrs], dtype=np.int64)

    def neighbours(self, u: int) -> tuple[int, ...]:
        """Sorted neighbour ids of node ``u`` (``u`` itself excluded)."""
        _validate.integer(u=u)
        if not 0 <= u < self.n:
            raise ValueError(f"Expected 0 <= u={u} < n={self.n}.")
        return self._nbrs[u]

    def _edge_array(self) -> np.ndarray:
        return np.array(self.edges, dtype=np.int64).reshape(-1, 2)


def metropolis_hastings(graph: Graph) -> np.ndarray:
    """Metropolis–Hastings weights: ``W[u, v] = 1 / (1 + max(deg u, deg v))`` on edges.

    The diagonal takes the rest of each row. The result is symmetric and doubly stochastic.

    Example:
        >>> W = metropolis_hastings(Graph(3, [(0, 1), (1, 2)]))
        >>> print(W[0, 0], W[0, 1], W[1, 1])
        0.6666666666666667 0.3333333333333333 0.33333333333333337
    """
    deg = graph.degrees
    e = graph._edge_array()
    w = 1.0 / (1.0 + np.maximum(deg[e[:, 0]], deg[e[:, 1]]))
    return _fill(graph.n, e, w)


def max_degree(graph: Graph) -> np.ndarray:
    """Max-degree weights: ``W[u, v] = 1 / (1 + max degree)`` on edges, diagonal the rest.

    Symmetric and doubly stochastic.

    Example:
        >>> print(max_degree(Graph(3, [(0, 1), (1, 2)]))[0, 0])
        0.6666666666666667
    """
    e = graph._edge_array()
    top = int(graph.degrees.max())
    return _fill(graph.n, e, np.full(len(e), 1.0 / (1.0 + top)))


def uniform_neighbour(graph: Graph) -> np.ndarray:
    """Uniform weights ``W[u, v] = 1 / (deg u + 1)`` for ``v`` in ``N(u)`` and ``v = u``.

    Row-stochastic only (not symmetric unless the graph is regular).

    Example:
        >>> print(uniform_neighbour(Graph(3, [(0, 1), (1, 2)]))[1, 0])
        0.3333333333333333
    """
    W = np.zeros((graph.n, graph.n))
    for u in range(graph.n):
        idx = np.array((*graph.neighbours(u), u), dtype=np.int64)
        W[u, idx] = 1.0 / len(idx)
    return W


def custom(
    matrix: Any,
    graph: Graph | None = None,
    *,
    doubly_stochastic: bool = False,
    symmetric: bool = False,
    atol: float = 1e-10,
) -> np.ndarray:
    """Validate a user-given gossip matrix and return it as a float64 copy.

    Args:
        matrix: ``n x n`` array-like of weights.
        graph, doubly_stochastic, symmetric, atol: as in :func:`validate`.

    Raises:
        TopologyError: see :func:`validate`.

    Example:
        >>> print(custom([[0.5, 0.5], [0.5, 0.5]]).sum())
        2.0
    """
    W = np.array(matrix, dtype=np.float64, copy=True)
    validate(W, graph, doubly_stochastic=doubly_stochastic, symmetric=symmetric, atol=atol)
    return W


WEIGHTINGS: MappingProxyType[str, Callable[[Graph], np.ndarray]] = MappingProxyType(
    {
        "metropolis-hastings": metropolis_hastings,
        "max-degree": max_degree,
        "uniform-neighbour": uniform_neighbour,
    }
)
"""Read-only mapping from weighting name to builder ``f(graph) -> W``."""


def _fill(n: int, e: np.ndarray, w: np.ndarray) -> np.ndarray:
    W = np.zeros((n, n))
    W[e[:, 0], e[:, 1]] = w
    W[e[:, 1], e[:, 0]] = w
    W[np.arange(n), np.arange(n)] = 1.0 - W.sum(axis=1)
    return W


def weighting_table(
    graph: Graph, weighting: str = "metropolis-hastings", *, atol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
    """``mixing_table(WEIGHTINGS[weighting](graph))``, checked as ``validate(W, graph)``
    checks it, without the n × n matrix: O(n·m) memory for a graph of n nodes and largest
    degree m − 1, so plans of 10⁴–10⁵ nodes build on a laptop.

    The bits are those of the dense path: a row's diagonal is 1 − the sum of its
    off-diagonal weights taken over one length-n scratch row, which numpy sums exactly as
    it sums that row of the matrix (tested against the dense path).

    Raises:
        ValueError: unknown weighting.
        TopologyError: as :func:`validate` (for these weightings only a disconnected graph
            or rows that do not sum to 1 can occur).

    Example:
        >>> g = Graph(3, [(0, 1), (1, 2)])
        >>> index, weight = weighting_table(g)
        >>> dense = mixing_table(metropolis_hastings(g))
        >>> bool(np.array_equal(index, dense[0]) and weight.tobytes() == dense[1].tobytes())
        True
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"Unknown weighting={weighting!r}; expected one of {sorted(WEIGHTINGS)}.")
    _validate.non_negative(atol=atol)
    n = graph.n
    deg = graph.degrees
    top = int(deg.max()) if n else 0
    nbrs = [np.array(sorted(graph.neighbours(u)), dtype=np.int64) for u in range(n)]
    m = 1 + max((len(v) for v in nbrs), default=0)
    index = np.repeat(np.arange(n, dtype=np.int64)[:, None], m, axis=1)
    weight = np.zeros((n, m))
    row = np.zeros(n)  # the scratch row: one row of W at a time
    for u, v in enumerate(nbrs):
        ids = np.sort(np.append(v, u))
        if weighting == "uniform-neighbour":
            w = np.full(len(ids), 1.0 / len(ids))
        else:
            off = (
                1.0 / (1.0 + np.maximum(deg[u], deg[v]))
                if weighting == "metropolis-hastings"
                else np.full(len(v), 1.0 / (1.0 + top))
            )
            row[v] = off
            diag = 1.0 - row.sum()
            row[v] = 0.0
            w = np.insert(off, int(np.searchsorted(v, u)), diag)
        index[u, : len(ids)] = ids
        weight[u, : len(ids)] = w
    bad = np.argwhere(weight < 0)
    if len(bad):
        u, j = bad[0]
        raise TopologyError(f"W has a negative weight W[{u}, {index[u, j]}] = {weight[u, j]:.12g}.")
    _check_sums(np.array([np.sum(w) for w in weight]), "row", atol)
    _check_connected(components(graph))
    return index, weight


def _check_connected(comps: list[tuple[int, ...]]) -> None:
    if len(comps) > 1:
        raise TopologyError(
            f"W is disconnected: its support graph has {len(comps)} components "
            f"(e.g. node {comps[0][0]} and node {comps[1][0]} are in different components)."
        )


def validate(
    W: Any,
    graph: Graph | None = None,
    *,
    doubly_stochastic: bool = False,
    symmetric: bool = False,
    atol: float = 1e-10,
) -> None:
    """Check that ``W`` is a usable gossip matrix; raise a TopologyError naming the defect.

    Checks, in order: square; finite; nonnegative; rows sum to 1; columns sum to 1 (if
    ``doubly_stochastic``); ``W == W.T`` (if ``symmetric``); weights only on edges of
    ``graph`` (if given); the support graph of ``W`` (nonzero off-diagonal entries) is
    connected, and strongly connected when ``W`` is not symmetric.

    Args:
        W: candidate ``n x n`` matrix.
        graph: optional graph whose edges (and the diagonal) must contain the support of W.
        doubly_stochastic: require column sums of 1 too.
        symmetric: require symmetry.
        atol: absolute tolerance for sums and symmetry.

    Raises:
        TopologyError: with a message naming the row, column, entry or nodes at fault.

    Example:
        >>> validate([[0.5, 0.4], [0.5, 0.5]])
        Traceback (most recent call last):
        ...
        edgedp.errors.TopologyError: W is not row-stochastic: row 0 sums to 0.9 (expected 1).
    """
    _validate.non_negative(atol=atol)
    W = _square(W, "W")
    n = W.shape[0]
    if graph is not None and graph.n != n:
        raise TopologyError(f"W is {n}x{n} but the graph has n={graph.n} nodes.")
    bad = np.argwhere(W < 0)
    if len(bad):
        u, v = bad[0]
        raise TopologyError(f"W has a negative weight W[{u}, {v}] = {W[u, v]:.12g}.")
    _check_sums(W.sum(axis=1), "row", atol)
    if doubly_stochastic:
        _check_sums(W.sum(axis=0), "column", atol)
    is_sym = np.allclose(W, W.T, rtol=0.0, atol=atol)
    if symmetric and not is_sym:
        u, v = np.unravel_index(np.argmax(np.abs(W - W.T)), W.shape)
        raise TopologyError(
            f"W is not symmetric: W[{u}, {v}] = {W[u, v]:.12g} but W[{v}, {u}] = {W[v, u]:.12g}."
        )
    off_diag = (W != 0) & ~np.eye(n, dtype=bool)
    if graph is not None:
        bad = np.argwhere(off_diag & ~graph.adjacency)
        if len(bad):
            u, v = bad[0]
            raise TopologyError(
                f"W puts weight {W[u, v]:.12g} on ({u}, {v}), which is not an edge of the graph"
                f"{' ' + repr(graph.name) if graph.name else ''}."
            )
    _check_connected(components(off_diag))
    if not np.array_equal(off_diag, off_diag.T):  # directed support: need strong connectivity
        for reverse in (False, True):
            support = off_diag.T if reverse else off_diag
            seen = _reach([np.flatnonzero(row).tolist() for row in support], 0)
            if len(seen) < n:
                v = min(set(range(n)) - seen)
                src, dst = (v, 0) if reverse else (0, v)
                raise TopologyError(
                    f"W is not strongly connected: node {src} cannot reach node {dst} "
                    "in its support graph."
                )


def components(graph_or_adjacency: Graph | Any) -> list[tuple[int, ...]]:
    """Connected components (edges taken as undirected), each a sorted tuple of node ids.

    Components are ordered by their smallest node.

    Example:
        >>> components(Graph(5, [(0, 3), (1, 2)]))
        [(0, 3), (1, 2), (4,)]
    """
    lists = _undirected_lists(graph_or_adjacency)
    seen: set[int] = set()
    out = []
    for start in range(len(lists)):
        if start not in seen:
            comp = _reach(lists, start)
            seen |= comp
            out.append(tuple(sorted(comp)))
    return out


def is_connected(graph_or_adjacency: Graph | Any) -> bool:
    """True if the graph (or the undirected support of a square array) is connected.

    Example:
        >>> print(is_connected(Graph(3, [(0, 1), (1, 2)])), is_connected(Graph(3, [(0, 1)])))
        True False
    """
    lists = _undirected_lists(graph_or_adjacency)
    return len(_reach(lists, 0)) == len(lists)


def spectral_gap(W: Any) -> float:
    """Spectral gap ``1 - |lambda_2|`` of a gossip matrix.

    ``|lambda_2|`` is the second largest eigenvalue modulus; ``eigvalsh`` is used when W is
    symmetric and ``eigvals`` otherwise. A one-node matrix has gap 1.

    Example:
        >>> ring = Graph(8, [(i, (i + 1) % 8) for i in range(8)])
        >>> print(round(spectral_gap(metropolis_hastings(ring)), 6))  # 2/3 (1 - cos(2 pi/8))
        0.195262
        >>> print(round(spectral_gap(metropolis_hastings(Graph.from_adjacency(1 - np.eye(5)))), 12))
        1.0
    """
    W = _square(W, "W").astype(np.float64)
    if W.shape[0] == 1:
        return 1.0
    if np.allclose(W, W.T, rtol=0.0, atol=1e-12):
        moduli = np.abs(np.linalg.eigvalsh(W))
    else:
        moduli = np.abs(np.linalg.eigvals(W))
    moduli.sort()
    return float(1.0 - moduli[-2])


def mixing_table(W: Any) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-order neighbour table used by every engine to mix.

    Row ``u`` lists the ids ``v`` with ``W[u, v] != 0`` or ``v == u`` in increasing order
    (self at its sorted position), then pads at the end with index ``u`` and weight 0.0.

    Args:
        W: ``n x n`` gossip matrix.

    Returns:
        ``(index, weight)``: int64 and float64 arrays of shape ``(n, m)`` where
        ``m = 1 + max number of nonzero off-diagonal entries in a row``.

    Example:
        >>> index, weight = mixing_table(metropolis_hastings(Graph(3, [(0, 1), (1, 2)])))
        >>> print(index.tolist())
        [[0, 1, 0], [0, 1, 2], [1, 2, 2]]
        >>> print(weight[0].tolist())
        [0.6666666666666667, 0.3333333333333333, 0.0]
    """
    W = _square(W, "W").astype(np.float64)
    n = W.shape[0]
    support = W != 0
    support[np.arange(n), np.arange(n)] = True
    m = int(support.sum(axis=1).max())
    index = np.repeat(np.arange(n, dtype=np.int64)[:, None], m, axis=1)
    weight = np.zeros((n, m))
    for u in range(n):
        ids = np.flatnonzero(support[u])
        index[u, : len(ids)] = ids
        weight[u, : len(ids)] = W[u, ids]
    return index, weight


def _square(x: Any, name: str) -> np.ndarray:
    """Return x as a finite square 2-D numeric array or raise TopologyError."""
    A = np.asarray(x)
    if A.dtype.kind not in "biuf":
        raise TypeError(f"Expected {name} to be a real numeric array, got dtype {A.dtype}.")
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise TopologyError(f"Expected {name} to be a non-empty square matrix, got {A.shape}.")
    if A.dtype.kind == "f" and not np.all(np.isfinite(A)):
        u, v = np.argwhere(~np.isfinite(A))[0]
        raise TopologyError(f"{name} has non-finite entries, e.g. {name}[{u}, {v}] = {A[u, v]}.")
    return A


def _check_sums(sums: np.ndarray, what: str, atol: float) -> None:
    off = np.flatnonzero(np.abs(sums - 1.0) > atol)
    if len(off):
        i = off[0]
        text = f"{sums[i]:.12g}"
        text = repr(float(sums[i])) if float(text) == 1.0 else text  # show tiny deviations
        raise TopologyError(f"W is not {what}-stochastic: {what} {i} sums to {text} (expected 1).")


def _undirected_lists(obj: Graph | Any) -> list[Iterable[int]]:
    if isinstance(obj, Graph):
        return list(obj._nbrs)
    A = _square(obj, "adjacency") != 0
    A = A | A.T
    return [np.flatnonzero(row).tolist() for row in A]


def _reach(lists: list[Iterable[int]], start: int) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        for v in lists[stack.pop()]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def neighbour_lists(mixing_index, mixing_weight) -> list[list[int]]:
    """Each node's graph neighbours (non-zero weight) from a plan's padded mixing rows.

    >>> neighbour_lists([[0, 1, 0], [1, 0, 0]], [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    [[0, 1], [1, 0]]
    """
    return [
        [int(v) for v, w in zip(idx, wt, strict=True) if w != 0]
        for idx, wt in zip(mixing_index, mixing_weight, strict=True)
    ]
