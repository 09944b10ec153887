"""Named communication graphs for edgedp: generators, real data sets and edge-list files.

Every generator returns an :class:`edgedp.topology.Graph`. :func:`parse` turns a short
spec string (as used in scenario files and on the command line) into a graph:

- ``er:N:P[:SEED]``: connected Erdős–Rényi G(N, P);
- ``ring:N``: cycle on N nodes;
- ``torus:R:C``: R x C periodic grid (R, C >= 3);
- ``smallworld:N:K:P[:SEED]``: connected Watts–Strogatz, K even;
- ``complete:N``: complete graph; ``star:N``: star with centre 0;
- ``florentine``: Florentine families (Breiger & Pattison 1986);
- ``karate``: Zachary's karate club (Zachary 1977);
- a path to an edge-list file (format in :mod:`edgedp_topologies.edgelist`).

This package depends on numpy only (no networkx).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import MappingProxyType

from edgedp.topology import Graph
from edgedp_topologies.edgelist import load_edge_list, save_edge_list
from edgedp_topologies.generators import (
    complete,
    erdos_renyi,
    florentine_families,
    karate_club,
    ring,
    small_world,
    star,
    torus,
)

__all__ = [
    "GENERATORS",
    "complete",
    "erdos_renyi",
    "florentine_families",
    "karate_club",
    "load_edge_list",
    "parse",
    "ring",
    "save_edge_list",
    "small_world",
    "star",
    "torus",
]

GENERATORS: MappingProxyType[str, Callable[..., Graph]] = MappingProxyType(
    {
        "er": erdos_renyi,
        "ring": ring,
        "torus": torus,
        "smallworld": small_world,
        "complete": complete,
        "star": star,
        "florentine": florentine_families,
        "karate": karate_club,
    }
)
"""Read-only mapping from spec name to generator."""

# name -> (usage, parameter names and types, number of required parameters)
_SPECS: MappingProxyType[str, tuple[str, tuple[tuple[str, type], ...], int]] = MappingProxyType(
    {
        "er": ("er:N:P[:SEED]", (("N", int), ("P", float), ("SEED", int)), 2),
        "ring": ("ring:N", (("N", int),), 1),
        "torus": ("torus:R:C", (("R", int), ("C", int)), 2),
        "smallworld": (
            "smallworld:N:K:P[:SEED]",
            (("N", int), ("K", int), ("P", float), ("SEED", int)),
            3,
        ),
        "complete": ("complete:N", (("N", int),), 1),
        "star": ("star:N", (("N", int),), 1),
        "florentine": ("florentine", (), 0),
        "karate": ("karate", (), 0),
    }
)
_ALL_USAGES = ", ".join(usage for usage, _, _ in _SPECS.values())


def parse(spec: str) -> Graph:
    """Build the graph named by a spec string, or load an existing edge-list file.

    Args:
        spec: one of the specs in the module docstring, or a path to an edge-list file.

    Returns:
        The graph.

    Raises:
        ValueError: unknown name or bad parameters; the one-line message names the fix.

    Example:
        >>> print(len(parse("ring:6").edges), parse("er:8:0.5:3") == erdos_renyi(8, 0.5, seed=3))
        6 True
    """
    if not isinstance(spec, str):
        raise TypeError(f"Expected spec to be a str, got {type(spec).__name__}.")
    if os.path.isfile(spec):
        return load_edge_list(spec)
    name, *raw = spec.strip().split(":")
    if name not in _SPECS and (os.sep in spec or "/" in spec or spec.endswith(".edges")):
        raise ValueError(f"edge-list file not found: {spec!r}; check the path.")
    if name not in _SPECS:
        raise ValueError(
            f"unknown topology {spec!r}: use {_ALL_USAGES}, or a path to an edge-list file."
        )
    usage, params, required = _SPECS[name]
    if not required <= len(raw) <= len(params):
        raise ValueError(f"bad topology spec {spec!r}: expected {usage}.")
    args = []
    for (pname, kind), text in zip(params, raw, strict=False):
        try:
            args.append(kind(text))
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise ValueError(
                f"bad topology spec {spec!r}: {pname}={text!r} is not {what}; expected {usage}."
            ) from None
    try:
        return GENERATORS[name](*args)
    except (TypeError, ValueError) as err:
        raise type(err)(f"bad topology spec {spec!r} ({usage}): {err}") from err
