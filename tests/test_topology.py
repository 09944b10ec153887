# ruff: noqa: N803, N806  (paper letters W, A: see docs/NOTATION.md)
"""Tests for edgedp.topology (graphs, gossip matrices, checks) and the edgedp_topologies package."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import edgedp_topologies
from edgedp import topology
from edgedp.errors import TopologyError
from edgedp.topology import Graph


@dataclass(frozen=True)
class Case:
    spec: str
    n: int


GRAPHS = (
    Case("ring:7", 7),
    Case("torus:3:4", 12),
    Case("complete:5", 5),
    Case("star:6", 6),
    Case("er:12:0.4:1", 12),
    Case("smallworld:12:4:0.3:2", 12),
    Case("florentine", 15),
    Case("karate", 34),
)
DOUBLY_STOCHASTIC = {"metropolis-hastings", "max-degree"}


def _edge_set(g: nx.Graph) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in g.edges()}


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize("case", GRAPHS, ids=lambda c: c.spec)
@pytest.mark.parametrize("weighting", sorted(topology.WEIGHTINGS))
def test_weighting_contract(weighting: str, case: Case) -> None:
    graph = edgedp_topologies.parse(case.spec)
    W = topology.WEIGHTINGS[weighting](graph)
    assert graph.n == case.n
    assert W.dtype == np.float64 and W.shape == (case.n, case.n)
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    # support is exactly the edges plus the diagonal (all three builders weight every edge)
    expected_support = graph.adjacency | np.eye(case.n, dtype=bool)
    np.testing.assert_array_equal(W != 0, expected_support)
    doubly = weighting in DOUBLY_STOCHASTIC
    if doubly:
        np.testing.assert_array_equal(W, W.T)
        np.testing.assert_allclose(W.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    topology.validate(W, graph, doubly_stochastic=doubly, symmetric=doubly)
    assert 0 < topology.spectral_gap(W) <= 1 + 1e-12


def test_weightings_mapping_is_read_only() -> None:
    with pytest.raises(TypeError):
        topology.WEIGHTINGS["mine"] = topology.max_degree  # type: ignore[index]
    assert set(topology.WEIGHTINGS) == {"metropolis-hastings", "max-degree", "uniform-neighbour"}


def test_weights_by_hand_on_path() -> None:
    # path 0-1-2-3: degrees 1, 2, 2, 1
    g = Graph(4, [(0, 1), (1, 2), (2, 3)])
    mh = topology.metropolis_hastings(g)
    assert mh[0, 1] == 1 / 3 and mh[1, 2] == 1 / 3 and mh[0, 0] == 1 - 1 / 3
    md = topology.max_degree(g)
    assert md[0, 1] == 1 / 3 and md[0, 0] == 1 - 1 / 3
    un = topology.uniform_neighbour(g)
    assert un[0, 0] == un[0, 1] == 1 / 2
    assert un[1, 0] == un[1, 1] == un[1, 2] == 1 / 3


def test_star_metropolis_differs_from_uniform() -> None:
    g = edgedp_topologies.star(5)  # centre degree 4, leaves degree 1
    mh = topology.metropolis_hastings(g)
    assert mh[1, 0] == 1 / 5 and mh[1, 1] == 1 - 1 / 5
    un = topology.uniform_neighbour(g)
    assert un[1, 0] == 1 / 2 and un[0, 1] == 1 / 5
    with pytest.raises(TopologyError, match="not symmetric"):
        topology.validate(un, g, symmetric=True)


def test_custom_returns_validated_float_copy() -> None:
    m = np.array([[1, 0], [0, 1]], dtype=np.int64)
    with pytest.raises(TopologyError, match="disconnected"):
        topology.custom(m)
    src = [[0.5, 0.5], [0.5, 0.5]]
    W = topology.custom(src, Graph(2, [(0, 1)]), doubly_stochastic=True, symmetric=True)
    assert W.dtype == np.float64
    W[0, 0] = 7.0
    assert src[0][0] == 0.5
    with pytest.raises(TopologyError, match="not an edge"):
        topology.custom(np.full((3, 3), 1 / 3), edgedp_topologies.parse("star:3"))


# --------------------------------------------------------------------------- validate()

_ROW_ONLY = np.array([[0.5, 0.5], [1.0, 0.0]])


@pytest.mark.parametrize(
    ("W", "kwargs", "match"),
    [
        (np.full((2, 3), 1 / 3), {}, r"square matrix, got \(2, 3\)"),
        (np.zeros((0, 0)), {}, "non-empty square"),
        (np.array([[0.5, np.nan], [0.5, 0.5]]), {}, r"non-finite entries, e\.g\. W\[0, 1\] = nan"),
        (np.array([[0.5, 0.5], [np.inf, 0.5]]), {}, r"W\[1, 0\] = inf"),
        (np.array([[1.1, -0.1], [0.5, 0.5]]), {}, r"negative weight W\[0, 1\] = -0\.1\b"),
        (
            np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0, 0.45, 0.45]]),
            {},
            r"not row-stochastic: row 2 sums to 0\.9 ",
        ),
        (_ROW_ONLY, {"doubly_stochastic": True}, r"not column-stochastic: column 0 sums to 1\.5"),
        (_ROW_ONLY, {"symmetric": True}, r"not symmetric: W\[0, 1\] = 0\.5 but W\[1, 0\] = 1\b"),
        (
            np.kron(np.eye(2), np.full((2, 2), 0.5)),
            {},
            r"disconnected: its support graph has 2 components .*node 0 and node 2",
        ),
        (np.array([[1.0, 0.0], [0.5, 0.5]]), {}, "not strongly connected: node 0 cannot reach"),
        (np.array([[0.5, 0.5], [0.0, 1.0]]), {}, "not strongly connected: node 1 cannot reach"),
    ],
)
def test_validate_errors(W: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        topology.validate(W, **kwargs)


def test_validate_graph_errors() -> None:
    path = Graph(3, [(0, 1), (1, 2)], name="path3")
    with pytest.raises(TopologyError, match=r"3x3 but the graph has n=4"):
        topology.validate(np.eye(3), Graph(4, [(0, 1)]))
    with pytest.raises(TopologyError, match=r"weight 0\.333333333333 on \(0, 2\).*'path3'"):
        topology.validate(np.full((3, 3), 1 / 3), path)
    # a W that drops an edge of a connected graph is reported as disconnected
    W = np.array([[1.0, 0, 0], [0, 0.5, 0.5], [0, 0.5, 0.5]])
    with pytest.raises(TopologyError, match="2 components"):
        topology.validate(W, path)


def test_validate_tolerance_and_types() -> None:
    W = topology.metropolis_hastings(edgedp_topologies.ring(5))
    W[0, 0] += 1e-12
    topology.validate(W)  # within the default atol=1e-10
    with pytest.raises(TopologyError, match=r"row 0 sums to 1\.00000000000\d+ \(expected 1\)"):
        topology.validate(W, atol=1e-13)
    with pytest.raises(TypeError, match="real numeric"):
        topology.validate(np.array([["a"]]))
    with pytest.raises(ValueError, match="atol"):
        topology.validate(W, atol=-1.0)
    assert topology.validate(np.ones((1, 1))) is None


# --------------------------------------------------------------------------- Graph


def test_graph_normalizes_edges() -> None:
    g = Graph(4, [(3, 2), (0, 1), (1, 0), (2, 3)], name="x")
    assert g.edges == ((0, 1), (2, 3))
    assert g == Graph(4, ((0, 1), (2, 3)), name="x")
    assert g.neighbours(2) == (3,)
    assert hash(g) == hash(Graph(4, [(1, 0), (3, 2)], name="x"))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((3, [(2, 2)]), {}, TopologyError, r"Self loop \(2, 2\)"),
        ((5, [(0, 5)]), {}, TopologyError, r"names node 5, but n=5 \(ids are 0\.\.4\)"),
        ((5, [(-1, 2)]), {}, TopologyError, "names node -1"),
        ((3, [(0, 1, 2)]), {}, TopologyError, r"pair \(u, v\), got \(0, 1, 2\)"),
        ((3, [(0, 1.0)]), {}, TypeError, r"v=1\.0 to be an integer"),
        ((0, []), {}, ValueError, "n=0 >= 1"),
        ((2.0, []), {}, TypeError, "n=2.0"),
        ((2, []), {"labels": ("a",)}, ValueError, "Expected 2 labels"),
    ],
)
def test_graph_errors(args: tuple, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Graph(*args, **kwargs)


def test_neighbours_range() -> None:
    with pytest.raises(ValueError, match="u=3 < n=3"):
        edgedp_topologies.ring(3).neighbours(3)


@st.composite
def graphs(draw: st.DrawFn, max_n: int = 12) -> Graph:
    n = draw(st.integers(1, max_n))
    pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda e: e[0] != e[1])
    edges = draw(st.lists(pairs, max_size=3 * n)) if n > 1 else []
    return Graph(n, edges)


@given(graphs())
def test_graph_views_agree(g: Graph) -> None:
    assert all(u < v for u, v in g.edges) and list(g.edges) == sorted(set(g.edges))
    A = g.adjacency
    np.testing.assert_array_equal(A, A.T)
    assert not A.diagonal().any()
    np.testing.assert_array_equal(g.degrees, A.sum(axis=1))
    for u in range(g.n):
        assert g.neighbours(u) == tuple(np.flatnonzero(A[u]).tolist())
    assert Graph.from_adjacency(A) == g


@given(graphs())
def test_components_agree_with_networkx(g: Graph) -> None:
    ref = nx.Graph()
    ref.add_nodes_from(range(g.n))
    ref.add_edges_from(g.edges)
    expected = sorted(tuple(sorted(c)) for c in nx.connected_components(ref))
    assert topology.components(g) == expected
    assert topology.components(g.adjacency.astype(float)) == expected
    assert topology.is_connected(g) == nx.is_connected(ref)
    assert topology.is_connected(g.adjacency) == nx.is_connected(ref)


# --------------------------------------------------------------------------- spectral gap


@pytest.mark.parametrize("n", range(3, 13))
def test_spectral_gap_ring_closed_form(n: int) -> None:
    # closed form: MH on a ring has weights 1/3, eigenvalues 1/3 + 2/3 cos(2 pi k / n)
    W = topology.metropolis_hastings(edgedp_topologies.ring(n))
    expected = 2 / 3 * (1 - np.cos(2 * np.pi / n))
    assert topology.spectral_gap(W) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_spectral_gap_complete_is_one(n: int) -> None:
    # closed form: MH on K_n is J/n, eigenvalues 1 and 0
    W = topology.metropolis_hastings(edgedp_topologies.complete(n))
    assert topology.spectral_gap(W) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n", [3, 4, 7])
def test_spectral_gap_nonsymmetric_closed_form(n: int) -> None:
    # closed form: W = (I + P)/2 for the cyclic shift P has |lambda_k| = |cos(pi k / n)|
    W = 0.5 * (np.eye(n) + np.roll(np.eye(n), 1, axis=1))
    topology.validate(W, doubly_stochastic=True)
    assert topology.spectral_gap(W) == pytest.approx(1 - np.cos(np.pi / n), abs=1e-12)


# --------------------------------------------------------------------------- mixing table


def test_mixing_table_by_hand() -> None:
    # star(4), MH: centre row 1/4 everywhere; leaf rows 1/4 to centre, 3/4 self
    index, weight = topology.mixing_table(topology.metropolis_hastings(edgedp_topologies.star(4)))
    assert index.dtype == np.int64 and weight.dtype == np.float64
    assert index.tolist() == [[0, 1, 2, 3], [0, 1, 1, 1], [0, 2, 2, 2], [0, 3, 3, 3]]
    assert weight.tolist() == [
        [0.25, 0.25, 0.25, 0.25],
        [0.25, 0.75, 0.0, 0.0],
        [0.25, 0.75, 0.0, 0.0],
        [0.25, 0.75, 0.0, 0.0],
    ]


def test_mixing_table_keeps_zero_self_weight_in_place() -> None:
    index, weight = topology.mixing_table(np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert index.tolist() == [[0, 1], [0, 1]]
    assert weight.tolist() == [[0.0, 1.0], [1.0, 0.0]]


@pytest.mark.parametrize("case", GRAPHS, ids=lambda c: c.spec)
def test_mixing_table_reconstructs_w(case: Case) -> None:
    g = edgedp_topologies.parse(case.spec)
    W = topology.uniform_neighbour(g)
    index, weight = topology.mixing_table(W)
    assert index.shape == weight.shape == (g.n, 1 + int(g.degrees.max()))
    for u in range(g.n):
        k = 1 + len(g.neighbours(u))
        assert index[u, :k].tolist() == sorted((*g.neighbours(u), u))
        assert np.all(index[u, k:] == u) and np.all(weight[u, k:] == 0.0)
    rebuilt = np.zeros_like(W)
    np.add.at(rebuilt, (np.arange(g.n)[:, None], index), weight)
    np.testing.assert_array_equal(rebuilt, W)


# --------------------------------------------------------------------------- generators


def test_real_graphs_match_networkx() -> None:
    karate = edgedp_topologies.karate_club()
    assert (karate.n, len(karate.edges), karate.name) == (34, 78, "karate")
    assert set(karate.edges) == _edge_set(nx.karate_club_graph())
    ref = nx.florentine_families_graph()
    names = sorted(ref.nodes())
    ids = {name: i for i, name in enumerate(names)}
    flor = edgedp_topologies.florentine_families()
    assert (flor.n, len(flor.edges), flor.labels) == (15, 20, tuple(names))
    assert set(flor.edges) == _edge_set(nx.relabel_nodes(ref, ids))


@pytest.mark.parametrize("n", [3, 4, 9])
def test_simple_generators_match_networkx(n: int) -> None:
    assert set(edgedp_topologies.ring(n).edges) == _edge_set(nx.cycle_graph(n))
    assert set(edgedp_topologies.complete(n).edges) == _edge_set(nx.complete_graph(n))
    assert set(edgedp_topologies.star(n).edges) == _edge_set(nx.star_graph(n - 1))
    assert (
        edgedp_topologies.erdos_renyi(n, 1.0, seed=5).edges == edgedp_topologies.complete(n).edges
    )


@pytest.mark.parametrize(("rows", "cols"), [(3, 3), (3, 5), (4, 6)])
def test_torus_matches_networkx(rows: int, cols: int) -> None:
    ref = nx.grid_2d_graph(rows, cols, periodic=True)
    ref = nx.relabel_nodes(ref, {(r, c): r * cols + c for r, c in ref.nodes()})
    assert set(edgedp_topologies.torus(rows, cols).edges) == _edge_set(ref)


@pytest.mark.parametrize(("n", "k"), [(8, 2), (10, 4), (11, 6)])
def test_small_world_without_rewiring_is_the_lattice(n: int, k: int) -> None:
    assert set(edgedp_topologies.small_world(n, k, 0.0).edges) == _edge_set(
        nx.watts_strogatz_graph(n, k, 0)
    )


@given(n=st.integers(1, 12), p=st.floats(0.3, 1.0), seed=st.integers(0, 2**32))
def test_erdos_renyi_connected_and_reproducible(n: int, p: float, seed: int) -> None:
    g = edgedp_topologies.erdos_renyi(n, p, seed=seed)
    assert g.n == n and topology.is_connected(g)
    assert g == edgedp_topologies.erdos_renyi(n, p, seed=seed)


@given(
    n=st.integers(5, 14),
    half_k=st.integers(1, 2),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32),
)
def test_small_world_connected_and_reproducible(n: int, half_k: int, p: float, seed: int) -> None:
    g = edgedp_topologies.small_world(n, 2 * half_k, p, seed=seed)
    assert topology.is_connected(g)
    assert len(g.edges) == n * half_k  # rewiring moves edges, never adds or drops one
    assert g == edgedp_topologies.small_world(n, 2 * half_k, p, seed=seed)


def test_random_generators_depend_on_seed() -> None:
    assert edgedp_topologies.erdos_renyi(20, 0.3, seed=0) != edgedp_topologies.erdos_renyi(
        20, 0.3, seed=1
    )
    assert edgedp_topologies.small_world(20, 4, 0.5, seed=0) != edgedp_topologies.small_world(
        20, 4, 0.5, seed=1
    )


def test_generator_errors() -> None:
    with pytest.raises(TopologyError, match=r"n=30, p=0\.01, seed=0\): no connected graph in 3"):
        edgedp_topologies.erdos_renyi(30, 0.01, max_attempts=3)
    with pytest.raises(TopologyError, match=r"n=4, p=0\) is never connected"):
        edgedp_topologies.erdos_renyi(4, 0.0)
    with pytest.raises(ValueError, match=r"p=1\.5 <= 1"):
        edgedp_topologies.erdos_renyi(4, 1.5)
    with pytest.raises(ValueError, match="n=2 >= 3"):
        edgedp_topologies.ring(2)
    with pytest.raises(ValueError, match="cols=2 >= 3"):
        edgedp_topologies.torus(3, 2)
    with pytest.raises(ValueError, match="even k"):
        edgedp_topologies.small_world(10, 3, 0.1)
    with pytest.raises(ValueError, match="even k"):
        edgedp_topologies.small_world(4, 4, 0.1)
    with pytest.raises(ValueError, match="n=1 >= 2"):
        edgedp_topologies.star(1)


def test_generators_mapping() -> None:
    assert set(edgedp_topologies.GENERATORS) == {
        "er", "ring", "torus", "smallworld", "complete", "star", "florentine", "karate"
    }  # fmt: skip
    with pytest.raises(TypeError):
        edgedp_topologies.GENERATORS["x"] = edgedp_topologies.ring  # type: ignore[index]


def test_package_imports_without_networkx_or_scipy() -> None:
    code = (
        "import sys, edgedp_topologies, edgedp.topology; "
        "bad = {'networkx', 'scipy'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- edge lists


@given(g=graphs(), name=st.text("abc-:9", max_size=6), labelled=st.booleans())
def test_edge_list_round_trip(g: Graph, name: str, labelled: bool) -> None:
    labels = tuple(f"node {i}" for i in range(g.n)) if labelled else ()
    g = Graph(g.n, g.edges, name=name, labels=labels)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.edges"
        edgedp_topologies.save_edge_list(g, path, comments=["provenance line"])
        assert edgedp_topologies.load_edge_list(path) == g


def test_load_edge_list_format(tmp_path: Path) -> None:
    path = tmp_path / "mine.edges"
    path.write_text("# a comment\n\n# nodes: 6\n 1\t0  # trailing comment\n2 1\n0 1\n")
    g = edgedp_topologies.load_edge_list(path)
    assert (g.n, g.edges, g.name, g.labels) == (6, ((0, 1), (1, 2)), "mine", ())
    path.write_text("3 4\n")  # without header: n = max id + 1
    assert edgedp_topologies.load_edge_list(path).n == 5


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("0 1\na b c\n", r"bad\.edges:2: expected two integer node ids, got 'a b c'"),
        ("0 1\n\n# c\n7\n", r"bad\.edges:4: expected two integer node ids, got '7'"),
        ("0 1\n1.5 2\n", r"bad\.edges:2: expected two integer"),
        ("0 1\n2 2\n", r"bad\.edges:2: self loop 2 2"),
        ("0 -1\n", r"bad\.edges:1: negative node id"),
        ("# nodes: 3\n0 1\n1 5\n", r"bad\.edges:3: node id 5 out of range: '# nodes: 3'"),
        ("# nodes: x\n", r"bad\.edges:1: expected '# nodes: N'"),
        ("# nodes: 3\n# nodes: 3\n", r"bad\.edges:2: '# nodes:' given twice"),
        ("# label: 0\n0 1\n", r"bad\.edges:1: expected '# label: ID TEXT'"),
        ("# label: 0 a\n0 1\n", r"bad\.edges: labels given for 1 of 2 nodes \(node 1 has none\)"),
        ("# only comments\n", r"bad\.edges: no edges and no '# nodes: N' header"),
    ],
)
def test_load_edge_list_errors(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.edges"
    path.write_text(text)
    with pytest.raises(TopologyError, match=match):
        edgedp_topologies.load_edge_list(path)


def test_save_edge_list_rejects_multiline_labels(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one-line labels"):
        edgedp_topologies.save_edge_list(Graph(2, [(0, 1)], labels=("a\nb", "c")), tmp_path / "x")


# --------------------------------------------------------------------------- parse()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("er:10:0.5", lambda: edgedp_topologies.erdos_renyi(10, 0.5)),
        ("er:10:0.5:7", lambda: edgedp_topologies.erdos_renyi(10, 0.5, seed=7)),
        ("ring:5", lambda: edgedp_topologies.ring(5)),
        ("torus:3:4", lambda: edgedp_topologies.torus(3, 4)),
        ("smallworld:10:4:0.2", lambda: edgedp_topologies.small_world(10, 4, 0.2)),
        ("smallworld:10:4:0.2:3", lambda: edgedp_topologies.small_world(10, 4, 0.2, seed=3)),
        ("complete:4", lambda: edgedp_topologies.complete(4)),
        ("star:4", lambda: edgedp_topologies.star(4)),
        ("florentine", edgedp_topologies.florentine_families),
        ("karate", edgedp_topologies.karate_club),
    ],
)
def test_parse_specs(spec: str, expected) -> None:
    assert edgedp_topologies.parse(spec) == expected()


def test_parse_file(tmp_path: Path) -> None:
    path = tmp_path / "k.edges"
    edgedp_topologies.save_edge_list(edgedp_topologies.karate_club(), path)
    assert edgedp_topologies.parse(str(path)) == edgedp_topologies.karate_club()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("foo", r"unknown topology 'foo': use er:N:P\[:SEED\], ring:N, .*edge-list file\.$"),
        ("ring", r"bad topology spec 'ring': expected ring:N\.$"),
        ("ring:5:3", r"bad topology spec 'ring:5:3': expected ring:N\.$"),
        ("florentine:3", r"expected florentine\.$"),
        ("er:10:x", r"'er:10:x': P='x' is not a number; expected er:N:P\[:SEED\]"),
        ("er:10:0.5:1.5", r"SEED='1\.5' is not an integer"),
        ("ring:2", r"bad topology spec 'ring:2' \(ring:N\): Expected n=2 >= 3"),
        ("er:30:0", r"bad topology spec 'er:30:0' .*never connected"),
        ("no/such/file.edges", r"edge-list file not found: 'no/such/file\.edges'"),
    ],
)
def test_parse_errors(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        edgedp_topologies.parse(spec)


# ---------------------------------------------------------------- mixing table without W
@given(
    st.integers(1, 40),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
    st.sampled_from(sorted(topology.WEIGHTINGS)),
)
def test_weighting_table_has_the_bits_of_the_dense_path(n, p, seed, weighting):
    r = np.random.default_rng(seed)
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if r.random() < p]
    edges += [(u, u + 1) for u in range(n - 1)]  # connected
    g = Graph(n, edges)
    W = topology.WEIGHTINGS[weighting](g)
    topology.validate(W, g)
    index, weight = topology.mixing_table(W)
    got = topology.weighting_table(g, weighting)
    assert np.array_equal(got[0], index) and got[1].tobytes() == weight.tobytes()


def test_weighting_table_refuses_what_validate_refuses():
    g = Graph(5, [(0, 1), (2, 3)])
    with pytest.raises(TopologyError) as dense:
        topology.validate(topology.metropolis_hastings(g), g)
    with pytest.raises(TopologyError) as table:
        topology.weighting_table(g)
    assert str(table.value) == str(dense.value) and "disconnected" in str(table.value)
    with pytest.raises(ValueError, match="Unknown weighting"):
        topology.weighting_table(g, "metropolis")


def test_weighting_table_of_a_large_graph_needs_no_square_matrix():
    import tracemalloc

    n = 20_000  # W would be 3.2 GB
    g = Graph(n, [(u, (u + 1) % n) for u in range(n)])
    tracemalloc.start()
    try:
        index, weight = topology.weighting_table(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert index.shape == weight.shape == (n, 3)
    assert peak < 40 * 2**20, peak  # tables, neighbour lists and one scratch row
    assert index[0].tolist() == [0, 1, n - 1]
    assert weight[0].tolist() == [1 - (1 / 3 + 1 / 3), 1 / 3, 1 / 3]
