"""The device log: reason codes, JSON lines, a neighbour configured with the wrong key is
named, and a run that never heard a neighbour ends degraded (exit 7), model written.

Real agent processes on 127.0.0.1; node 0's node.toml gets a wrong public key for
neighbour 1 (a valid CURVE key that is nobody's), the mistake an operator makes.
"""

import json
import re

import zmq

import edgedp_topologies
from edgedp.accounting.participation import Participation
from edgedp.plan import TaskSpec, make_plan
from firmware_py import deploy, logs


def _plan(path, steps):
    p = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("complete:3"),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=5,
        topology_name="complete:3",
        task=TaskSpec(dataset="synthetic-logistic"),
        noise_multiplier=1.5,
    )
    path.write_bytes(p.to_bytes())
    return p


def _wrong_key_run(tmp_path, steps=5):
    _plan(tmp_path / "run.plan", steps)
    run = deploy.local_run(
        tmp_path / "run.plan", tmp_path / "run", round_timeout=0.3, startup_timeout=2.0, start=()
    )
    toml = run.configs[0].read_text()
    right = re.search(r'id = 1\nendpoint = "[^"]+"\npublic_key = "([^"]+)"', toml).group(1)
    wrong, _ = zmq.curve_keypair()
    run.configs[0].write_text(toml.replace(right, wrong.decode()))
    return run, right


def test_wrong_neighbour_key_is_named_and_the_run_ends_degraded(tmp_path):
    run, right = _wrong_key_run(tmp_path)
    run.start(0, args=["--log-format", "json"])
    for u in (1, 2):
        run.start(u)
    codes = run.wait(timeout=120)
    assert codes[0] == 7 and codes[1] == 7  # 0 and 1 never heard each other
    records = [json.loads(line) for line in (run.directory / "node-0.log").read_text().splitlines()]
    by_code = {}
    for r in records:
        assert {"time", "level", "node", "code", "message"} <= set(r)
        assert r["node"] == 0 and r["code"] is not None
        by_code.setdefault(r["code"], []).append(r)
    # plan-seed noise: no ε is claimed after the not-private warning
    assert by_code["not-private"] and by_code["start"][0]["epsilon"] is None
    started = by_code["start"][0]["message"]
    assert "no privacy" in started and "against" not in started
    silent = by_code["neighbour-silent"]
    assert len(silent) == 1 and silent[0]["neighbour"] == 1 and silent[0]["level"] == "ERROR"
    assert "public_key" in silent[0]["message"]
    # node 1 connects with its real key, which node 0's config does not list
    refused = by_code["handshake-refused"]
    assert sum(r["count"] for r in refused) >= 1
    assert any(right[:8] in r["message"] for r in refused)
    assert all(1 in r["neighbours"] for r in by_code["missing"])
    assert "done" not in by_code
    (degraded,) = by_code["degraded"]
    assert "neighbours [1] sent nothing valid" in degraded["message"]
    done = run.metrics(0)[-1]
    assert done["event"] == "done" and "[1]" in done["degraded"]
    assert (run.directory / "configs" / "state" / "node-0" / "final.npy").exists()
    # node 1's default text log names node 0 the same way
    text = (run.directory / "node-1.log").read_text()
    assert re.search(r"node 1 ERROR \[neighbour-silent\] neighbour 0 \(tcp://127\.0\.0\.1:", text)
    assert "[degraded]" in text and "Traceback" not in text


def test_healthy_run_logs_done_and_exits_zero(tmp_path):
    _plan(tmp_path / "run.plan", 4)
    run = deploy.local_run(tmp_path / "run.plan", tmp_path / "run", round_timeout=5.0)
    assert run.wait(timeout=120) == [0, 0, 0]
    for u in range(3):
        text = (run.directory / f"node-{u}.log").read_text()
        assert f"node {u} INFO [done] the plan's 4 rounds are done; missing 0, rejected 0" in text
        for code in ("neighbour-silent", "degraded", "handshake-refused", "rejected", "refused"):
            assert f"[{code}]" not in text
        assert run.metrics(u)[-1]["degraded"] is None


def test_refusals_carry_the_exit_reason_code(tmp_path):
    run, _ = _wrong_key_run(tmp_path)
    toml = run.configs[0].read_text()
    run.configs[0].write_text(toml.replace("[run]\n", "[run]\nmax_epsilonn = 1.0\n"))
    run.start(0, args=["--log-format", "json"])
    assert run.wait(timeout=60)[0] == 2
    (line,) = (run.directory / "node-0.log").read_text().splitlines()
    record = json.loads(line)
    assert record["code"] == logs.EXIT_CODES[2] == "config"
    assert "max_epsilonn" in record["message"] and record["level"] == "ERROR"


def _strict(line: str):
    """json.loads that refuses NaN and ±Infinity (RFC 8259 JSON, what jq and browsers read)."""

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(line, parse_constant=refuse)


def test_json_log_lines_and_metrics_are_strict_json(tmp_path):
    import io
    import logging
    import math

    from edgedp import strict_json
    from firmware_py import resources

    stream = io.StringIO()
    logger = logs.setup(3, fmt="json", stream=stream)
    # a dsgd plan spends epsilon = inf; a diverged run's norm may be nan
    logs.event(logger, logging.INFO, "start", "budget", epsilon=math.inf, norm=math.nan)
    record = _strict(stream.getvalue().splitlines()[-1])
    assert record["epsilon"] == "inf" and record["norm"] is None and record["node"] == 3
    assert strict_json.number(record["epsilon"]) == math.inf
    metrics = resources.MetricsLog(tmp_path / "metrics.jsonl", log=io.StringIO())
    assert metrics.write({"event": "round", "update_norm": -math.inf, "loss": math.nan})
    metrics.close()
    line = (tmp_path / "metrics.jsonl").read_text().splitlines()[-1]
    assert _strict(line) == {"event": "round", "update_norm": "-inf", "loss": None}
