"""One ``edgedp-agent`` as an aarch64 process (qemu-user) in a loopback ring of x86 agents.

Run by ``scripts/arm64_agent.sh`` (which builds the arm64 Debian root and the device
install) with the operator's Python (the repository's ``.venv``: it needs ``edgedp_sim`` for the
shards and the simulator digest). Everything runs on 127.0.0.1. It measures and compares:

1. the install (size per distribution; nothing but the device dependencies);
2. import time of ``firmware_py.daemon`` and peak RSS, emulated and native;
3. ``arm64_probe.py`` on both architectures (noise draws, elementwise functions, the
   model's gradients, the mixing step): which numbers are bit-identical;
4. runs of a ring plan (``dp-dsgd``, ``synthetic-logistic``), all agents native and with
   node 0 under qemu, each with ``noise_secret = "plan-seed"`` (final model digest vs. the
   simulator's) and with private noise (per-node keys and one run id, the same keys and
   run id in both runs, so that their per-round noise digests in metrics.jsonl can be
   compared); and two native control runs of a longer plan, the second with node 0 on
   glibc's SSE2 (non-FMA) exp/log/log1p as on an x86 CPU without FMA — the probe shows
   those differ in the last bit for some inputs; the control shows whether a run notices.

Prints a summary and writes ``WORK/report.json``. Exit status 0 when every agent finished
with status 0 and the emulated node's noise digests equal the native ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import edgedp._numerics  # noqa: E402, F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np  # noqa: E402
import zmq.auth  # noqa: E402

import edgedp_topologies  # noqa: E402
from edgedp import streams  # noqa: E402
from edgedp.accounting.participation import Participation  # noqa: E402
from edgedp.models import model_digest  # noqa: E402
from edgedp.plan import NoisePlan, TaskSpec, make_plan  # noqa: E402
from edgedp_sim import provenance  # noqa: E402
from firmware_py import checkpoint, deploy, ledger  # noqa: E402

#: What ``pip install edgedp-*.whl`` may bring to a device: the four direct dependencies
#: and PyNaCl's own (cffi; pycparser comes with cffi).
DEVICE_DISTRIBUTIONS = {"edgedp", "numpy", "pyzmq", "msgpack", "pynacl", "cffi", "pycparser"}
#: Top-level modules the device path may load besides the standard library (with numpy's
#: and pyzmq's Cython runtime, PyNaCl's cffi module, and Debian's sitecustomize).
DEVICE_MODULES = {
    "edgedp",
    "firmware_py",
    "numpy",
    "zmq",
    "msgpack",
    "nacl",
    "_cffi_backend",
    "_sodium",
    "cython_runtime",
    "sitecustomize",
}


class Guest:
    """Runs aarch64 programs of the Debian root ``root`` with qemu-user (no binfmt_misc)."""

    def __init__(self, root: Path, site: Path, qemu: str, cpu: str) -> None:
        self.root, self.site, self.qemu, self.cpu = root, site, qemu, cpu

    def env(self, cpu: str | None = None) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            # the guest's loader: ROOT has no ld.so.cache (ldconfig never ran); the host's
            # x86 cache holds no aarch64 entries, so name the multiarch folders (looked up
            # under ROOT through -L)
            "LD_LIBRARY_PATH": "/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu",
            "PYTHONPATH": str(self.site),
            "PYTHONNOUSERSITE": "1",
            "QEMU_CPU": cpu or self.cpu,
        }

    def python(self, *args: str) -> list[str]:
        return [self.qemu, "-L", str(self.root), str(self.root / "usr/bin/python3.11"), *args]

    def agent(self, config: Path) -> list[str]:
        """The installed console script ``edgedp-agent``, run by the guest's python."""
        return self.python(str(self.site / "bin" / "edgedp-agent"), "--config", str(config))


#: glibc's x86-64 exp/log/log1p come in an FMA variant (picked on CPUs with FMA and AVX2,
#: like aarch64's, which always has FMA) and an SSE2 one; this makes a native agent use the
#: SSE2 one, as on an x86 CPU without FMA.
NO_FMA = "glibc.cpu.hwcaps=-AVX2,-FMA"


def native_env(tunables: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GLIBC_"))}
    env["PYTHONPATH"] = str(REPO)
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    return env


def native_agent(config: Path) -> list[str]:
    return [sys.executable, "-m", "firmware_py.daemon", "--config", str(config)]


# -- processes -----------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS (kB) of a live process; {} once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


def supervise(procs: dict[int, subprocess.Popen], timeout: float) -> dict[int, dict]:
    """Wait for every process: exit code, and its VmHWM (peak RSS, kB) as last read from
    /proc every 0.25 s while it ran; SIGTERM then SIGKILL to those still running at the
    deadline."""
    deadline = time.monotonic() + timeout
    out = {u: {"vmhwm_kb": 0} for u in procs}
    live = dict(procs)
    signalled = None
    while live:
        for u, p in list(live.items()):
            hwm = _status(p.pid).get("VmHWM")
            pid, status = os.waitpid(p.pid, os.WNOHANG)
            if pid == 0:
                if hwm:
                    out[u]["vmhwm_kb"] = max(out[u]["vmhwm_kb"], hwm)
                continue
            p.returncode = os.waitstatus_to_exitcode(status)
            out[u].update(code=p.returncode, ended=time.time())
            del live[u]
        if live and time.monotonic() > deadline:
            if signalled is None:
                signalled = time.monotonic()
                for p in live.values():
                    p.send_signal(signal.SIGTERM)
            elif time.monotonic() > signalled + 30:
                for p in live.values():
                    p.kill()
        time.sleep(0.25)
    return out


def measure(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> dict:
    """Run a short command; its stdout, stderr and wall time."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = p.communicate(timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:4]}... exited {p.returncode}: {stderr.decode()[-2000:]}")
    return {"stdout": stdout.decode(), "stderr": stderr.decode(), "wall": wall}


_HWM = "; print([int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"


def self_hwm_kb(python: list[str], code: str, env: dict[str, str]) -> int:
    """VmHWM (kB) that a Python process reports for itself at the end of ``code``: the
    parent's RSS does not count (a child's ru_maxrss would include it across fork + exec).
    Under qemu-user /proc/self/status is qemu's own: the guest plus the emulator."""
    return int(measure([*python, "-c", code + _HWM], env)["stdout"].split()[-1])


def polled_hwm_kb(cmd: list[str], env: dict[str, str], after: float = 1.0) -> int:
    """VmHWM of a process that sleeps, read from outside while it runs."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(after)
    hwm = _status(p.pid).get("VmHWM", 0)
    p.wait()
    return hwm


# -- install, imports, memory --------------------------------------------------------------


def install_report(site: Path) -> dict:
    """Bytes per installed distribution (its RECORD, as on disk) and in total."""
    dists = {}
    for info in sorted(site.glob("*.dist-info")):
        name = info.name.split("-")[0].lower().replace("_", "-")
        total = 0
        for line in (info / "RECORD").read_text().splitlines():
            path = site / line.split(",")[0]
            if path.is_file():
                total += path.stat().st_size
        dists[name] = total
    du = subprocess.run(["du", "-sb", str(site)], capture_output=True, text=True, check=True)
    return {
        "distributions": dists,
        "total_bytes": int(du.stdout.split()[0]),
        "only_device_dependencies": set(dists) <= DEVICE_DISTRIBUTIONS,
        "extra": sorted(set(dists) - DEVICE_DISTRIBUTIONS),
    }


_IMPORT = (
    "import time; t = time.perf_counter(); import firmware_py.daemon; "
    "print(time.perf_counter() - t)"
)
_MODULES = (
    "import sys, json; import firmware_py.daemon; "
    "std = set(sys.stdlib_module_names); "
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} - std - {'__main__'})))"
)


def import_report(guest: Guest, repeats: int) -> dict:
    genv, nenv = guest.env(), native_env()
    g = [measure(guest.python("-c", _IMPORT), genv) for _ in range(repeats)]
    n = [measure([sys.executable, "-c", _IMPORT], nenv) for _ in range(repeats)]
    loaded = json.loads(measure(guest.python("-c", _MODULES), genv)["stdout"])
    trace = measure(guest.python("-X", "importtime", "-c", "import firmware_py.daemon"), genv)
    parts = {"edgedp+firmware_py (self)": 0.0}
    for line in trace["stderr"].splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        fields = line.removeprefix("import time:").split("|")
        if not fields[0].strip().isdigit():
            continue
        name = fields[2].strip()
        if name in ("numpy", "zmq", "msgpack", "nacl.bindings", "firmware_py.daemon"):
            parts[name] = int(fields[1]) / 1e6  # cumulative
        if name.split(".")[0] in ("edgedp", "firmware_py"):
            parts["edgedp+firmware_py (self)"] += int(fields[0]) / 1e6
    return {
        "guest_import_s": statistics.median(float(m["stdout"]) for m in g),
        "guest_process_s": statistics.median(m["wall"] for m in g),
        "native_import_s": statistics.median(float(m["stdout"]) for m in n),
        "native_process_s": statistics.median(m["wall"] for m in n),
        "guest_importtime_cumulative_s": parts,
        "modules_loaded": loaded,
        "unexpected_modules": [
            m for m in loaded if m not in DEVICE_MODULES and not m.startswith("_cython_")
        ],
        "repeats": repeats,
    }


def memory_report(guest: Guest) -> dict:
    genv, nenv = guest.env(), native_env()
    sleep = [guest.qemu, "-L", str(guest.root), str(guest.root / "usr/bin/sleep"), "2"]
    return {
        "qemu_sleep_kb": polled_hwm_kb(sleep, genv),
        "guest_python_empty_kb": self_hwm_kb(guest.python(), "pass", genv),
        "guest_import_daemon_kb": self_hwm_kb(guest.python(), "import firmware_py.daemon", genv),
        "native_python_empty_kb": self_hwm_kb([sys.executable], "pass", nenv),
        "native_import_daemon_kb": self_hwm_kb([sys.executable], "import firmware_py.daemon", nenv),
    }


def probe_report(guest: Guest, shard: Path, out: Path, cpus: list[str]) -> dict:
    """arm64_probe.py natively, natively with glibc's SSE2 (no FMA) variants, and under
    each emulated CPU; arrays compared bit for bit with the native ones."""
    probe = str(Path(__file__).with_name("arm64_probe.py"))
    runs = {}
    for name, env in (("x86_64", native_env()), ("x86_64-no-fma", native_env(NO_FMA))):
        runs[name] = measure([sys.executable, probe, str(shard), str(out / f"{name}.npz")], env)
    for cpu in cpus:
        runs[cpu] = measure(
            guest.python(probe, str(shard), str(out / f"{cpu}.npz")), guest.env(cpu)
        )
    cpus = [*cpus, "x86_64-no-fma"]
    info = {k: json.loads(v["stdout"].strip().splitlines()[-1]) for k, v in runs.items()}
    ref = np.load(out / "x86_64.npz")
    compared = {}
    for cpu in cpus:
        other = np.load(out / f"{cpu}.npz")
        compared[cpu] = {}
        for name in ref.files:
            a, b = ref[name], other[name]
            differ = a.view(np.uint64) != b.view(np.uint64)
            rel = np.abs(a - b) / np.maximum(np.abs(a), np.finfo(float).tiny)
            compared[cpu][name] = {
                "values": int(a.size),
                "differ": int(differ.sum()),
                "max_rel": float(rel.max()) if differ.any() else 0.0,
            }
    return {"interpreters": info, "vs_x86_64": compared}


# -- runs ----------------------------------------------------------------------------------


def write_plan(path: Path, nodes: int, steps: int) -> NoisePlan:
    topology = f"ring:{nodes}"
    plan = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse(topology),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.5,
        seed=21,
        topology_name=topology,
        task=TaskSpec(dataset="synthetic-logistic"),
    )
    path.write_bytes(plan.to_bytes())
    return plan


def simulator_digest(plan: NoisePlan) -> str:
    from edgedp_sim import batch, datasets

    data = datasets.partition(
        datasets.load(plan.task.dataset, seed=plan.seed),
        plan.n,
        scheme=plan.task.partition,
        seed=plan.seed,
    )
    return batch.run(plan, data).digests[0]


def setup_run(
    plan_file: Path,
    plan: NoisePlan,
    directory: Path,
    *,
    private: bool,
    keys_from: Path | None,
    run_id: str | None,
    args,
) -> deploy.LocalRun:
    """What ``deploy.local_run`` sets up (keys, shards, configs), without starting agents.
    ``keys_from`` copies another run's device keys with new, empty release ledgers: the
    same noise secrets, so the per-round noise digests of the two runs are comparable (a
    laboratory comparison that releases the same noise twice on purpose; a device never
    gets a second ledger for its secret)."""
    if directory.exists():
        shutil.rmtree(directory)
    keys_dir = directory / "keys"
    checkpoint.private_folder(keys_dir)
    if keys_from is None:
        keys = {u: deploy.generate_keys(keys_dir, f"node-{u}") for u in range(plan.n)}
    else:
        for f in keys_from.iterdir():
            if not f.name.endswith(".ledger"):
                shutil.copy2(f, keys_dir / f.name)
        for secret in keys_dir.glob("*.noise"):
            ledger.create(ledger.ledger_path(secret), secret.read_bytes())
        keys = {}
        for u in range(plan.n):
            public, _ = zmq.auth.load_certificate(keys_dir / f"node-{u}.key")
            keys[u] = {
                "public_key": public.decode(),
                "secret_key_file": str(keys_dir / f"node-{u}.key_secret"),
                "noise_secret_file": str(keys_dir / f"node-{u}.noise"),
            }
    ports = deploy.free_ports(plan.n)
    endpoints = {u: f"tcp://127.0.0.1:{ports[u]}" for u in range(plan.n)}
    shards = deploy.write_shards(plan, directory / "shards")
    configs = deploy.write_configs(
        plan_file,
        plan,
        endpoints=endpoints,
        public_keys={u: k["public_key"] for u, k in keys.items()},
        out=directory / "configs",
        key_files={u: k["secret_key_file"] for u, k in keys.items()},
        noise_files={u: k["noise_secret_file"] for u, k in keys.items()} if private else None,
        shards={u: str(s.resolve()) for u, s in enumerate(shards)},
        round_timeout=args.round_timeout,
        startup_timeout=args.startup_timeout,
        run_id=run_id,
    )
    return deploy.LocalRun(directory, configs, [None] * plan.n, plan)


def execute(
    run: deploy.LocalRun,
    guest: Guest,
    emulated: set[int],
    timeout: float,
    no_fma: frozenset[int] = frozenset(),
) -> dict:
    """Start every node's agent (``emulated`` ones under qemu, ``no_fma`` ones native with
    glibc's SSE2 variants) and wait; per node: exit code, VmHWM, round times, noise digests."""
    procs = {}
    started = time.time()
    for u, cfg in enumerate(run.configs):
        log = open(run.directory / f"node-{u}.log", "wb")
        if u in emulated:
            cmd, env = guest.agent(cfg), guest.env()
        else:
            cmd, env = native_agent(cfg), native_env(NO_FMA if u in no_fma else None)
        procs[u] = subprocess.Popen(cmd, env=env, cwd=run.directory, stdout=log, stderr=log)
        log.close()
        run.processes[u] = procs[u]
    result = supervise(procs, timeout)
    nodes = {}
    for u in range(len(run.configs)):
        metrics = run.directory / "configs" / "state" / f"node-{u}" / "metrics.jsonl"
        lines = run.metrics(u) if metrics.exists() else []
        rounds = [m for m in lines if m.get("event") == "round"]
        times = [m["time"] for m in rounds]
        intervals = [b - a for a, b in zip(times, times[1:], strict=False)]
        done = next((m for m in lines if m.get("event") == "done"), {})
        nodes[u] = {
            "emulated": u in emulated,
            "code": result[u].get("code"),
            "vmhwm_kb": result[u]["vmhwm_kb"],
            "process_s": round(result[u].get("ended", started) - started, 2),
            "rounds": len(rounds),
            "round_interval_median_s": statistics.median(intervals) if intervals else None,
            "round_wait_median_s": statistics.median(m["seconds"] for m in rounds[1:])
            if len(rounds) > 1
            else None,
            "first_round_s": round(times[0] - started, 2) if times else None,
            "missing": done.get("missing"),
            "rejected": done.get("rejected"),
            "noise": [m["noise"] for m in rounds],
            "update_norm": [m["update_norm"] for m in rounds],
        }
    out = {"nodes": nodes, "all_exit_0": all(n["code"] == 0 for n in nodes.values())}
    if out["all_exit_0"]:
        out["final_models"] = run.final_models()
        out["digest"] = model_digest(out["final_models"])
    return out


def compare(a: dict, b: dict) -> dict:
    """Two runs of the same plan (and noise secrets): digests, models, noise per node."""
    out = {"digest_equal": a.get("digest") is not None and a.get("digest") == b.get("digest")}
    if "final_models" in a and "final_models" in b:
        x, y = a["final_models"], b["final_models"]
        out["final_models_max_rel"] = float(
            np.max(np.abs(x - y) / np.maximum(np.abs(x), np.finfo(float).tiny))
        )
    out["noise_equal"] = {
        u: a["nodes"][u]["noise"] == b["nodes"][u]["noise"] and len(a["nodes"][u]["noise"]) > 0
        for u in a["nodes"]
    }
    out["first_round_update_norm_differs"] = {
        u: next(
            (
                r
                for r, (x, y) in enumerate(
                    zip(a["nodes"][u]["update_norm"], b["nodes"][u]["update_norm"], strict=False)
                )
                if x != y
            ),
            None,
        )
        for u in a["nodes"]
    }
    return out


# -- main ----------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/arm64-root"))
    ap.add_argument("--site", type=Path, help="the device install (default ROOT/opt/edgedp/site)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arm64-run"))
    ap.add_argument("--qemu", default="qemu-aarch64-static")
    ap.add_argument("--cpu", default="cortex-a72", help="QEMU_CPU of the agent (Raspberry Pi 4)")
    ap.add_argument("--probe-cpus", default="cortex-a72,cortex-a76,max")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--control-steps", type=int, default=200, help="the native control runs")
    ap.add_argument("--round-timeout", type=float, default=120.0)
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument("--repeats", type=int, default=5, help="import-time measurements")
    args = ap.parse_args()
    site = args.site or args.root / "opt/edgedp/site"
    guest = Guest(args.root.resolve(), site.resolve(), args.qemu, args.cpu)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"cpu": args.cpu, "nodes": args.nodes, "steps": args.steps}

    print("== install", flush=True)
    report["install"] = install_report(guest.site)
    print("== imports and memory", flush=True)
    report["imports"] = import_report(guest, args.repeats)
    report["memory"] = memory_report(guest)

    plan_file = work / "run.plan"
    plan = write_plan(plan_file, args.nodes, args.steps)
    report["plan_hash"] = plan.plan_hash
    report["simulator_digest"] = simulator_digest(plan)
    print("== probe", flush=True)
    probe_dir = work / "probe"
    probe_dir.mkdir(exist_ok=True)
    shard = deploy.write_shards(plan, probe_dir / "shards")[0]
    report["probe"] = probe_report(guest, shard, probe_dir, args.probe_cpus.split(","))

    # control (native only, so it can be long): node 0 with glibc's SSE2 exp/log/log1p
    control_file = work / "control.plan"
    control = write_plan(control_file, args.nodes, args.control_steps)
    report["control_steps"] = args.control_steps
    report["control_simulator_digest"] = simulator_digest(control)

    limit = args.startup_timeout + args.control_steps * args.round_timeout
    runs = {}
    run_id = streams.new_run_id()
    for name, private, emulated, no_fma in (
        ("plan-seed-native", False, set(), frozenset()),
        ("plan-seed-arm64", False, {0}, frozenset()),
        ("private-arm64", True, {0}, frozenset()),
        ("private-native", True, set(), frozenset()),
        ("control-native", False, set(), frozenset()),
        ("control-no-fma", False, set(), frozenset({0})),
    ):
        print(f"== run {name}", flush=True)
        keys_from = work / "private-arm64" / "keys" if name == "private-native" else None
        is_control = name.startswith("control")
        run = setup_run(
            control_file if is_control else plan_file,
            control if is_control else plan,
            work / name,
            private=private,
            keys_from=keys_from,
            run_id=run_id if private else None,
            args=args,
        )
        t0 = time.monotonic()
        runs[name] = execute(run, guest, emulated, limit, no_fma)
        runs[name]["wall_s"] = round(time.monotonic() - t0, 2)
        print(
            f"   exit codes {[n['code'] for n in runs[name]['nodes'].values()]}, "
            f"{runs[name]['wall_s']} s",
            flush=True,
        )
    report["run_id"] = run_id
    report["comparisons"] = {
        "plan-seed: arm64 vs native": compare(runs["plan-seed-arm64"], runs["plan-seed-native"]),
        "private: arm64 vs native": compare(runs["private-arm64"], runs["private-native"]),
        "control: node 0 without FMA vs native": compare(
            runs["control-no-fma"], runs["control-native"]
        ),
    }
    for name in ("plan-seed-native", "plan-seed-arm64"):  # private noise is not the sim's
        report["comparisons"][f"{name} vs simulator"] = (
            runs[name].get("digest") == report["simulator_digest"]
        )
    for name in ("control-native", "control-no-fma"):
        report["comparisons"][f"{name} vs simulator"] = (
            runs[name].get("digest") == report["control_simulator_digest"]
        )
    for r in runs.values():
        r.pop("final_models", None)
    report["runs"] = runs
    provenance.write_json(work / "report.json", report, default=str)
    summarize(report)
    ok = all(r["all_exit_0"] for r in runs.values()) and all(
        report["comparisons"][c]["noise_equal"][0]
        for c in ("plan-seed: arm64 vs native", "private: arm64 vs native")
    )
    return 0 if ok else 1


def summarize(report: dict) -> None:
    inst, imp, mem = report["install"], report["imports"], report["memory"]
    mib = 1 / 2**20
    dists = sorted(inst["distributions"].items(), key=lambda kv: -kv[1])
    print(f"\n== summary (emulated CPU: {report['cpu']})")
    print(
        f"install: {inst['total_bytes'] * mib:.1f} MiB ("
        + ", ".join(f"{k} {v * mib:.1f}" for k, v in dists)
        + f"); only device dependencies: {inst['only_device_dependencies']} {inst['extra']}"
    )
    print(
        f"import firmware_py.daemon: arm64 {imp['guest_import_s']:.2f} s (whole process "
        f"{imp['guest_process_s']:.2f} s), x86 {imp['native_import_s']:.2f} s (process "
        f"{imp['native_process_s']:.2f} s); arm64 -X importtime cumulative: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in imp["guest_importtime_cumulative_s"].items())
    )
    print(
        f"modules loaded besides the standard library: {imp['modules_loaded']}; "
        f"unexpected: {imp['unexpected_modules']}"
    )
    kb = {k: v / 1000 for k, v in mem.items()}
    print(
        f"VmHWM (MB): qemu running sleep {kb['qemu_sleep_kb']:.1f}; python -c pass arm64 "
        f"{kb['guest_python_empty_kb']:.1f}, x86 {kb['native_python_empty_kb']:.1f}; import "
        f"firmware_py.daemon arm64 {kb['guest_import_daemon_kb']:.1f}, x86 "
        f"{kb['native_import_daemon_kb']:.1f}"
    )
    for name, r in report["runs"].items():
        nodes = r["nodes"].values()

        def fmt(x):
            return "-" if x is None else f"{x:.3f}"

        print(
            f"run {name}: exit {[n['code'] for n in nodes]}, {r['wall_s']} s; VmHWM (MB) "
            f"{[round(n['vmhwm_kb'] / 1000, 1) for n in nodes]}; first round after "
            f"{[n['first_round_s'] for n in nodes]} s; round interval median (s) "
            f"{[fmt(n['round_interval_median_s']) for n in nodes]}, of which waiting "
            f"{[fmt(n['round_wait_median_s']) for n in nodes]}; missing "
            f"{[n['missing'] for n in nodes]}; digest {str(r.get('digest'))[:16]}"
        )
    print(f"simulator digest {report['simulator_digest'][:16]}")
    for name, c in report["comparisons"].items():
        print(f"{name}: {c}")
    for cpu, arrays in report["probe"]["vs_x86_64"].items():
        differ = ", ".join(f"{k} {v['differ']}/{v['values']}" for k, v in arrays.items())
        dispatch = report["probe"]["interpreters"][cpu]["numpy_dispatch"]
        print(f"probe {cpu} vs x86_64 (values differing): {differ}; numpy dispatch {dispatch}")


if __name__ == "__main__":
    sys.exit(main())
