"""node.toml: one device's configuration, validated with errors that name the field.

```toml
[node]
id = 3
bind = "tcp://0.0.0.0:5603"                # where this node listens
key_file = "keys/node-3.key_secret"        # ZeroMQ CURVE keypair (pyzmq certificate format)
noise_secret_file = "keys/node-3.noise"    # 32+ secret bytes; or noise_secret = "plan-seed"
# ledger_file = "keys/node-3.noise.ledger" # streams this secret has used (default: beside it)
# sealed_seed = "base64..."                # whisper lowrank/dense: the run's shared seed,
                                           # sealed to this device's CURVE key by edgedp deploy

[plan]
file = "run.plan"
hash = "5f1c..."                           # the plan's SHA-256: any other plan is refused
public_key = "9a0b..."                     # optional: only plans signed by this planning key

[data]
shard = "shards/node-3.npz"                # arrays x (m, f) and y (m,)

[model]
kind = "logistic"                          # must match the plan's task model
# file = "model.onnx"                      # for onnx:... models: this device's copy (hash-checked)

[run]
id = "9f2c..."                             # run id shared by all nodes (edgedp deploy writes it)
# manifest = "run.manifest"                # the run as the operator signed it (default)
checkpoint_dir = "state/node-3"
metrics = "state/node-3/metrics.jsonl"
final_model = "state/node-3/final.npy"
round_timeout = 10.0                       # seconds to wait for neighbours each round
startup_timeout = 120.0                    # for the first round
dropout_rule = "renormalize"
max_epsilon = 8.0                          # budget: refuse a plan whose ε(delta) exceeds it
delta = 1e-6                               # δ of that ε; default: the plan's own δ
adversary = "worst"                        # whose ε the budget binds: worst (default),
                                           # eavesdropper, insider or neighbourhood
max_missing = 0.25                         # exit 7 (degraded) if more of the neighbours'
                                           # messages were missing, or one never came
max_memory_mb = 1024                       # refuse (exit 3) a plan or model that needs more;
                                           # default: half of the machine's memory

[[neighbours]]
id = 1
endpoint = "tcp://10.0.0.11:5601"
public_key = "z85 public key (40 characters)"
```

``noise_secret = "plan-seed"`` derives the noise from the plan's public seed, which makes a run
reproducible and comparable with the simulators but gives **no privacy**; it is for tests.
Every stream is keyed by (secret, plan hash, ``run.id``) (:mod:`edgedp.streams`); with a
noise secret file, ``run.id`` is required and the ledger file records every (plan, run) the
secret has drawn noise for, so a fresh start on a used stream is refused. In plan-seed mode
``run.id`` defaults to ``"simulation"``, the simulators' run id.

Every section and key is checked against :data:`SECTIONS`: an unknown one (e.g. a misspelled
``max_epsilonn``, which would otherwise leave the budget at ∞) is a :class:`ConfigError`
naming it and the closest valid key.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from edgedp import _validate, streams
from edgedp.agent import DROPOUT_RULES

__all__ = ["SECTIONS", "ConfigError", "NodeConfig", "Neighbour", "load"]

PLAN_SEED = "plan-seed"
#: Whose ε ``run.max_epsilon`` binds: the worst adversary the device faces, or a named one.
ADVERSARIES = ("worst", "eavesdropper", "insider", "neighbourhood")

# The keys each section may hold; a key added to ``load`` is added here too.
NODE_KEYS = (
    "id",
    "bind",
    "key_file",
    "noise_secret_file",
    "noise_secret",
    "ledger_file",
    "sealed_seed",
)
PLAN_KEYS = ("file", "hash", "public_key")
DATA_KEYS = ("shard",)
MODEL_KEYS = ("kind", "file")
RUN_KEYS = (
    "id",
    "manifest",
    "checkpoint_dir",
    "metrics",
    "final_model",
    "round_timeout",
    "startup_timeout",
    "dropout_rule",
    "max_epsilon",
    "delta",
    "adversary",
    "max_missing",
    "max_memory_mb",
)
NEIGHBOUR_KEYS = ("id", "endpoint", "public_key")  # each [[neighbours]] entry
#: Section name -> allowed keys (``neighbours`` is an array of tables).
SECTIONS = MappingProxyType(
    {
        "node": NODE_KEYS,
        "plan": PLAN_KEYS,
        "data": DATA_KEYS,
        "model": MODEL_KEYS,
        "run": RUN_KEYS,
        "neighbours": NEIGHBOUR_KEYS,
    }
)


class ConfigError(ValueError):
    """A bad node.toml; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class Neighbour:
    id: int
    endpoint: str
    public_key: bytes


@dataclass(frozen=True, slots=True)
class NodeConfig:
    path: Path
    id: int
    bind: str
    key_file: Path
    noise_secret_file: Path | None
    ledger_file: Path | None
    run_id: str
    adversary: str
    max_missing: float
    plan_file: Path
    plan_hash: str
    plan_public_key: str
    sealed_seed: str
    shard: Path
    model_kind: str
    model_file: Path | None
    checkpoint_dir: Path
    metrics: Path
    final_model: Path
    round_timeout: float
    startup_timeout: float
    dropout_rule: str
    max_epsilon: float
    delta: float | None  # None: the plan's own δ
    neighbours: tuple[Neighbour, ...]
    max_memory: int | None = None  # bytes (run.max_memory_mb); None: no limit
    manifest: Path | None = None  # run.manifest: the signed run (firmware_py.trust)

    @property
    def reproducible(self) -> bool:
        return self.noise_secret_file is None


def _get(table: dict, section: str, key: str, kind: type, default: Any = ...) -> Any:
    sec = table.get(section, {})
    if not isinstance(sec, dict):
        raise ConfigError(f"[{section}] must be a table")
    if key not in sec:
        if default is ...:
            raise ConfigError(f"missing {section}.{key}")
        return default
    value = sec[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ConfigError(f"{section}.{key} must be a {kind.__name__}, got {value!r}")
    return value


def _check_layout(raw: dict) -> None:
    """Refuse unknown sections and keys (naming the closest valid one) and wrong shapes."""
    stray = {k: v for k, v in raw.items() if k not in SECTIONS and not isinstance(v, dict)}
    dotted = [f"{sec}.{key}" for sec, keys in SECTIONS.items() for key in keys]
    _validate.known_keys(stray, dotted, error=ConfigError)  # a key outside its section
    _validate.known_keys(raw, SECTIONS, what="section", error=ConfigError)
    for section, keys in SECTIONS.items():
        value = raw.get(section)
        if value is None:
            continue
        if section == "neighbours":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError("neighbours must be [[neighbours]] tables")
            for i, entry in enumerate(value):
                _validate.known_keys(entry, keys, where=f"neighbours[{i}]", error=ConfigError)
        elif not isinstance(value, dict):
            raise ConfigError(f"[{section}] must be a table")
        else:
            _validate.known_keys(value, keys, where=section, error=ConfigError)


def _fraction(table: dict, section: str, key: str, default: float) -> float:
    value = _get(table, section, key, float, default)
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{section}.{key} = {value} must be in [0, 1]")
    return value


def _hex(table: dict, section: str, key: str) -> str:
    """An optional 64-hex-digit value (a pinned plan hash or a public key), lower case."""
    value = _get(table, section, key, str, "")
    if value and not (len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value)):
        raise ConfigError(f"{section}.{key} = {value!r} must be 64 hex digits")
    return value.lower()


def machine_memory() -> int:
    """Physical memory in bytes (os.sysconf); 1 GiB when the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**30


def _endpoint(name: str, value: str) -> str:
    if not value.startswith(("tcp://", "ipc://", "inproc://")):
        raise ConfigError(f"{name} = {value!r} must look like tcp://HOST:PORT")
    return value


def load(path: str | Path) -> NodeConfig:
    """Read and validate a node.toml; relative paths are relative to the file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    _check_layout(raw)
    base = path.parent

    def rel(p: str) -> Path:
        q = Path(p)
        return q if q.is_absolute() else base / q

    node_id = _get(raw, "node", "id", int)
    if node_id < 0:
        raise ConfigError(f"node.id = {node_id} must be >= 0")
    secret = raw.get("node", {}).get("noise_secret")
    if secret is not None and secret != PLAN_SEED:
        raise ConfigError(f'node.noise_secret may only be "{PLAN_SEED}" (or use noise_secret_file)')
    noise_file = raw.get("node", {}).get("noise_secret_file")
    if (secret is None) == (noise_file is None):
        raise ConfigError(
            'set exactly one of node.noise_secret_file or node.noise_secret = "plan-seed"'
        )
    run_id = _get(raw, "run", "id", str, None)
    if run_id is None and noise_file is not None:
        raise ConfigError(
            "missing run.id: a run with a private noise secret needs the run id shared by "
            "every node (edgedp deploy writes a fresh one)"
        )
    try:
        run_id = streams.validate_run_id(run_id or streams.SIMULATION_RUN)
    except ValueError as exc:
        raise ConfigError(f"run.id: {exc}") from None
    adversary = _get(raw, "run", "adversary", str, "worst")
    if adversary not in ADVERSARIES:
        raise ConfigError(f"run.adversary = {adversary!r}; choose one of {list(ADVERSARIES)}")
    ledger = _get(raw, "node", "ledger_file", str, None)
    if ledger is not None and noise_file is None:
        raise ConfigError('node.ledger_file needs node.noise_secret_file (not "plan-seed")')
    rule = _get(raw, "run", "dropout_rule", str, "renormalize")
    if rule not in DROPOUT_RULES:
        raise ConfigError(f"run.dropout_rule = {rule!r}; choose one of {sorted(DROPOUT_RULES)}")
    floats = {
        k: _get(raw, "run", k, float, d)
        for k, d in [
            ("round_timeout", 10.0),
            ("startup_timeout", 120.0),
            ("max_epsilon", math.inf),
            ("delta", None),
        ]
    }
    for k in ("round_timeout", "startup_timeout", "max_epsilon"):
        if not floats[k] > 0:
            raise ConfigError(f"run.{k} = {floats[k]} must be > 0")
    max_memory_mb = _get(raw, "run", "max_memory_mb", float, machine_memory() / 2**21)
    if not 0 < max_memory_mb < math.inf:
        raise ConfigError(f"run.max_memory_mb = {max_memory_mb} must be > 0 (megabytes)")
    if floats["delta"] is not None and not 0 < floats["delta"] < 1:
        raise ConfigError(f"run.delta = {floats['delta']} must be in (0, 1)")
    neighbours = []
    entries = raw.get("neighbours", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError("at least one [[neighbours]] entry is required")
    for i, nb in enumerate(entries):
        where = f"neighbours[{i}]"
        missing = [k for k in NEIGHBOUR_KEYS if k not in nb]
        if missing:
            raise ConfigError(f"{where} needs id, endpoint and public_key (missing {missing[0]})")
        if not isinstance(nb["id"], int) or nb["id"] < 0 or nb["id"] == node_id:
            raise ConfigError(f"{where}.id = {nb['id']!r} must be another node's id")
        key = nb["public_key"]
        if not isinstance(key, str) or len(key) != 40:
            raise ConfigError(f"{where}.public_key must be a 40-character z85 CURVE key")
        neighbours.append(
            Neighbour(nb["id"], _endpoint(f"{where}.endpoint", nb["endpoint"]), key.encode())
        )
    if len({n.id for n in neighbours}) != len(neighbours):
        raise ConfigError("a neighbour id appears twice in [[neighbours]]")
    state = _get(raw, "run", "checkpoint_dir", str)
    model_file = _get(raw, "model", "file", str, None)
    return NodeConfig(
        path=path,
        id=node_id,
        bind=_endpoint("node.bind", _get(raw, "node", "bind", str)),
        key_file=rel(_get(raw, "node", "key_file", str)),
        noise_secret_file=rel(noise_file) if noise_file is not None else None,
        ledger_file=(
            rel(ledger)
            if ledger is not None
            else (rel(noise_file + ".ledger") if noise_file is not None else None)
        ),
        run_id=run_id,
        adversary=adversary,
        max_missing=_fraction(raw, "run", "max_missing", 0.25),
        plan_file=rel(_get(raw, "plan", "file", str)),
        plan_hash=_hex(raw, "plan", "hash"),
        plan_public_key=_hex(raw, "plan", "public_key"),
        sealed_seed=_get(raw, "node", "sealed_seed", str, ""),
        shard=rel(_get(raw, "data", "shard", str)),
        model_kind=_get(raw, "model", "kind", str, ""),
        model_file=rel(model_file) if model_file is not None else None,
        checkpoint_dir=rel(state),
        manifest=rel(_get(raw, "run", "manifest", str, "run.manifest")),
        metrics=rel(_get(raw, "run", "metrics", str, str(Path(state) / "metrics.jsonl"))),
        final_model=rel(_get(raw, "run", "final_model", str, str(Path(state) / "final.npy"))),
        dropout_rule=rule,
        neighbours=tuple(sorted(neighbours, key=lambda n: n.id)),
        max_memory=int(max_memory_mb * 2**20),
        **floats,
    )
