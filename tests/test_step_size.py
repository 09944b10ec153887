"""The default step size of private plans (edgedp.planning.step_rule), the warning when a run
ends worse than it started, the comparison protocol, and `edgedp tune step-size`.

The rule's noise variance s² is recomputed another way: the batch engine's own update rules
on zero gradients (edgedp_sim.noise_probe), and two closed forms derived by hand.
"""

import json
import math
from dataclasses import dataclass

import pytest

import edgedp
from edgedp import step_size
from edgedp.errors import PlanError
from edgedp.plan import NoisePlan, TaskSpec
from edgedp.planning import step_rule
from edgedp_cli import main as cli
from edgedp_sim import datasets, noise_probe, runner, scenarios, training_check

PRIVATE = {"target_epsilon": 4.0, "delta": 1e-5}


# ------------------------------------------------------------------ s², another way
@dataclass(frozen=True, slots=True)
class NoiseCase:
    mechanism: str
    options: tuple[tuple[str, object], ...] = ()


NOISE_CASES = [
    NoiseCase("dp-dsgd"),
    NoiseCase("dp-dsgd", (("weighting", "uniform-neighbour"),)),  # reversible, not symmetric
    NoiseCase("antipgd", (("weighting", "max-degree"),)),
    NoiseCase("dmf"),
    NoiseCase("mafalda"),
    NoiseCase("banded", (("bandwidth", 3),)),
    NoiseCase("blt", (("buffers", 2),)),
    NoiseCase("whisper"),
    NoiseCase("decor"),
    NoiseCase("zipdl"),
    NoiseCase("muffliato", (("gossip_rounds", 3),)),
    NoiseCase("dome", (("sketch_dim", 8),)),
    NoiseCase("dome", (("sketch_dim", 8), ("sketch_refresh", 3))),
    NoiseCase("dome", (("sketch_dim", 8), ("sketch_refresh", 0), ("sketch_temporal", "antipgd"))),
]


@pytest.mark.parametrize(
    "case", NOISE_CASES, ids=lambda c: c.mechanism + "".join(f"-{v}" for _, v in c.options)
)
def test_final_noise_variance_matches_the_engine_on_zero_gradients(case):
    plan = edgedp.make_plan(
        case.mechanism, "er:12:0.4:1", steps=12, batch_size=4, **PRIVATE, **dict(case.options)
    )
    local = datasets.local_size("digits-parity", plan.n)
    closed = step_rule.final_noise_variance(plan, batch_size=4, dim=65, local_size=local)
    # 96 trials x 65 coordinates: the estimate's relative error is about 1.5%
    measured = noise_probe.final_noise_variance(plan, local_size=local, trials=96)
    assert closed == pytest.approx(measured, rel=0.04)


def test_final_noise_variance_closed_forms_on_the_complete_graph():
    # complete graph, Metropolis-Hastings: W = 11^T/n, so only the mean survives a mixing.
    # DP-D-SGD: each step's noise averages over n nodes and adds up: s² = (ν/B)² T / n.
    # AntiPGD (noise z_t − z_{t−1}): the sum telescopes to z_{T−1}: s² = (ν/B)² / n.
    for mechanism, steps_factor in (("dp-dsgd", 10), ("antipgd", 1)):
        plan = edgedp.make_plan(mechanism, "complete:5", steps=10, batch_size=4, **PRIVATE)
        got = step_rule.final_noise_variance(plan, batch_size=4, dim=65, local_size=287)
        want = (plan.noise_std / 4) ** 2 * steps_factor / 5
        assert got == pytest.approx(want, rel=1e-9)


def test_the_rule_formula_and_the_task_numbers():
    # logistic on 64 standardised features + bias: F(0) = ln 2, tr H <= 65/4
    scale = step_rule.task_scale(TaskSpec(), 65)
    assert scale.start_loss == pytest.approx(math.log(2)) and scale.curvature_trace == 16.25
    soft = step_rule.task_scale(TaskSpec(model="softmax:10", dataset="digits"), 650)
    assert soft.start_loss == pytest.approx(math.log(10))
    assert soft.curvature_trace == pytest.approx(0.9 * 65)  # (1 − 1/C)(f + 1)
    lin = step_rule.task_scale(TaskSpec(model="linear", dataset="diabetes"), 11)
    assert (lin.start_loss, lin.curvature_trace) == (0.5, 11.0)
    assert "not standardised" in step_rule.task_scale(
        TaskSpec(model="linear", dataset="synthetic-linear"), 21
    )
    # ½ η² s² tr H = b F(0) at the rule's η
    eta = step_rule.rule_step(2.0, scale)
    assert 0.5 * eta**2 * 2.0 * 16.25 == pytest.approx(step_rule.NOISE_BUDGET * math.log(2))
    assert step_rule.rule_step(1e-9, scale) == step_rule.MAX_STEP
    assert [step_rule.round_down(x) for x in (0.0608, 0.5, 0.12499, 3.14e-5)] == [
        0.06,
        0.5,
        0.12,
        3.1e-5,
    ]


def test_plans_record_the_rule_and_keep_it_through_a_file():
    plan = edgedp.make_plan("dp-dsgd", "ring:8", steps=20, **PRIVATE)
    choice = plan.step_size
    assert choice.method == "noise-budget" and "costs no privacy" in choice.assumption
    assert plan.learning_rate == step_rule.round_down(choice.inputs["unrounded"])
    back = NoisePlan.from_bytes(plan.to_bytes())
    assert back.plan_hash == plan.plan_hash and back.step_size == choice
    given = edgedp.make_plan("dp-dsgd", "ring:8", steps=20, learning_rate=0.1, **PRIVATE)
    assert given.step_size is None and given.learning_rate == 0.1
    assert "step_size" not in given.to_dict()
    noiseless = edgedp.make_plan("dsgd", "ring:8", steps=20)
    assert noiseless.step_size is None and noiseless.learning_rate == step_rule.MAX_STEP
    mlp = edgedp.make_plan("dp-dsgd", "ring:8", steps=20, model="mlp:64-8-2", **PRIVATE)
    assert mlp.step_size.method == "fixed-default" and "no public curvature" in (
        mlp.step_size.assumption
    )
    adam = edgedp.make_plan("dome", "ring:8", steps=20, sketch_dim=8, optimizer="adam", **PRIVATE)
    assert adam.step_size.method == "fixed-default"


def test_a_malformed_step_size_section_is_refused_on_load():
    plan = edgedp.make_plan("dp-dsgd", "ring:8", steps=20, **PRIVATE)
    from edgedp import _codec

    outer = _codec.decode(plan.to_bytes())
    outer["plan"]["step_size"]["method"] = "guessed"
    with pytest.raises(PlanError, match="step-size method"):
        NoisePlan.from_bytes(_codec.encode(outer))
    with pytest.raises(ValueError, match="expected a number"):
        step_size.StepSizeChoice("tuned", "x", {"grid": {"a": 1}})


# ------------------------------------------------------------------ scenarios, ≥ 5 seeds
@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    topology: str
    steps: int
    epsilon: float
    scenario: dict
    task: tuple[tuple[str, str], ...] = ()


# The reported scenario (Erdős–Rényi, mean degree 10, 20% dropouts, ε = 2 at δ = 1e-5) at
# 100 nodes in the batch engine (no latency): experiments/step_size.py runs it as reported,
# 200 nodes and 50 ms latency in the event engine. Then a grid graph with dropouts and
# message loss, and another dataset and model (linear regression on diabetes) at ε = 1.
SETTINGS = [
    Setting("er-dropout", "er:100:0.1:1", 100, 2.0, {"seed": 1, "faults": {"dropout": 0.2}}),
    Setting(
        "torus-lossy",
        "torus:8:8",
        100,
        1.0,
        {"seed": 2, "faults": {"dropout": 0.1}, "network": {"loss": 0.02}},
    ),
    Setting(
        "smallworld-diabetes",
        "smallworld:20:4:0.2:1",
        100,
        1.0,
        {"seed": 3, "faults": {"dropout": 0.1}},
        (("model", "linear"), ("dataset", "diabetes")),
    ),
]


@pytest.mark.parametrize("mechanism", ["dp-dsgd", "mafalda", "whisper"])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_private_mechanism_ends_below_its_start_with_the_default(setting, mechanism):
    plan = edgedp.make_plan(
        mechanism,
        setting.topology,
        steps=setting.steps,
        target_epsilon=setting.epsilon,
        delta=1e-5,
        **dict(setting.task),
    )
    assert plan.step_size.method == "noise-budget"
    run = edgedp.simulate(plan, setting.scenario, engine="batch", trials=5)
    assert (run.test_loss[:, -1] < run.test_loss[:, 0]).all(), run.test_loss[:, [0, -1]]
    assert run.warnings == () and "noise-budget rule" in run.step_size


def test_the_old_default_diverges_and_the_run_says_why():
    # the reported scenario at its 200 nodes (batch engine): the old default 0.5
    topology, scenario = "er:200:0.05:1", SETTINGS[0].scenario
    plan = edgedp.make_plan(
        "dp-dsgd", topology, steps=100, target_epsilon=2.0, delta=1e-5, learning_rate=0.5
    )
    run = edgedp.simulate(plan, scenario, engine="batch", trials=5)
    assert (run.test_loss[:, -1] > run.test_loss[:, 0]).all()
    (warning,) = run.warnings
    assert "above the starting model's" in warning and "(5 of 5 trials)" in warning
    assert "too large for the noise" in warning and "omit the learning rate" in warning
    # the rule for this plan under the run's 20% dropouts (measured by the engine)
    local = datasets.local_size("digits-parity", 200)
    rule, _ = step_rule.choose(plan, dim=65, local_size=local, dropout=0.2)
    assert f"gives {rule:g} for this plan on this network" in warning


# ------------------------------------------------------------------ outputs
SCENARIO = """
name = "tiny"
seed = 1
steps = 12
eval_every = 4

[topology]
spec = "ring:8"

[task]
batch_size = 40

[privacy]
mechanism = "dp-dsgd"
target_epsilon = 2.0
delta = 1e-5
{lr}
"""


def test_sim_run_states_the_step_size_and_warns_on_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(SCENARIO.format(lr="learning_rate = 40.0"))
    assert cli.main(["sim", "run", str(bad), "--engine", "batch", "-q"]) == 0
    captured = capsys.readouterr()
    assert "edgedp sim run: warning: the final test loss" in captured.err
    assert "step size 40 given by the plan's author" in captured.out
    assert cli.main(["sim", "run", str(bad), "--engine", "batch", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["warnings"] and summary["step_size_method"] == "given"
    good = tmp_path / "good.toml"
    good.write_text(SCENARIO.format(lr=""))
    summary = runner.run_scenario(scenarios.load(good), engine_name="batch")
    assert summary["warnings"] == [] and summary["step_size_method"] == "noise-budget"


def test_comparison_protocol_says_own_or_shared():
    rule = [edgedp.make_plan(m, "ring:8", steps=20, **PRIVATE) for m in ("dp-dsgd", "mafalda")]
    text = training_check.comparison_protocol([training_check.step_size_entry(p) for p in rule])
    assert "each private mechanism at its own step size from the planner's noise-budget rule" in (
        text
    )
    shared = [
        edgedp.make_plan(m, "ring:8", steps=20, learning_rate=0.2, **PRIVATE)
        for m in ("dp-dsgd", "mafalda")
    ]
    text = training_check.comparison_protocol([training_check.step_size_entry(p) for p in shared])
    assert "one shared step size given for every mechanism" in text
    assert "dp-dsgd 0.2, mafalda 0.2" in text


def test_tune_step_size_writes_plans_with_the_protocol(tmp_path, capsys):
    sc = tmp_path / "tiny.toml"
    sc.write_text(SCENARIO.format(lr=""))
    out = tmp_path / "out"
    argv = ["tune", "step-size", str(sc), "--mechanisms", "dp-dsgd,mafalda", "--seeds", "2"]
    assert cli.main([*argv, "--out", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "comparison protocol: each mechanism at its own best step size" in text
    assert "no private example was read: it costs no privacy" in text
    report = json.loads((out / "tune.json").read_text())
    assert report["proxy"] == datasets_proxy() and (out / "tune.png").stat().st_size > 0
    for row in report["results"]:
        plan = NoisePlan.from_bytes((out / f"{row['mechanism']}.plan").read_bytes())
        assert plan.learning_rate == row["tuned_step_size"] and plan.task.dataset == "digits-parity"
        assert plan.step_size.method == "tuned" and plan.step_size.inputs["protocol"] == "own"
        losses = dict(zip(row["grid"], row["final_test_loss"], strict=True))
        assert losses[row["tuned_step_size"]] == min(losses.values())
    assert cli.main(["sim", "run", str(out / "mafalda.plan"), "-q"]) == 0
    assert "tuned in simulation (own protocol)" in capsys.readouterr().out

    shared = tmp_path / "shared"
    argv += ["--protocol", "shared", "--proxy", "task", "--out", str(shared), "--json"]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert len({r["tuned_step_size"] for r in report["results"]}) == 1
    assert "NOT covered by the plan's epsilon" in report["assumption"]
    assert report["comparison_protocol"].startswith("comparison protocol: one step size shared")


def datasets_proxy() -> str:
    """The public proxy of the default task: digits-parity's shape (64 features, 1,438
    training examples of 1,797), split 80/20 as datasets.load splits it."""
    return "synthetic-logistic:64:1797"


def test_public_proxy_has_the_task_shape():
    name = datasets_proxy()
    proxy, real = datasets.load(name, seed=0), datasets.load("digits-parity", seed=0)
    assert proxy.x_train.shape == real.x_train.shape
    from edgedp_sim import step_tune

    assert step_tune.public_proxy(TaskSpec(), 8) == name
    with pytest.raises(ValueError, match="no synthetic proxy"):
        step_tune.public_proxy(TaskSpec(model="softmax:10", dataset="digits"), 8)


def test_tune_refuses_what_it_cannot_tune(tmp_path, capsys):
    sc = tmp_path / "tiny.toml"
    sc.write_text(SCENARIO.format(lr=""))
    assert cli.main(["tune", "step-size", str(sc), "--mechanisms", "dsgd", "-q"]) == 2
    assert "Gaussian private mechanisms" in capsys.readouterr().err
    plan = tmp_path / "p.toml"
    plan.write_text('plan = "x.plan"\nsteps = 3\n')
    assert cli.main(["tune", "step-size", str(plan), "-q"]) == 2
    assert "a plan file fixes its step size" in capsys.readouterr().err
