"""One plan builder: the command line, scenario files and the Python API build every mechanism
through ``edgedp.planning.build`` and write the same bytes for the same options."""

import hashlib
import math

import pytest

import edgedp
from edgedp import mechanisms
from edgedp.plan import NoisePlan
from edgedp.planning.request import FAMILY_OPTIONS, SHARED_OPTIONS, PlanRequest
from edgedp_cli import main as cli
from edgedp_cli import plan_cmd
from edgedp_sim import scenarios

#: The examples' frame with another seed and clip norm (every front end must follow them).
BASE = {**mechanisms.EXAMPLE_FRAME, "seed": 3, "clip_norm": 0.5}
#: label -> (mechanism, options): every example of every command-line mechanism's registry
#: record, options named as ``edgedp.make_plan`` names them.
CASES = {label: (name, options) for label, name, options in mechanisms.examples(command_line=True)}


def test_every_command_line_mechanism_has_an_example():
    assert {name for name, _ in CASES.values()} == set(mechanisms.names(command_line=True))


def _request_name(name: str) -> str:
    """The request's (and the command line's) name of a ``make_plan`` option."""
    return {"target_epsilon": "target_eps"}.get(name, name)


def _flag(name: str) -> str:
    return "--" + _request_name(name).replace("_", "-")


def _argv(mechanism: str, options: dict, out) -> list[str]:
    family = mechanisms.get(mechanism).family
    argv = ["plan", family, str(out), "--json", "-q"]
    if len(plan_cmd.FAMILIES[family]) > 1:
        argv += ["--mechanism", mechanism]
    for name, value in {**BASE, **options}.items():
        argv += [_flag(name), str(value)]
    return argv


def _scenario(mechanism: str, options: dict) -> dict:
    """The scenario file of the same plan: the frame's task and graph, and the command
    line's adjacency (a scenario's Laplace default is paper 004's Definition 1)."""
    privacy = {"mechanism": mechanism, "seed": BASE["seed"], "clip_norm": BASE["clip_norm"]}
    if "adjacency" in FAMILY_OPTIONS[mechanisms.get(mechanism).family]:
        privacy["adjacency"] = PlanRequest.__dataclass_fields__["adjacency"].default
    privacy.update(options)
    out = {"name": "same-bytes", "steps": BASE["steps"], "topology": {"spec": BASE["topology"]}}
    out["privacy"] = privacy
    out["task"] = {"batch_size": BASE["batch_size"]}
    return out


def _api(mechanism: str, options: dict):
    return edgedp.make_plan(mechanism, **{**BASE, **options})


@pytest.mark.parametrize("case", sorted(CASES))
def test_three_front_ends_write_the_same_plan(case, tmp_path, capsys):
    """The API's plan of the example; the command line and the scenario state the
    participation the API chose from the task (the command line asks for it)."""
    mechanism, options = CASES[case]
    plan = _api(mechanism, options)
    from_api = plan.to_bytes()
    if "participation" in FAMILY_OPTIONS[mechanisms.get(mechanism).family]:
        options = {"participation": f"{plan.participation.k},{plan.participation.b}", **options}
    out = tmp_path / "p.plan"
    assert cli.main(_argv(mechanism, options, out)) == 0, capsys.readouterr().err
    written = out.read_bytes()
    from_scenario = scenarios.parse(_scenario(mechanism, options)).plan.to_bytes()
    digests = {hashlib.sha256(b).hexdigest() for b in (written, from_api, from_scenario)}
    assert len(digests) == 1
    # a whisper or decor example with a sketch dimension is a dome plan carrying that noise
    assert plan.mechanism == mechanism or plan.cross_agent.kind == mechanism
    assert NoisePlan.from_bytes(written).mechanism == plan.mechanism


def test_request_defaults_are_the_command_lines():
    """Every flag of every `edgedp plan FAMILY` defaults to the request's field default, and
    each family parser has exactly the request's options of that family."""
    fields = PlanRequest.__dataclass_fields__
    cli_only = {"help", "out", "json", "quiet", "sign", "mechanism", "func"}
    for family, parser in plan_cmd._family_parsers().items():
        dests = {a.dest for a in parser._actions} - cli_only
        assert dests == {"topology", "steps", *SHARED_OPTIONS, *FAMILY_OPTIONS[family]}, family
        for action in parser._actions:
            if action.dest in dests - {"topology", "steps"}:
                assert action.default == fields[action.dest].default, (family, action.dest)


@pytest.mark.parametrize(
    ("mechanism", "option", "value"),
    [("dp-dsgd", "rank", 4), ("sr-gt", "noise_multiplier", 1.0), ("mafalda", "sketch_dim", 4)],
)
def test_an_option_of_another_family_is_refused_by_every_front_end(mechanism, option, value):
    options = {**CASES[mechanism][1], option: value}
    with pytest.raises(ValueError, match=f"{option} is not an option of mechanism"):
        PlanRequest(
            mechanism=mechanism,
            topology="ring:8",
            steps=20,
            **{_request_name(k): v for k, v in options.items()},
        )
    with pytest.raises(ValueError, match=f"{option} is not an option"):
        _api(mechanism, options)
    with pytest.raises(scenarios.ScenarioError, match=f"{option} is not an option"):
        scenarios.parse(_scenario(mechanism, options))


def test_scenario_defaults_for_laplace_are_paper_004s():
    """A scenario's sr-gt takes Definition 1 adjacency and no clipping unless it says so."""
    raw = _scenario("sr-gt", {"gamma": 0.1, "beta": 2.0, "q1": 0.5, "q2": 0.9})
    raw["privacy"].update(target_epsilon=1.0, delta_grad=0.3)
    del raw["privacy"]["clip_norm"], raw["privacy"]["adjacency"]
    plan = scenarios.parse(raw).plan
    assert plan.laplace.adjacency == "problem" and math.isinf(plan.clip_norm)


def test_unknown_request_options_name_the_valid_ones():
    with pytest.raises(TypeError, match="unknown plan option 'rnak'"):
        PlanRequest.from_mapping(
            {"mechanism": "whisper", "topology": "ring:8", "steps": 2, "rnak": 2}
        )
    with pytest.raises(TypeError, match="unknown option 'rnak'"):
        edgedp.make_plan("whisper", "ring:8", steps=2, rnak=2)


def _functions_named(root, name):
    """(path, return annotation source) of every module-level ``def name`` under ``root``."""
    import ast
    from pathlib import Path

    found = []
    for path in sorted((Path(__file__).parents[1] / root).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                returns = None if node.returns is None else ast.unparse(node.returns)
                found.append((str(path), returns))
    return found


def test_every_make_plan_returns_a_noise_plan_and_family_planners_return_records():
    """No two functions named make_plan return different types: each returns a NoisePlan;
    the family planners are plan_<what> returning a Planned<What> record (plan + facts)."""
    from edgedp.families.cross import planning as cross_agent
    from edgedp.families.mf import factorization

    makers = [
        f
        for root in ("edgedp", "edgedp_sim", "edgedp_cli")
        for f in _functions_named(root, "make_plan")
    ]
    assert len(makers) >= 2
    assert {returns for _, returns in makers} == {"NoisePlan"}, makers
    assert not hasattr(cross_agent, "make_plan")
    assert _functions_named("edgedp/families", "plan_cross_agent")[0][1] == "PlannedCrossAgent"
    assert _functions_named("edgedp/families", "plan_factor")[0][1] == "PlannedFactor"
    import edgedp_topologies
    from edgedp.accounting.participation import Participation

    kw = dict(steps=4, participation=Participation(4, 1), clip_norm=1.0, learning_rate=0.1)
    planned = cross_agent.plan_cross_agent(
        "whisper", edgedp_topologies.parse("ring:6"), **kw, noise_multiplier=2.0
    )
    assert isinstance(planned, cross_agent.PlannedCrossAgent)
    assert isinstance(planned.plan, NoisePlan) and "planner_seconds" in planned.info
    assert isinstance(factorization.PlannedFactor, type)
