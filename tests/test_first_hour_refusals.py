"""Mistakes of the first hour refused with one clear line (the CLI) or one clear exception
(the API), before anything runs; each case was a traceback, a silent surprise or a
misleading message."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import edgedp
from edgedp import signing
from edgedp_cli import main as cli

PLAN = ["plan", "sgd", "--topology", "ring:4", "--steps", "6", "--mechanism", "dp-dsgd"]
PLAN += ["--participation", "6,1", "--noise-multiplier", "1.0"]
ROOT = Path(__file__).resolve().parent.parent


def _one_line_error(capsys, argv, status=2):
    assert cli.main(argv) == status
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _usage_error(capsys, argv) -> str:
    """argparse's error: the usage of the command that was meant, then one error line."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("edgedp"), err
    return "\n".join(err)


@pytest.fixture
def plan_file(tmp_path, capsys):
    out = tmp_path / "run.plan"
    assert cli.main([*PLAN, str(out), "--json"]) == 0
    capsys.readouterr()
    return out


# ---------------------------------------------------------------- keys and signing
def test_sign_with_the_public_key_is_refused(tmp_path, plan_file, capsys):
    assert cli.main(["keys", "planner", "--out", str(tmp_path / "ops"), "--json"]) == 0
    capsys.readouterr()
    before = plan_file.read_bytes()
    err = _one_line_error(
        capsys, ["sign", str(plan_file), "--key", str(tmp_path / "ops/planner.pub")]
    )
    assert "public" in err and "planner.key" in err
    assert plan_file.read_bytes() == before  # nothing signed
    err = _one_line_error(
        capsys, [*PLAN, str(tmp_path / "b.plan"), "--sign", str(tmp_path / "ops/planner.pub")]
    )
    assert "public" in err
    # and the other way round: the secret half never goes into a public anchors file
    argv = ["keys", "anchors", "--planner-key", str(tmp_path / "ops/planner.key")]
    err = _one_line_error(capsys, [*argv, "--out", str(tmp_path / "anchors.toml")])
    assert "secret" in err and not (tmp_path / "anchors.toml").exists()
    assert cli.main(["sign", str(plan_file), "--key", str(tmp_path / "ops/planner.key")]) == 0


def test_a_bare_hex_key_file_readable_by_others_is_not_taken_for_a_secret(tmp_path):
    secret, public = signing.generate_planner_key()
    (tmp_path / "old.key").write_text(secret + "\n")
    (tmp_path / "old.key").chmod(0o600)
    assert signing.read_key(tmp_path / "old.key", kind="secret") == secret
    (tmp_path / "old.pub").write_text(public + "\n")
    (tmp_path / "old.pub").chmod(0o644)
    assert signing.read_key(tmp_path / "old.pub", kind="public") == public
    with pytest.raises(signing.SignatureError, match="readable by others"):
        signing.read_key(tmp_path / "old.pub", kind="secret")


@pytest.mark.parametrize("command", [["keys", "gen", "--name", "n0"], ["keys", "planner"]])
def test_keys_into_a_folder_that_cannot_be_made(tmp_path, capsys, command):
    (tmp_path / "file").write_text("")
    err = _one_line_error(capsys, [*command, "--out", str(tmp_path / "file" / "keys")])
    assert "file/keys" in err and "Not a directory" in err


# ---------------------------------------------------------------- engines and sweeps
LATENCY = """
    name = "lat"
    seed = 1
    steps = 4
    [topology]
    spec = "ring:4"
    [task]
    dataset = "synthetic-logistic:5:200"
    [privacy]
    mechanism = "dp-dsgd"
    noise_multiplier = 1.0
    [network]
    latency = { kind = "constant", ms = 20 }
"""


def test_batch_engine_on_a_latency_scenario_is_refused(tmp_path, capsys):
    (tmp_path / "lat.toml").write_text(textwrap.dedent(LATENCY))
    err = _one_line_error(capsys, ["sim", "run", str(tmp_path / "lat.toml"), "--engine", "batch"])
    assert "batch engine" in err and "latency" in err and "--engine event" in err
    with pytest.raises(ValueError, match="latency"):
        edgedp.simulate(
            edgedp.make_plan(
                "dp-dsgd",
                "ring:4",
                steps=4,
                noise_multiplier=1.0,
                dataset="synthetic-logistic:5:200",
            ),
            {"network": {"latency": {"kind": "constant", "ms": 20}}},
            engine="batch",
        )


def test_a_sweep_point_its_engine_cannot_run_fails_before_anything_runs(tmp_path):
    from edgedp_sim import scenarios, sweep

    (tmp_path / "lat.toml").write_text(textwrap.dedent(LATENCY))
    grid = {"scenario": "lat.toml", "engine": "batch", "grid": {"network.loss": [0.0]}}
    with pytest.raises(scenarios.ScenarioError, match="grid point .*batch engine.*latency"):
        sweep.points(grid, tmp_path)


# ---------------------------------------------------------------- the parser
def test_an_option_of_another_family_names_the_subcommand(capsys):
    err = _usage_error(capsys, [*PLAN, "--sketch-dim", "8", "x.plan"])
    assert "usage: edgedp plan sgd" in err
    assert "--sketch-dim" in err and "edgedp plan cross" in err and "edgedp plan dome" in err


def test_the_old_plan_syntax_says_where_the_family_goes(capsys):
    err = _usage_error(capsys, ["plan", "--topology", "ring:8", "--mechanism", "whisper"])
    assert "edgedp plan cross --topology ring:8" in err
    assert "invalid choice" not in err
    err = _usage_error(capsys, ["plan", "--topology", "ring:8", "--steps", "5"])
    assert "edgedp plan FAMILY" in err and "sgd" in err


def test_a_topology_typo_is_reported_before_the_missing_participation(capsys):
    err = _one_line_error(capsys, ["plan", "sgd", "--topology", "rign:8", "--steps", "5", "x.plan"])
    assert "rign:8" in err and "participation" not in err


# ---------------------------------------------------------------- the Python API
def test_make_plan_names_a_value_of_the_wrong_type():
    with pytest.raises(TypeError, match=r"target_eps(ilon)?='4'.*number"):
        edgedp.make_plan("dp-dsgd", "ring:4", steps=6, target_epsilon="4", delta=1e-5)
    with pytest.raises(TypeError, match=r"steps='6'"):
        edgedp.make_plan("dp-dsgd", "ring:4", steps="6", noise_multiplier=1.0)
    with pytest.raises(TypeError, match=r"clip_norm=None"):
        edgedp.make_plan("dp-dsgd", "ring:4", steps=6, noise_multiplier=1.0, clip_norm=None)


def test_simulate_and_leak_take_a_plan_file_and_a_single_attacker(plan_file):
    with pytest.raises(ValueError, match="cannot read plan 'x.plan': No such file"):
        edgedp.simulate("x.plan")
    with pytest.raises(TypeError, match="expected a NoisePlan or a plan file"):
        edgedp.account({"mechanism": "dp-dsgd"})
    assert (
        edgedp.simulate(str(plan_file)).plan_hash == edgedp.account(plan_file).report["plan_hash"]
    )
    res = edgedp.leak(plan_file, "hbc:1", trials=16)  # one attacker, not the letters h, b, c
    assert [a.attacker for a in res.attackers] == ["hbc:1"]


DEVICE_ONLY = (
    "import sys\n"
    "for m in ('simpy', 'sklearn', 'networkx', 'matplotlib', 'dask', 'tqdm', 'scipy',"
    " 'dp_accounting', 'threadpoolctl'):\n"
    "    sys.modules[m] = None  # what a device-only install lacks\n"
    "import edgedp\n"
)


def test_the_api_on_a_device_only_install_raises_one_import_error_naming_the_extra():
    code = DEVICE_ONLY + (
        "try:\n"
        "    p = edgedp.make_plan('dp-dsgd', 'ring:4', steps=6, noise_multiplier=1.0)\n"
        "    edgedp.simulate(p)\n"
        "except ImportError as exc:\n"
        "    print(repr(exc), exc.__cause__, exc.__suppress_context__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "edgedp.simulate() needs simpy" in out.stdout and "'edgedp[sim]'" in out.stdout
    assert out.stdout.strip().endswith("None True")
    uncaught = subprocess.run(
        [
            sys.executable,
            "-c",
            DEVICE_ONLY + "edgedp.make_plan('mafalda', 'ring:4', steps=6, "
            "target_epsilon=4.0, delta=1e-5)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert len(uncaught.stderr.strip().splitlines()) <= 6, uncaught.stderr
    assert (
        "edgedp.make_plan() needs scipy" in uncaught.stderr and "'edgedp[plan]'" in uncaught.stderr
    )


def test_plan_with_the_default_task_needs_no_simulator_extra(tmp_path):
    code = (
        "import sys\n"
        "for m in ('simpy', 'sklearn', 'networkx', 'matplotlib', 'dask', 'tqdm'):\n"
        "    sys.modules[m] = None  # the plan extra only\n"
        "from edgedp_cli.main import main\n"
        f"sys.exit(main({[*PLAN, str(tmp_path / 'p.plan'), '--json']!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "p.plan").stat().st_size > 0


def test_a_missing_package_names_the_smallest_extra_that_installs_it():
    from edgedp import api

    assert api.install_extra(ModuleNotFoundError(name="simpy")) == ("simpy", "sim")
    assert api.install_extra(ModuleNotFoundError(name="scipy")) == ("scipy", "plan")
    assert api.install_extra(ModuleNotFoundError(name="dask")) == ("dask", "sim")
    assert api.install_extra(ModuleNotFoundError(name="onnx")) == ("onnx", "onnx-build")


def test_library_plots_leave_matplotlib_backend_alone(tmp_path):
    code = (
        "import matplotlib\nmatplotlib.use('svg')\n"
        "from pathlib import Path\nfrom edgedp_sim import runner, sweep_summary\n"
        "m = {'rounds': [0, 1], 'test_loss': [1.0, 0.5], 'consensus_distance': [1.0, 0.1]}\n"
        f"runner._plot(m, Path({str(tmp_path)!r}), 't')\n"
        "rows = [{'scenario': 'a', 'final_test_loss': 0.4, 'dropped_messages': 0}]\n"
        f"sweep_summary.plot(rows, Path({str(tmp_path / 's.png')!r}))\n"
        "print(matplotlib.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg"
    assert (tmp_path / "loss.png").stat().st_size > 0 and (tmp_path / "s.png").stat().st_size > 0
