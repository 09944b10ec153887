"""Deployment: device keys, one node.toml per device, data shards, and a local launcher."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zmq.auth

from edgedp import algorithms, streams
from edgedp.accounting import budget
from edgedp.plan import NoisePlan
from firmware_py import checkpoint

__all__ = [
    "LocalRun",
    "free_ports",
    "generate_keys",
    "local_run",
    "read_endpoints",
    "write_configs",
    "write_shards",
]


def generate_keys(out: Path, name: str = "node") -> dict[str, str]:
    """A CURVE keypair (``NAME.key``, ``NAME.key_secret``) and a 32-byte noise secret
    (``NAME.noise``, mode 0600) in ``out``; returns the paths and the public key."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    public_file, secret_file = zmq.auth.create_certificates(str(out), name)
    noise = out / f"{name}.noise"
    fd = os.open(noise, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(32))
    os.chmod(secret_file, 0o600)
    public, _ = zmq.auth.load_certificate(public_file)
    return {
        "public_key_file": public_file,
        "secret_key_file": secret_file,
        "noise_secret_file": str(noise),
        "public_key": public.decode(),
    }


def read_endpoints(path: Path, n: int) -> dict[int, str]:
    """endpoints.toml: ``[endpoints]`` with ``0 = "tcp://10.0.0.10:5600"`` ... for every node."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    table = raw.get("endpoints")
    if not isinstance(table, dict):
        raise ValueError(f"{path}: needs an [endpoints] table mapping node id to tcp://HOST:PORT")
    out = {}
    for k, v in table.items():
        if not k.isdigit() or not isinstance(v, str) or not v.startswith("tcp://"):
            raise ValueError(f'{path}: bad entry {k} = {v!r}; expected NODE_ID = "tcp://HOST:PORT"')
        out[int(k)] = v
    if set(out) != set(range(n)):
        raise ValueError(
            f"{path}: expected endpoints for nodes 0..{n - 1}, missing "
            f"{sorted(set(range(n)) - set(out))}"
        )
    return out


def write_shards(plan: NoisePlan, out: Path) -> list[Path]:
    """Per-node data shards (``x``, ``y`` arrays) of the plan's task, as the simulators split it."""
    from sim import datasets

    data = datasets.partition(
        datasets.load(plan.task.dataset, seed=plan.seed),
        plan.n,
        scheme=plan.task.partition,
        seed=plan.seed,
    )
    return datasets.write_shards(data, Path(out))


def _toml_str(s: str) -> str:
    return json.dumps(str(s))


def write_configs(
    plan_file: Path,
    plan: NoisePlan,
    *,
    endpoints: dict[int, str],
    public_keys: dict[int, str],
    out: Path,
    key_files: dict[int, str],
    noise_files: dict[int, str] | None,
    shards: dict[int, str],
    bind: dict[int, str] | None = None,
    round_timeout: float = 10.0,
    startup_timeout: float = 120.0,
    max_epsilon: float | None = None,
    delta: float = 1e-6,
    run_id: str | None = None,
) -> list[Path]:
    """One ``node-U.toml`` per node. ``noise_files=None`` writes ``noise_secret = "plan-seed"``
    (reproducible, not private: for tests and comparisons with the simulators).

    With private noise every config gets the same ``run.id`` (``run_id``, default a fresh
    random one: :mod:`edgedp.streams`), and ``run.max_epsilon`` defaults to the plan's own ε
    against the worst adversary (:func:`edgedp.accounting.budget.device_epsilon`), so a
    device never runs a plan looser than the one it was deployed with."""
    if noise_files:
        run_id = streams.validate_run_id(run_id or streams.new_run_id())
        if max_epsilon is None:
            max_epsilon, _ = budget.device_epsilon(plan, delta=delta)
    elif run_id is not None:
        streams.validate_run_id(run_id)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for u in range(plan.n):
        share = plan.share(u)
        nbrs = sorted(set(share.neighbours) - {u})
        secret_line = (
            f"noise_secret_file = {_toml_str(noise_files[u])}"
            if noise_files
            else 'noise_secret = "plan-seed"'
        )
        lines = [
            "[node]",
            f"id = {u}",
            f"bind = {_toml_str((bind or endpoints)[u])}",
            f"key_file = {_toml_str(key_files[u])}",
            secret_line,
            "",
            "[plan]",
            f"file = {_toml_str(plan_file)}",
            f"# plan_hash = {plan.plan_hash}",
            "",
            "[data]",
            f"shard = {_toml_str(shards[u])}",
            "",
            "[model]",
            f"kind = {_toml_str(plan.task.model.partition('@')[0])}",
            "",
            "[run]",
            *([f"id = {_toml_str(run_id)}"] if run_id is not None else []),
            f"checkpoint_dir = {_toml_str(f'state/node-{u}')}",
            f"round_timeout = {float(round_timeout)}",
            f"startup_timeout = {float(startup_timeout)}",
            'dropout_rule = "renormalize"',
            f"delta = {float(delta)}",
        ]
        if max_epsilon is not None and max_epsilon < float("inf"):
            lines.append(f"max_epsilon = {float(max_epsilon)!r}")
        for v in nbrs:
            lines += [
                "",
                "[[neighbours]]",
                f"id = {v}",
                f"endpoint = {_toml_str(endpoints[v])}",
                f"public_key = {_toml_str(public_keys[v])}",
            ]
        p = out / f"node-{u}.toml"
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 (bound then released)."""
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class LocalRun:
    directory: Path
    configs: list[Path]
    processes: list[subprocess.Popen]
    plan: NoisePlan | None = None

    def wait(self, timeout: float) -> list[int | None]:
        """Every node's exit status (None for a node this run did not start)."""
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.processes:
            if p is None:
                codes.append(None)
                continue
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        return codes

    def start(self, u: int) -> subprocess.Popen:
        log = open(self.directory / f"node-{u}.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "firmware_py.daemon", "--config", str(self.configs[u])],
            stdout=log,
            stderr=log,
            cwd=self.directory,
        )
        log.close()
        self.processes[u] = proc
        return proc

    def final_models(self) -> np.ndarray:
        """Every node's last model state, from its final checkpoint (what the simulators'
        ``model_digest`` covers; for sr-gt/DPOP it differs from the published release)."""
        algo = algorithms.for_mechanism(self.plan.mechanism)
        out = []
        for u in range(len(self.configs)):
            body = checkpoint.load(self._state(u) / "checkpoint")
            state = {k: np.asarray(v, dtype=np.float64) for k, v in body["state"].items()}
            out.append(algo.model(state))
        return np.stack(out)

    def released_models(self) -> np.ndarray:
        """What every node published at the end (``final.npy``: covered by the plan)."""
        return np.stack([np.load(self._state(u) / "final.npy") for u in range(len(self.configs))])

    def _state(self, u: int) -> Path:
        return self.directory / "configs" / "state" / f"node-{u}"

    def metrics(self, u: int) -> list[dict]:
        """Node u's metrics lines (a line torn by a kill -9 is skipped)."""
        path = self.directory / "configs" / "state" / f"node-{u}" / "metrics.jsonl"
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def local_run(
    plan_file: Path,
    directory: Path,
    *,
    private_noise: bool = False,
    round_timeout: float = 10.0,
    startup_timeout: float = 60.0,
    start: Collection[int] | None = None,
) -> LocalRun:
    """Set up and launch one agent process per node on 127.0.0.1 (returns immediately).

    ``start`` lists the nodes to launch (default: all); the others are left for the caller
    (``LocalRun.start(u)``, or a test playing that node itself)."""
    plan = NoisePlan.from_bytes(Path(plan_file).read_bytes())
    directory = Path(directory)
    checkpoint.private_folder(directory / "keys")
    keys = {u: generate_keys(directory / "keys", f"node-{u}") for u in range(plan.n)}
    ports = free_ports(plan.n)
    endpoints = {u: f"tcp://127.0.0.1:{ports[u]}" for u in range(plan.n)}
    shards = write_shards(plan, directory / "shards")
    configs = write_configs(
        Path(plan_file).resolve(),
        plan,
        endpoints=endpoints,
        public_keys={u: k["public_key"] for u, k in keys.items()},
        out=directory / "configs",
        key_files={u: k["secret_key_file"] for u, k in keys.items()},
        noise_files={u: k["noise_secret_file"] for u, k in keys.items()} if private_noise else None,
        shards={u: str(s.resolve()) for u, s in enumerate(shards)},
        round_timeout=round_timeout,
        startup_timeout=startup_timeout,
    )
    run = LocalRun(directory, configs, [None] * plan.n, plan)
    for u in range(plan.n) if start is None else sorted(start):
        run.start(u)
    return run
