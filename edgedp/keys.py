"""Device keys: ZeroMQ CURVE keypairs and pairwise secrets by X25519 key agreement.

CURVE keys are Curve25519 keys (z85-encoded), so two neighbours can agree on a shared
secret without sending it: ``x25519(my_secret, their_public)`` is the same on both sides
(RFC 7748). Pairwise-noise algorithms derive their per-edge streams from
:func:`pairwise_secret`, which hashes that shared value with both node ids; the secret is
never written to a plan or sent on the wire. X25519 is implemented here from RFC 7748 (a
Montgomery ladder on Python integers, tested against the RFC vectors and the
``cryptography`` package) because the device path may depend on numpy, pyzmq and msgpack
only and pyzmq does not expose scalar multiplication. Python integer arithmetic is not
constant-time; the keys are long-term CURVE keys used once per edge at start-up.
"""

from __future__ import annotations

import hashlib

import zmq
from zmq.utils import z85

__all__ = ["generate_keypair", "pairwise_secret", "public_from_secret", "x25519"]

_P = 2**255 - 19
_A24 = 121665


def _clamp(scalar: bytes) -> int:
    k = bytearray(scalar)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    return int.from_bytes(k, "little")


def x25519(scalar: bytes, u: bytes) -> bytes:
    """RFC 7748 X25519: the u-coordinate of ``scalar · u`` (both 32 raw bytes).

    >>> k = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    >>> u = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    >>> x25519(k, u).hex()  # RFC 7748 §5.2 test vector
    'c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552'
    """
    if len(scalar) != 32 or len(u) != 32:
        raise ValueError("Expected 32-byte scalar and u-coordinate.")
    k = _clamp(scalar)
    ub = bytearray(u)
    ub[31] &= 127
    x1 = int.from_bytes(ub, "little") % _P
    x2, z2, x3, z3 = 1, 0, x1, 1
    swap = 0
    for t in reversed(range(255)):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = x2 + z2, x2 - z2
        aa, bb = a * a % _P, b * b % _P
        e = aa - bb
        c, d = x3 + z3, x3 - z3
        da, cb = d * a % _P, c * b % _P
        x3 = (da + cb) ** 2 % _P
        z3 = x1 * (da - cb) ** 2 % _P
        x2 = aa * bb % _P
        z2 = e * (aa + _A24 * e) % _P
    if swap:
        x2, z2 = x3, z3
    out = x2 * pow(z2, _P - 2, _P) % _P
    return out.to_bytes(32, "little")


def generate_keypair() -> tuple[bytes, bytes]:
    """A new CURVE keypair ``(public_z85, secret_z85)`` from libzmq's CSPRNG."""
    return zmq.curve_keypair()


def public_from_secret(secret_z85: bytes) -> bytes:
    """The z85 public key of a z85 secret key (checks a key file's consistency)."""
    return z85.encode(x25519(z85.decode(secret_z85), (9).to_bytes(32, "little")))


def pairwise_secret(my_secret_z85: bytes, peer_public_z85: bytes, *, me: int, peer: int) -> bytes:
    """The 32-byte secret nodes ``me`` and ``peer`` share, identical on both sides.

    Raises ValueError for a degenerate (all-zero) shared value, which only a malicious
    low-order public key produces.
    """
    if me == peer:
        raise ValueError("A node has no pairwise secret with itself.")
    shared = x25519(z85.decode(my_secret_z85), z85.decode(peer_public_z85))
    if shared == bytes(32):
        raise ValueError(
            f"Key agreement with node {peer} gave the all-zero value; refusing its key."
        )
    lo, hi = sorted((int(me), int(peer)))
    h = hashlib.blake2b(digest_size=32, person=b"edgedp-pair-v1")
    h.update(shared + lo.to_bytes(8, "little") + hi.to_bytes(8, "little"))
    return h.digest()
