"""What a new user meets in the first hour with the CLI: one clear line, never a traceback.

Each case was a traceback, a wrong exit status or a silent surprise; real processes (the CLI,
an edgedp-agent on 127.0.0.1) are run where that is what the user runs.
"""

import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import edgedp_topologies
from edgedp import factors, topology
from edgedp.plan import TaskSpec, make_plan
from edgedp_cli import main as cli
from edgedp_cli import sim_cmd
from edgedp_sim import datasets
from firmware_py import deploy

PLAN = ["plan", "sgd", "--topology", "ring:4", "--steps", "6", "--mechanism", "dp-dsgd"]
PLAN += ["--participation", "6,1", "--noise-multiplier", "1.0"]


def _one_line_error(capsys, argv, status=2):
    assert cli.main(argv) == status
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_plan_out_into_a_missing_folder_or_onto_a_folder(tmp_path, capsys):
    err = _one_line_error(capsys, [*PLAN, str(tmp_path / "nope" / "run.plan")])
    assert "does not exist" in err and "mkdir -p" in err
    err = _one_line_error(capsys, [*PLAN, str(tmp_path)])
    assert "is a folder" in err and not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--steps", "0"], "--steps 0"), (["--steps", "4", "--max-iterations", "0"], "iterations")],
)
def test_mf_optimize_bad_counts(capsys, extra, message):
    err = _one_line_error(capsys, ["mf", "optimize", "--participation", "1,1", *extra])
    assert message in err


def test_unconverged_planner_says_so(tmp_path, capsys):
    argv = ["plan", "mf", "--topology", "ring:4", "--steps", "12", "--mechanism", "dmf"]
    argv += ["--participation", "12,1", "--target-eps", "4", "--delta", "1e-6", "--json"]
    assert cli.main([*argv, str(tmp_path / "d.plan"), "--max-iterations", "2"]) == 0
    captured = capsys.readouterr()
    assert '"converged": false' in captured.out
    assert "stopped unconverged after 2 iterations" in captured.err


def test_tune_sr_gt_refuses_constants_whose_optimum_is_not_moving(capsys):
    argv = ["tune", "sr-gt", "--target-eps", "1", "--delta-grad", "1"]
    err = _one_line_error(capsys, [*argv, "--problem", "sensor-fusion"])
    assert "gamma -> 0" in err and "c1 >" in err
    assert cli.main([*argv, "--problem", "sensor-fusion", "--c1", "100", "--c2", "1e-3"]) == 0


def test_simulator_command_on_a_device_install_prints_the_install_line(tmp_path):
    plan = tmp_path / "run.plan"
    assert cli.main([*PLAN, str(plan), "--json"]) == 0
    code = (
        "import sys\nfor m in ('simpy', 'sklearn', 'scipy', 'networkx', 'matplotlib'):\n"
        "    sys.modules[m] = None  # what a device install lacks\n"
        "from edgedp_cli.main import main\n"
        f"sys.exit(main(['sim', 'run', {str(plan)!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 3
    assert out.stderr.strip().splitlines() == [
        "edgedp sim: simpy is not installed; install it with: pip install 'edgedp[sim]'"
    ]


def test_sweep_table_keeps_whole_names_and_gives_the_mean_and_ci_over_seeds():
    rows = [
        {
            "scenario": f"faults.dropout=0.1,network.loss=0.05,steps=20,seed={s}",
            "final_test_loss": loss,
            "dropped_messages": 3,
            "simulated_seconds": 1.0,
            "learning_rate": 0.061,
            "step_size_method": "noise-budget",
            "warnings": ["worse"] if s == 2 else [],
        }
        for s, loss in ((1, 0.4), (2, 0.6))
    ]
    text = sim_cmd.sweep_table(rows)
    assert "faults.dropout=0.1,network.loss=0.05,steps=20 " in text
    # mean 0.5, sd 0.1414, t(0.975, 1) = 12.706: half-width 12.706 * 0.1414 / sqrt(2) = 1.2706
    assert "0.5000 ± 1.2706! 0.061 noise-budget" in text
    assert text.endswith("(warnings on stderr and in sweep.json)")


def test_sparse_spectral_gap_matches_the_dense_one():
    W = topology.metropolis_hastings(edgedp_topologies.parse("er:1100:0.006:2"))  # noqa: N806
    assert W.shape[0] > cli.SPARSE_GAP_NODES
    assert cli.spectral_gap(W, quiet=True) == pytest.approx(topology.spectral_gap(W), abs=1e-9)


def test_dp_dsgd_loss_ratio_is_one_without_an_eigendecomposition():
    from edgedp.families.mf import factorization
    from edgedp.planning import report

    p = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("ring:5"),
        steps=6,
        participation=datasets.task_participation(TaskSpec(), nodes=5, steps=6),
        clip_norm=1.0,
        learning_rate=0.5,
        noise_multiplier=1.0,
    )
    assert isinstance(p.factor, factors.Identity) and report.loss_ratio(p) == 1.0
    exact = factorization.relative_loss(
        p.factor.strategy(6), p.mixing_matrix(), participation=p.participation
    )
    assert exact == pytest.approx(1.0, abs=1e-12)


# ---------------------------------------------------------------- real agents
def _agent_run(tmp_path):
    task = TaskSpec(dataset="synthetic-logistic", batch_size=50)
    p = make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("complete:3"),
        steps=4,
        participation=datasets.task_participation(task, nodes=3, steps=4),
        clip_norm=1.0,
        learning_rate=0.3,
        seed=5,
        topology_name="complete:3",
        task=task,
        noise_multiplier=1.5,
    )
    (tmp_path / "run.plan").write_bytes(p.to_bytes())
    return deploy.local_run(
        tmp_path / "run.plan", tmp_path / "run", round_timeout=0.3, startup_timeout=1.0, start=()
    )


def _log(run) -> str:
    text = (run.directory / "node-0.log").read_text()
    assert "Traceback" not in text, text
    return text


def test_agent_on_a_port_in_use_exits_6_with_one_line(tmp_path):
    run = _agent_run(tmp_path)
    port = int(re.search(r'bind = "tcp://127\.0\.0\.1:(\d+)"', run.configs[0].read_text())[1])
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        run.start(0)
        assert run.wait(timeout=60)[0] == 6
    errors = [line for line in _log(run).splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "[io]" in errors[0] and "in use" in errors[0]


def test_agent_whose_plan_does_not_fit_its_shard_exits_3(tmp_path):
    run = _agent_run(tmp_path)
    shard = re.search(r'shard = "([^"]+)"', run.configs[0].read_text())[1]
    with np.load(shard) as z:
        x, y = z["x"], z["y"]
    np.savez(shard, x=x[:900], y=y[:900])  # another local size: another (k, b)
    os.chmod(shard, 0o600)
    run.start(0)
    assert run.wait(timeout=60)[0] == 3
    (line,) = [line for line in _log(run).splitlines() if " ERROR " in line]
    assert "[plan-refused]" in line and "900 examples" in line and "--participation" in line
