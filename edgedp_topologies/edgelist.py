"""Plain-text edge lists.

Format: one ``u v`` pair per line (integer ids ``0..n-1``, whitespace separated); ``#``
starts a comment; blank lines are ignored. Three optional header comments are understood:

- ``# nodes: N`` declares the number of nodes (needed for isolated nodes); otherwise
  ``n = max id + 1``;
- ``# name: TEXT`` sets :attr:`Graph.name` (default: the file name without suffix);
- ``# label: ID TEXT`` sets the label of node ``ID`` (all nodes or none).

Every error names the file and line, e.g.
``karate.edges:12: expected two integer node ids, got 'a b c'``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from edgedp.errors import TopologyError
from edgedp.topology import Graph

__all__ = ["load_edge_list", "save_edge_list"]


def load_edge_list(path: str | os.PathLike[str]) -> Graph:
    """Read a graph from an edge-list file.

    Args:
        path: file to read.

    Returns:
        The graph, named by its ``# name:`` header or else by the file stem.

    Raises:
        TopologyError: malformed line, self loop, id out of range; the message names
            ``file:line``.
        OSError: the file cannot be read.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = Path(d) / "path.edges"
        ...     _ = p.write_text("# nodes: 4\\n0 1\\n1 2  # middle edge\\n")
        ...     g = load_edge_list(p)
        >>> print(g.n, g.edges, g.name)
        4 ((0, 1), (1, 2)) path
    """
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        return parse_edge_lines(f, source=str(path), default_name=path.stem)


def save_edge_list(
    graph: Graph, path: str | os.PathLike[str], *, comments: Iterable[str] = ()
) -> None:
    """Write a graph as an edge list that :func:`load_edge_list` reads back equal.

    Args:
        graph: graph to write.
        path: destination file (overwritten).
        comments: free-text lines written first, each prefixed with ``# ``.

    Example:
        >>> import tempfile
        >>> g = Graph(3, [(0, 2)], name="tiny", labels=("a", "b", "c"))
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_edge_list(g, Path(d) / "t.edges")
        ...     print(load_edge_list(Path(d) / "t.edges") == g)
        True
    """
    for label in graph.labels:
        if "\n" in label or "\r" in label or label != label.strip() or not label:
            raise ValueError(f"Cannot write label {label!r}: use non-empty one-line labels.")
    if "\n" in graph.name or "\r" in graph.name or graph.name != graph.name.strip():
        raise ValueError(f"Cannot write graph name {graph.name!r}: use a stripped one-line name.")
    lines = [f"# {c}".rstrip() for text in comments for c in text.splitlines()]
    lines += [f"# name: {graph.name}".rstrip(), f"# nodes: {graph.n}"]
    lines += [f"# label: {i} {label}" for i, label in enumerate(graph.labels)]
    lines += [f"{u} {v}" for u, v in graph.edges]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def parse_edge_lines(lines: Iterable[str], *, source: str, default_name: str = "") -> Graph:
    """Parse edge-list lines; errors are prefixed with ``source:line:``."""
    edges: list[tuple[int, int, int]] = []
    n: int | None = None
    name: str | None = None
    labels: dict[int, tuple[str, int]] = {}

    def fail(lineno: int | None, message: str) -> TopologyError:
        where = source if lineno is None else f"{source}:{lineno}"
        return TopologyError(f"{where}: {message}")

    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line.startswith("#"):
            key, sep, value = line[1:].strip().partition(":")
            key, value = key.strip(), value.strip()
            if not sep or key not in ("nodes", "name", "label"):
                continue
            if key == "nodes":
                if n is not None:
                    raise fail(lineno, "'# nodes:' given twice")
                if _int(value) is None or int(value) < 1:
                    raise fail(
                        lineno, f"expected '# nodes: N' with an integer N >= 1, got {value!r}"
                    )
                n = int(value)
            elif key == "name":
                name = value
            else:
                node, _, text = value.partition(" ")
                if _int(node) is None or int(node) < 0 or not text.strip():
                    raise fail(lineno, f"expected '# label: ID TEXT', got {value!r}")
                if int(node) in labels:
                    raise fail(lineno, f"node {node} labelled twice")
                labels[int(node)] = (text.strip(), lineno)
            continue
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        pair = [_int(t) for t in tokens]
        if len(pair) != 2 or None in pair:
            raise fail(lineno, f"expected two integer node ids, got {' '.join(tokens)!r}")
        u, v = pair
        if min(u, v) < 0:
            raise fail(lineno, f"negative node id in {u} {v}: ids are 0..n-1")
        if u == v:
            raise fail(lineno, f"self loop {u} {u}: gossip graphs have no self loops")
        edges.append((u, v, lineno))

    ids = [(max(u, v), lineno) for u, v, lineno in edges]
    ids += [(node, lineno) for node, (_, lineno) in labels.items()]
    if n is None:
        if not ids:
            raise fail(None, "no edges and no '# nodes: N' header")
        n = max(node for node, _ in ids) + 1
    for node, lineno in ids:
        if node >= n:
            raise fail(lineno, f"node id {node} out of range: '# nodes: {n}' allows 0..{n - 1}")
    if labels and len(labels) != n:
        missing = min(set(range(n)) - set(labels))
        raise fail(None, f"labels given for {len(labels)} of {n} nodes (node {missing} has none)")
    return Graph(
        n,
        tuple((u, v) for u, v, _ in edges),
        name=default_name if name is None else name,
        labels=tuple(labels[i][0] for i in range(n)) if labels else (),
    )


def _int(token: str) -> int | None:
    """The token as a plain decimal int, or None."""
    t = token[1:] if token.startswith(("+", "-")) else token
    return int(token) if t.isascii() and t.isdigit() else None
