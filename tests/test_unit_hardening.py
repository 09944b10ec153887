"""The systemd unit's hardening holds, and the agent runs within it (real agent processes).

systemd does not run in the test machine, so what it would enforce is enforced here by the
same kernel mechanisms: the unit's system-call filter (@system-service without @privileged,
expanded by ``systemd-analyze syscall-filter``) is loaded with libseccomp before the agent
starts; the exposure score is ``systemd-analyze security --offline``'s. A forced abort of an
agent leaves no core file: its memory holds the noise secret and the CURVE key.
"""

import ctypes
import ctypes.util
import errno
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile import harness

from firmware_py import deploy

ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def _unit(tmp_path) -> Path:
    unit = deploy.systemd_unit(
        root="/var/lib/edgedp",
        command="/usr/local/bin/edgedp-agent",
        ledger="keys/node-0.noise.ledger",
        allow=["10.0.0.11", "10.0.0.12"],
    )
    path = tmp_path / "edgedp-agent.service"
    path.write_text(unit)
    return path


def test_the_units_exposure_is_at_most_two(tmp_path):
    # before: 3.2 (no system-call filter, no IP allow-list, the process tree and IPC open)
    out = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(_unit(tmp_path))],
        capture_output=True,
        text=True,
    )
    score = float(re.search(r"Overall exposure level for \S+: ([\d.]+)", out.stdout)[1])
    assert score <= 2.0, out.stdout
    unit = _unit(tmp_path).read_text()
    for line in (
        "ReadWritePaths=/var/lib/edgedp/state /var/lib/edgedp/keys/node-0.noise.ledger",
        "--anchors /etc/edgedp/anchors.toml",
        "LimitCORE=0",
        "IPAddressAllow=localhost 10.0.0.11 10.0.0.12",
        "SystemCallFilter=@system-service",
    ):
        assert line in unit


def _expand(group: str) -> set[str]:
    """The system calls of a systemd filter group, subgroups expanded."""
    out = subprocess.run([ANALYZE, "syscall-filter", group], capture_output=True, text=True)
    names = set()
    for line in out.stdout.splitlines()[1:]:
        name = line.split("#")[0].strip()
        if not name:
            continue
        names |= _expand(name) if name.startswith("@") else {name}
    return names


def _seccomp(allowed: set[str]):
    """A preexec function loading an allow-list filter (others fail with EPERM)."""
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    numbers = [lib.seccomp_syscall_resolve_name(n.encode()) for n in sorted(allowed)]
    numbers = [n for n in numbers if n >= 0]  # names of other architectures

    def load():
        ctx = lib.seccomp_init(0x00050000 | errno.EPERM)  # SCMP_ACT_ERRNO(EPERM)
        for n in numbers:
            lib.seccomp_rule_add(ctx, 0x7FFF0000, n, 0)  # SCMP_ACT_ALLOW
        if lib.seccomp_load(ctx) != 0:
            raise OSError("seccomp_load failed")

    return load


def test_the_agent_runs_under_the_units_system_call_filter(tmp_path):
    if ctypes.util.find_library("seccomp") is None:
        pytest.skip("libseccomp is not installed")
    allowed = _expand("@system-service") - _expand("@privileged")
    assert "setrlimit" in allowed and "prctl" in allowed and "setuid" not in allowed
    harness.write_plan(tmp_path / "run.plan", topology="ring:3", steps=5)
    run = deploy.local_run(
        tmp_path / "run.plan", tmp_path / "run", private_noise=True, start=[1, 2]
    )
    run.start(0, preexec_fn=_seccomp(allowed))
    assert run.wait(timeout=120) == [0, 0, 0], (tmp_path / "run" / "node-0.log").read_text()
    # the filter was in force: a forbidden call fails inside it
    probe = subprocess.run(
        [sys.executable, "-c", "import os; os.setuid(0)"],
        preexec_fn=_seccomp(allowed),
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "Operation not permitted" in probe.stderr


def test_a_forced_abort_leaves_no_core_and_no_secret_on_disk(tmp_path):
    def cores_allowed():
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    with open("/proc/sys/kernel/core_pattern") as fh:
        pattern = fh.read().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"core files are not written to the working folder here ({pattern!r})")
    # the control: a process that does not refuse core dumps leaves one here
    control = tmp_path / "control"
    control.mkdir()
    subprocess.run(
        [sys.executable, "-c", "import os; os.abort()"],
        cwd=control,
        preexec_fn=cores_allowed,
        capture_output=True,
    )
    assert any(f.name.startswith("core") for f in control.iterdir())
    harness.write_plan(tmp_path / "run.plan", topology="ring:3", steps=200)
    run = deploy.local_run(
        tmp_path / "run.plan", tmp_path / "run", private_noise=True, start=[1, 2]
    )
    proc = run.start(0, preexec_fn=cores_allowed)  # its parent allows core files
    deadline = time.monotonic() + 60
    while not any(
        m.get("event") == "round"
        for m in harness.lines(run.directory / "configs" / "state" / "node-0" / "metrics.jsonl")
    ):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGABRT)
    assert proc.wait(timeout=30) == -signal.SIGABRT
    for u in (1, 2):
        run.processes[u].kill()
    secrets = [
        (run.directory / "keys" / "node-0.noise").read_bytes(),
        re.search(
            rb'secret-key = "(.+)"', (run.directory / "keys" / "node-0.key_secret").read_bytes()
        )[1],
    ]
    files = [f for f in run.directory.rglob("*") if f.is_file()]
    assert not [f for f in files if f.name.startswith("core")]
    for f in files:
        if f.name in ("node-0.noise", "node-0.key_secret"):
            continue
        data = f.read_bytes()
        assert not any(s in data for s in secrets), f
