"""Dropout rules: how a node mixes when some neighbours' messages did not arrive in time.

:func:`mixing_terms` gives the weights and vectors of a node's padded mixing row for one
round, in row order (the order every engine mixes in); the batch engine applies the same
rules vectorized in slot order (:mod:`edgedp_sim.round_faults`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

__all__ = ["DROPOUT_RULES", "check_rule", "mixing_terms"]

#: How an agent mixes when some neighbours' messages did not arrive in time.
DROPOUT_RULES = MappingProxyType(
    {
        "renormalize": "drop the missing neighbours' weights and rescale the rest to sum to 1",
        "reuse-last": "use the last model received from that neighbour (renormalize if none)",
        "self": "give the missing neighbours' weight to the agent's own model",
    }
)


def check_rule(rule: str, share) -> None:
    """ValueError unless ``rule`` is a dropout rule the node's ``share`` can mix with."""
    if rule not in DROPOUT_RULES:
        raise ValueError(f"Unknown dropout_rule={rule!r}; expected one of {sorted(DROPOUT_RULES)}.")
    if rule == "reuse-last" and share.sketch is not None and share.sketch.refresh:
        raise ValueError(
            "dropout_rule='reuse-last' would mix a dome message from an earlier round, "
            "whose coordinates are in another sketch basis; use 'renormalize' or 'self' "
            "(or a plan with refresh=0)."
        )


def mixing_terms(
    rule: str,
    *,
    node: int,
    row: Sequence[int],
    weights: Sequence[float],
    own: np.ndarray,
    got: Mapping[int, np.ndarray],
    missing: set[int],
    last_seen: Mapping[int, np.ndarray],
) -> tuple[Sequence[float], list]:
    """``(weights, vectors)`` of the padded ``row``: the node's ``own`` message at its own
    entry, each neighbour's message from ``got``, and for the ``missing`` ones what ``rule``
    says (their last message, the node's own message, or weight 0 and a rescaled rest)."""
    vecs = [own if v == node else got.get(v) for v in row]
    if not missing:
        return weights, vecs
    out = list(weights)
    for j, v in enumerate(row):
        if v not in missing:
            continue
        if rule == "reuse-last" and v in last_seen:
            vecs[j] = last_seen[v]
        elif rule == "self":
            vecs[j] = own
        else:
            vecs[j], out[j] = own, 0.0
    total = sum(out)
    if rule in ("renormalize", "reuse-last") and total != 1.0:
        out = [w / total for w in out]
    return tuple(out), vecs
