"""A device's stream keys, all bound to (plan hash, run id) (:mod:`edgedp.streams`).

Own noise, batch order and message noise come from the device's noise secret; per-edge keys
from X25519 with each neighbour's CURVE key (never in the plan); the shared seed of
Whisper's low-rank/dense forms from the box ``edgedp deploy`` sealed to this device's key
(libsodium); with ``noise_secret = "plan-seed"`` everything comes from the plan seed
(reproducible runs, equal to the simulators').
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from edgedp import keys, runtime, streams
from firmware_py import config

__all__ = ["stream_keys"]


def stream_keys(
    cfg: config.NodeConfig, plan, share, noise_secret: bytes, secret: bytes
) -> tuple[dict, str]:
    """The Agent's key arguments and their fingerprint, all bound to (plan hash, run id).

    Own noise, batch order and message noise come from the device's noise secret; per-edge
    keys from X25519 with each neighbour's CURVE key (never in the plan); with noise_secret
    = "plan-seed" everything comes from the plan seed (reproducible runs, equal to the
    simulators')."""
    own = streams.RunKeys(noise_secret, plan.plan_hash, cfg.run_id)
    if cfg.reproducible:
        return runtime.node_keys(own, cfg.id, share.neighbours).arguments(), own.fingerprint()
    cross = share.cross_agent
    if cross is None:
        return runtime.device_keys(own, cfg.id).arguments(), own.fingerprint()
    shared = None
    if cross.factor_row:
        sealed = _open_seed(cfg, secret)
        shared = streams.RunKeys(sealed, plan.plan_hash, cfg.run_id).shared()
    public = {n.id: n.public_key for n in cfg.neighbours}
    pairs = {
        v: streams.edge_key(
            keys.pairwise_secret(secret, public[v], me=cfg.id, peer=v),
            plan_hash=plan.plan_hash,
            run=cfg.run_id,
            u=cfg.id,
            v=v,
        )
        for v, _ in cross.edge_terms
    }
    arguments = runtime.device_keys(own, cfg.id, edges=pairs, shared=shared).arguments()
    digest = hashlib.sha256(own.fingerprint().encode())
    if shared is not None:
        digest.update(hashlib.sha256(f"shared:{shared.hex()}".encode()).digest())
    for v in sorted(pairs):  # a changed edge secret must refuse a resume too
        digest.update(hashlib.sha256(f"{v}:{pairs[v].hex()}".encode()).digest())
    return arguments, digest.hexdigest()


def _open_seed(cfg: config.NodeConfig, secret: bytes) -> bytes:
    """The run's shared seed, opened from the sealed box ``edgedp deploy`` wrote for this
    device (libsodium, this device's CURVE key); never stored in clear."""
    if not cfg.sealed_seed:
        raise config.ConfigError(
            "this plan's shared-seed noise (whisper --form lowrank/dense) needs node.sealed_seed: "
            "the run's seed sealed to this device's key (`edgedp deploy` writes it)"
        )
    try:
        seed = keys.open_sealed(base64.b64decode(cfg.sealed_seed, validate=True), secret)
    except (ValueError, binascii.Error) as exc:
        raise config.ConfigError(f"node.sealed_seed: {exc}") from None
    if len(seed) < 32:
        raise config.ConfigError("node.sealed_seed holds fewer than 32 seed bytes")
    return seed
