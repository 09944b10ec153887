"""The checkpoint file format: a checksummed body whose arrays are stored as raw bytes.

The file is ``MAGIC``, the sha256 of the rest, the length of a msgpack skeleton, the skeleton
(the body with every array replaced by ``{"__raw__": i, "dtype", "shape"}``) and the arrays'
raw little-endian bytes one after another: saving writes the arrays' own buffers (no copy,
the hash streamed over them), loading reads the file once. Files of the earlier format
(msgpack ``{"sha256": ..., "body": ...}``) are still read. Writing and loading the files
durably is :mod:`firmware_py.checkpoint`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from edgedp import _codec

__all__ = ["MAGIC", "copy_arrays", "decode", "encode"]


#: First bytes of a checkpoint file in the raw-buffer format.
MAGIC = b"EDGEDPC2"
_DTYPES = {"<f8": np.dtype("<f8"), "<f4": np.dtype("<f4"), "<i8": np.dtype("<i8")}
_LENGTH = struct.Struct("<Q")


def _split(obj: Any, buffers: list) -> Any:
    """``obj`` with every array replaced by a ``__raw__`` record; its bytes go to ``buffers``."""
    if isinstance(obj, np.ndarray):
        key = obj.dtype.newbyteorder("<").str if obj.dtype.byteorder == ">" else obj.dtype.str
        if key not in _DTYPES:
            return obj  # the msgpack codec converts (or refuses) other dtypes
        arr = np.ascontiguousarray(obj, dtype=_DTYPES[key])
        buffers.append(memoryview(arr).cast("B"))
        return {"__raw__": len(buffers) - 1, "dtype": key, "shape": list(arr.shape)}
    if isinstance(obj, Mapping):
        return {str(k): _split(obj[k], buffers) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [_split(v, buffers) for v in obj]
    return obj


def _join(obj: Any, data: memoryview, offsets: list[int]) -> Any:
    """Inverse of :func:`_split` over ``data`` (the arrays' bytes); ValueError if malformed."""
    if isinstance(obj, dict):
        if "__raw__" in obj:
            if set(obj) != {"__raw__", "dtype", "shape"} or obj["dtype"] not in _DTYPES:
                raise ValueError("malformed array record")
            index, shape = obj["__raw__"], tuple(obj["shape"])
            if type(index) is not int or index != len(offsets) - 1:
                raise ValueError("array records out of order")
            if not all(type(s) is int and s >= 0 for s in shape):
                raise ValueError(f"malformed array shape {shape}")
            dt = _DTYPES[obj["dtype"]]
            start = offsets[-1]
            end = start + int(np.prod(shape, dtype=object)) * dt.itemsize
            if end > len(data):
                raise ValueError("array data is shorter than its shape")
            offsets.append(end)
            return np.frombuffer(data[start:end], dtype=dt).reshape(shape)
        return {k: _join(v, data, offsets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join(v, data, offsets) for v in obj]
    return obj


def encode(body: dict[str, Any]) -> list:
    """The buffers of ``body``'s checkpoint file (see the module docstring), in order."""
    buffers: list = []
    skeleton = _codec.encode(_split(body, buffers))
    digest = hashlib.sha256(_LENGTH.pack(len(skeleton)))
    digest.update(skeleton)
    for buf in buffers:
        digest.update(buf)
    return [MAGIC + digest.digest() + _LENGTH.pack(len(skeleton)) + skeleton, *buffers]


def decode(data: bytes | bytearray) -> dict[str, Any]:
    """The body of a checkpoint file; ValueError if it is damaged or malformed."""
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC:  # the earlier msgpack format
        outer = _codec.decode(bytes(data))
        blob = outer["body"]
        if hashlib.sha256(blob).hexdigest() != outer["sha256"]:
            raise ValueError("checksum mismatch")
        return _codec.decode(blob)
    head = len(MAGIC) + 32 + _LENGTH.size
    if len(view) < head:
        raise ValueError("truncated file")
    if hashlib.sha256(view[len(MAGIC) + 32 :]).digest() != bytes(view[len(MAGIC) : head - 8]):
        raise ValueError("checksum mismatch")
    (size,) = _LENGTH.unpack(view[head - 8 : head])
    if head + size > len(view):
        raise ValueError("truncated skeleton")
    offsets = [0]
    body = _join(_codec.decode(bytes(view[head : head + size])), view[head + size :], offsets)
    if offsets[-1] != len(view) - head - size:
        raise ValueError("array data does not match the skeleton")
    return body


_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None)})


def copy_arrays(body: Any) -> Any:
    """``body`` with every array copied (a snapshot a background write may hold while the
    agent goes on)."""
    if isinstance(body, np.ndarray):
        return body.copy()
    if isinstance(body, Mapping):  # immutable leaves kept without a call (every round)
        return {k: v if type(v) in _IMMUTABLE else copy_arrays(v) for k, v in body.items()}
    if isinstance(body, (list, tuple)):
        return [copy_arrays(v) for v in body]
    return body
