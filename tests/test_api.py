"""The Python API (edgedp.api): docs/API.md as a doctest, the exports, and the device rule."""

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest

import edgedp

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_docs_api_page_runs_as_a_doctest():
    res = doctest.testfile(
        str(DOCS / "API.md"),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert res.attempted > 20
    assert res.failed == 0


def test_every_exported_name_is_documented():
    page = (DOCS / "API.md").read_text()
    for name in edgedp.__all__:
        if name != "__version__":
            assert f"{name}" in page, name


def test_import_edgedp_and_its_api_pull_in_no_planning_or_simulator():
    code = (
        "import json, sys\nimport edgedp\n"
        "print(json.dumps(sorted(m for m in ('scipy', 'edgedp_sim', 'simpy', 'sklearn',"
        " 'edgedp_cli',"
        " 'matplotlib') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_simulator_missing_names_the_extra_to_install():
    # a device-only install: the simulator's packages cannot be imported
    code = (
        "import sys\nsys.modules['simpy'] = None\nsys.modules['sklearn'] = None\n"
        "import edgedp\nfrom edgedp import api\n"
        "try:\n    api._need('edgedp_sim.engine')\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'edgedp[sim]'" in out.stdout


def test_make_plan_is_the_cli_planner(tmp_path):
    from edgedp.plan import NoisePlan
    from edgedp_cli import main as cli

    argv = ["--topology", "ring:6", "--steps", "12", "--mechanism", "dp-dsgd"]
    argv += ["--participation", "12,1", "--target-eps", "2", "--delta", "1e-5"]
    assert cli.main(["plan", "sgd", *argv, str(tmp_path / "p.plan"), "--json"]) == 0
    written = NoisePlan.from_bytes((tmp_path / "p.plan").read_bytes())
    built = edgedp.make_plan("dp-dsgd", "ring:6", steps=12, target_epsilon=2, delta=1e-5)
    assert built.plan_hash == written.plan_hash


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mechanism": "dp-sgd"}, "expected one of"),
        ({"steps": 0}, "steps=0"),
        ({"participation": "3"}, "--participation"),
    ],
)
def test_make_plan_bad_values_are_one_line_value_errors(kwargs, message):
    args = {"mechanism": "dp-dsgd", "steps": 10, "noise_multiplier": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        edgedp.make_plan(args.pop("mechanism"), "ring:4", **args)
    assert "\n" not in str(info.value)


def test_simulate_refuses_bad_engine_trials_and_scenario_keys():
    plan = edgedp.make_plan("dsgd", "ring:4", steps=3)
    with pytest.raises(ValueError, match="engine="):
        edgedp.simulate(plan, engine="gpu")
    with pytest.raises(ValueError, match="trials=0"):
        edgedp.simulate(plan, trials=0)
    with pytest.raises(ValueError, match="the plan is given"):
        edgedp.simulate(plan, {"privacy": {"mechanism": "dp-dsgd"}})
    lan = {"network": {"latency": {"kind": "constant", "ms": 3}}, "faults": {"dropout": 0.1}}
    with pytest.raises(ValueError, match=r"batch engine cannot run .*latency"):
        edgedp.simulate(plan, lan, engine="batch")
    # dropouts at zero latency are round masks: the batch engine runs them
    assert edgedp.simulate(plan, {"faults": {"dropout": 0.1}}, engine="batch").engine == "batch"
