"""A parsed scenario as bytes, for workers that do not see the scenario's files.

:func:`dump` writes everything a :class:`~edgedp_sim.scenarios.Scenario` holds — the plan
file's bytes (:meth:`NoisePlan.to_bytes`), the network with a latency table's rows read in,
the faults and the run settings — as one msgpack document (:mod:`edgedp._codec`: sorted keys,
so the same scenario gives the same bytes, and :func:`digest` names it). :func:`load`
rebuilds it, re-certifying the plan as a scenario file's ``plan = FILE`` is. Sweeps and
sharded trials send these bytes to Dask workers instead of paths, so a worker needs neither
the sweep folder nor the plan and latency files at the client's paths.
"""

from __future__ import annotations

import hashlib
from typing import Any

from edgedp import _codec
from edgedp.plan import NoisePlan
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.links import Latency, Network
from edgedp_sim.scenarios import Scenario, ScenarioError

__all__ = ["digest", "dump", "load"]

_VERSION = 1


def dump(sc: Scenario) -> bytes:
    """The bytes of ``sc`` (deterministic)."""
    net, f, lat = sc.network, sc.faults, sc.network.latency
    return _codec.encode(
        {
            "v": _VERSION,
            "plan": sc.plan.to_bytes(),
            "name": sc.name,
            "seed": sc.seed,
            "eval_every": sc.eval_every,
            "initial_state": sc.initial_state,
            "engine": sc.engine,
            "leakage": sc.leakage,
            "network": {
                "latency": {
                    "kind": lat.kind,
                    "params": lat.params,
                    "table": [[u, v, ms] for (u, v), ms in sorted(lat.table.items())],
                },
                "bandwidth_mbps": net.bandwidth_mbps,
                "loss": net.loss,
                "round_timeout_s": net.round_timeout_s,
                "startup_timeout_s": net.startup_timeout_s,
                "compute_s": net.compute_s,
            },
            "faults": {
                "dropout": f.dropout,
                "dropout_rule": f.dropout_rule,
                "crashes": [[c.node, c.at_s, c.down_s] for c in f.crashes],
                "churn": [f.churn_rate_per_s, f.churn_down_s, f.churn_horizon_s],
                "extra": f.extra,
            },
        }
    )


def digest(data: bytes) -> str:
    """A short name of scenario bytes (SHA-256, 16 hex digits)."""
    return hashlib.sha256(data).hexdigest()[:16]


def load(data: bytes) -> Scenario:
    """The scenario of :func:`dump`'s bytes; a malformed document is a ScenarioError."""
    try:
        d: dict[str, Any] = _codec.decode(data)
        if d.get("v") != _VERSION:
            raise ScenarioError(f"scenario bytes of version {d.get('v')!r}, expected {_VERSION}")
        lat, net, f = d["network"]["latency"], d["network"], d["faults"]
        latency = Latency(
            lat["kind"], dict(lat["params"]), {(int(u), int(v)): ms for u, v, ms in lat["table"]}
        )
        rate, down, horizon = f["churn"]
        return Scenario(
            name=d["name"],
            seed=d["seed"],
            plan=NoisePlan.from_bytes(d["plan"], gram=True),
            network=Network(
                latency=latency,
                bandwidth_mbps=net["bandwidth_mbps"],
                loss=net["loss"],
                round_timeout_s=net["round_timeout_s"],
                startup_timeout_s=net["startup_timeout_s"],
                compute_s=net["compute_s"],
            ),
            faults=Faults(
                dropout=f["dropout"],
                dropout_rule=f["dropout_rule"],
                crashes=tuple(Crash(int(u), at, dn) for u, at, dn in f["crashes"]),
                churn_rate_per_s=rate,
                churn_down_s=down,
                churn_horizon_s=horizon,
                extra=f["extra"],
            ),
            eval_every=d["eval_every"],
            leakage=d["leakage"],
            initial_state=d["initial_state"],
            engine=d["engine"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(f"malformed scenario bytes: {exc}") from None
