"""D-MF and MAFALDA plans: planned, certified, and run identically by every engine."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import edgedp_topologies
from edgedp import factors, topology
from edgedp.accounting.participation import Participation
from edgedp.families.mf import factorization
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp.planning import mf_optimal
from edgedp_sim import batch, datasets, engine

GRAPH = edgedp_topologies.parse("er:10:0.4:2")
W = topology.metropolis_hastings(GRAPH)
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=1), 10, seed=1)


def _planned_plan(mechanism, **planner_options):
    """(planner result, plan) for 24 steps, minibatches of 1/6 of the local data."""
    part = Participation(4, 6)
    planned = factorization.plan_factor(
        mechanism, W, steps=24, participation=part, **planner_options
    )
    p = make_plan(
        mechanism,
        GRAPH,
        steps=24,
        participation=part,
        clip_norm=1.0,
        learning_rate=0.2,
        noise_multiplier=1.0,
        factor=planned.factor,
        seed=3,
        task=TaskSpec(dataset="synthetic-logistic", batch_size=DATA.local_size // 6),
    )
    return planned, p


@pytest.mark.parametrize("mechanism", ["dmf", "mafalda"])
def test_planned_plans_certify_and_run_identically(mechanism):
    planned, p = _planned_plan(mechanism)
    assert planned.gap < 1e-3 and planned.dual_bound <= planned.loss * (1 + 1e-12)
    # X = CᵀC is zero off the diagonal on co-participating pairs up to rounding, so the Thm 7
    # bound (sum of |X|) is 1 to within rounding
    assert p.sensitivity == pytest.approx(1.0, rel=1e-9)
    back = NoisePlan.from_bytes(p.to_bytes())  # re-certified on load
    assert back.plan_hash == p.plan_hash
    digest = batch.run(p, DATA).digests[0]
    assert engine.run(p, DATA).model_digest == digest  # memoized draws == regenerated draws


def test_mafalda_beats_dp_dsgd_and_antipgd_on_its_objective():
    part = Participation(3, 10)
    T = 30
    maf = factorization.plan_factor("mafalda", W, steps=T, participation=part)
    dmf = factorization.plan_factor("dmf", W, steps=T, participation=part)
    ratio = {
        name: factorization.relative_loss(f.strategy(T), W, participation=part)
        for name, f in [
            ("mafalda", maf.factor),
            ("dmf", dmf.factor),
            ("antipgd", factors.AntiPGD()),
            ("dp-dsgd", factors.Identity()),
        ]
    }
    assert ratio["dp-dsgd"] == pytest.approx(1.0)
    assert ratio["mafalda"] < 1.0 and ratio["mafalda"] <= ratio["dmf"] * (1 + 1e-3)
    assert ratio["mafalda"] < ratio["antipgd"]


def test_complete_graph_mafalda_equals_dmf():
    # complete graph with MH weights: W = 11ᵀ/n, so H is the prefix-sum Gram (families/mf/mafalda)
    g = edgedp_topologies.complete(6)
    Wc = topology.metropolis_hastings(g)
    part = Participation(2, 8)
    a = factorization.plan_factor("mafalda", Wc, steps=16, participation=part)
    b = factorization.plan_factor("dmf", Wc, steps=16, participation=part)
    assert a.loss == pytest.approx(b.loss, rel=1e-3)


def test_cli_mf_optimize_and_plan(tmp_path):
    cmd = [sys.executable, "-m", "edgedp_cli"]
    out = json.loads(
        subprocess.run(
            [
                *cmd,
                "mf",
                "optimize",
                "--workload",
                "prefix",
                "--steps",
                "64",
                "--participation",
                "4,16",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert set(out) >= {"loss", "dual_bound", "gap", "iterations", "seconds"}
    assert out["dual_bound"] <= out["loss"] and out["gap"] < 1e-3
    H = mf_optimal.prefix_sum_gram(64)
    assert out["loss"] <= mf_optimal.loss(np.eye(64), H, Participation(4, 16))
    plan = tmp_path / "m.plan"
    rep = json.loads(
        subprocess.run(
            [
                *cmd,
                "plan",
                "mf",
                str(plan),
                "--topology",
                "ring:8",
                "--steps",
                "20",
                "--participation",
                "20,1",
                "--mechanism",
                "mafalda",
                "--target-eps",
                "5",
                "--delta",
                "1e-6",
                "--dataset",
                "synthetic-logistic",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert rep["epsilon"] == pytest.approx(5.0, rel=1e-6) and rep["loss_ratio_to_dp_dsgd"] < 1
    assert math.isfinite(rep["gap"])


@pytest.mark.parametrize("mechanism, kw", [("banded", {"bandwidth": 3}), ("blt", {"buffers": 2})])
def test_compact_plans_certify_and_run_identically(mechanism, kw):
    planned, p = _planned_plan(mechanism, **kw)
    assert planned.loss_ratio_to_dense >= 1 - 1e-3
    assert NoisePlan.from_bytes(p.to_bytes()).plan_hash == p.plan_hash
    assert p.factor.state_bytes(10) <= 8 * 10 * max(kw.values())  # bounded device state
    assert engine.run(p, DATA).model_digest == batch.run(p, DATA).digests[0]
