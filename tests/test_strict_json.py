"""strict_json.clean against the table of its module docstring, on generated nested values.

The reference below is written from the table alone (NaN → null, ±∞ → "inf"/"-inf", numpy
scalars → Python numbers, arrays and tuples → lists), not from the module's code, so the
fast paths for exact types (a metrics line per device round) are checked against it.
"""

import json
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from edgedp import strict_json


def reference(x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return (
            None if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else v)
        )
    if isinstance(x, (int, np.integer)):
        return int(x)
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, dict):
        return {(k.item() if isinstance(k, np.generic) else k): reference(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [reference(v) for v in x]
    return x


floats = st.floats(allow_nan=True, allow_infinity=True)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    floats,
    st.text(max_size=5),
    floats.map(np.float64),
    st.floats(width=32).map(np.float32),
    st.integers(-(2**31), 2**31).map(np.int64),
    st.booleans().map(np.bool_),
    st.lists(floats, max_size=4).map(lambda v: np.array(v, dtype=np.float64)),
)
keys = st.one_of(st.text(max_size=4), st.integers(0, 9).map(np.int64), st.integers(0, 9))
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=20,
)


def _same(a, b):
    """Equal, with the exact Python types the reference gives (1 and 1.0 and True differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b, strict=True))
    return a == b


@given(values)
def test_clean_follows_the_table(x):
    got = strict_json.clean(x)
    assert _same(got, reference(x))
    json.dumps(got, allow_nan=False)  # always strict JSON


def test_a_metrics_line_keeps_its_types():
    line = {"round": 3, "noise": "ab", "missing": [1], "ok": True, "eps": math.inf, "x": None}
    assert strict_json.dumps(line) == (
        '{"round": 3, "noise": "ab", "missing": [1], "ok": true, "eps": "inf", "x": null}'
    )
