"""Named graph generators, all returning :class:`edgedp.topology.Graph`.

Random generators take an integer ``seed`` and draw from ``numpy.random.default_rng(seed)``
only, so the same arguments always give the same graph. They redraw (continuing the same
generator) until the graph is connected.
"""

from __future__ import annotations

import math
from importlib import resources

import numpy as np

from edgedp import _validate
from edgedp.errors import TopologyError
from edgedp.topology import Graph, is_connected
from edgedp_topologies.edgelist import parse_edge_lines

__all__ = [
    "complete",
    "erdos_renyi",
    "florentine_families",
    "karate_club",
    "ring",
    "small_world",
    "star",
    "torus",
]


def erdos_renyi(n: int, p: float, seed: int = 0, max_attempts: int = 1000) -> Graph:
    """Connected Erdős–Rényi graph G(n, p).

    Each of the ``n(n-1)/2`` possible edges is present independently with probability ``p``;
    disconnected draws are discarded and the next draw of the same generator is used.

    Args:
        n: number of nodes (>= 1).
        p: edge probability in [0, 1].
        seed: integer seed of ``numpy.random.default_rng``.
        max_attempts: number of draws before giving up.

    Raises:
        TopologyError: no connected draw within ``max_attempts``.

    Example:
        >>> print(erdos_renyi(10, 0.5, seed=1) == erdos_renyi(10, 0.5, seed=1))
        True
        >>> print(len(erdos_renyi(6, 1.0).edges))
        15
    """
    _validate.integer(minimum=1, n=n, max_attempts=max_attempts)
    _validate.in_range(0.0, 1.0, p=p)
    _validate.integer(seed=seed)
    name = f"er:{n}:{p}:{seed}"
    if n > 1 and p == 0:
        raise TopologyError(f"erdos_renyi(n={n}, p=0) is never connected; use p > 0.")
    rng = np.random.default_rng(seed)
    for _ in range(max_attempts):
        edges = []
        for u in range(n - 1):  # row by row: O(n) memory, same stream as one big draw
            hits = np.flatnonzero(rng.random(n - 1 - u) < p) + (u + 1)
            edges.extend((u, v) for v in hits.tolist())
        graph = Graph(n, tuple(edges), name)
        if is_connected(graph):
            return graph
    hint = f"p above ln(n)/n = {math.log(n) / n:.3g}"
    raise TopologyError(
        f"erdos_renyi(n={n}, p={p}, seed={seed}): no connected graph in {max_attempts} "
        f"attempts; use {hint} or raise max_attempts."
    )


def ring(n: int) -> Graph:
    """Cycle on ``n >= 3`` nodes: ``u`` is adjacent to ``u +- 1 mod n``.

    Example:
        >>> print(ring(5).edges)
        ((0, 1), (0, 4), (1, 2), (2, 3), (3, 4))
    """
    _validate.integer(minimum=3, n=n)
    return Graph(n, tuple((u, (u + 1) % n) for u in range(n)), name=f"ring:{n}")


def torus(rows: int, cols: int) -> Graph:
    """2-D torus (periodic grid); node ``(r, c)`` has id ``r * cols + c``; 4-regular.

    Example:
        >>> g = torus(3, 4)
        >>> print(g.n, len(g.edges), set(g.degrees.tolist()))
        12 24 {4}
    """
    _validate.integer(minimum=3, rows=rows, cols=cols)
    edges = []
    for r in range(rows):
        for c in range(cols):
            u = r * cols + c
            edges.append((u, r * cols + (c + 1) % cols))
            edges.append((u, ((r + 1) % rows) * cols + c))
    return Graph(rows * cols, tuple(edges), name=f"torus:{rows}:{cols}")


def small_world(n: int, k: int, p: float, seed: int = 0, max_attempts: int = 1000) -> Graph:
    """Connected Watts–Strogatz small-world graph.

    Start from the ring lattice where each node is joined to its ``k/2`` nearest neighbours
    on each side. For ``j = 1..k/2`` and ``u = 0..n-1`` the lattice edge ``(u, u+j mod n)``
    is rewired with probability ``p`` to ``(u, w)``, ``w`` uniform among nodes that are not
    ``u`` and not already adjacent to ``u`` (a node adjacent to all others keeps its edge).
    Disconnected results are redrawn.

    Args:
        n: number of nodes (>= 3).
        k: even lattice degree, ``2 <= k < n``.
        p: rewiring probability in [0, 1].
        seed: integer seed of ``numpy.random.default_rng``.
        max_attempts: number of draws before giving up.

    Example:
        >>> g = small_world(20, 4, 0.2, seed=3)
        >>> print(g.n, len(g.edges))
        20 40
    """
    _validate.integer(minimum=3, n=n)
    _validate.integer(minimum=1, max_attempts=max_attempts)
    _validate.integer(minimum=2, k=k)
    _validate.integer(seed=seed)
    _validate.in_range(0.0, 1.0, p=p)
    if k % 2 or k >= n:
        raise ValueError(f"Expected an even k with 2 <= k < n={n}, got k={k}.")
    rng = np.random.default_rng(seed)
    for _ in range(max_attempts):
        adj = [{(u + s) % n for s in range(-k // 2, k // 2 + 1) if s} for u in range(n)]
        for j in range(1, k // 2 + 1):
            for u in range(n):
                v = (u + j) % n
                if rng.random() >= p:
                    continue
                if len(adj[u]) >= n - 1:
                    continue
                w = u
                while w == u or w in adj[u]:  # rejection: uniform over the allowed nodes
                    w = int(rng.integers(n))
                adj[u].discard(v)
                adj[v].discard(u)
                adj[u].add(w)
                adj[w].add(u)
        edges = tuple((u, v) for u in range(n) for v in adj[u] if u < v)
        graph = Graph(n, edges, name=f"smallworld:{n}:{k}:{p}:{seed}")
        if is_connected(graph):
            return graph
    raise TopologyError(
        f"small_world(n={n}, k={k}, p={p}, seed={seed}): no connected graph in "
        f"{max_attempts} attempts; lower p, raise k or raise max_attempts."
    )


def complete(n: int) -> Graph:
    """Complete graph on ``n >= 1`` nodes.

    Example:
        >>> print(len(complete(6).edges))
        15
    """
    _validate.integer(minimum=1, n=n)
    return Graph(n, tuple((u, v) for u in range(n) for v in range(u + 1, n)), f"complete:{n}")


def star(n: int) -> Graph:
    """Star on ``n >= 2`` nodes with centre 0.

    Example:
        >>> print(star(4).edges)
        ((0, 1), (0, 2), (0, 3))
    """
    _validate.integer(minimum=2, n=n)
    return Graph(n, tuple((0, v) for v in range(1, n)), name=f"star:{n}")


def florentine_families() -> Graph:
    """Florentine families marriage network (Breiger & Pattison 1986), 15 nodes, 20 edges.

    Node ids follow the sorted family names, kept in ``labels``.

    Example:
        >>> g = florentine_families()
        >>> print(g.n, len(g.edges), g.labels[8])
        15 20 Medici
    """
    return _packaged("florentine_families.edges")


def karate_club() -> Graph:
    """Zachary's karate club (Zachary 1977), 34 nodes, 78 edges, ids as in networkx.

    Example:
        >>> g = karate_club()
        >>> print(g.n, len(g.edges), int(g.degrees.max()))
        34 78 17
    """
    return _packaged("karate_club.edges")


def _packaged(filename: str) -> Graph:
    text = (
        resources.files("edgedp_topologies").joinpath("data", filename).read_text(encoding="utf-8")
    )
    return parse_edge_lines(text.splitlines(), source=filename)
