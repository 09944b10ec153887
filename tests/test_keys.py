import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import given
from hypothesis import strategies as st
from zmq.utils import z85

from edgedp import keys


def test_rfc7748_vectors():
    # RFC 7748 §6.1 Diffie-Hellman example
    alice = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    bob = bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    alice_pub = bytes.fromhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
    bob_pub = bytes.fromhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
    base = (9).to_bytes(32, "little")
    assert keys.x25519(alice, base) == alice_pub and keys.x25519(bob, base) == bob_pub
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert keys.x25519(alice, bob_pub).hex() == shared == keys.x25519(bob, alice_pub).hex()


@given(st.binary(min_size=32, max_size=32), st.binary(min_size=32, max_size=32))
def test_x25519_agrees_with_the_cryptography_package(a, b):
    mine = X25519PrivateKey.from_private_bytes(a)
    peer = X25519PrivateKey.from_private_bytes(b).public_key().public_bytes_raw()
    assert keys.x25519(a, peer) == mine.exchange(X25519PublicKey.from_public_bytes(peer))


def test_curve_keypairs_agree_pairwise():
    (pa, sa), (pb, sb) = keys.generate_keypair(), keys.generate_keypair()
    assert keys.public_from_secret(sa) == pa
    s1 = keys.pairwise_secret(sa, pb, me=3, peer=7)
    s2 = keys.pairwise_secret(sb, pa, me=7, peer=3)
    assert s1 == s2 and len(s1) == 32
    (pc, _) = keys.generate_keypair()
    assert keys.pairwise_secret(sa, pc, me=3, peer=8) != s1
    with pytest.raises(ValueError, match="itself"):
        keys.pairwise_secret(sa, pb, me=3, peer=3)
    with pytest.raises(ValueError, match="all-zero"):
        keys.pairwise_secret(sa, z85.encode(bytes(32)), me=3, peer=4)


def test_pairwise_secret_is_libsodium_kx_recomputed_independently():
    # crypto_kx: BLAKE2b-512(X25519(sk, pk') || client_pk || server_pk) = rx || tx for the
    # client; the edge uses the client->server half. Recomputed with `cryptography` and
    # hashlib; the lower node id is the client.
    (pa, sa), (pb, sb) = keys.generate_keypair(), keys.generate_keypair()
    raw = {k: z85.decode(v) for k, v in {"pa": pa, "sa": sa, "pb": pb, "sb": sb}.items()}
    q = X25519PrivateKey.from_private_bytes(raw["sa"]).exchange(
        X25519PublicKey.from_public_bytes(raw["pb"])
    )
    digest = hashlib.blake2b(q + raw["pa"] + raw["pb"], digest_size=64).digest()
    client_to_server = digest[32:]  # the client's tx key
    assert keys.pairwise_secret(sa, pb, me=1, peer=2) == client_to_server
    assert keys.pairwise_secret(sb, pa, me=2, peer=1) == client_to_server


def test_sealed_seed_opens_only_with_its_device_key():
    (pa, sa), (_, sb) = keys.generate_keypair(), keys.generate_keypair()
    seed = bytes(range(32))
    box = keys.seal(seed, pa)
    assert seed not in box and keys.open_sealed(box, sa) == seed
    with pytest.raises(ValueError, match="not sealed to this device"):
        keys.open_sealed(box, sb)
    assert keys.seal(seed, pa) != box  # ephemeral sender key: a fresh box every time
