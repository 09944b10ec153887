"""Peers cannot exhaust a device, and failing I/O is retried, never a crash.

Real agent processes on 127.0.0.1 under idle-connection floods (with the descriptor limit
of a small board), oversized and many-part messages from an authenticated neighbour, and
real I/O failures (a directory in the way of a write, a file-size limit); the retry policy,
the metrics writer and the descriptor reserve also in-process and in a child process.
"""

import io
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import zmq
import zmq.auth
from hostile import harness

import edgedp_topologies
from edgedp import rng
from edgedp.accounting.participation import Participation
from edgedp.models import model_digest
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import batch, datasets
from firmware_py import deploy, ledger, resources


def _plan(path, steps, topology="complete:3"):
    p = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse(topology),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=21,
        topology_name=topology,
        task=TaskSpec(dataset="synthetic-logistic"),
        noise_multiplier=1.5,
    )
    path.write_bytes(p.to_bytes())
    return p


def _endpoint(run, u):
    return run.configs[u].read_text().split("bind = ")[1].split("\n")[0].strip('"')


def _port(run, u):
    return int(_endpoint(run, u).rsplit(":", 1)[1])


def _rounds(run, u):
    try:
        return [m for m in run.metrics(u) if m["event"] == "round"]
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def _wait(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out


def _soft_nofile(pid):
    with open(f"/proc/{pid}/limits") as fh:
        line = next(x for x in fh if x.startswith("Max open files"))
    return int(line.split()[3])


def _board_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))  # a small board, no headroom


def _fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def _listener(agent_pid):
    """The pid of an agent's listener process (it holds the PULL socket's connections)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == agent_pid and b"edgedp.transport.inbound" in cmdline:
            return int(entry)
    return None


def test_idle_connections_without_a_key_cannot_exhaust_an_agent(tmp_path):
    # long enough to outlast the flood on an idle machine too (300 rounds took 2.5 s there)
    _plan(tmp_path / "run.plan", steps=3000)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=1.0)
    run.processes[0].kill()
    run.processes[0].wait()
    agent = run.start(0, preexec_fn=_board_limit)
    _wait(lambda: len(_rounds(run, 0)) >= 3)
    soft = _soft_nofile(agent.pid)
    assert soft == 1024 - resources.RESERVE  # the rest is kept for the agent's own files
    listener = _listener(agent.pid)  # accepts the connections, with the agent's limit
    assert listener is not None and _soft_nofile(listener) == soft
    # 1,100 idle TCP connections (no greeting, no key), opened as fast as the listener
    # accepts them, so that its table fills before the handshake interval closes them
    port, socks, base = _port(run, 0), [], _fds(listener)
    for i in range(1_100):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        if i % 16 == 15:
            deadline = time.monotonic() + 0.2
            while _fds(listener) < min(base + i, soft) - 16 and time.monotonic() < deadline:
                time.sleep(0.002)
    samples = []
    for _ in range(40):
        samples.append((_fds(listener), len(_rounds(run, 0))))
        time.sleep(0.05)
    full = [rounds for fds, rounds in samples if fds >= 0.95 * soft]
    assert len(full) >= 2  # the attack really filled what libzmq may use ...
    assert full[-1] > full[0]  # ... and the agent kept checkpointing meanwhile
    assert run.wait(timeout=240) == [0, 0, 0]
    for s in socks:
        s.close()
    log = (run.directory / "node-0.log").read_text()
    assert "Traceback" not in log and f"descriptors {soft} (hard 1024" in log
    assert run.metrics(0)[-1]["event"] == "done"


def _attacked(tmp_path):
    """A ring of three whose node 0 waits in round 0 (its neighbours stopped) for node 1's
    key to attack it: (plan, run, agent pid, a PUSH socket with node 1's CURVE keys)."""
    p = _plan(tmp_path / "run.plan", steps=6)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", startup_timeout=120)
    for u in (1, 2):
        run.processes[u].kill()
        run.processes[u].wait()
    pid = run.processes[0].pid
    _wait(lambda: _listener(pid) is not None)
    keys = run.directory / "keys"
    server_pub, _ = zmq.auth.load_certificate(str(keys / "node-0.key"))
    pub, sec = zmq.auth.load_certificate(str(keys / "node-1.key_secret"))
    evil = zmq.Context.instance().socket(zmq.PUSH)
    evil.curve_serverkey, evil.curve_publickey, evil.curve_secretkey = server_pub, pub, sec
    evil.setsockopt(zmq.LINGER, 0)
    evil.connect(_endpoint(run, 0))
    time.sleep(1.0)
    return p, run, pid, evil


def _finishes_clean(p, run):
    """Node 0's neighbours come back; the run ends with the clean run's model."""
    for u in (1, 2):
        run.start(u)
    assert run.wait(timeout=120) == [0, 0, 0]
    data = datasets.partition(datasets.load(p.task.dataset, seed=p.seed), p.n, seed=p.seed)
    assert model_digest(run.final_models()) == batch.run(p, data).digests[0]  # untouched
    done = run.metrics(0)[-1]
    assert not done["rejected"]
    return done


def test_oversized_and_many_part_messages_are_refused_without_buffering(tmp_path):
    p, run, pid, evil = _attacked(tmp_path)
    log = (run.directory / "node-0.log").read_text()
    cap = int(log.split("inbound frames <= ")[1].split()[0])
    before = _tree_rss(pid)
    # 40 parts of 1 MiB (the 40 x 60 MiB attack, scaled): the first part is over the cap,
    # libzmq drops the connection at its size field and buffers none of it
    big = memoryview(bytes(1 << 20))
    evil.send_multipart([big] * 40, copy=False)
    # 40 parts under the cap: drained part by part and counted, never decoded
    evil.send_multipart([bytes(cap)] * 40)
    peak, until = before, time.monotonic() + 2.0
    while time.monotonic() < until:
        peak = max(peak, _tree_rss(pid))
        time.sleep(0.005)
    evil.close()
    assert peak - before < 8 << 20  # before the caps: > 40 MiB (the whole message was buffered)
    assert _finishes_clean(p, run)["refused"] == {"TooManyParts": 1}


def _tree_rss(pid):
    """The resident size of an agent and its listener process together."""
    listener = _listener(pid)
    total = _status(pid)["VmRSS"]
    try:
        return total + (_status(listener)["VmRSS"] if listener else 0)
    except FileNotFoundError:  # the listener just ended
        return total


def test_a_multipart_flood_ends_the_listener_not_the_agent(tmp_path):
    # before: one message of 150,000 parts of 4,032 bytes from a neighbour's key took an
    # agent from 53 to 1,231 MiB (libzmq gathers every part before it hands any over)
    p, run, pid, evil = _attacked(tmp_path)
    first = _listener(pid)
    before, agent_before = _tree_rss(pid), _status(pid)["VmHWM"]
    part = memoryview(bytes(4032))
    evil.send_multipart([part] * 150_000, copy=False)  # ~605 MB
    # the listener reaches its cap: libzmq's allocation fails there, which ends the
    # listener (a new one starts) or drops the attacker's connection; either way it stops
    peak, quiet = before, time.monotonic() + 10
    while _listener(pid) in (None, first) and time.monotonic() < quiet:
        peak = max(peak, _tree_rss(pid))
        time.sleep(0.002)
    evil.close()
    assert _listener(pid) is not None
    assert peak - before <= 64 << 20, (peak - before) >> 20
    assert _status(pid)["VmHWM"] - agent_before < 8 << 20  # the agent held none of it
    assert set(_finishes_clean(p, run)["refused"]) <= {"MemoryLimit"}


def _block(path):
    """A directory where the agent writes its temporary file: every write fails (EISDIR)."""
    while True:
        try:
            return path.mkdir()
        except FileExistsError:  # a write is in flight: its file is renamed in a moment
            time.sleep(0.001)


def test_a_start_that_cannot_write_its_state_ends_with_exit_6(tmp_path):
    # before: a fresh start on a full disk retried its first durable write silently for ever
    _plan(tmp_path / "run.plan", steps=6)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", private_noise=True, start=[])

    def no_room():  # every write past the first byte fails (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))

    agent = subprocess.run(  # the log on a pipe: a file limit does not apply to it
        [sys.executable, "-m", "firmware_py.daemon", "--config", str(run.configs[0]),
         "--anchors", str(run.anchors), "--lab"],
        cwd=run.directory, preexec_fn=no_room, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert agent.returncode == 6, agent.stderr
    log = agent.stderr
    assert "[io-retry] release ledger failed (EFBIG" in log
    last = log.strip().splitlines()[-1]
    assert "[io] I/O error at start" in last and "File too large" in last


def test_failing_writes_are_retried_and_no_round_is_sent_before_its_record(tmp_path):
    p = _plan(tmp_path / "run.plan", steps=80)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=0.3)
    pid, log = run.processes[0].pid, run.directory / "node-0.log"
    state = run.directory / "configs" / "state" / "node-0"
    _wait(lambda: len(_rounds(run, 0)) >= 2)
    # 1) the release ledger cannot be written: a file-size limit below its slots (EFBIG; the
    # agent ignores SIGXFSZ; the metrics lines wait in memory meanwhile)
    releases = state / "releases"  # plan-seed runs keep it in the state folder
    stream = ledger.stream_id(p.plan_hash, "simulation", 0)

    def mark():
        return ledger.read(releases, rng.seed_secret(p.seed))[stream].round

    hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (ledger.HEADER, hard))
    _wait(lambda: "release ledger failed (EFBIG" in log.read_text())
    held = mark()
    time.sleep(1.0)  # > 3 round deadlines: the neighbours move on without node 0
    blocked = held + 1  # begun but not recorded as released: it is not sent either
    assert mark() == held
    for v in (1, 2):
        assert all(0 in m["missing"] for m in _rounds(run, v) if held < m["round"] <= held + 3)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
    # 2) the checkpoint cannot be written: the next round waits for it. Node 0 catches up
    # on its neighbours' queued rounds at once when a block ends, so the file-size limit of
    # 3) is set while it is held here, not after.
    _wait(lambda: len(_rounds(run, 0)) >= blocked + 3)
    # (a limit below the release ledger's fixed size would stop its in-place writes too)
    _wait(lambda: (state / "metrics.jsonl").stat().st_size > releases.stat().st_size)
    for name in ("checkpoint", "checkpoint.prev"):  # not overwritten in place: a new file
        os.link(state / name, tmp_path / f"held-{name}")  # is written, and its temporary
    blocker = state / f".checkpoint.tmp.{pid}"  # name is taken by a directory
    _block(blocker)
    _wait(lambda: "checkpoint failed (EISDIR" in log.read_text())
    # 3) metrics hit a file-size limit (EFBIG; the agent ignores SIGXFSZ): lines wait
    size = (state / "metrics.jsonl").stat().st_size
    hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, hard))
    time.sleep(0.5)
    blocker.rmdir()
    _wait(lambda: "checkpoint done after" in log.read_text())
    _wait(lambda: "metrics write failed (EFBIG" in log.read_text())
    time.sleep(0.5)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
    # the neighbours stop waiting for node 0 once it missed three deadlines unheard, and it
    # may end degraded (7: more than run.max_missing of its neighbours' messages missing)
    assert set(run.wait(timeout=120)) <= {0, 7}
    text = log.read_text()
    assert "Traceback" not in text
    assert text.count("release ledger done after") == 1
    assert text.count("checkpoint done after") == 1
    # the limit may still hold when the run ends: the final flush then retries the lines
    assert "metrics writes work again" in text or "metrics done after" in text
    for v in (1, 2):  # the neighbours mixed without node 0 while it could not send
        assert any(0 in m["missing"] for m in _rounds(run, v))
    sent = {}
    for m in _rounds(run, 0):  # every round once, each with its own noise: nothing reused
        sent.setdefault(m["round"], []).append(m["noise"])
    jumps = [m for m in run.metrics(0) if m["event"] == "rejoin"]
    skipped = {r for j in jumps for r in range(j["from"], j["round"])}
    expected = harness.plan_seed_digests(p, 0)
    assert not skipped & set(sent) and sorted(skipped | set(sent)) == list(range(p.steps))
    assert all(sent[r] == [expected[r]] for r in sent)
    assert run.metrics(0)[-1]["event"] == "done"


def test_retry_backs_off_logs_and_stops_on_request():
    calls, log, slept = [], io.StringIO(), []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise OSError(24, "Too many open files")
        return "written"

    got = resources.retry("node 0: checkpoint", flaky, log=log, first=0.05, sleep=slept.append)
    assert got == "written" and len(calls) == 4
    assert sum(slept) == pytest.approx(0.05 + 0.1 + 0.2)  # doubling backoff
    assert log.getvalue().splitlines() == [
        "node 0: checkpoint failed (EMFILE: Too many open files); retrying with backoff up to 5 s",
        "node 0: checkpoint done after 4 attempts",
    ]

    def never():
        raise OSError(28, "No space left on device")

    with pytest.raises(resources.StoppedError, match="ENOSPC"):
        resources.retry("x", never, log=log, stop=lambda: True, sleep=slept.append)


def test_metrics_lines_wait_in_memory_while_the_disk_is_full(tmp_path):
    log = io.StringIO()
    metrics = resources.MetricsLog("/dev/full", log=log)  # every write: ENOSPC
    assert not metrics.write({"round": 0}) and not metrics.write({"round": 1})
    assert metrics.lines == 2 and "ENOSPC" in log.getvalue()
    os.close(metrics.fd)
    metrics.fd = os.open(tmp_path / "m.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert metrics.write({"round": 2})  # space again: everything goes out, in order
    metrics.close()
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(x)["round"] for x in lines] == [0, 1, 2]
    assert "work again" in log.getvalue()


def test_a_full_descriptor_table_still_opens_the_agents_own_files(tmp_path):
    code = textwrap.dedent(
        f"""
        import os, resource
        from firmware_py import resources
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        soft, hard = resources.reserve_descriptors()
        assert (soft, hard) == (192, 256), (soft, hard)
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))  # a peer's connections
        except OSError as exc:
            assert exc.errno == 24
        fd = resources.open_fd({str(tmp_path / "checkpoint")!r}, os.O_WRONLY | os.O_CREAT)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (192, 256)
        print(len(held), fd)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    held, fd = map(int, out.stdout.split())
    assert held > 150 and fd >= 192  # the file got a reserved descriptor


def _faults_per_message(keep: bool, environ: dict | None = None) -> float:
    """Page faults per 0.8 MB message received over a real ZeroMQ link in a child process
    (the agent's receive pattern: a zero-copy frame, a private copy, a gradient-sized
    temporary), with or without :func:`resources.keep_freed_memory`."""
    code = textwrap.dedent(
        f"""
        import resource
        import numpy as np, zmq
        from firmware_py import resources
        if {keep!r}:
            kept = resources.keep_freed_memory()
            assert kept == (0 if resources.allocator_configured() else 2 * resources.MMAP_THRESHOLD)
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{{port}}")
        payload = np.ones(100_000)
        def one():
            push.send_multipart([b"h", payload], copy=False)
            frames = pull.recv_multipart(copy=False)
            own = np.array(np.frombuffer(frames[1].buffer), dtype=np.float64)
            return float((np.ones((5, 100_000)) * own).sum())
        for _ in range(5):
            one()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(30):
            one()
        print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 30)
        for s in (push, pull):
            s.close(linger=0)
        ctx.term()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"):
        env.pop(name, None)
    env.pop("GLIBC_TUNABLES", None)
    env.update(environ or {})
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


def test_freed_memory_is_kept_for_the_next_round_without_page_faults():
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt's thresholds are glibc's")
    default = _faults_per_message(keep=False)
    kept = _faults_per_message(keep=True)
    # glibc's adaptive thresholds give the heap back and take it again: a fault per page
    assert default > 100, default
    assert kept < 5, kept
    # the operator's allocator setting (the systemd unit's choice before) is left alone
    unit = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}
    assert _faults_per_message(keep=True, environ=unit) > 100
    assert resources.allocator_configured(unit) and not resources.allocator_configured({})
