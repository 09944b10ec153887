"""Validation helpers for public boundaries.

Messages name the offending value and what was expected, e.g.
``Expected clip_norm=-1.0 > 0.``. Bad values raise ``ValueError``, wrong types ``TypeError``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "finite_array",
    "in_range",
    "integer",
    "known_keys",
    "non_negative",
    "open_unit",
    "positive",
    "shape_is",
]


def _items(kwargs: dict[str, Any]):
    if not kwargs:
        raise TypeError("Expected at least one keyword argument to validate.")
    return kwargs.items()


def positive(**kwargs: Any) -> None:
    """Raise ValueError unless every keyword value is a finite number > 0."""
    for name, value in _items(kwargs):
        if not (isinstance(value, (int, float, np.integer, np.floating)) and value > 0):
            raise ValueError(f"Expected {name}={value!r} > 0.")
        if not math.isfinite(value):
            raise ValueError(f"Expected {name}={value!r} to be finite.")


def non_negative(**kwargs: Any) -> None:
    """Raise ValueError unless every keyword value is a number >= 0 (inf allowed)."""
    for name, value in _items(kwargs):
        if not (isinstance(value, (int, float, np.integer, np.floating)) and value >= 0):
            raise ValueError(f"Expected {name}={value!r} >= 0.")


def in_range(lo: float, hi: float, **kwargs: Any) -> None:
    """Raise ValueError unless lo <= value <= hi for every keyword value."""
    for name, value in _items(kwargs):
        if not (isinstance(value, (int, float, np.integer, np.floating)) and lo <= value <= hi):
            raise ValueError(f"Expected {lo} <= {name}={value!r} <= {hi}.")


def open_unit(**kwargs: Any) -> None:
    """Raise ValueError unless 0 < value < 1 for every keyword value (a δ, a probability).

    >>> open_unit(delta=1e-6)
    >>> open_unit(delta=1.5)
    Traceback (most recent call last):
    ...
    ValueError: Expected delta=1.5 in (0, 1).
    """
    for name, value in _items(kwargs):
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, bool
        )
        if not (ok and 0 < value < 1):
            raise ValueError(f"Expected {name}={value!r} in (0, 1).")


def integer(minimum: int | None = None, **kwargs: Any) -> None:
    """Raise TypeError unless every keyword value is an int; ValueError if below minimum."""
    for name, value in _items(kwargs):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"Expected {name}={value!r} to be an integer.")
        if minimum is not None and value < minimum:
            raise ValueError(f"Expected {name}={value!r} >= {minimum}.")


def finite_array(name: str, x: Any) -> np.ndarray:
    """Return x as an ndarray; raise ValueError naming it if it holds NaN or Inf."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiuc":
        raise TypeError(f"Expected {name} to be numeric, got dtype {arr.dtype}.")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"Expected {name} to be finite; it has {bad} NaN/Inf entries.")
    return arr


def shape_is(name: str, x: Any, shape: tuple[int | None, ...]) -> None:
    """Raise ValueError unless x has the given shape (None matches any length)."""
    actual = np.shape(x)
    ok = len(actual) == len(shape) and all(
        want is None or want == got for want, got in zip(shape, actual, strict=True)
    )
    if not ok:
        raise ValueError(f"Expected {name} to have shape {shape}, got {actual}.")


def known_keys(
    table: Mapping[str, Any],
    allowed: Iterable[str],
    *,
    where: str = "",
    what: str = "key",
    error: type[Exception] = ValueError,
) -> None:
    """Raise ``error`` naming every key of ``table`` not in ``allowed``, with the closest one.

    For configuration files, where a misspelled key must not be silently ignored (a budget
    ``max_epsilonn = 1`` would leave the real one at its default). ``where`` is the dotted
    path of the table (``"run"`` gives ``run.max_epsilonn``); ``what="section"`` names
    tables as ``[name]``.

    >>> known_keys({"max_epsilonn": 1}, ("max_epsilon", "delta"), where="run")
    Traceback (most recent call last):
    ...
    ValueError: unknown key run.max_epsilonn (did you mean run.max_epsilon?)
    """
    allowed = tuple(allowed)
    unknown = [k for k in table if k not in allowed]
    if not unknown:
        return

    def name(key: str) -> str:
        path = f"{where}.{key}" if where else str(key)
        return f"[{path}]" if what == "section" else path

    parts = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = (
            f"did you mean {name(close[0])}?"
            if close
            else f"expected one of {', '.join(name(a) for a in sorted(allowed))}"
        )
        parts.append(f"{name(key)} ({hint})")
    plural = "s" if len(unknown) > 1 else ""
    raise error(f"unknown {what}{plural} {', '.join(parts)}")
