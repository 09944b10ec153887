"""δ is part of the plan: every report of a plan's ε is at the plan's δ unless asked
otherwise and says which δ; δ outside (0, 1) is refused at every entry point.

A plan calibrated to (ε, δ) = (2, 1e-5) must report ε = 2 at δ = 1e-5 through account(),
leak(), `edgedp account`, `edgedp leak` and `edgedp sim run` — the target is the number
recomputed another way (the planner's input, not the accountant's output)."""

import hashlib
import json
import math

import pytest

import edgedp
from edgedp import _codec
from edgedp.accounting import budget, gdp
from edgedp.errors import PlanError
from edgedp.plan import NoisePlan
from edgedp_cli import main as cli

TARGET, DELTA = 2.0, 1e-5


@pytest.fixture(scope="module")
def planned():
    return edgedp.make_plan(
        "dp-dsgd", "ring:6", steps=12, target_epsilon=TARGET, delta=DELTA, participation="12,1"
    )


@pytest.fixture(scope="module")
def plan_file(planned, tmp_path_factory):
    path = tmp_path_factory.mktemp("delta") / "p.plan"
    path.write_bytes(planned.to_bytes())
    return path


def test_the_plan_records_its_target_and_delta(planned):
    assert planned.delta == DELTA and planned.target_epsilon == TARGET
    again = NoisePlan.from_bytes(planned.to_bytes())
    assert (again.delta, again.target_epsilon) == (DELTA, TARGET)
    # planned from sigma: the delta it is reported at (given, or the default 1e-6)
    by_sigma = edgedp.make_plan("dp-dsgd", "ring:6", steps=12, noise_multiplier=1.0, delta=1e-4)
    assert by_sigma.delta == 1e-4 and by_sigma.target_epsilon is None
    default = edgedp.make_plan("dp-dsgd", "ring:6", steps=12, noise_multiplier=1.0)
    assert default.delta == 1e-6
    # the delta is part of the plan's identity
    assert (
        by_sigma.plan_hash
        != edgedp.make_plan(
            "dp-dsgd", "ring:6", steps=12, noise_multiplier=1.0, delta=1e-7
        ).plan_hash
    )


def test_account_reports_at_the_plan_delta(planned):
    g = edgedp.account(planned)
    assert g.delta == DELTA and g.epsilon == pytest.approx(TARGET, rel=1e-6)
    # asked otherwise: the delta asked for, named
    other = edgedp.account(planned, delta=1e-6)
    assert other.delta == 1e-6 and other.epsilon > TARGET
    eav = edgedp.account(planned, attacker="eavesdropper:all")
    assert eav.delta == DELTA and eav.epsilon == pytest.approx(TARGET, rel=1e-6)


def test_leak_reports_at_the_plan_delta(planned):
    res = edgedp.leak(planned, ["eavesdropper:all"], trials=24)
    entry = res.attackers[0]
    assert entry.delta == DELTA and entry.epsilon == pytest.approx(TARGET, rel=1e-6)
    assert "1e-05" in entry.guarantee
    asked = edgedp.leak(planned, ["eavesdropper:all"], trials=24, delta=1e-3).attackers[0]
    assert asked.delta == 1e-3 and asked.epsilon < TARGET


def test_cli_account_leak_and_sim_run_report_at_the_plan_delta(plan_file, capsys):
    assert cli.main(["account", str(plan_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == DELTA and out["epsilon"] == pytest.approx(TARGET, rel=1e-6)
    assert cli.main(["leak", str(plan_file), "--attacker", "eavesdropper:all", "--trials", "24",
                     "--audit-trials", "0", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == DELTA and out["epsilon"] == pytest.approx(TARGET, rel=1e-6)
    assert cli.main(["sim", "run", str(plan_file), "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == DELTA and out["epsilon"] == pytest.approx(TARGET, rel=1e-6)
    assert out["adjacency"] == "zero-out" and out["attacker"]
    assert cli.main(["sim", "run", str(plan_file), "-q"]) == 0
    text = capsys.readouterr().out
    assert "1e-05" in text and "zero-out" in text


def test_text_reports_name_delta_adjacency_and_attacker(plan_file, capsys):
    assert cli.main(["account", str(plan_file)]) == 0
    text = capsys.readouterr().out
    assert "1e-05" in text and "zero-out" in text and "attacker" in text


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-1e-6", "nan", "inf"])
def test_cli_refuses_delta_outside_zero_one(plan_file, tmp_path, capsys, bad):
    flag = f"--delta={bad}"  # (argparse reads "--delta -1e-6" as two options)
    runs = [
        ["account", str(plan_file), flag],
        ["audit", str(plan_file), "--trials", "8", flag],
        ["leak", str(plan_file), "--attacker", "hbc:1", "--trials", "8", flag],
        ["sim", "run", str(plan_file), flag],
        ["plan", "sgd", str(tmp_path / "x.plan"), "--topology", "ring:6", "--steps", "12",
         "--participation", "12,1", "--target-eps", "2", flag],
        ["plan", "sgd", str(tmp_path / "y.plan"), "--topology", "ring:6", "--steps", "12",
         "--participation", "12,1", "--noise-multiplier", "1", flag],
    ]  # fmt: skip
    for argv in runs:
        assert cli.main([*argv, "-q"]) == 2, argv
        err = capsys.readouterr().err
        assert "delta" in err and "(0, 1)" in err, (argv, err)
    assert not (tmp_path / "x.plan").exists() and not (tmp_path / "y.plan").exists()


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -1e-6, math.nan, math.inf])
def test_python_api_refuses_delta_outside_zero_one(planned, bad):
    with pytest.raises(ValueError, match=r"delta.*\(0, 1\)"):
        edgedp.make_plan("dp-dsgd", "ring:6", steps=12, target_epsilon=2, delta=bad)
    with pytest.raises(ValueError, match=r"delta.*\(0, 1\)"):
        edgedp.make_plan("dp-dsgd", "ring:6", steps=12, noise_multiplier=1.0, delta=bad)
    with pytest.raises(ValueError, match=r"delta.*\(0, 1\)"):
        edgedp.account(planned, delta=bad)
    with pytest.raises(ValueError, match=r"delta.*\(0, 1\)"):
        edgedp.leak(planned, ["hbc:1"], trials=8, delta=bad)
    with pytest.raises(ValueError, match=r"delta.*\(0, 1\)"):
        budget.device_epsilon(planned, delta=bad)


@pytest.mark.parametrize("bad", ["0.0", "1.0", "2"])
def test_scenario_files_refuse_delta_outside_zero_one(tmp_path, bad):
    from edgedp_sim import scenarios

    path = tmp_path / "s.toml"
    path.write_text(
        'steps = 6\n[topology]\nspec = "ring:6"\n[privacy]\nmechanism = "dp-dsgd"\n'
        f"target_epsilon = 2.0\ndelta = {bad}\n"
    )
    with pytest.raises(scenarios.ScenarioError, match=r"delta.*\(0, 1\)"):
        scenarios.load(path)


def test_scenario_delta_is_the_plan_delta(tmp_path):
    from edgedp_sim import scenarios

    path = tmp_path / "s.toml"
    path.write_text(
        'steps = 6\n[topology]\nspec = "ring:6"\n[privacy]\nmechanism = "dp-dsgd"\n'
        "noise_multiplier = 2.0\ndelta = 1e-4\n"
    )
    assert scenarios.load(path).plan.delta == 1e-4


def test_a_tampered_target_is_refused(planned):
    """The recorded target must be what the accountant certifies at the recorded δ."""
    d = planned.to_dict()
    d["target_epsilon"] = 1.0  # claims a stronger guarantee than the noise gives
    blob = _codec.encode({"plan": d, "hash": hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()})
    with pytest.raises(PlanError, match="target"):
        NoisePlan.from_bytes(blob)
    d = planned.to_dict()
    d["delta"] = 1.5
    blob = _codec.encode({"plan": d, "hash": hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()})
    with pytest.raises(PlanError, match=r"delta.*\(0, 1\)"):
        NoisePlan.from_bytes(blob)


def test_a_version_2_plan_file_is_refused_with_the_fix(planned):
    d = planned.to_dict()
    d["version"] = 2
    for key in ("delta", "target_epsilon"):
        d.pop(key, None)
    blob = _codec.encode({"plan": d, "hash": hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()})
    with pytest.raises(PlanError, match=r"version 2.*delta.*edgedp plan"):
        NoisePlan.from_bytes(blob)


def test_the_device_budget_defaults_to_the_plan_delta(planned):
    eps, against = budget.device_epsilon(planned)
    assert eps == pytest.approx(TARGET, rel=1e-6) and "delta=1e-05" in against
    eps6, _ = budget.device_epsilon(planned, delta=1e-6)
    assert eps6 == pytest.approx(gdp.epsilon(planned.mu, delta=1e-6), rel=1e-12)


def test_laplace_plans_keep_their_pld_delta():
    p = edgedp.make_plan(
        "sr-gt", "ring:6", steps=12, target_epsilon=2.0, gamma=0.1, beta=2.0, q1=0.5, q2=0.9,
        delta=1e-4,
    )  # fmt: skip
    assert p.delta == 1e-4
    g = edgedp.account(p)
    assert g.delta == 0.0  # pure epsilon
    assert g.report["pld_delta"] == 1e-4
