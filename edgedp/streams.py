"""Stream keys bound to what they protect: secret × plan hash × run × label (DESIGN §6).

Every random stream a node draws — its own noise, its batch order, its Zip-DL message
noise, the per-edge streams of DECOR/Whisper and the shared-seed streams — is keyed by

    derive_key(secret, "run", plan_hash, run, label, ids…)

so two plans, or two runs of one plan, never draw the same numbers from one secret: a
neighbour who saw a device's messages in two runs cannot subtract its noise. ``run`` is a
run id shared by the nodes of one run (the per-edge streams of both ends must agree): a
fresh random id per deployment on devices (``edgedp deploy``, ``edgedp local-run
--private-noise``), and :data:`SIMULATION_RUN` in simulations and in reproducible device
runs (noise from the plan's public seed, comparable bit for bit, not private).

Who holds which secret: simulations derive everything from the plan seed
(:meth:`RunKeys.simulation`); a device derives its own streams from its noise secret and
each edge's streams from the pairwise secret it agrees with that neighbour
(:func:`edge_key`); the shared seed of Whisper's low-rank/dense forms is simulation-only.

>>> a = RunKeys(b"device-secret", "ab" * 32, "run-1")
>>> b = RunKeys(b"device-secret", "ab" * 32, "run-2")
>>> a.noise(3) == a.noise(3), a.noise(3) == b.noise(3)
(True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedp import rng
from edgedp.families.cross.noise import CrossKeys

__all__ = ["SIMULATION_RUN", "RunKeys", "edge_key", "new_run_id", "validate_run_id"]

#: The run id of simulations and of reproducible (public-seed) device runs.
SIMULATION_RUN = "simulation"
_RUN_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$")


def validate_run_id(run: str) -> str:
    """A run id: 1–64 characters of letters, digits, '.', '_' or '-' (ValueError otherwise)."""
    if not isinstance(run, str) or not _RUN_ID.match(run):
        raise ValueError(
            f"Expected run id {run!r} to be 1-64 letters, digits, '.', '_' or '-' "
            "(e.g. the 32 hex digits `edgedp deploy` writes)."
        )
    return run


def new_run_id() -> str:
    """A fresh random run id (128 bits, hex) for one deployment."""
    import secrets

    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class RunKeys:
    """The stream keys of one secret within one (plan, run).

    Args:
      secret: a device's noise secret, a pairwise secret, or a simulation seed's secret.
      plan_hash: the plan's SHA-256 (hex).
      run: the run id (:func:`validate_run_id`).
    """

    secret: bytes
    plan_hash: str
    run: str

    def __post_init__(self) -> None:
        if not isinstance(self.secret, (bytes, bytearray)) or not self.secret:
            raise TypeError("Expected secret to be non-empty bytes.")
        if not re.fullmatch(r"[0-9a-f]{64}", str(self.plan_hash)):
            raise ValueError(f"Expected plan_hash to be 64 hex digits, got {self.plan_hash!r}.")
        validate_run_id(self.run)

    @classmethod
    def simulation(cls, plan, *, run: str = SIMULATION_RUN) -> RunKeys:
        """Every stream of a simulation, from the plan's public seed (no privacy)."""
        return cls(rng.seed_secret(plan.seed), plan.plan_hash, run)

    def key(self, label: str, *ids: int) -> rng.StreamKey:
        """The key of stream ``label`` (with non-negative integer ids) in this plan and run."""
        return rng.derive_key(self.secret, "run", self.plan_hash, self.run, label, *ids)

    def per_trial(self, label: str, *, nodes: int, trials: int, first_trial: int = 0) -> np.ndarray:
        """``(trials, nodes)`` object array of ``key(label, trial, node)`` (e.g. ``"noise"``,
        ``"batch"``, ``"initial-state"``: :meth:`noise`, :meth:`batch`, :meth:`initial`) for
        trials ``first_trial ..``; the keys of a simulation's every (trial, node) at once."""
        tails = [(first_trial + i, u) for i in range(trials) for u in range(nodes)]
        keys = rng.derive_keys(self.secret, ("run", self.plan_hash, self.run, label), tails)
        out = np.empty(len(keys), dtype=object)
        out[:] = keys
        return out.reshape(trials, nodes)

    def noise(self, node: int, *, trial: int = 0) -> rng.StreamKey:
        """Node ``node``'s own noise stream (Gaussian factor input or Laplace draws)."""
        return self.key("noise", int(trial), int(node))

    def batch(self, node: int, *, trial: int = 0) -> rng.StreamKey:
        """Node ``node``'s data-order permutation."""
        return self.key("batch", int(trial), int(node))

    def initial(self, node: int, *, trial: int = 0) -> rng.StreamKey:
        """Node ``node``'s random initial state (simulations that draw x_i(0), paper 004)."""
        return self.key("initial-state", int(trial), int(node))

    def messages(self, node: int, *, trial: int = 0) -> rng.StreamKey:
        """Node ``node``'s message-wise noise (Zip-DL)."""
        return self.key("cross-message", int(trial), int(node))

    def shared(self, *, trial: int = 0) -> rng.StreamKey:
        """The shared-seed streams (Whisper's low-rank / dense forms; simulations only)."""
        return self.key("cross-shared", int(trial))

    def pair(self, u: int, v: int, *, trial: int = 0) -> rng.StreamKey:
        """The per-edge stream of edge {u, v} (the same key at both ends)."""
        lo, hi = sorted((int(u), int(v)))
        return self.key("cross-pair", int(trial), lo, hi)

    def cross(self, node: int, neighbours, *, trial: int = 0) -> CrossKeys:
        """All cross-agent keys of one node when this secret is shared by everyone
        (simulations and reproducible runs)."""
        return CrossKeys(
            shared=self.shared(trial=trial),
            pairs={int(v): self.pair(node, v, trial=trial) for v in neighbours if v != node},
            messages=self.messages(node, trial=trial),
        )

    def agent(self, node: int, neighbours=(), *, trial: int = 0) -> dict[str, Any]:
        """The ``noise_key``, ``batch_key`` and ``cross_keys`` arguments of an Agent whose
        streams all come from this secret (simulations and reproducible runs): the keys
        :func:`edgedp.runtime.node_keys` gives (which builds on this module)."""
        return {
            "noise_key": self.noise(node, trial=trial),
            "batch_key": self.batch(node, trial=trial),
            "cross_keys": self.cross(node, neighbours, trial=trial),
        }

    def fingerprint(self) -> str:
        """A one-way fingerprint of (secret, plan, run) for checkpoints: a resume with another
        secret, plan or run is refused. Revealing it does not reveal any stream key."""
        return self.key("fingerprint").hex()


def edge_key(pairwise_secret: bytes, *, plan_hash: str, run: str, u: int, v: int) -> rng.StreamKey:
    """A device's per-edge stream key from the secret it agreed with its neighbour."""
    return RunKeys(pairwise_secret, plan_hash, run).pair(u, v)
