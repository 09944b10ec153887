"""Plan and run signatures: Ed25519 (libsodium through PyNaCl) over a plan's hash, or over
a run manifest (:func:`sign_document`).

A plan's SHA-256 detects accidents, not tampering: whoever edits ``noise_multiplier`` can
recompute the hash. The operator therefore signs plans with a planning key; devices pin
the operator's public key (``[plan] public_key`` in node.toml) and refuse a plan without a
valid signature by it. What is signed is the domain-separated plan hash
``b"edgedp-plan-v2\\0" + sha256``; the signature sits in the plan file's envelope, beside
the plan, so signing does not change the hash (nor any stream key bound to it).

>>> secret, public = generate_planner_key()
>>> envelope = sign("ab" * 32, secret)
>>> verify(envelope, "ab" * 32, public) == public
True

A document (a run manifest: what a run is, :mod:`firmware_py.trust`) is signed the same way
over ``b"edgedp-run-v1\\0"`` + the SHA-256 of its canonical JSON (sorted keys, no spaces):

>>> doc = {"run": "r1", "plan_hash": "ab" * 32}
>>> verify_document(sign_document(doc, secret), doc, public) == public
True
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import nacl.exceptions
import nacl.signing

__all__ = [
    "SignatureError",
    "canonical_json",
    "generate_planner_key",
    "read_key",
    "sign",
    "sign_document",
    "verify",
    "verify_document",
    "write_keys",
]

_DOMAIN = b"edgedp-plan-v2\0"
_RUN_DOMAIN = b"edgedp-run-v1\0"


class SignatureError(ValueError):
    """A missing, malformed or invalid plan signature, or one by an untrusted key."""


def _message(plan_hash: str) -> bytes:
    try:
        digest = bytes.fromhex(plan_hash)
    except (TypeError, ValueError):
        raise SignatureError(f"Expected a plan hash of 64 hex digits, got {plan_hash!r}.") from None
    if len(digest) != 32:
        raise SignatureError(f"Expected a plan hash of 64 hex digits, got {plan_hash!r}.")
    return _DOMAIN + digest


def generate_planner_key() -> tuple[str, str]:
    """A new planning keypair ``(secret_hex, public_hex)`` (Ed25519 seed and verify key)."""
    key = nacl.signing.SigningKey.generate()
    return bytes(key).hex(), bytes(key.verify_key).hex()


def _sign(message: bytes, secret_hex: str) -> dict[str, str]:
    try:
        key = nacl.signing.SigningKey(bytes.fromhex(secret_hex))
    except (TypeError, ValueError, nacl.exceptions.CryptoError):
        raise SignatureError("The planning key is not a 32-byte Ed25519 seed in hex.") from None
    signed = key.sign(message)
    return {"key": bytes(key.verify_key).hex(), "sig": signed.signature.hex()}


def _verify(envelope, message: bytes, trusted_hex: str | None, what: str) -> str:
    if not isinstance(envelope, dict) or set(envelope) != {"key", "sig"}:
        raise SignatureError(f"The {what}'s signature is malformed (expected key and sig).")
    try:
        public = bytes.fromhex(str(envelope["key"]))
        signature = bytes.fromhex(str(envelope["sig"]))
        nacl.signing.VerifyKey(public).verify(message, signature)
    except (ValueError, TypeError, nacl.exceptions.CryptoError):
        raise SignatureError(f"The {what}'s signature does not verify: it was modified.") from None
    if trusted_hex is not None and public.hex() != str(trusted_hex).lower():
        raise SignatureError(
            f"The {what} is signed by {public.hex()[:16]}…, not by the trusted planning key "
            f"{str(trusted_hex)[:16]}…."
        )
    return public.hex()


def sign(plan_hash: str, secret_hex: str) -> dict[str, str]:
    """The signature envelope ``{"key": public_hex, "sig": signature_hex}`` of a plan hash."""
    return _sign(_message(plan_hash), secret_hex)


def verify(envelope, plan_hash: str, trusted_hex: str | None = None) -> str:
    """Check a signature envelope; returns the signer's public key (hex).

    With ``trusted_hex`` the signer must be that key. Raises :class:`SignatureError`.
    """
    return _verify(envelope, _message(plan_hash), trusted_hex, "plan")


def canonical_json(doc: dict) -> bytes:
    """The bytes a document's signature covers: JSON with sorted keys, no spaces, ASCII."""
    try:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise SignatureError(f"The document is not plain JSON ({exc}).") from None


def _document_message(doc: dict) -> bytes:
    return _RUN_DOMAIN + hashlib.sha256(canonical_json(doc)).digest()


def sign_document(doc: dict, secret_hex: str) -> dict[str, str]:
    """The signature envelope of a JSON document (a run manifest)."""
    return _sign(_document_message(doc), secret_hex)


def verify_document(envelope, doc: dict, trusted_hex: str | None = None) -> str:
    """Check a document's signature envelope (as :func:`verify`); returns the signer's key."""
    return _verify(envelope, _document_message(doc), trusted_hex, "run manifest")


def write_keys(out: Path, name: str = "planner", *, force: bool = False) -> dict[str, str]:
    """Write ``NAME.key`` (secret, 0600) and ``NAME.pub`` in ``out``; refuse to overwrite."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    secret_file, public_file = out / f"{name}.key", out / f"{name}.pub"
    if not force and (secret_file.exists() or public_file.exists()):
        raise FileExistsError(
            f"{secret_file} already exists: refusing to overwrite a planning key "
            "(devices pin its public key); pass --force to replace it"
        )
    secret, public = generate_planner_key()
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(f"{_LABELS['secret']}\n{secret}\n")
    public_file.write_text(f"{_LABELS['public']}\n{public}\n")
    return {"secret_key_file": str(secret_file), "public_key_file": str(public_file),
            "public_key": public}  # fmt: skip


#: The first line of each planning key file: which half it holds.
_LABELS = {
    "secret": "# edgedp planning SECRET key (Ed25519 seed): signs plans; keep it private",
    "public": "# edgedp planning public key (Ed25519): devices pin it to verify plans",
}
_USE = {"secret": "signing needs the secret half (NAME.key)",
        "public": "devices pin the public half (NAME.pub)"}  # fmt: skip


def read_key(path: Path, *, kind: str) -> str:
    """The hex key of a planning key file of ``kind`` (``"secret"`` or ``"public"``).

    A file of :func:`write_keys` says on its first line which half it holds; the other half
    is refused (a signature by the public key would verify against nothing a device pins,
    and a secret in an anchors file would be published). A bare 64-hex-digit file (older
    versions wrote those) is taken as a secret only when no one else can read it (secrets
    are written 0600, public keys 0644). Raises :class:`SignatureError`.
    """
    if kind not in _LABELS:
        raise ValueError(f"kind={kind!r}; expected 'secret' or 'public'")
    try:
        text = Path(path).read_text()
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SignatureError(f"{path}: {exc.strerror}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    labels = [name for name, label in _LABELS.items() if lines and lines[0] == label]
    if labels:
        lines = lines[1:]
    if len(lines) != 1 or len(_hex32(lines[0])) != 32:
        raise SignatureError(f"{path}: expected one 64-hex-digit key")
    held, why = (labels[0], "") if labels else (None, "")
    if held is None and kind == "secret" and mode & 0o077:
        held, why = "public", "a bare key readable by others, "  # whatever it is: no secret
    if held is not None and held != kind:
        fix = Path(path).with_suffix(".key" if kind == "secret" else ".pub").name
        raise SignatureError(
            f"{path} holds the {held} planning key ({why}{_USE[kind]}, e.g. {fix})"
        )
    return lines[0]


def _hex32(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return b""
