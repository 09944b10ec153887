"""Deployment: device keys, one node.toml per device, data shards, and a local launcher."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zmq.auth

from edgedp import families, keys, signing, streams
from edgedp.accounting import budget
from edgedp.plan import NoisePlan
from firmware_py import checkpoint, ledger, trust

__all__ = [
    "LocalRun",
    "free_ports",
    "generate_keys",
    "json_lines",
    "local_run",
    "read_endpoints",
    "node_config",
    "sealed_seeds",
    "systemd_unit",
    "write_configs",
    "write_device_folders",
    "write_shards",
]


def generate_keys(
    out: Path, name: str = "node", *, force: bool = False, noise_only: bool = False
) -> dict[str, str]:
    """A CURVE keypair (``NAME.key``, ``NAME.key_secret``), a 32-byte noise secret
    (``NAME.noise``) and its empty release ledger (``NAME.noise.ledger``,
    :mod:`firmware_py.ledger`) in ``out`` (folder 0700, secrets and ledger 0600); returns the
    paths and the public key. ``noise_only``: a new noise secret and ledger, the keypair kept
    (a retired secret: its neighbours need nothing new, its runs are over). Existing keys are
    never overwritten unless ``force``: a new keypair changes the public key every neighbour
    pins, and a new noise secret ends every run of the old one."""
    out = Path(out)
    exts = ("noise", "noise.ledger") if noise_only else ("key", "key_secret", "noise")
    files = [out / f"{name}.{ext}" for ext in exts]
    if not force and any(f.exists() for f in files):
        raise FileExistsError(
            f"{out / name}.* already exist: refusing to overwrite device keys (their public "
            "key is pinned by the neighbours and the noise secret's runs would end); "
            "pass --force to replace them"
        )
    checkpoint.private_folder(out)
    if noise_only:
        public_file, secret_file = str(out / f"{name}.key"), str(out / f"{name}.key_secret")
        if not Path(secret_file).exists():
            raise FileNotFoundError(f"{secret_file}: no keypair to keep; leave out --noise")
    else:
        public_file, secret_file = zmq.auth.create_certificates(str(out), name)
        os.chmod(secret_file, 0o600)
    noise = out / f"{name}.noise"
    book = ledger.ledger_path(noise)
    book.unlink(missing_ok=True)  # the old secret's: it says nothing of the new one
    secret = os.urandom(32)
    fd = os.open(noise, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
        fh.flush()
        os.fsync(fh.fileno())
    ledger.create(book, secret)
    public, _ = zmq.auth.load_certificate(public_file)
    return {
        "public_key_file": public_file,
        "secret_key_file": secret_file,
        "noise_secret_file": str(noise),
        "ledger_file": str(book),
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
    missing, extra = sorted(set(range(n)) - set(out)), sorted(set(out) - set(range(n)))
    if missing or extra:
        raise ValueError(
            f"{path}: the plan has nodes 0..{n - 1}; "
            + "; ".join(
                part
                for part in (
                    f"no endpoint for {missing}" if missing else "",
                    f"endpoints for nodes it does not have: {extra}" if extra else "",
                )
                if part
            )
        )
    shared = {v: sorted(u for u in out if out[u] == v) for v in out.values()}
    twice = {v: us for v, us in shared.items() if len(us) > 1}
    if twice:
        v, us = next(iter(twice.items()))
        raise ValueError(f"{path}: nodes {us} share the endpoint {v}; each needs its own")
    return out


def write_shards(plan: NoisePlan, out: Path) -> list[Path]:
    """Per-node data shards (``x``, ``y`` arrays) of the plan's task, as the simulators split it."""
    from edgedp_sim import datasets

    data = datasets.partition(
        datasets.load(plan.task.dataset, seed=plan.seed),
        plan.n,
        scheme=plan.task.partition,
        seed=plan.seed,
    )
    return datasets.write_shards(data, Path(out))


def _toml_str(s: str) -> str:
    return json.dumps(str(s))


def node_config(
    plan: NoisePlan,
    u: int,
    *,
    bind: str,
    endpoints: dict[int, str],
    public_keys: dict[int, str],
    key_file: str,
    noise_file: str | None,
    plan_file: str,
    shard: str,
    checkpoint_dir: str,
    model_file: str | None = None,
    round_timeout: float = 10.0,
    startup_timeout: float = 120.0,
    max_epsilon: float | None = None,
    delta: float | None = None,
    run_id: str | None = None,
    planner_key: str | None = None,
    sealed_seed: str | None = None,
) -> str:
    """The node.toml text of node ``u`` (paths are written as given: relative ones are
    relative to the config file on the device)."""
    nbrs = sorted(set(plan.share(u).neighbours) - {u})
    node = [
        "[node]",
        f"id = {u}",
        f"bind = {_toml_str(bind)}",
        f"key_file = {_toml_str(key_file)}",
        f"noise_secret_file = {_toml_str(noise_file)}"
        if noise_file
        else 'noise_secret = "plan-seed"',
    ]
    if sealed_seed is not None:
        node.append(f"sealed_seed = {_toml_str(sealed_seed)}")
    lines = [
        *node,
        "",
        "[plan]",
        f"file = {_toml_str(plan_file)}",
        f"hash = {_toml_str(plan.plan_hash)}",
        *([f"public_key = {_toml_str(planner_key)}"] if planner_key else []),
        "",
        "[data]",
        f"shard = {_toml_str(shard)}",
        "",
        "[model]",
        f"kind = {_toml_str(_model_kind(plan))}",
        *([f"file = {_toml_str(model_file)}"] if model_file else []),
        "",
        "[run]",
        *([f"id = {_toml_str(run_id)}"] if run_id is not None else []),
        f"checkpoint_dir = {_toml_str(checkpoint_dir)}",
        f"round_timeout = {float(round_timeout)}",
        f"startup_timeout = {float(startup_timeout)}",
        'dropout_rule = "renormalize"',
        *([f"delta = {float(delta)!r}"] if delta is not None else []),  # else the plan's δ
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
    return "\n".join(lines) + "\n"


def _model_kind(plan: NoisePlan) -> str:
    """``[model] kind``: the plan's model name; ``onnx`` for ONNX plans, whose planner-side
    path means nothing on the device (``[model] file`` names the device's copy)."""
    name = plan.task.model.partition("@")[0]
    return "onnx" if name.startswith("onnx:") else name


def _run_settings(plan, noise_files, run_id, max_epsilon, delta):
    """(run_id, max_epsilon) of a deployment: with private noise a run id (fresh unless
    given) and the plan's own worst-adversary ε as the default budget."""
    if noise_files:
        run_id = streams.validate_run_id(run_id or streams.new_run_id())
        if max_epsilon is None:
            max_epsilon, _ = budget.device_epsilon(plan, delta=delta)
    elif run_id is not None:
        streams.validate_run_id(run_id)
    return run_id, max_epsilon


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
    delta: float | None = None,
    run_id: str | None = None,
    model_files: dict[int, str] | None = None,
    sealed_seeds: dict[int, str] | None = None,
) -> list[Path]:
    """One ``node-U.toml`` per node in ``out`` (state in ``out/state/node-U``).
    ``noise_files=None`` writes ``noise_secret = "plan-seed"`` (reproducible, not private:
    for tests and comparisons with the simulators).

    With private noise every config gets the same ``run.id`` (``run_id``, default a fresh
    random one: :mod:`edgedp.streams`), and ``run.max_epsilon`` defaults to the plan's own ε
    against the worst adversary (:func:`edgedp.accounting.budget.device_epsilon`), so a
    device never runs a plan looser than the one it was deployed with."""
    run_id, max_epsilon = _run_settings(plan, noise_files, run_id, max_epsilon, delta)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for u in range(plan.n):
        text = node_config(
            plan,
            u,
            bind=(bind or endpoints)[u],
            endpoints=endpoints,
            public_keys=public_keys,
            key_file=key_files[u],
            noise_file=noise_files[u] if noise_files else None,
            plan_file=str(plan_file),
            shard=shards[u],
            checkpoint_dir=f"state/node-{u}",
            model_file=(model_files or {}).get(u),
            round_timeout=round_timeout,
            startup_timeout=startup_timeout,
            max_epsilon=max_epsilon,
            delta=delta,
            run_id=run_id,
            sealed_seed=(sealed_seeds or {}).get(u),
        )
        p = out / f"node-{u}.toml"
        _private(p, text.encode())
        paths.append(p)
    return paths


#: Where ``edgedp deploy`` assumes a device keeps its keys, node.toml, plan and state.
DEVICE_ROOT = "/var/lib/edgedp"
#: The agent command the systemd unit runs (a pip install into /usr/local).
AGENT_COMMAND = "/usr/local/bin/edgedp-agent"


def systemd_unit(
    *,
    root: str = DEVICE_ROOT,
    command: str = AGENT_COMMAND,
    description: str = "",
    ledger: str = "keys/node.noise.ledger",
    allow: Sequence[str] = (),
) -> str:
    """The hardened systemd unit (``firmware_py/edgedp-agent.service``) for one device:
    writable only ``root/state`` and the release ledger ``root/ledger``; network traffic
    only with the ``allow`` addresses (the neighbours') and the loopback, or any address
    when the list is empty or names a host instead of an IP address."""
    import ipaddress
    from importlib import resources
    from string import Template

    for name, value in (("root", root), ("command", command)):
        if not value.startswith("/") or any(c in value for c in " \n\"'$%"):
            raise ValueError(f"Expected {name}={value!r} to be an absolute path without spaces.")
    if ledger.startswith("/") or any(c in ledger for c in " \n\"'$%") or ".." in ledger:
        raise ValueError(f"Expected ledger={ledger!r} to be a relative path below root.")
    try:
        ips = [str(ipaddress.ip_address(a)) for a in allow]
    except ValueError:
        ips = []  # a host name: systemd's allow-list takes addresses only
    addresses = "any" if not ips else " ".join(["localhost", *ips])
    template = resources.files("firmware_py").joinpath("edgedp-agent.service").read_text()
    return Template(template).substitute(
        root=root,
        command=command,
        description=description,
        ledger=ledger,
        anchors=str(trust.ANCHORS),
        addresses=addresses,
    )


def needs_shared_seed(plan: NoisePlan) -> bool:
    """True for cross-agent plans with shared-seed streams (Whisper's low-rank/dense forms)."""
    return plan.cross_agent is not None and plan.cross_agent.rank > 0


def sealed_seeds(plan: NoisePlan, public_keys: dict[int, str]) -> dict[int, str] | None:
    """A fresh 32-byte shared seed for one run, sealed to every device's CURVE public key
    (base64; libsodium sealed boxes). The seed itself is never written anywhere."""
    if not needs_shared_seed(plan):
        return None
    seed = os.urandom(32)
    return {
        u: base64.b64encode(keys.seal(seed, public_keys[u].encode())).decode()
        for u in range(plan.n)
    }


def _private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (0600, also over an old file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(data)


def signed_run(
    plan: NoisePlan,
    plan_bytes: bytes,
    signing_key: str,
    *,
    run_id: str,
    public_keys: dict,
    max_epsilon: float,
    delta: float,
) -> tuple[bytes, bytes]:
    """The plan file signed with ``signing_key`` and the run manifest it signs
    (:mod:`firmware_py.trust`): this plan, this run, every node's key, the budget."""
    loaded = NoisePlan.from_bytes(plan_bytes)
    if loaded.plan_hash != plan.plan_hash:
        raise ValueError("the plan bytes are not the plan's")
    manifest = trust.RunManifest(
        plan_hash=plan.plan_hash,
        run=run_id,
        nodes={u: public_keys[u] for u in range(plan.n)},
        max_epsilon=float(max_epsilon),
        delta=float(delta),
    )
    return loaded.to_bytes(signing_key=signing_key), manifest.signed(signing_key)


def write_device_folders(
    plan_bytes: bytes,
    plan: NoisePlan,
    *,
    endpoints: dict[int, str],
    public_keys: dict[int, str],
    out: Path,
    with_shards: bool = False,
    signing_key: str | None = None,
    planner_key: str | None = None,
    run_id: str | None = None,
    max_epsilon: float | None = None,
    delta: float | None = None,
    round_timeout: float = 10.0,
    startup_timeout: float = 120.0,
    root: str = DEVICE_ROOT,
    command: str = AGENT_COMMAND,
    force: bool = False,
) -> dict:
    """One folder ``out/node-U`` per device with everything it needs besides its own keys.

    Each holds ``node.toml`` (every path relative to it, so the folder can be copied to the
    device's ``root`` as is), ``run.plan``, ``edgedp-agent.service`` (the hardened systemd
    unit for ``root``), ``shard.npz`` (see below), and ``model.onnx`` for ONNX
    plans (hash-checked against the plan on the device); ``with_shards`` adds each node's
    shard of the plan's task as ``shard.npz``. With ``signing_key`` (the operator's planning
    key) the plan is signed and ``run.manifest`` says what the run is, signed too: devices
    with trust anchors run nothing else (:mod:`firmware_py.trust`). Every file is 0600 and
    every folder 0700 (the operator installs them with the modes the device needs). The
    device's keys are generated on the device (``edgedp keys gen --out keys --name node-U``
    in ``root``); only its public key comes back to the operator. An ``out`` that already
    holds device folders is refused unless ``force``: a deployment is a run. Returns the run
    id, the budget and the folders.
    """
    out = Path(out)
    earlier = sorted(out.glob("node-*/node.toml")) if out.exists() else []
    if earlier and not force:
        raise FileExistsError(
            f"{out} already holds device folders (a deployment of its own run): write the "
            "new run's folders elsewhere, or pass --force to replace them"
        )
    run_id, max_epsilon = _run_settings(plan, True, run_id, max_epsilon, delta)
    manifest = None
    if signing_key is not None:
        plan_bytes, manifest = signed_run(
            plan, plan_bytes, signing_key, run_id=run_id, public_keys=public_keys,
            max_epsilon=max_epsilon, delta=plan.delta if delta is None else delta,
        )  # fmt: skip
    seeds = sealed_seeds(plan, public_keys)
    model_path = None
    if plan.task.model.startswith("onnx:"):
        model_path = Path(plan.task.model.removeprefix("onnx:").partition("@")[0])
    shard_files = None
    if with_shards:
        shard_files = write_shards(plan, out / ".shards")
    folders = []
    for u in range(plan.n):
        folder = out / f"node-{u}"
        checkpoint.private_folder(folder)
        _private(folder / "run.plan", plan_bytes)
        if manifest is not None:
            _private(folder / "run.manifest", manifest)
        if shard_files is not None:
            _private(folder / "shard.npz", shard_files[u].read_bytes())
        if model_path is not None:
            _private(folder / "model.onnx", model_path.read_bytes())
        text = node_config(
            plan,
            u,
            bind="tcp://0.0.0.0:" + endpoints[u].rsplit(":", 1)[1],
            endpoints=endpoints,
            public_keys=public_keys,
            key_file=f"keys/node-{u}.key_secret",
            noise_file=f"keys/node-{u}.noise",
            plan_file="run.plan",
            shard="shard.npz",
            checkpoint_dir=f"state/{run_id}",
            model_file="model.onnx" if model_path is not None else None,
            round_timeout=round_timeout,
            startup_timeout=startup_timeout,
            max_epsilon=max_epsilon,
            delta=delta,
            run_id=run_id,
            planner_key=None if signing_key is not None else planner_key,
            sealed_seed=None if seeds is None else seeds[u],
        )
        _private(folder / "node.toml", text.encode())
        unit = systemd_unit(
            root=root,
            command=command,
            description=f"(node {u}, run {run_id})",
            ledger=f"keys/node-{u}.noise.ledger",
            allow=_addresses(endpoints, plan.share(u).neighbours, u),
        )
        _private(folder / "edgedp-agent.service", unit.encode())
        folders.append(folder)
    if shard_files is not None:
        shutil.rmtree(out / ".shards", ignore_errors=True)
    return {
        "run_id": run_id,
        "max_epsilon": max_epsilon,
        "folders": folders,
        "signed": manifest is not None,
    }


def _addresses(endpoints: dict[int, str], neighbours, u: int) -> list[str]:
    """The IP addresses of node ``u``'s neighbours (its unit's network allow-list)."""
    hosts = []
    for v in sorted(set(neighbours) - {u}):
        host = endpoints[v].removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")
        if host not in hosts:
            hosts.append(host)
    return hosts


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


def json_lines(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file (metrics); a line torn by a kill is skipped."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@dataclass
class LocalRun:
    """Agents of one plan on 127.0.0.1. ``anchors``: the trust anchors' file they are
    started with (a laboratory one, ``--lab``: owned by the user who runs them)."""

    directory: Path
    configs: list[Path]
    processes: list[subprocess.Popen]
    plan: NoisePlan | None = None
    anchors: Path | None = None

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

    def start(self, u: int, *, preexec_fn=None, args: Sequence[str] = ()) -> subprocess.Popen:
        """(Re)start node ``u``'s agent with extra daemon ``args`` (e.g. ``--log-format
        json``); ``preexec_fn`` runs in the child before it starts (e.g. resource limits)."""
        log = open(self.directory / f"node-{u}.log", "ab")
        trust_args = ["--anchors", str(self.anchors), "--lab"] if self.anchors else []
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "firmware_py.daemon",
                "--config",
                str(self.configs[u]),
                *trust_args,
                *args,
            ],
            stdout=log,
            stderr=log,
            cwd=self.directory,
            preexec_fn=preexec_fn,
        )
        log.close()
        self.processes[u] = proc
        return proc

    def final_models(self) -> np.ndarray:
        """Every node's last model state, from its final checkpoint (what the simulators'
        ``model_digest`` covers; for sr-gt/DPOP it differs from the published release)."""
        algo = families.for_mechanism(self.plan.mechanism)
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
        return json_lines(self.directory / "configs" / "state" / f"node-{u}" / "metrics.jsonl")


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

    Paths are made absolute first (the agents run in ``directory``), so a relative
    ``directory`` or a plan naming a relative ``onnx:`` file works. With ``private_noise``
    every agent gets its own keys, a fresh run id and — for shared-seed plans — the run's
    seed sealed to its key. ``start`` lists the nodes to launch (default: all); the others
    are left for the caller (``LocalRun.start(u)``, or a test playing that node itself).

    Agents are started with the trust anchors ``directory/anchors.toml`` (``--anchors``,
    ``--lab``: the file is this user's). With ``private_noise`` it names a planning key made
    for the run (``directory/ops``), the plan is signed with it and ``configs/run.manifest``
    says what the run is, as ``edgedp deploy --sign`` does; with plan-seed noise there are
    no anchors (nothing private to protect)."""
    plan_bytes = Path(plan_file).read_bytes()
    plan = NoisePlan.from_bytes(plan_bytes, gram=True)
    directory = Path(directory).resolve()
    checkpoint.private_folder(directory / "keys")
    keys = {u: generate_keys(directory / "keys", f"node-{u}", force=True) for u in range(plan.n)}
    ports = free_ports(plan.n)
    endpoints = {u: f"tcp://127.0.0.1:{ports[u]}" for u in range(plan.n)}
    shards = write_shards(plan, directory / "shards")
    public = {u: k["public_key"] for u, k in keys.items()}
    model = None
    if plan.task.model.startswith("onnx:"):
        model = str(Path(plan.task.model.removeprefix("onnx:").partition("@")[0]).resolve())
    plan_path = Path(plan_file).resolve()
    run_id = streams.new_run_id() if private_noise else None
    anchors = directory / "anchors.toml"
    if private_noise:  # a laboratory trust chain: a planning key, the anchors, a signed run
        ops = signing.write_keys(directory / "ops", force=True)
        secret = signing.read_key(Path(ops["secret_key_file"]), kind="secret")
        anchors.write_text(trust.anchors_text(ops["public_key"]))
        ceiling, _ = budget.device_epsilon(plan)
        plan_bytes, manifest = signed_run(
            plan, plan_bytes, secret, run_id=run_id, public_keys=public,
            max_epsilon=ceiling, delta=plan.delta,
        )  # fmt: skip
        plan_path = directory / "run.plan"
        plan_path.write_bytes(plan_bytes)
        checkpoint.private_folder(directory / "configs")
        _private(directory / "configs" / "run.manifest", manifest)
    configs = write_configs(
        plan_path,
        plan,
        endpoints=endpoints,
        public_keys=public,
        out=directory / "configs",
        key_files={u: k["secret_key_file"] for u, k in keys.items()},
        noise_files={u: k["noise_secret_file"] for u, k in keys.items()} if private_noise else None,
        shards={u: str(s.resolve()) for u, s in enumerate(shards)},
        round_timeout=round_timeout,
        startup_timeout=startup_timeout,
        run_id=run_id,
        model_files=None if model is None else dict.fromkeys(range(plan.n), model),
        sealed_seeds=sealed_seeds(plan, public) if private_noise else None,
    )
    run = LocalRun(directory, configs, [None] * plan.n, plan, anchors)
    for u in range(plan.n) if start is None else sorted(start):
        run.start(u)
    return run
