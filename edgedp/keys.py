"""Device keys: ZeroMQ CURVE keypairs, pairwise secrets, sealed shared seeds — libsodium.

CURVE keys are Curve25519 keys (z85-encoded), so two neighbours can agree on a shared
secret without sending it. Everything here goes through libsodium (PyNaCl), which is
constant-time and ships aarch64 wheels:

* :func:`x25519` is ``crypto_scalarmult`` (RFC 7748; the RFC vectors are tests);
* :func:`pairwise_secret` is libsodium's key exchange ``crypto_kx`` with the lower node id as
  client: BLAKE2b-512 of the X25519 value and *both* public keys, split into two directed
  session keys; the edge uses the client→server one, which both ends compute. Per-edge
  stream keys are then derived from it with the plan hash and run id
  (:func:`edgedp.streams.edge_key`), so one edge secret never feeds two runs;
* :func:`seal` / :func:`open_sealed` are sealed boxes (``crypto_box_seal``): a planner
  encrypts a run's shared seed to each device's CURVE public key; only that device opens it.

The secrets are never written to a plan or sent on the wire in clear.
"""

from __future__ import annotations

import nacl.bindings
import nacl.exceptions
import nacl.public
import zmq
from zmq.utils import z85

__all__ = [
    "generate_keypair",
    "open_sealed",
    "pairwise_secret",
    "public_from_secret",
    "seal",
    "x25519",
]


def x25519(scalar: bytes, u: bytes) -> bytes:
    """RFC 7748 X25519 (libsodium ``crypto_scalarmult``): the u-coordinate of ``scalar · u``.

    Raises ValueError for wrong lengths or an all-zero result (a low-order point).

    >>> k = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    >>> u = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    >>> x25519(k, u).hex()  # RFC 7748 §5.2 test vector
    'c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552'
    """
    if len(scalar) != 32 or len(u) != 32:
        raise ValueError("Expected 32-byte scalar and u-coordinate.")
    try:
        return nacl.bindings.crypto_scalarmult(bytes(scalar), bytes(u))
    except nacl.exceptions.RuntimeError:  # libsodium refuses an all-zero shared value
        raise ValueError("X25519 gave the all-zero value (a low-order public key).") from None


def generate_keypair() -> tuple[bytes, bytes]:
    """A new CURVE keypair ``(public_z85, secret_z85)`` from libzmq's CSPRNG."""
    return zmq.curve_keypair()


def public_from_secret(secret_z85: bytes) -> bytes:
    """The z85 public key of a z85 secret key (checks a key file's consistency)."""
    return zmq.curve_public(secret_z85)


def pairwise_secret(my_secret_z85: bytes, peer_public_z85: bytes, *, me: int, peer: int) -> bytes:
    """The 32-byte secret nodes ``me`` and ``peer`` share, identical on both sides.

    libsodium ``crypto_kx`` with the lower id as client (module docstring). Raises
    ValueError for a node paired with itself or a low-order (malicious) public key.
    """
    if me == peer:
        raise ValueError("A node has no pairwise secret with itself.")
    secret = z85.decode(my_secret_z85)
    public = z85.decode(zmq.curve_public(my_secret_z85))
    theirs = z85.decode(peer_public_z85)
    if len(theirs) != 32:
        raise ValueError(f"Node {peer}'s public key is not a 32-byte Curve25519 key.")
    try:
        if me < peer:
            _, client_to_server = nacl.bindings.crypto_kx_client_session_keys(
                public, secret, theirs
            )
        else:
            client_to_server, _ = nacl.bindings.crypto_kx_server_session_keys(
                public, secret, theirs
            )
    except nacl.exceptions.CryptoError:  # the X25519 value was all-zero (RuntimeError too)
        raise ValueError(
            f"Key agreement with node {peer} gave the all-zero value; refusing its key."
        ) from None
    return client_to_server


def seal(message: bytes, recipient_public_z85: bytes) -> bytes:
    """``message`` encrypted to one device's CURVE public key (libsodium sealed box)."""
    box = nacl.public.SealedBox(nacl.public.PublicKey(z85.decode(recipient_public_z85)))
    return box.encrypt(bytes(message))


def open_sealed(ciphertext: bytes, secret_z85: bytes) -> bytes:
    """Open a sealed box with the device's CURVE secret key (ValueError if not for it)."""
    box = nacl.public.SealedBox(nacl.public.PrivateKey(z85.decode(secret_z85)))
    try:
        return box.decrypt(bytes(ciphertext))
    except nacl.exceptions.CryptoError:
        raise ValueError("The sealed value was not sealed to this device's key.") from None
