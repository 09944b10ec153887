"""The wire codec without sockets: round trips, and decoding arbitrary bytes never crashes."""

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgedp import wire

H = b"p" * 32
CTX = wire.Context(plan_hash=H, neighbours=frozenset({1, 2}), shapes=((5,),))


def _valid(round_=3, sender=1, arr=None):
    return wire.encode(
        wire.Message(H, round_, sender, "model", (np.arange(5.0) if arr is None else arr,))
    )


@given(
    hnp.arrays(st.sampled_from([np.float64, np.float32]), hnp.array_shapes(max_dims=3, max_side=6)),
    st.integers(0, 2**40),
    st.integers(0, 2**20),
)
def test_round_trip(arr, round_, sender):
    frames = wire.encode(wire.Message(H, round_, sender, "model", (arr,)))
    msg = wire.decode([bytes(f) for f in frames])
    assert (msg.round, msg.sender, msg.plan_hash) == (round_, sender, H)
    assert msg.arrays[0].dtype == arr.dtype and np.array_equal(msg.arrays[0], arr, equal_nan=True)
    assert not msg.arrays[0].flags.writeable  # a zero-copy view


@given(st.lists(st.binary(max_size=64), min_size=0, max_size=4))
def test_decode_of_random_frames_raises_only_wire_errors(frames):
    try:
        wire.decode(frames)
    except wire.WireError:
        pass


@given(st.data())
def test_mutated_headers_raise_only_wire_errors(data):
    frames = [bytes(f) for f in _valid()]
    header = bytearray(frames[0])
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(header) - 1))
        header[i] = data.draw(st.integers(0, 255))
    try:
        msg = wire.decode([bytes(header), frames[1]])
        wire.check(msg, CTX, round_lo=0, round_hi=10)
    except wire.WireError:
        pass


@given(
    st.dictionaries(
        st.sampled_from(["v", "plan", "round", "sender", "kind", "arrays", "x"]),
        st.none()
        | st.integers(-5, 2**64 - 1)
        | st.binary(max_size=40)
        | st.text(max_size=5)
        | st.lists(st.integers(-3, 9), max_size=3),
    )
)
def test_hostile_header_values_raise_only_wire_errors(header):
    try:
        wire.decode([msgpack.packb(header, use_bin_type=True), b"\x00" * 40])
    except wire.WireError:
        pass


@pytest.mark.parametrize(
    "frames, ctx_kw, error",
    [
        (lambda: _valid(sender=7), {}, wire.UnknownSender),
        (lambda: _valid(round_=11), {}, wire.RoundOutOfWindow),
        (lambda: _valid(arr=np.full(5, np.inf)), {}, wire.BadPayload),
        (lambda: _valid(arr=np.zeros(4)), {}, wire.BadPayload),
        (lambda: _valid(arr=np.zeros(5, np.float32)), {}, wire.BadPayload),
        (
            lambda: wire.encode(wire.Message(b"q" * 32, 3, 1, "model", (np.zeros(5),))),
            {},
            wire.PlanHashMismatch,
        ),
    ],
)
def test_check_rejections(frames, ctx_kw, error):
    msg = wire.decode([bytes(f) for f in frames()])
    with pytest.raises(error):
        wire.check(msg, CTX, round_lo=0, round_hi=10, **ctx_kw)


def test_structure_errors():
    good = [bytes(f) for f in _valid()]
    with pytest.raises(wire.Oversized):
        wire.decode(good, max_bytes=50)
    with pytest.raises(wire.Oversized):
        wire.decode([b"\x00" * (wire.MAX_HEADER_BYTES + 1), good[1]])
    with pytest.raises(wire.Malformed, match="data frames"):
        wire.decode(good[:1])
    with pytest.raises(wire.Malformed, match="bytes do not match"):
        wire.decode([good[0], good[1][:-1]])
    with pytest.raises(wire.UnknownSender, match="authenticated"):
        wire.check(wire.decode(good), CTX, round_lo=0, round_hi=10, authenticated_sender=2)
    with pytest.raises(TypeError):
        wire.encode(wire.Message(H, 0, 1, "model", (np.zeros(2, dtype=object),)))


def _header(**fields):
    base = {"v": 1, "plan": H, "round": 3, "sender": 1, "kind": "model", "arrays": [["<f8", [5]]]}
    base.update(fields)
    return msgpack.packb(base, use_bin_type=True)


@pytest.mark.parametrize(
    "frames",
    [
        [_header(arrays=[[["<f8"], [5]]]), b"\x00" * 40],  # dtype is a list (unhashable)
        [_header(arrays=[[{"<f8": 1}, [5]]]), b"\x00" * 40],  # dtype is a map
        [_header(arrays=[["<f8", [2**30, 2**30, 16]]]), b""],  # int64 product wraps to 0
        [_header(arrays=[["<f8", [2**31 - 1] * 4]]), b"\x00" * 8],  # product far past the cap
        [_header(arrays=[["<f8", [5, {"a": 1}]]]), b"\x00" * 40],  # a map inside the shape
        [_header(arrays=[["<f8", 5]]), b"\x00" * 40],  # shape is not a list
        [_header(arrays=[[b"<f8", [5]]]), b"\x00" * 40],  # dtype as bytes
        [msgpack.packb({b"v": 1, "plan": 2}, use_bin_type=True)],  # str and bytes keys
        [_header(kind=["model"]), b"\x00" * 40],
        [_header(plan=[1, 2]), b"\x00" * 40],
        [_header(round=[3]), b"\x00" * 40],
        [_header(sender={"a": 1}), b"\x00" * 40],
        [_header(v=1.0), b"\x00" * 40],
        [_header(round=-1), b"\x00" * 40],
        [_header(round=2**64 - 1), b"\x00" * 40],
        [b"\x91" * 4000 + b"\x90"],  # nesting 4,000 deep within the header cap
        [b"\xdd\xff\xff\xff\xff"],  # array32 declaring 2**32 - 1 items, none present
        [b"\xdb\xff\xff\xff\xff"],  # str32 declaring 4 GiB
        [b"\xdf\xff\xff\xff\xff"],  # map32 declaring 2**32 - 1 pairs
        [b"\xc7\xff\x05" + b"\x00" * 10],  # ext type
        [_header(), b"\x00" * 40, b"\x00" * 8],  # an extra part
        [_header()],  # a missing part
        [],
        "not frames",
    ],
)
def test_hostile_frames_are_wire_errors(frames):
    with pytest.raises(wire.WireError):
        wire.decode(frames)


_msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=6)
    | st.binary(max_size=40)
    | st.sampled_from(["<f8", "<f4", "model", "|O", "<i8", "V8"]),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=4) | st.binary(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150)
@given(
    st.dictionaries(
        st.sampled_from(["v", "plan", "round", "sender", "kind", "arrays"]), _msgpack_values
    ),
    st.lists(st.binary(max_size=48), max_size=3),
)
def test_structurally_mutated_headers_raise_only_wire_errors(fields, data_frames):
    header = {"v": 1, "plan": H, "round": 3, "sender": 1, "kind": "model", "arrays": []}
    header.update(fields)
    try:
        msg = wire.decode([msgpack.packb(header, use_bin_type=True), *data_frames])
        wire.check(msg, CTX, round_lo=0, round_hi=10)
    except wire.WireError:
        pass


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            _msgpack_values | st.sampled_from(["<f8", "<f4"]),
            st.lists(st.integers(-1, 2**40) | _msgpack_values, max_size=5) | _msgpack_values,
        ),
        min_size=1,
        max_size=3,
    ),
    st.lists(st.integers(0, 64), min_size=1, max_size=3),
)
def test_array_specs_raise_only_wire_errors(specs, sizes):
    header = _header(arrays=[list(s) for s in specs])
    data_frames = [b"\x00" * sizes[i % len(sizes)] for i in range(len(specs))]  # one per spec
    try:
        wire.decode([header, *data_frames])
    except wire.WireError:
        pass


@settings(max_examples=100)
@given(st.binary(min_size=1, max_size=200), st.integers(0, 10), st.integers(0, 255))
def test_byte_flips_of_valid_frames_raise_only_wire_errors(noise, where, value):
    frames = [bytearray(f) for f in _valid()]
    for i, b in enumerate(noise[:8]):
        k = (where * 31 + i * 17 + b) % len(frames[0])
        frames[0][k] = (frames[0][k] ^ b) if b else value
    try:
        msg = wire.decode([bytes(f) for f in frames])
        wire.check(msg, CTX, round_lo=0, round_hi=10)
    except wire.WireError:
        pass


def test_values_beyond_the_stated_bound_are_rejected():
    ctx = wire.Context(plan_hash=H, neighbours=frozenset({1, 2}), shapes=((5,),), bounds=(10.0,))
    for arr in (np.full(5, 1.797e308), np.full(5, 1e300), np.array([0, 0, -10.5, 0, 0.0])):
        with pytest.raises(wire.BeyondBound):
            wire.check(wire.decode(_valid(arr=arr)), ctx, round_lo=0, round_hi=10)
    wire.check(wire.decode(_valid(arr=np.full(5, -10.0))), ctx, round_lo=0, round_hi=10)
