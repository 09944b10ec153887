"""One JSON writer for every report and results file: strict JSON that keeps the sign of ∞.

Strict JSON (RFC 8259; Python's ``allow_nan=False``) has no NaN or infinity, yet reports
carry ε = ∞ (no noise) and curves carry undefined points. They are written as:

=============  ==========================================
value          written as
=============  ==========================================
NaN            ``null``
+∞             the string ``"inf"``
−∞             the string ``"-inf"``
numpy scalar   the Python number (``np.float64(2.0)`` → ``2.0``)
numpy array    a list (each entry as above)
tuple          a list
=============  ==========================================

Finite floats round-trip exactly (``json.loads(dumps(x)) == x``); :func:`number` reads a
written number back (``"inf"`` → ``math.inf``). Needs only the standard library and numpy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["INF", "NEG_INF", "clean", "dumps", "number", "write"]

#: How +∞ and −∞ are written (NaN is ``null``).
INF, NEG_INF = "inf", "-inf"


#: Exact types written as they are (subclasses and floats take the general path).
_AS_IS = frozenset({str, int, bool, type(None)})


def clean(x: Any, *, default: Callable[[Any], Any] | None = None) -> Any:
    """``x`` with every value strict JSON can hold (the table above), nested containers too.

    ``default`` turns an object of another type into one that can be written (as in
    :func:`json.dumps`); without it such objects are returned unchanged.

    >>> clean({"eps": float("inf"), "curve": (1.5, float("nan"), -float("inf"))})
    {'eps': 'inf', 'curve': [1.5, None, '-inf']}
    """
    if type(x) in _AS_IS:  # the common exact types first (a metrics line per device round)
        return x
    if isinstance(x, float | np.floating):
        x = float(x)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return INF if x > 0 else NEG_INF
        return x
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if x is None or isinstance(x, str | int):
        return x
    if isinstance(x, Mapping):  # plain values kept without a call
        return {
            _key(k): v if type(v) in _AS_IS else clean(v, default=default) for k, v in x.items()
        }
    if isinstance(x, list | tuple | np.ndarray):
        return [clean(v, default=default) for v in x]
    if default is not None:
        return clean(default(x))
    return x


def _key(k: Any) -> Any:
    return k if type(k) is str else k.item() if isinstance(k, np.generic) else k


def dumps(
    x: Any,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """Strict JSON text of ``x`` (:func:`clean` first); raises ValueError if any NaN is left.

    >>> dumps({"epsilon": float("inf"), "mu": 0.5, "nmi": [float("nan")]})
    '{"epsilon": "inf", "mu": 0.5, "nmi": [null]}'
    """
    return json.dumps(
        clean(x, default=default), indent=indent, sort_keys=sort_keys, allow_nan=False
    )


def write(path: str | Path, x: Any, **kwargs: Any) -> None:
    """Write :func:`dumps` of ``x`` (and a newline) to ``path``; ``kwargs`` as for dumps."""
    Path(path).write_text(dumps(x, **kwargs) + "\n")


def number(v: Any) -> float | None:
    """A number as written back to a float: ``"inf"`` → ∞, ``"-inf"`` → −∞, ``null`` → None.

    >>> number("-inf"), number(None), number(2)
    (-inf, None, 2.0)
    """
    if v is None:
        return None
    if v == INF:
        return math.inf
    if v == NEG_INF:
        return -math.inf
    return float(v)
