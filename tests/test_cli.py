"""The edgedp command line, run as a real subprocess."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest


def edgedp(*args, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "edgedp_cli", *args], capture_output=True, text=True, timeout=300
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return proc


def test_topology_json():
    out = json.loads(edgedp("topology", "ring:12", "--json").stdout)
    assert out["n"] == 12 and out["edges"] == 12
    # closed form: ring with MH weights 1/3 -> gap = 2/3 (1 - cos(2 pi / n))
    assert out["spectral_gap"] == pytest.approx(2 / 3 * (1 - math.cos(2 * math.pi / 12)), rel=1e-9)


def test_plan_then_account(tmp_path):
    path = tmp_path / "p.plan"
    out = json.loads(
        edgedp(
            "plan",
            "sgd",
            str(path),
            "--topology",
            "er:20:0.3:1",
            "--steps",
            "50",
            "--participation",
            "50,1",
            "--mechanism",
            "dp-dsgd",
            "--target-eps",
            "4",
            "--delta",
            "1e-6",
            "--json",
        ).stdout
    )
    assert out["epsilon"] == pytest.approx(4.0, rel=1e-6)
    assert out["sensitivity"] == pytest.approx(math.sqrt(50), rel=1e-12)  # C = I, k = 50
    assert out["noise_multiplier"] == pytest.approx(1 / out["mu"], rel=1e-12)
    acc = json.loads(edgedp("account", str(path), "--json").stdout)
    assert acc["plan_hash"] == out["plan_hash"] and acc["epsilon"] == pytest.approx(4.0, rel=1e-6)
    half = json.loads(edgedp("account", str(path), "--steps-done", "25", "--json").stdout)
    # spent after 25 of 50 steps: mu scales with sqrt(k) for C = I
    assert half["mu"] == pytest.approx(acc["mu"] / math.sqrt(2), rel=1e-9)


def test_sim_run_on_a_plan(tmp_path):
    path = tmp_path / "p.plan"
    edgedp(
        "plan",
        "mf",
        str(path),
        "--topology",
        "ring:8",
        "--steps",
        "10",
        "--participation",
        "10,1",
        "--mechanism",
        "antipgd",
        "--noise-multiplier",
        "2",
        "--dataset",
        "synthetic-logistic",
    )
    a = json.loads(edgedp("sim", "run", str(path), "--json").stdout)
    b = json.loads(edgedp("sim", "run", str(path), "--json").stdout)
    assert a["model_digest"] == b["model_digest"] and a["rounds"] == 10
    assert a["messages"] == 8 * 2 * 10


@pytest.mark.parametrize(
    "args, needle",
    [
        (["topology", "nonsense:3"], "unknown topology"),
        (
            [
                "plan",
                "sgd",
                "/dev/null",
                "--topology",
                "ring:5",
                "--steps",
                "5",
                "--participation",
                "x",
                "--mechanism",
                "dp-dsgd",
                "--noise-multiplier",
                "1",
            ],
            "--participation",
        ),
        (
            [
                "plan",
                "sgd",
                "/dev/null",
                "--topology",
                "ring:5",
                "--steps",
                "5",
                "--participation",
                "5,1",
                "--mechanism",
                "dp-dsgd",
            ],
            "exactly one",
        ),
        (
            [
                "plan",
                "sgd",
                "/dev/null",
                "--topology",
                "ring:5",
                "--steps",
                "5",
                "--participation",
                "5,1",
                "--mechanism",
                "dp-dsgd",
                "--target-eps",
                "1",
            ],
            "--delta",
        ),
        (["account", "/nonexistent.plan"], "cannot read plan"),
    ],
)
def test_bad_arguments_give_one_line_errors(args, needle):
    proc = edgedp(*args, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_keys_gen_and_deploy(tmp_path):
    from firmware_py import config

    plan = tmp_path / "p.plan"
    edgedp(
        "plan",
        "sgd",
        str(plan),
        "--topology",
        "ring:3",
        "--steps",
        "5",
        "--participation",
        "5,1",
        "--mechanism",
        "dp-dsgd",
        "--noise-multiplier",
        "2",
    )
    for u in range(3):
        info = json.loads(
            edgedp(
                "keys", "gen", "--out", str(tmp_path / "keys"), "--name", f"node-{u}", "--json"
            ).stdout
        )
        assert len(info["public_key"]) == 40
        assert oct((tmp_path / "keys" / f"node-{u}.noise").stat().st_mode)[-3:] == "600"
    eps = tmp_path / "endpoints.toml"
    eps.write_text(
        "[endpoints]\n" + "".join(f'{u} = "tcp://127.0.0.1:{5600 + u}"\n' for u in range(3))
    )
    out = json.loads(
        edgedp(
            "deploy",
            str(plan),
            "--endpoints",
            str(eps),
            "--keys",
            str(tmp_path / "keys"),
            "--out",
            str(tmp_path / "cfg"),
            "--json",
        ).stdout
    )
    assert len(out["folders"]) == 3 and len(out["run_id"]) == 32
    folder = Path(out["folders"][1])
    assert sorted(f.name for f in folder.iterdir()) == [
        "edgedp-agent.service",
        "node.toml",
        "run.plan",
    ]
    text = (folder / "node.toml").read_text()
    assert str(tmp_path) not in text  # relocatable: every path relative to node.toml
    cfg = config.load(folder / "node.toml")
    assert cfg.id == 1 and [n.id for n in cfg.neighbours] == [0, 2]
    assert cfg.neighbours[0].endpoint == "tcp://127.0.0.1:5600" and cfg.model_kind == "logistic"
    assert not cfg.reproducible  # real deployments get per-device noise secrets
    assert cfg.run_id == out["run_id"] and cfg.plan_hash == out["plan_hash"]
    assert cfg.bind == "tcp://0.0.0.0:5601" and cfg.max_epsilon == out["max_epsilon"]
    assert cfg.key_file == folder / "keys" / "node-1.key_secret"
    again = edgedp("keys", "gen", "--out", str(tmp_path / "keys"), "--name", "node-0", check=False)
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    eps.write_text('[endpoints]\n0 = "tcp://127.0.0.1:1"\n')
    bad = edgedp(
        "deploy",
        str(plan),
        "--endpoints",
        str(eps),
        "--keys",
        str(tmp_path / "keys"),
        "--out",
        str(tmp_path / "cfg2"),
        check=False,
    )
    assert bad.returncode == 2 and "no endpoint for [1, 2]" in bad.stderr
