"""`edgedp plan --mechanism mafalda` computes the MAFALDA workload Gram once, under a BLAS
thread limit, and reports the same numbers as when each step computed it afresh."""

import json

import numpy as np
import pytest

import edgedp_topologies
from edgedp import topology
from edgedp.accounting.participation import Participation
from edgedp.families.mf import factorization, mafalda
from edgedp_cli import main as cli

ARGS = [
    "--topology",
    "ring:8",
    "--steps",
    "12",
    "--participation",
    "12,1",
    "--target-eps",
    "5",
    "--delta",
    "1e-6",
    "--dataset",
    "synthetic-logistic",
    "--json",
]


@pytest.mark.parametrize("mechanism", ["mafalda", "banded"])
def test_cli_plan_computes_the_workload_gram_once(mechanism, monkeypatch, tmp_path, capsys):
    calls = []
    original = mafalda.workload_gram

    def counted(*args, **kwargs):
        calls.append(kwargs.get("steps"))
        return original(*args, **kwargs)

    monkeypatch.setattr(mafalda, "workload_gram", counted)
    extra = ["--bandwidth", "3"] if mechanism == "banded" else []
    out = tmp_path / "p.plan"
    argv = ["plan", "mf", str(out), *ARGS, "--mechanism", mechanism, *extra]
    assert cli.main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert calls == [12]  # planning and the loss ratio share one H
    # the ratio equals the one computed from a fresh H (the previous behaviour)
    W = topology.WEIGHTINGS["metropolis-hastings"](edgedp_topologies.parse("ring:8"))  # noqa: N806
    planned = factorization.plan_factor(
        mechanism,
        W,
        steps=12,
        participation=Participation(12, 1),
        bandwidth=3 if mechanism == "banded" else None,
    )
    fresh = factorization.relative_loss(
        planned.factor.strategy(12), W, participation=Participation(12, 1)
    )
    assert rep["loss_ratio_to_dp_dsgd"] == pytest.approx(fresh, rel=1e-9)


def test_workload_gram_runs_under_the_blas_limit(monkeypatch):
    from edgedp.planning import mf_optimal

    limits = []
    original = mf_optimal._blas_limit
    monkeypatch.setattr(mf_optimal, "_blas_limit", lambda t: limits.append(t) or original(t))
    W = np.full((3, 3), 1 / 3)  # noqa: N806
    expected = [[3.0, 2.0, 1.0], [2.0, 2.0, 1.0], [1.0, 1.0, 1.0]]  # complete graph: T − max(a, b)
    np.testing.assert_allclose(mafalda.workload_gram(W, steps=3), expected, atol=1e-12)
    np.testing.assert_allclose(
        mafalda.workload_gram(W, steps=3, blas_threads=None), expected, atol=1e-12
    )
    assert limits == [1, None]
    with pytest.raises(ValueError, match="blas_threads"):
        mafalda.workload_gram(W, steps=3, blas_threads=0)
    with pytest.raises(ValueError, match="workload_gram shaped"):
        factorization.relative_loss(
            np.eye(3), W, participation=Participation(3, 1), workload_gram=np.eye(2)
        )
