"""Participation schemas: which steps one record (or one node's data) may contribute to.

(k, b)-participation (paper 003, §2 "Fixed-epoch-order participation"): a record participates
at most k times, adjacent participations exactly b steps apart. Formally Π is the set of all
π with |π| <= k and consecutive elements b apart. Subsets of a pattern never have a larger
Thm 7 bound (paper 000, Eq. 8 sums |X| entries), so only the maximal windows matter:

    {i, i + b, …, i + (k' − 1)b},  k' = min(k, #{j >= 0 : (i mod b) + jb < steps}),

for every start i whose window fits below ``steps``. When steps <= k·b (the usual k epochs
of b batches) the starts are exactly 0, …, min(b, steps) − 1, e.g. (k=3, b=2) over 6 steps
gives {0, 2, 4} and {1, 3, 5} (003, §2). When steps > k·b the formal definition also allows
later windows, e.g. (k=1, b=1) is single participation at any step; we include them, so an
under-declared k can only make the accounting more conservative, never less.

Steps are 0-based. In decentralized learning the gradient rows are time-major (row t·n + u
is node u at step t); a node's patterns over those rows are ``node_patterns`` (paper 000,
Remark 8).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp._validate import integer

__all__ = ["Participation"]


@dataclass(frozen=True, slots=True)
class Participation:
    """(k, b)-participation: at most ``k`` participations, exactly ``b`` steps apart.

    Attributes:
        k: Maximum number of participations (>= 1).
        b: Gap between consecutive participations in steps (>= 1).

    >>> [p.tolist() for p in Participation(3, 2).patterns(6)]
    [[0, 2, 4], [1, 3, 5]]
    """

    k: int
    b: int

    def __post_init__(self) -> None:
        integer(1, k=self.k, b=self.b)
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "b", int(self.b))

    @classmethod
    def every_step(cls, steps: int) -> Participation:
        """Participation at every one of ``steps`` steps: (k, b) = (steps, 1).

        >>> Participation.every_step(5)
        Participation(k=5, b=1)
        """
        return cls(steps, 1)

    @classmethod
    def single(cls, steps: int) -> Participation:
        """At most one participation within ``steps`` steps: (k, b) = (1, steps).

        >>> Participation.single(5).count(5)
        1
        """
        return cls(1, steps)

    @classmethod
    def from_string(cls, text: str) -> Participation:
        """Parse ``"k,b"`` (two integers >= 1, spaces allowed), e.g. from a config file.

        Raises:
            TypeError: If text is not a string.
            ValueError: If text is not two comma-separated integers >= 1.

        >>> Participation.from_string("6, 342")
        Participation(k=6, b=342)
        """
        if not isinstance(text, str):
            raise TypeError(f"Expected participation to be a string 'k,b', got {text!r}.")
        parts = text.split(",")
        message = (
            f"Expected participation as 'k,b' with integers k >= 1 and b >= 1 "
            f"(e.g. '3,2'), got {text!r}."
        )
        if len(parts) != 2:
            raise ValueError(message)
        try:
            k, b = (int(part) for part in parts)
        except ValueError:
            raise ValueError(message) from None
        if k < 1 or b < 1:
            raise ValueError(message)
        return cls(k, b)

    @classmethod
    def for_task(cls, steps: int, *, local_size: int, batch_size: int) -> Participation:
        """The participation a task runs: b = batches per epoch, k = ⌈steps / b⌉.

        The engines use batch ``t mod b`` of a fixed permutation of the local data at step
        t, with b = ⌊local_size / batch_size⌋ (``batch_size`` 0 = the whole local set): every
        example is in exactly one batch per epoch, so it participates every b steps, at most
        ⌈steps / b⌉ times.

        Raises:
            ValueError: If batch_size exceeds local_size.

        >>> Participation.for_task(10, local_size=359, batch_size=0)
        Participation(k=10, b=1)
        >>> Participation.for_task(1000, local_size=359, batch_size=32)
        Participation(k=91, b=11)
        """
        integer(1, steps=steps, local_size=local_size)
        integer(0, batch_size=batch_size)
        batch = batch_size or local_size
        if batch > local_size:
            raise ValueError(f"Expected batch_size={batch} <= the local dataset size {local_size}.")
        per_epoch = local_size // batch
        return cls(-(-int(steps) // per_epoch), per_epoch)

    def covers(self, run: Participation) -> bool:
        """Whether this (certified) participation covers ``run``, the one a task runs: the
        same gap b and at least as many participations k.

        >>> Participation(10, 1).covers(Participation(10, 1)), Participation(3, 4).covers(
        ...     Participation(10, 1))
        (True, False)
        """
        return self.b == run.b and self.k >= run.k

    def count(self, steps: int) -> int:
        """Maximum number of participations within ``steps`` steps: min(k, ⌈steps/b⌉).

        >>> Participation(3, 2).count(5)
        3
        """
        integer(0, steps=steps)
        return min(self.k, -(-int(steps) // self.b))

    def patterns(self, steps: int) -> list[np.ndarray]:
        """Maximal participation patterns within ``steps`` steps, ordered by first step.

        Args:
            steps: Horizon (>= 0).

        Returns:
            List of int64 arrays of step indices (see the module docstring).

        >>> [p.tolist() for p in Participation(1, 1).patterns(3)]
        [[0], [1], [2]]
        """
        integer(0, steps=steps)
        steps, k, b = int(steps), self.k, self.b
        out = []
        for start in range(steps):
            in_residue = (steps - 1 - start % b) // b + 1  # steps ≡ start (mod b)
            length = min(k, in_residue)
            if (steps - 1 - start) // b + 1 >= length:
                out.append(start + b * np.arange(length, dtype=np.int64))
        return out

    def node_patterns(self, steps: int, n: int, node: int) -> list[np.ndarray]:
        """Patterns of ``node`` over time-major rows t·n + node (paper 000, Remark 8).

        Args:
            steps: Horizon T (>= 0).
            n: Number of nodes (>= 1).
            node: Node index in [0, n).

        Returns:
            List of int64 arrays of row indices into an (n·T)-row gradient matrix.

        >>> [p.tolist() for p in Participation(2, 1).node_patterns(3, n=4, node=1)]
        [[1, 5], [5, 9]]
        """
        integer(1, n=n)
        integer(0, node=node)
        if node >= n:
            raise ValueError(f"Expected node={node!r} < n={n!r}.")
        return [p * int(n) + int(node) for p in self.patterns(steps)]
