"""When a node that fell behind may skip rounds to rejoin its neighbours (pure rule).

A node more than the receive window W behind its neighbours can never use their messages
(they are past its window) and they can never use its messages (stale). The rule: skip to
the round a *majority* of the neighbours has provably reached. Evidence is the round of an
authenticated, otherwise valid message from each neighbour (the agent notes it even when
the message is past the window and rejected). With deg neighbours and quorum
q = ⌊deg/2⌋ + 1, the target is the q-th largest round seen, only if it is past the window,
and at most T − 1: fewer than q lying neighbours cannot push a node past a round an honest
neighbour reached, and the node only skips its own rounds — which releases less, never
more (docs/DEVICE_RUNTIME.md, "Falling behind: rejoin").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["quorum", "target"]


def quorum(degree: int) -> int:
    """Neighbours whose evidence a jump needs: a strict majority.

    >>> [quorum(d) for d in (1, 2, 3, 4)]
    [1, 2, 2, 3]
    """
    return degree // 2 + 1


def target(
    current: int, *, window: int, steps: int, seen: Mapping[int, int], neighbours: Iterable[int]
) -> int | None:
    """The round to skip to from round ``current``, or None if the window still bridges
    the gap or too few neighbours show it does not.

    Args:
      current: the node's round (between rounds).
      window: how many rounds ahead the node accepts messages.
      steps: T; rounds are 0 .. T − 1.
      seen: the latest round seen from each neighbour (authenticated messages only).
      neighbours: the node's neighbours.

    >>> target(3, window=8, steps=50, seen={1: 40, 2: 30}, neighbours=(1, 2))
    30
    >>> target(3, window=8, steps=50, seen={1: 49, 2: 4}, neighbours=(1, 2)) is None
    True
    """
    neighbours = tuple(neighbours)
    far = sorted((seen[v] for v in neighbours if seen.get(v, -1) > current + window), reverse=True)
    q = quorum(len(neighbours))
    if not neighbours or len(far) < q:
        return None
    return min(far[q - 1], steps - 1)
