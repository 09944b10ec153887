"""msgpack encoding of plain data with numpy arrays (plans, shares, checkpoints).

Arrays become ``{"__nd__": dtype, "shape": [...], "data": raw little-endian bytes}``;
only a fixed set of dtypes is accepted back, the byte count must match the shape, and
nothing is ever looked up by a name taken from the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

__all__ = ["canonical_bytes", "decode", "encode"]

_DTYPES: dict[str, np.dtype] = {
    "<f8": np.dtype("<f8"),
    "<i8": np.dtype("<i8"),
    "<f4": np.dtype("<f4"),
}
_MAX_BYTES = 1 << 31


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        dt = obj.dtype.newbyteorder("<") if obj.dtype.byteorder not in "<|=" else obj.dtype
        key = np.dtype(dt).str
        if key == "<i4" or key == "<u4" or key == "<u8" or key == "|b1":
            obj, key = obj.astype("<i8"), "<i8"
        if key not in _DTYPES:
            raise TypeError(f"Cannot encode arrays of dtype {obj.dtype}.")
        data = np.ascontiguousarray(obj, dtype=_DTYPES[key]).tobytes()
        return {"__nd__": key, "shape": list(obj.shape), "data": data}
    if isinstance(obj, Mapping):
        return {str(k): _to_plain(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [_to_plain(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, int) and not isinstance(obj, bool) and not -(2**63) <= obj < 2**64:
        raise ValueError(f"Integer {obj} does not fit in 64 bits.")
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    raise TypeError(f"Cannot encode object of type {type(obj).__name__}.")


def _from_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__nd__" in obj:
            key = obj["__nd__"]
            if key not in _DTYPES or set(obj) != {"__nd__", "shape", "data"}:
                raise ValueError(f"Malformed array record with dtype {key!r}.")
            shape = tuple(int(s) for s in obj["shape"])
            if any(s < 0 for s in shape):
                raise ValueError(f"Malformed array shape {shape}.")
            dt = _DTYPES[key]
            if int(np.prod(shape, dtype=np.int64)) * dt.itemsize != len(obj["data"]):
                raise ValueError(
                    f"Array data has {len(obj['data'])} bytes, shape {shape} needs more/less."
                )
            return np.frombuffer(obj["data"], dtype=dt).reshape(shape).copy()
        return {k: _from_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_plain(v) for v in obj]
    return obj


def encode(obj: Any) -> bytes:
    """msgpack bytes of ``obj`` with keys sorted (deterministic: the same data, the same bytes)."""
    return msgpack.packb(_to_plain(obj), use_bin_type=True)


def canonical_bytes(obj: Any) -> bytes:
    """Alias of :func:`encode`, named for hashing."""
    return encode(obj)


def decode(data: bytes) -> Any:
    """Inverse of :func:`encode`; raises ValueError on malformed input."""
    if len(data) > _MAX_BYTES:
        raise ValueError(f"Refusing to decode {len(data)} bytes (limit {_MAX_BYTES}).")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"Not a valid msgpack document: {exc}") from None
    return _from_plain(obj)
