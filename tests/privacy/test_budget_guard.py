"""The device budget binds the worst adversary the device faces, for every mechanism.

Whisper/DECOR devices share pairwise secrets with their neighbours, so a curious
neighbourhood removes all but the device's own independent noise; the eavesdropper's ε
understates what they learn (whisper on star:6 at ε = 3: a colluding neighbourhood gets
7.78). The neighbourhood's number is recomputed here from the plan's covariance factors
and the GDP conversion of dp-accounting — not from the accountant's trust report.
"""

import math

import numpy as np
import pytest

import edgedp_topologies
from edgedp.accounting import budget
from edgedp.accounting.participation import Participation
from edgedp.families.cross import planning as planner
from edgedp.families.laplace.accounting import LaplaceSchedule
from edgedp.plan import TaskSpec, make_plan
from firmware_py import daemon, deploy

DELTA = 1e-6


def _whisper():
    return planner.plan_cross_agent(
        "whisper",
        edgedp_topologies.parse("star:6"),
        steps=20,
        participation=Participation(20, 1),
        clip_norm=0.1,
        learning_rate=0.5,
        target_epsilon=3.0,
        delta=DELTA,
        topology_name="star:6",
    ).plan


def _gdp_epsilon(mu, delta):
    """ε of μ-GDP at δ, by dp-accounting's PLD of the Gaussian mechanism (an independent
    implementation of the conversion)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    dist = pld.from_gaussian_mechanism(1.0 / mu, value_discretization_interval=1e-5)
    return dist.get_epsilon_for_delta(delta)


def test_whisper_budget_binds_the_colluding_neighbourhood():
    p = _whisper()
    eps, against = budget.device_epsilon(p, delta=DELTA)
    assert "neighbourhood" in against
    # a victim whose neighbours all collude (they know the seed and their edge secrets)
    # is left with its own independent noise ν√D_u per step, k = 20 participations of Δ
    k, nu, clip = 20, p.noise_std, p.clip_norm
    worst_mu = max(clip * math.sqrt(k) / (nu * math.sqrt(d)) for d in p.cross_agent.diag)
    assert eps == pytest.approx(_gdp_epsilon(worst_mu, DELTA), abs=2e-3)
    assert eps == pytest.approx(7.775, abs=1e-3)  # the review's star:6 number
    eavesdropper, _ = budget.device_epsilon(p, delta=DELTA, adversary="eavesdropper")
    assert eavesdropper == pytest.approx(3.0, abs=1e-9) and eps > 2 * eavesdropper


def test_laplace_budget_counts_the_final_release():
    sched = LaplaceSchedule(gamma=0.5, beta=1, q1=0.2, q2=0.5, delta_grad=1, epsilon=1,
                            adjacency="problem")  # fmt: skip
    p = make_plan(
        "sr-gt", edgedp_topologies.parse("ring:5"), steps=3, clip_norm=math.inf, laplace=sched,
        task=TaskSpec(model="least-squares", dataset="sensor-fusion", partition="per-node"),
    )  # fmt: skip
    eps, against = budget.device_epsilon(p, delta=DELTA)
    # messages of rounds 0..2 release x(1), x(2); the final release x(3): ε(1 − 0.4³)
    assert eps == pytest.approx(1 - 0.4**3, rel=1e-12) and "final release" in against


def _config(tmp_path, plan, **run):
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan_file = tmp_path / "run.plan"
    plan_file.write_bytes(plan.to_bytes())
    keys = {u: deploy.generate_keys(tmp_path / "keys", f"node-{u}") for u in range(plan.n)}
    cfgs = deploy.write_configs(
        plan_file,
        plan,
        endpoints={u: f"tcp://127.0.0.1:{7000 + u}" for u in range(plan.n)},
        public_keys={u: k["public_key"] for u, k in keys.items()},
        out=tmp_path / "configs",
        key_files={u: k["secret_key_file"] for u, k in keys.items()},
        noise_files={u: k["noise_secret_file"] for u, k in keys.items()},
        shards={u: "missing.npz" for u in range(plan.n)},
        run_id="r1",
        max_epsilon=run.pop("max_epsilon"),
    )
    text = cfgs[0].read_text()
    for key, value in run.items():
        text = text.replace("[run]\n", f'[run]\n{key} = "{value}"\n')
    cfgs[0].write_text(text)
    return cfgs[0]


def test_daemon_refuses_a_plan_over_budget_against_the_worst_adversary(tmp_path, capsys):
    p = _whisper()
    cfg = _config(tmp_path, p, max_epsilon=5.0)
    lab = ["--anchors", str(tmp_path / "none"), "--lab"]  # no trust anchors: node.toml's budget
    assert daemon.main(["--config", str(cfg), *lab]) == daemon.EXIT_PLAN
    err = capsys.readouterr().err
    assert "epsilon=7.775" in err and "neighbourhood" in err
    # naming a weaker adversary explicitly passes the guard (and is logged); the run then
    # stops at the missing shard, a config error
    cfg = _config(tmp_path / "named", p, max_epsilon=5.0, adversary="eavesdropper")
    assert daemon.main(["--config", str(cfg), *lab]) == daemon.EXIT_CONFIG
    assert "missing.npz" in capsys.readouterr().err


def test_deploy_sets_the_plans_own_worst_epsilon_as_the_budget(tmp_path):
    p = _whisper()
    cfg = _config(tmp_path, p, max_epsilon=None).read_text()
    line = next(x for x in cfg.splitlines() if x.startswith("max_epsilon"))
    assert float(line.split("=")[1]) == budget.device_epsilon(p, delta=DELTA)[0]
    assert np.isfinite(float(line.split("=")[1]))
