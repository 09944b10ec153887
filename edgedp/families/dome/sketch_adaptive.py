"""DOME's adaptive sketch (paper 002 Alg. 2) fed by a lagged network aggregate on gossip.

Paper 002 updates the sketch from the server's decoded aggregate ĝ_t (history streaming
PCA + orthogonal Gaussian probes). On a gossip graph there is no server; here the
aggregate is the network sum of the *released* coefficients, carried along a public
spanning tree and used after a public lag, so every node computes the same basis bits:

* **Tree** (:func:`spanning_tree`): BFS from node 0 over the plan's graph, neighbours in
  increasing id. The sum of a round's releases is defined by the tree: the partial sum of
  node u is c_u + Σ_{children v, increasing id} partial(v) (:func:`tree_sum`), the root's
  partial is the aggregate A(s) — the same additions in the same order everywhere.
* **Windows and lag**: with ``refresh = P`` the basis changes every P rounds; window j's
  aggregate is A_j = Σ_{s in window j, increasing} A(s), decoded as
  ĝ_j = S_j A_j / (n P B) (the mean decoded update of the window). The basis of window w is
  the initial orthogonal Gaussian sketch for w < D (``lag = D``) and otherwise
  UpdateSketch(U, Λ, ĝ_{w−D}) applied to the windows in order. Pipelining partial sums up
  and the total down the tree delivers A(s) to every node at the start of round
  s + max(1, 2H) (H the tree height), hence D ≥ 1 + ⌈(max(1, 2H) − 1)/P⌉
  (:func:`min_lag`).
* **UpdateSketch** (:func:`update_sketch`, Alg. 2): Y = U Λ + ĝ ĝᵀ U (first update:
  Y = ĝ ĝᵀ S), QR by classical Gram–Schmidt applied twice (fixed-order reductions, no
  BLAS), Λ'_j = ‖R[:, j]‖ (line 8), keep the first r columns with
  Σ_{i≤r} Λ'² ≥ q Σ Λ'² (line 10; at most k − ``probes``), append k − r Gaussian probes
  from the public seed orthogonalized against them (lines 12-15). A column of Y that is
  numerically dependent on the previous ones (e.g. all but one at the first update, where
  Y has rank 1) is replaced by the corresponding column of the previous basis
  orthogonalized against the earlier ones — the role of the arbitrary completion that a
  Householder QR would return.

Privacy: the aggregate is a sum of released values (each c_u is the Gaussian release the
accountant certifies), so every basis is post-processing and costs nothing; it is public to
whoever sees all messages, exactly like the random bases.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from edgedp import rng
from edgedp.errors import EdgeDPError
from edgedp.families.dome import sketch

__all__ = [
    "AdaptiveSketch",
    "MissingAggregateError",
    "PerTrial",
    "Tree",
    "TreeAggregator",
    "initial_basis",
    "min_lag",
    "spanning_tree",
    "tree_sum",
    "update_sketch",
]

_PROBE_SECRET = b"edgedp.dome.adaptive-probes.v1"
_DEPENDENT = 1e-10  # residual / column norm below which a column counts as dependent


class Tree:
    """A rooted spanning tree: ``parent[u]`` (−1 at the root), sorted ``children[u]``, depth."""

    def __init__(self, parent: list[int]) -> None:
        self.parent = tuple(parent)
        n = len(parent)
        children: list[list[int]] = [[] for _ in range(n)]
        for u, p in enumerate(parent):
            if p >= 0:
                children[p].append(u)
        self.children = tuple(tuple(sorted(c)) for c in children)
        depth = [0] * n
        order = [u for u in range(n) if parent[u] < 0]
        if len(order) != 1:
            raise ValueError(f"Expected one root, got {len(order)}.")
        queue = deque(order)
        seen = 0
        while queue:
            u = queue.popleft()
            seen += 1
            for v in self.children[u]:
                depth[v] = depth[u] + 1
                queue.append(v)
        if seen != n:
            raise ValueError("The parent list is not a tree spanning every node.")
        self.depth = tuple(depth)
        self.height = max(depth)

    def neighbours(self, u: int) -> tuple[int, ...]:
        p = self.parent[u]
        return tuple(sorted(((p,) if p >= 0 else ()) + self.children[u]))


def spanning_tree(neighbours: list[list[int]] | np.ndarray) -> Tree:
    """BFS tree from node 0, neighbours visited in increasing id (public, deterministic).

    ``neighbours[u]`` lists u's graph neighbours (u itself and repeats are ignored).

    >>> spanning_tree([[1, 3], [0, 2], [1, 3], [2, 0]]).parent
    (-1, 0, 1, 0)
    """
    n = len(neighbours)
    parent = [-2] * n
    parent[0] = -1
    queue = deque([0])
    while queue:
        u = queue.popleft()
        for v in sorted({int(v) for v in neighbours[u]}):
            if v != u and parent[v] == -2:
                parent[v] = u
                queue.append(v)
    if -2 in parent:
        raise ValueError("The graph is not connected; the adaptive basis needs a spanning tree.")
    return Tree(parent)


def tree_sum(tree: Tree, values: np.ndarray) -> np.ndarray:
    """Σ_u values[..., u, :] in the tree's order (the aggregate the protocol computes)."""

    def partial(u: int) -> np.ndarray:
        out = values[..., u, :]
        for v in tree.children[u]:
            out = out + partial(v)
        return out

    return partial(0)


def min_lag(height: int, refresh: int) -> int:
    """Smallest window lag D with A_{w−D} at every node before window w starts.

    >>> min_lag(2, 1), min_lag(2, 4), min_lag(0, 1)
    (4, 2, 1)
    """
    if refresh < 1:
        raise ValueError(f"Expected refresh={refresh} >= 1 for an adaptive basis.")
    return 1 + -(-(max(1, 2 * height) - 1) // refresh)


def initial_basis(spec: sketch.SketchSpec, d: int) -> sketch.Basis:
    """S_0: the plan's orthogonal Gaussian sketch (the ``gaussian`` family's first basis)."""
    fixed = sketch.SketchSpec(dim=spec.dim, basis="gaussian", seed=spec.seed, refresh=0)
    return sketch.basis(fixed, 0, d)


def _orthonormalize(vectors, fallback, Q):  # noqa: N803
    """CGS2 of ``vectors`` rows after the rows of Q; returns (rows, column norms of R).

    R's column j holds the projection coefficients of both passes (summed) and the residual
    norm; a dependent row is replaced by ``fallback[j]`` orthogonalized (its R column is
    still that of the original row).
    """
    m = len(Q)
    out = np.empty((m + len(vectors), vectors.shape[1]))
    if m:
        out[:m] = Q
    norms = np.empty(len(vectors))
    for j, y in enumerate(vectors):
        i = m + j
        v, coef = y, np.zeros(i)
        for _ in range(2):
            if i:
                c = sketch._row_dots(out[:i], v)
                v = v - sketch._combine(out[:i], c)
                coef = coef + c
        res = math.sqrt(float(np.sum(v * v)))
        norms[j] = math.sqrt(float(np.sum(coef * coef)) + res * res)
        if not res > _DEPENDENT * math.sqrt(float(np.sum(y * y))):
            v = fallback[j]
            for _ in range(2):
                if i:
                    v = v - sketch._combine(out[:i], sketch._row_dots(out[:i], v))
            res = math.sqrt(float(np.sum(v * v)))
            if not res > _DEPENDENT:
                raise FloatingPointError("adaptive sketch: no independent completion column")
        out[i] = v / res
    return out[m:], norms


def update_sketch(
    spec: sketch.SketchSpec,
    previous: sketch.Basis,
    U: np.ndarray | None,  # noqa: N803 (paper letters, docs/NOTATION.md)
    lam: np.ndarray | None,
    g_hat: np.ndarray,
    index: int,
) -> tuple[sketch.Basis, np.ndarray, np.ndarray]:
    """Paper 002 Alg. 2: (S_new, U, Λ) from the previous state and the decoded aggregate.

    ``U`` is (k, d) (rows = columns of the paper's U), ``lam`` (k,); both None before the
    first update. ``index`` keys the probes Ω (public seed, one stream per update).
    """
    d, k = previous.d, previous.k
    prev_rows = previous.rows if previous.rows is not None else previous.dense().T  # "gaussian"
    src = prev_rows if U is None else U
    dots = sketch._row_dots(src, g_hat)
    Y = dots[:, None] * g_hat[None, :]  # noqa: N806 (rows: ĝ ĝᵀ u_j)
    if U is not None:
        assert lam is not None  # U and lam are set together
        Y = lam[:, None] * U + Y  # noqa: N806
    U_new, lam_new = _orthonormalize(Y, prev_rows, np.empty((0, d)))  # noqa: N806
    energy = lam_new * lam_new
    total = float(np.sum(energy))
    # Alg. 2 line 10: the first r columns carry a proportion q of the energy (r = 0 for a
    # zero aggregate; rounding in the cumulative sum never makes q = 1 keep fewer than all)
    reached = np.nonzero(np.cumsum(energy) >= spec.energy * total)[0]
    r = 0 if total == 0 else (int(reached[0]) + 1 if reached.size else k)
    r = min(r, k - spec.probes)
    key = rng.derive_key(_PROBE_SECRET, spec.seed, d, k)
    omega = rng.generator(key, index).standard_normal((k - r, d))
    probes, _ = _orthonormalize(omega, omega, U_new[:r])
    rows = np.concatenate([U_new[:r], probes])
    return sketch.Basis("gaussian", d, k, rows=rows), U_new, lam_new


class AdaptiveSketch:
    """One node's (or one batch trial's) view of the adaptive bases.

    ``basis(t)`` returns S of round t's window; ``deliver(s, A)`` hands over round s's
    network aggregate A(s) (k floats), rounds in increasing order from 0. Window j's
    aggregate is consumed when its last round is delivered; the basis of window w needs
    windows ≤ w − D delivered, otherwise :meth:`basis` raises (a node never sends in a
    basis it cannot compute). Keeps the bases of windows w − D … w and (U, Λ).
    """

    def __init__(self, spec: sketch.SketchSpec, d: int, *, nodes: int, batch_size: int):
        if spec.basis != "adaptive":
            raise ValueError(f"Expected an adaptive SketchSpec, got basis={spec.basis!r}.")
        self.spec, self.d = spec, d
        self.scale = 1.0 / (nodes * spec.refresh * batch_size)
        self.bases: dict[int, sketch.Basis] = {w: initial_basis(spec, d) for w in range(spec.lag)}
        # mean removal: m̄ of each window (zeros until the first aggregate is in)
        self.means: dict[int, np.ndarray] = {w: np.zeros(d) for w in range(spec.lag)}
        self.moment, self.consumed = np.zeros(d), 0
        self.U: np.ndarray | None = None
        self.lam: np.ndarray | None = None
        self.next_round = 0  # next round whose aggregate deliver() expects
        self.window_sum: np.ndarray | None = None

    def basis(self, round_: int) -> sketch.Basis:
        w = round_ // self.spec.refresh
        if w not in self.bases:
            raise LookupError(
                f"adaptive basis of window {w} (round {round_}) is not available: the "
                f"aggregates of rounds < {round_ + 1 - self.spec.lag * self.spec.refresh} "
                f"have not all arrived (delivered up to round {self.next_round - 1})"
            )
        return self.bases[w]

    def mean(self, round_: int) -> np.ndarray | None:
        """m̄ of round t's window with ``mean_removal`` (paper 002 Alg. 1 line 9), else None."""
        if not self.spec.mean_removal:
            return None
        self.basis(round_)  # same availability as the basis
        return self.means[round_ // self.spec.refresh]

    def deliver(self, round_: int, aggregate: np.ndarray) -> None:
        if round_ != self.next_round:
            raise ValueError(f"Expected the aggregate of round {self.next_round}, got {round_}.")
        aggregate = np.asarray(aggregate, dtype=np.float64)
        if aggregate.shape != (self.spec.dim,) or not np.all(np.isfinite(aggregate)):
            raise ValueError(f"Expected a finite aggregate of shape ({self.spec.dim},).")
        self.window_sum = aggregate if self.window_sum is None else self.window_sum + aggregate
        self.next_round += 1
        P, D = self.spec.refresh, self.spec.lag  # noqa: N806
        if self.next_round % P:
            return
        j = round_ // P
        S_j = self.bases[j]  # noqa: N806
        g_hat = S_j.lift(self.window_sum) * self.scale
        self.window_sum = None
        if self.spec.mean_removal:  # Alg. 1 lines 17-18 on the network aggregate
            b1 = self.spec.beta1
            g_hat = g_hat + self.means[j]
            self.moment = b1 * self.moment + (1.0 - b1) * g_hat
            self.consumed += 1
            self.means[j + D] = self.moment / (1.0 - b1**self.consumed)
        newest = self.bases[j + D - 1]
        self.bases[j + D], self.U, self.lam = update_sketch(
            self.spec, newest, self.U, self.lam, g_hat, j
        )
        for w in [w for w in self.bases if w < j + 1]:
            del self.bases[w]
            self.means.pop(w, None)


class PerTrial:
    """Bases of a batch engine's trials, applied along the leading (trial) axis."""

    def __init__(self, bases: list[sketch.Basis]) -> None:
        self.bases = bases
        self.d, self.k = bases[0].d, bases[0].k

    def _map(self, fn, x: np.ndarray, width: int) -> np.ndarray:
        out = np.empty((*x.shape[:-1], width))
        for i, b in enumerate(self.bases):
            out[i] = fn(b, x[i])
        return out

    def project(self, x: np.ndarray) -> np.ndarray:
        return self._map(sketch.Basis.project, np.asarray(x, dtype=np.float64), self.k)

    def lift(self, c: np.ndarray) -> np.ndarray:
        return self._map(sketch.Basis.lift, np.asarray(c, dtype=np.float64), self.d)

    def row_energy(self) -> np.ndarray:
        return np.stack([b.row_energy() for b in self.bases])[:, None, :]


class MissingAggregateError(EdgeDPError, RuntimeError):
    """A node lacks a spanning-tree frame it needs: it cannot compute the shared basis."""


class TreeAggregator:
    """One device's part of the spanning-tree all-reduce of the releases, and its bases.

    Node u at depth ℓ_u (tree height H) sends, with its round-t gossip message, the partial
    sum of round t − (H − ℓ_u) to its parent and the total of round t − H − ℓ_u to its
    children (one k-float frame per tree edge and direction). It learns A(s) at the end of
    round s + max(H, 1) − 1 (root) or s + H + ℓ_u − 1, and hands it to its
    :class:`AdaptiveSketch`. Without faults every frame arrives within its round.
    """

    def __init__(self, spec, d: int, *, tree: Tree, node: int, batch_size: int) -> None:
        self.tree, self.node = tree, node
        self.H, self.level = tree.height, tree.depth[node]  # noqa: N806 (H: height)
        self.parent, self.children = tree.parent[node], tree.children[node]
        self.sketch = AdaptiveSketch(spec, d, nodes=len(tree.parent), batch_size=batch_size)
        self.own: dict[int, np.ndarray] = {}
        self.partials: dict[int, dict[int, np.ndarray]] = {}
        self.totals: dict[int, np.ndarray] = {}

    def basis(self, round_: int) -> sketch.Basis:
        return self.sketch.basis(round_)

    def release(self, round_: int, coef: np.ndarray) -> None:
        self.own[round_] = np.array(coef, dtype=np.float64)

    def _partial(self, s: int) -> np.ndarray:
        out = self.own[s]
        got = self.partials.get(s, {})
        for v in self.children:
            if v not in got:
                raise MissingAggregateError(
                    f"node {self.node}: no partial sum of round {s} from child {v}; the "
                    "adaptive basis cannot be computed (faults are not supported)"
                )
            out = out + got[v]
        return out

    def expects(self, sender: int, round_: int) -> bool:
        """Whether ``sender``'s round-``round_`` message carries a tree frame for us."""
        if sender == self.parent:  # total of round t − H − ℓ_parent
            return round_ - self.H - self.tree.depth[sender] >= 0
        if sender in self.children:  # partial of round t − (H − ℓ_child)
            return round_ - self.H + self.tree.depth[sender] >= 0
        return False

    def frames_out(self, round_: int) -> dict[int, np.ndarray]:
        """The frame for each tree neighbour, after this round's release."""
        out = {}
        s_up = round_ - (self.H - self.level)
        if self.parent >= 0 and s_up >= 0:
            out[self.parent] = self._partial(s_up)
        s_down = round_ - self.H - self.level
        if s_down >= 0 and self.children:
            total = self.totals.get(s_down)
            if total is None:
                raise MissingAggregateError(f"node {self.node}: no total of round {s_down}")
            for v in self.children:
                out[v] = total
        return out

    def take(self, sender: int, round_: int, frame: np.ndarray) -> None:
        if sender == self.parent:
            self.totals[round_ - self.H - self.tree.depth[sender]] = frame
        else:
            s = round_ - self.H + self.tree.depth[sender]
            self.partials.setdefault(s, {})[sender] = frame

    def end_round(self, round_: int) -> None:
        """Learn the aggregate that completes in this round and update the bases."""
        if self.parent < 0:
            s = round_ - max(self.H, 1) + 1
            if s >= 0:
                self.totals[s] = self._partial(s)
        else:
            s = round_ - self.H - self.level + 1
        if s >= 0:
            if s not in self.totals:
                raise MissingAggregateError(
                    f"node {self.node}: no total of round {s} from its parent"
                )
            self.sketch.deliver(s, self.totals[s])
        for table in (self.own, self.partials, self.totals):
            for old in [r for r in table if r < s - self.H]:
                del table[old]
