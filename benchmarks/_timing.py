"""Shared measurement helpers for the benchmark scripts (run as ``python benchmarks/X.py``)."""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes allocated through Python's allocators while ``fn`` runs (tracemalloc)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
