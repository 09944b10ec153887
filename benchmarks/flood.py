"""Round rate of real agents under pre-authentication attacks on one of them.

A ring of 4 agent processes on 127.0.0.1 (DP-D-SGD, d = 21, 2 s deadline); node 0 runs with
the descriptor limit of a small board (RLIMIT_NOFILE 1024, no headroom). After warm-up an
attacker process targets node 0's port for a fixed window:

* handshake flood: many ZeroMQ sockets with unknown CURVE keys, each redoing the handshake
  (HELLO, WELCOME, INITIATE, refused by the ZAP handler) as fast as libzmq reconnects;
* slow-loris: up to 1,500 TCP connections, opened one at a time as fast as the agent
  accepts them, that send 10 bytes of the 64-byte ZMTP greeting and stall, reopened
  whenever the agent closes them.

Printed: rounds per second of node 0 and of the whole ring over the window, with no attack
(baseline measured in the same run), under each attack, and under the same attack aimed at
a decoy (a bare pyzmq CURVE socket in another process: the attacker's CPU on this shared
machine, without the agent as target); the ratios to the baseline; node 0's peak
descriptors; whether it survived.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq
import zmq.auth
import zmq.auth.thread

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy

GREETING_PART = b"\xff" + b"\x00" * 8 + b"\x7f"  # ZMTP signature: 10 of the 64 bytes


def _handshake_flood(endpoint: str, server_key: bytes, sockets: int, seconds: float) -> None:
    ctx = zmq.Context(io_threads=1)
    socks = []
    for _ in range(sockets):
        s = ctx.socket(zmq.DEALER)
        s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()  # a stranger's key
        s.curve_serverkey = server_key
        s.setsockopt(zmq.RECONNECT_IVL, 1)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1)
        s.linger = 0
        s.connect(endpoint)
        socks.append(s)
    time.sleep(seconds)
    for s in socks:
        s.close()
    ctx.term()


def _slow_loris(port: int, connections: int, seconds: float) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * connections)), hard))
    poller, live = select.poll(), {}  # fd -> (socket, greeting sent)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(live) < connections:  # one new connection per turn: as fast as accepted
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            live[s.fileno()] = (s, False)
            poller.register(s, select.POLLOUT | select.POLLIN)
        for fd, event in poller.poll(5):
            s, sent = live[fd]
            closed = bool(event & (select.POLLHUP | select.POLLERR))
            if event & select.POLLIN and not closed:
                try:
                    closed = not s.recv(4096)  # the agent's greeting, or its close
                except OSError:
                    closed = True
            if closed:  # closed by the agent (handshake interval): open another
                poller.unregister(fd)
                del live[fd]
                s.close()
            elif event & select.POLLOUT and not sent:
                try:
                    s.send(GREETING_PART)  # ... and never the rest
                except OSError:
                    pass
                live[fd] = (s, True)
                poller.modify(fd, select.POLLIN)
    for s, _ in live.values():
        s.close()


def _decoy(queue) -> None:
    """A bare pyzmq CURVE PULL socket refusing every key, standing in for the target."""
    ctx = zmq.Context()
    auth = zmq.auth.thread.ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=tempfile.mkdtemp())  # no key is admitted
    pull = ctx.socket(zmq.PULL)
    pull.curve_server = True
    pub, sec = zmq.curve_keypair()
    pull.curve_publickey, pull.curve_secretkey = pub, sec
    pull.setsockopt(zmq.HANDSHAKE_IVL, 3000)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    queue.put((port, pub))
    time.sleep(3600)


def _board_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def _round_lines(run, u) -> list[dict]:
    try:
        return [m for m in run.metrics(u) if m["event"] == "round"]
    except (FileNotFoundError, ValueError):
        return []


def _round_times(run, u) -> list[float]:
    return [m["time"] for m in _round_lines(run, u)]


def measure(tmp: Path, attack: str, target: str, decoy, window: float) -> dict:
    graph = edgedp_topologies.parse("ring:4")
    plan = make_plan(
        "dp-dsgd",
        graph,
        steps=1500,
        participation=Participation(1500, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.5,
        seed=21,
        topology_name="ring:4",
        task=TaskSpec(dataset="synthetic-logistic"),
    )
    (tmp / "run.plan").write_bytes(plan.to_bytes())
    run = deploy.local_run(tmp / "run.plan", tmp / "run", round_timeout=2.0, startup_timeout=60)
    run.processes[0].kill()
    run.processes[0].wait()
    log = open(tmp / "run" / "node-0.log", "ab")
    run.processes[0] = subprocess.Popen(
        [sys.executable, "-m", "firmware_py.daemon", "--config", str(run.configs[0])],
        stdout=log,
        stderr=log,
        cwd=run.directory,
        preexec_fn=_board_limit,
    )
    log.close()
    pid = run.processes[0].pid
    deadline = time.monotonic() + 180
    while len(_round_times(run, 0)) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    endpoint = run.configs[0].read_text().split("bind = ")[1].split("\n")[0].strip('"')
    port, key = (
        int(endpoint.rsplit(":", 1)[1]),
        zmq.auth.load_certificate(str(tmp / "run" / "keys" / "node-0.key"))[0],
    )
    if target == "decoy":
        port, key = decoy
        endpoint = f"tcp://127.0.0.1:{port}"
    spawn = multiprocessing.get_context("spawn")
    attacker = None
    if attack == "flood":
        attacker = spawn.Process(target=_handshake_flood, args=(endpoint, key, 200, window + 2))
    elif attack == "slow-loris":
        attacker = spawn.Process(target=_slow_loris, args=(port, 1500, window + 2))
    if attacker is not None:
        attacker.start()
    time.sleep(1.0)  # the attack is under way
    start, peak = time.time(), 0
    while time.time() < start + window:
        try:
            peak = max(peak, len(os.listdir(f"/proc/{pid}/fd")))
        except FileNotFoundError:
            break
        time.sleep(0.1)
    end = time.time()
    alive = run.processes[0].poll() is None
    if attacker is not None:
        attacker.join()
    rates = []
    for u in range(4):
        ends = [t for t in _round_times(run, u) if start <= t <= end]
        rates.append(len(ends) / (end - start))
    inside = [
        m.get("refused_handshakes", 0) for m in _round_lines(run, 0) if start <= m["time"] <= end
    ]
    refused = (inside[-1] - inside[0]) / (end - start) if len(inside) > 1 else float("nan")
    for p in run.processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    run.wait(timeout=30)
    return {
        "node0": rates[0],
        "ring": sum(rates) / 4,
        "peak_fds": peak,
        "alive": alive,
        "refused_per_s": refused,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=8.0, help="seconds measured per case")
    ap.add_argument("--attacks", nargs="+", default=["flood", "slow-loris"])
    args = ap.parse_args()
    queue = multiprocessing.get_context("spawn").Queue()
    decoy_proc = multiprocessing.get_context("spawn").Process(target=_decoy, args=(queue,))
    decoy_proc.start()
    decoy = queue.get(timeout=30)
    cases = [("none", "agent")]
    cases += [(attack, target) for attack in args.attacks for target in ("agent", "decoy")]
    results = {}
    try:
        for attack, target in cases:
            with tempfile.TemporaryDirectory() as tmp:
                results[attack, target] = measure(Path(tmp), attack, target, decoy, args.window)
            r = results[attack, target]
            print(
                f"{attack:>10} -> {target:5}: node 0 {r['node0']:6.1f} rounds/s, ring "
                f"{r['ring']:6.1f} rounds/s; node 0 peak descriptors {r['peak_fds']}, "
                f"refused handshakes {r['refused_per_s']:.0f}/s; "
                f"{'alive' if r['alive'] else 'DIED'}",
                flush=True,
            )
    finally:
        decoy_proc.kill()
    base = results["none", "agent"]
    print(f"baseline (no attack, same run): node 0 {base['node0']:.1f} rounds/s")
    for attack in args.attacks:
        on, off = results[attack, "agent"], results[attack, "decoy"]
        print(
            f"{attack}: round rate / baseline = {on['node0'] / base['node0']:.2f} (node 0), "
            f"{on['ring'] / base['ring']:.2f} (ring); same attack on the decoy: "
            f"{off['node0'] / base['node0']:.2f} (node 0)"
        )


if __name__ == "__main__":
    main()
