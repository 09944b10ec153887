"""How much memory a plan and an agent will need, estimated before anything is built.

A device refuses a plan that cannot fit (``run.max_memory_mb``, :mod:`firmware_py.config`)
from numbers it can read without allocating: the plan file's size, the horizon T and the
shape of the temporal factor in the decoded plan, and the model dimension d. The
estimates are upper bounds of what loading and running allocate (tested against measured
peaks in benchmarks/plan_load.py and benchmarks/agent_memory.py), rounded up generously:

* plan load: 2 × the file (the bytes and their decoded arrays), ``PER_STEP`` bytes per step
  (the O(T) certification and the per-round noise bound), and the factor's own arrays:
  banded 3 × 8·T·p, BLT nothing beyond ``PER_STEP``, dense 6 × 8·T² (C, C⁻¹, the
  inversion, cumulative column sums and |C| for the sensitivity bounds);
* agent: ``AGENT_VECTORS`` model-sized vectors (the agent's round needs at most 4 — θ, the
  gradient sum, the noise and the half step, or θ, the half step and the mixing — then the
  encoded frame and the checkpoint's copy, with margin), the neighbours' messages of a
  round, the per-example chunk and its clipping temporary (each at most ``CHUNK_FLOATS``
  floats, or one example) and twice the factor's
  streaming state (a BLT builds its new buffers beside the old).

Numpy only: devices run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgedp import factors
from edgedp.errors import PlanError

__all__ = [
    "AGENT_VECTORS",
    "CHUNK_FLOATS",
    "PER_STEP",
    "PlanTooLargeError",
    "agent_bytes",
    "check",
    "plan_bytes",
]

#: Bytes per step of a plan's load (O(T) arrays of certification and of the message bound).
PER_STEP = 512
#: Model-sized float64 vectors an agent holds at its peak, besides the factor's state.
AGENT_VECTORS = 8


class PlanTooLargeError(PlanError):
    """A plan (or its model) needs more memory than the device allows."""


def plan_bytes(raw: Mapping[str, Any], file_size: int) -> tuple[int, str]:
    """(bytes, description) an upper estimate of loading the decoded plan ``raw``.

    Only reads sizes: ``raw["steps"]`` and the factor's array shapes.

    >>> plan_bytes({"steps": 10**9, "factor": {"kind": "identity"}}, 1000)[1]
    'steps T=1,000,000,000, identity factor'
    """
    steps = int(raw.get("steps", 0))
    factor: Mapping[str, Any] = raw["factor"] if isinstance(raw.get("factor"), Mapping) else {}
    size, shape = factors.load_bytes(factor)  # ValueError for an unknown kind
    total = 2 * int(file_size) + PER_STEP * max(steps, 0) + size
    return total, f"steps T={steps:,}, {shape}"


#: Floats of per-example gradients an agent holds at once (``edgedp.agent`` clips in chunks
#: of ``max(1, CHUNK_FLOATS // d)`` examples).
CHUNK_FLOATS = 1 << 20


def agent_bytes(dim: int, state_bytes: int, neighbours: int = 0) -> int:
    """An upper estimate of an agent's arrays for a model of ``dim`` parameters.

    >>> agent_bytes(10**6, 8 * 10**6, neighbours=2) / (8 * 10**6)
    14.097152
    """
    chunk = 2 * max(CHUNK_FLOATS, int(dim))
    vectors = (AGENT_VECTORS + int(neighbours)) * int(dim)
    return 8 * (vectors + chunk) + 2 * int(state_bytes)


def check(needed: int, limit: int | None, what: str) -> None:
    """Raise :class:`PlanTooLargeError` when ``needed`` bytes exceed ``limit`` (None: no limit).

    >>> try:
    ...     check(3 * 2**20, 2**20, "steps T=5")
    ... except PlanTooLargeError as exc:
    ...     print(exc)
    needs about 3 MB (steps T=5) but this device allows 1 MB (run.max_memory_mb)
    """
    if limit is not None and needed > limit:
        raise PlanTooLargeError(
            f"needs about {_mb(needed)} MB ({what}) but this device allows {_mb(limit)} MB "
            "(run.max_memory_mb)"
        )


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f}" if n >= 10 * 2**20 else f"{n / 2**20:.3g}"
