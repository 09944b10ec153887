"""Boards an operator can trust: trust anchors and signed runs, pinned plans, sealed shared
seeds, relocatable device folders, the hardened systemd unit, and private files (real agent
processes)."""

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zmq.auth

import edgedp_topologies
from edgedp import _codec, keys, signing
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError
from edgedp.families.cross import planning as planner
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from firmware_py import config, daemon, deploy, trust


def _plan(steps=4, sigma=1.0):
    return make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("ring:3"),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=sigma,
        task=TaskSpec(dataset="synthetic-logistic"),
        seed=2,
        topology_name="ring:3",
    )


def _tampered(data: bytes, **changes) -> bytes:
    """The plan file with fields changed and its SHA-256 recomputed (what an attacker can do)."""
    outer = _codec.decode(data)
    d = dict(outer["plan"], **changes)
    outer["plan"], outer["hash"] = d, hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()
    return _codec.encode(outer)


# ---------------------------------------------------------------- signatures
def test_a_signed_plan_verifies_and_a_tampered_one_does_not():
    secret, public = signing.generate_planner_key()
    p = _plan()
    signed = p.to_bytes(signing_key=secret)
    assert NoisePlan.from_bytes(signed, trusted_key=public).plan_hash == p.plan_hash
    # a smaller σ with the hash recomputed: the hash check passes, the signature does not
    bad = _tampered(signed, noise_multiplier=0.5, sensitivity=p.sensitivity)
    with pytest.raises(PlanError, match="does not verify"):
        NoisePlan.from_bytes(bad, trusted_key=public)
    with pytest.raises(PlanError, match="not signed"):
        NoisePlan.from_bytes(p.to_bytes(), trusted_key=public)
    _, other = signing.generate_planner_key()
    with pytest.raises(PlanError, match="not by the trusted planning key"):
        NoisePlan.from_bytes(signed, trusted_key=other)
    # σ = 0 with the hash recomputed is refused even unsigned: no private plan without noise
    with pytest.raises(PlanError, match="never runs without noise"):
        NoisePlan.from_bytes(_tampered(p.to_bytes(), noise_multiplier=0.0))


def _device_folders(tmp_path, plan, *, signed=True, with_shards=True, ceiling=None):
    """Deploy ``plan`` (signed: a signed plan and run manifest) to device folders dev0..,
    with trust anchors naming the planning key at ``tmp_path/anchors.toml``."""
    secret, public = signing.generate_planner_key()
    device_keys = {u: deploy.generate_keys(tmp_path / f"dev{u}" / "keys", f"node-{u}")
                   for u in range(plan.n)}  # fmt: skip
    ports = deploy.free_ports(plan.n)
    out = deploy.write_device_folders(
        plan.to_bytes(),
        plan,
        endpoints={u: f"tcp://127.0.0.1:{ports[u]}" for u in range(plan.n)},
        public_keys={u: k["public_key"] for u, k in device_keys.items()},
        out=tmp_path / "deploy",
        with_shards=with_shards,
        signing_key=secret if signed else None,
        root=str(tmp_path),
        command=str(Path(sys.executable).parent / "edgedp-agent"),
    )
    (tmp_path / "anchors.toml").write_text(trust.anchors_text(public, max_epsilon=ceiling))
    # "copy node-U/* to the device": the device folder already holds its keys/
    for u, folder in enumerate(out["folders"]):
        for f in folder.iterdir():
            shutil.copy(f, tmp_path / f"dev{u}" / f.name)
    return out, secret


def _agent(tmp_path, u, *args, python=None):
    return [*(python or [sys.executable]), "-m", "firmware_py.daemon", "--config", "node.toml",
            "--anchors", str(tmp_path / "anchors.toml"), *args]  # fmt: skip


def _run_devices(tmp_path, n, *args, user=None):
    procs = [
        subprocess.Popen(
            _agent(tmp_path, u, *args, python=user),
            cwd=tmp_path / f"dev{u}",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for u in range(n)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    return [p.returncode for p in procs], outs


def _one(tmp_path, u, *args):
    """Node ``u`` alone (its neighbours absent): the exit status of its start-up checks."""
    out = subprocess.run(
        _agent(tmp_path, u, *args), cwd=tmp_path / f"dev{u}", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    return out.returncode, out.stderr


def test_relocated_device_folders_run_signed_and_pinned(tmp_path):
    p = _plan()
    out, _ = _device_folders(tmp_path, p)
    codes, logs = _run_devices(tmp_path, p.n)
    assert codes == [0, 0, 0], logs
    for u in range(p.n):
        text = (tmp_path / f"dev{u}" / "node.toml").read_text()
        assert str(tmp_path / "deploy") not in text  # nothing points back at the operator
        state = tmp_path / f"dev{u}" / "state" / out["run_id"]
        assert (state / "final.npy").exists()
    # a tampered, re-hashed plan copied to one device is refused there (exit 3)
    plan_file = tmp_path / "dev0" / "run.plan"
    plan_file.write_bytes(_tampered(plan_file.read_bytes(), learning_rate=0.31))
    shutil.rmtree(tmp_path / "dev0" / "state")
    anchors = str(tmp_path / "anchors.toml")
    config_file = str(tmp_path / "dev0" / "node.toml")
    assert daemon.main(["--config", config_file, "--anchors", anchors]) == daemon.EXIT_PLAN


def test_the_pinned_plan_hash_is_enforced_without_a_signature(tmp_path, capsys):
    p = _plan()
    _device_folders(tmp_path, p, signed=False)
    other = _plan(sigma=1.1)
    (tmp_path / "dev1" / "run.plan").write_bytes(other.to_bytes())
    args = ["--config", str(tmp_path / "dev1" / "node.toml"), "--anchors", "none", "--lab"]
    assert daemon.main(args) == daemon.EXIT_PLAN
    assert "pins plan.hash" in capsys.readouterr().err


def _unpinned(folder: Path) -> None:
    """node.toml without its plan.hash pin and budget, as an attacker who can write it
    leaves it."""
    text = (folder / "node.toml").read_text()
    cut = ("hash = ", "max_epsilon = ")
    lines = [line for line in text.splitlines() if not line.startswith(cut)]
    (folder / "node.toml").write_text("\n".join(lines) + "\n")


def test_a_device_with_anchors_runs_only_the_run_its_operator_signed(tmp_path):
    # before: with node.toml's pins removed an attacker-signed sigma = 0.01 plan (epsilon
    # 5,474) and an older operator-signed plan both started
    p = _plan()
    out, operator = _device_folders(tmp_path, p, ceiling=10.0)
    dev = tmp_path / "dev0"
    _unpinned(dev)
    attacker, _ = signing.generate_planner_key()
    (dev / "run.plan").write_bytes(_plan(sigma=0.01).to_bytes(signing_key=attacker))
    code, err = _one(tmp_path, 0)
    assert code == daemon.EXIT_PLAN and "not by the trusted planning key" in err
    older = _plan(sigma=0.5)  # signed by the operator, for another run
    (dev / "run.plan").write_bytes(older.to_bytes(signing_key=operator))
    code, err = _one(tmp_path, 0)
    assert code == daemon.EXIT_PLAN and "the operator did not sign this run for" in err
    # the older run's own signed manifest, its run id written into node.toml: over the
    # device's ceiling (10) -> refused; the operator's ceiling holds whatever a run says
    budget = 20.0
    manifest = trust.RunManifest(
        plan_hash=older.plan_hash, run="older-run", nodes=_node_keys(tmp_path, p.n),
        max_epsilon=budget, delta=1e-6,
    )  # fmt: skip
    (dev / "run.manifest").write_bytes(manifest.signed(operator))
    text = (dev / "node.toml").read_text().replace(out["run_id"], "older-run")
    (dev / "node.toml").write_text(text)
    code, err = _one(tmp_path, 0)
    assert code == daemon.EXIT_PLAN and "set by the trust anchors" in err
    # a rogue key for a neighbour in node.toml: not the key the manifest signs
    (dev / "run.plan").write_bytes((tmp_path / "deploy" / "node-0" / "run.plan").read_bytes())
    (dev / "run.manifest").write_bytes(
        (tmp_path / "deploy" / "node-0" / "run.manifest").read_bytes()
    )
    rogue, _ = zmq.curve_keypair()
    text = (tmp_path / "deploy" / "node-0" / "node.toml").read_text()
    neighbour_key = _node_keys(tmp_path, p.n)[1]
    (dev / "node.toml").write_text(text.replace(neighbour_key, rogue.decode()))
    code, err = _one(tmp_path, 0)
    assert code == daemon.EXIT_PLAN and "neighbour 1" in err and "run manifest signs" in err


def _node_keys(tmp_path, n):
    return {
        u: zmq.auth.load_certificate(tmp_path / f"dev{u}" / "keys" / f"node-{u}.key")[0].decode()
        for u in range(n)
    }


def test_an_agent_without_anchors_refuses_a_private_plan_unless_lab(tmp_path):
    p = _plan()
    _device_folders(tmp_path, p)
    (tmp_path / "anchors.toml").unlink()
    code, err = _one(tmp_path, 0)
    assert code == daemon.EXIT_PLAN and "no trust anchors" in err and "--lab" in err
    codes, logs = _run_devices(tmp_path, p.n, "--lab")
    assert codes == [0, 0, 0], logs
    assert all("WARNING [lab] laboratory setting (--lab): no trust anchors" in log for log in logs)


def _as_nobody():
    """The command prefix that runs a Python of this environment as user nobody: setpriv,
    and an interpreter nobody may execute (this one; else the system's of the same version,
    with this environment's packages on its path, as on a board with a shared install)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the agent as another, unprivileged user")
    setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    import site
    import sysconfig

    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(root), sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    probe = (
        "import subprocess, sys, zmq, numpy, nacl; "
        "subprocess.run([sys.executable, '-V'], check=True)"
    )
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        cmd = [*setpriv, "env", f"PYTHONPATH={path}", python]
        if subprocess.run([*cmd, "-c", probe], capture_output=True).returncode == 0:
            return cmd
    pytest.skip(f"no {version} here that user nobody may run with these packages")


@pytest.fixture
def shared_tmp():
    """A folder other users can enter (pytest's tmp_path is 0700 all the way up)."""
    path = Path(tempfile.mkdtemp(prefix="edgedp-unprivileged-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_unprivileged_agent_runs_but_cannot_change_its_anchors(shared_tmp):
    # the unit's layout: configuration, plan, manifest and anchors root's and read-only; keys
    # and the state folder the agent user's
    nobody = _as_nobody()
    p = _plan()
    out, _ = _device_folders(shared_tmp, p)
    for u in range(p.n):
        dev = shared_tmp / f"dev{u}"
        dev.chmod(0o755)
        for f in dev.iterdir():
            if f.is_file():
                f.chmod(0o644)
        (dev / "state").mkdir(mode=0o700)
        for f in [dev / "state", dev / "keys", *(dev / "keys").iterdir()]:
            os.chown(f, 65534, 65534)
    (shared_tmp / "anchors.toml").chmod(0o644)
    codes, logs = _run_devices(shared_tmp, p.n, user=nobody)
    assert codes == [0, 0, 0], logs
    assert all("[lab]" not in log for log in logs)
    line = f'planner_public_key = "{"0" * 64}"'
    changed = subprocess.run(
        [*nobody[:4], "sh", "-c", f"echo '{line}' >> {shared_tmp}/anchors.toml"],
        capture_output=True,
    )
    assert changed.returncode != 0 and b"Permission denied" in changed.stderr
    # anchors the agent's own user owns are no anchors: refused without --lab
    os.chown(shared_tmp / "anchors.toml", 65534, 65534)
    shutil.rmtree(shared_tmp / "dev0" / "state" / out["run_id"])
    refused = subprocess.run(
        _agent(shared_tmp, 0, python=nobody),
        cwd=shared_tmp / "dev0",
        capture_output=True,
        text=True,
    )
    assert refused.returncode == daemon.EXIT_PLAN
    assert "can be changed by this agent's user" in refused.stderr


# ---------------------------------------------------------------- sealed shared seeds
def _whisper_lowrank():
    return planner.plan_cross_agent(
        "whisper",
        edgedp_topologies.parse("er:5:0.8:1"),
        steps=4,
        participation=Participation(4, 1),
        clip_norm=0.5,
        learning_rate=0.3,
        target_epsilon=8.0,
        delta=1e-6,
        form="lowrank",
        rank=2,
        task=TaskSpec(dataset="synthetic-logistic"),
        topology_name="er:5:0.8:1",
    ).plan


def test_whisper_lowrank_runs_on_private_devices_with_a_sealed_seed(tmp_path):
    p = _whisper_lowrank()
    assert p.cross_agent.rank == 2
    out, _ = _device_folders(tmp_path, p)
    boxes = {u: config.load(tmp_path / f"dev{u}" / "node.toml").sealed_seed for u in range(p.n)}
    assert len(set(boxes.values())) == p.n  # one sealed copy per device
    own = {}
    for u in range(p.n):
        _, sk = zmq.auth.load_certificate(
            str(tmp_path / f"dev{u}" / "keys" / f"node-{u}.key_secret")
        )
        own[u] = keys.open_sealed(base64.b64decode(boxes[u]), sk)
        with pytest.raises(ValueError, match="not sealed to this device"):
            keys.open_sealed(base64.b64decode(boxes[(u + 1) % p.n]), sk)
    seed = own[0]
    assert all(s == seed for s in own.values()) and len(seed) == 32
    # the seed in clear (raw, hex, base64) appears in no file the operator or devices hold
    forms = [seed, seed.hex().encode(), base64.b64encode(seed)]
    for f in [*tmp_path.rglob("*")]:
        if f.is_file():
            data = f.read_bytes()
            assert not any(form in data for form in forms), f
    codes, logs = _run_devices(tmp_path, p.n)
    assert codes == [0] * p.n, logs
    models = [
        np.load(tmp_path / f"dev{u}" / "state" / out["run_id"] / "final.npy") for u in range(p.n)
    ]
    assert all(np.all(np.isfinite(m)) for m in models)


# ---------------------------------------------------------------- files and the unit
def test_every_file_under_the_state_folder_is_private(tmp_path):
    p = _plan()
    out, _ = _device_folders(tmp_path, p)
    codes, logs = _run_devices(tmp_path, p.n)
    assert codes == [0, 0, 0], logs
    dev = tmp_path / "dev0"
    checked = 0
    for f in [dev / "keys", *(dev / "keys").rglob("*"), dev / "state", *(dev / "state").rglob("*")]:
        mode = stat.S_IMODE(f.stat().st_mode)
        if f.is_dir():
            assert mode == 0o700, (f, oct(mode))
        elif f.name.endswith(".key"):  # a public key
            continue
        else:
            assert mode == 0o600, (f, oct(mode))
        checked += 1
    assert checked >= 8


def test_a_plan_file_holds_no_secret(tmp_path):
    p = _whisper_lowrank()
    out, planning_secret = _device_folders(tmp_path, p)
    plan_bytes = (tmp_path / "dev0" / "run.plan").read_bytes()
    secrets = [bytes.fromhex(planning_secret), planning_secret.encode()]
    for u in range(p.n):
        kdir = tmp_path / f"dev{u}" / "keys"
        secrets.append((kdir / f"node-{u}.noise").read_bytes())
        secret_line = next(
            line for line in (kdir / f"node-{u}.key_secret").read_text().splitlines()
            if "secret-key" in line
        )  # fmt: skip
        secrets.append(secret_line.split('"')[1].encode())
    assert not any(s in plan_bytes for s in secrets)
    decoded = json.dumps(_codec.decode(plan_bytes)["plan"], default=str)
    assert "seed" in decoded and "sealed" not in decoded  # the public simulation seed only


def test_the_systemd_unit_is_hardened_and_valid(tmp_path):
    unit = deploy.systemd_unit(
        root=str(tmp_path), command=str(Path(sys.executable).parent / "edgedp-agent")
    )
    for directive in (
        "User=edgedp",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        f"ReadWritePaths={tmp_path}",
        "RestartPreventExitStatus=2 3 4 5 7\n",
        "Restart=on-failure",
        "UMask=0077",
        "CapabilityBoundingSet=\n",
    ):
        assert directive in unit
    path = tmp_path / "edgedp-agent.service"
    path.write_text(unit)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit's syntax is not checked")
    res = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True)
    # verify only warns (exit 0) about values it ignores: demand no output at all
    assert res.returncode == 0 and not res.stderr.strip() and not res.stdout.strip(), res.stderr
    with pytest.raises(ValueError, match="absolute path"):
        deploy.systemd_unit(root="relative/dir")


def test_local_run_with_a_relative_folder_and_a_relative_onnx_model(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from edgedp.models import graph, model_digest
    from edgedp.models.spec import parse
    from edgedp_sim import batch, datasets

    monkeypatch.chdir(tmp_path)
    graph.write(parse("mlp:20-4-1:tanh", features=20, loss="bce"), Path("model.onnx"))
    p = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("ring:3"),
        steps=3,
        participation=Participation(3, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        task=TaskSpec(model="onnx:model.onnx", dataset="synthetic-logistic"),
        seed=2,
    )
    assert p.task.model.startswith("onnx:model.onnx@")  # relative, as the user wrote it
    Path("run.plan").write_bytes(p.to_bytes())
    run = deploy.local_run(Path("run.plan"), Path("relative-run"))
    assert run.wait(timeout=120) == [0, 0, 0]
    data = datasets.partition(datasets.load(p.task.dataset, seed=p.seed), p.n, seed=p.seed)
    assert model_digest(run.final_models()) == batch.run(p, data).digests[0]
