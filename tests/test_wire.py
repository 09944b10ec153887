"""The wire codec without sockets: round trips, and decoding arbitrary bytes never crashes."""

import msgpack
import numpy as np
import pytest
from hypothesis import given
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
        | st.integers(-5, 2**70)
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
