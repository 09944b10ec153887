"""A Dense factor is certified from C but streams noise through its stored inverse M: the
mechanism that runs is C' = M⁻¹. An ill-conditioned C is refused (as unstable BLT factors
are); an accepted one streams what is certified, up to the plan's own 1e-9 tolerance.

The realised C' is computed another way: the exact rational inverse of the floats the
device streams (fractions), and its Thm 7 sensitivity for one window covering every step
(k = T, b = 1) is Σ_{s,t} |(C'ᵀC')[s,t]|, summed here by hand.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedp import factors, plan
from edgedp.accounting import factor_sensitivity
from edgedp.accounting.participation import Participation


def _toeplitz(column, steps):
    c = np.zeros(steps)
    column = column[:steps]
    c[: len(column)] = column
    idx = np.arange(steps)
    lag = idx[:, None] - idx[None, :]
    return np.where(lag >= 0, c[np.clip(lag, 0, steps - 1)], 0.0)


def _realised(streamed: np.ndarray) -> np.ndarray:
    """The exact inverse of the streamed lower-triangular matrix, rounded to floats."""
    T = streamed.shape[0]
    M = [[Fraction(float(x)) for x in row] for row in streamed]
    inv = [[Fraction(0)] * T for _ in range(T)]
    for col in range(T):
        for i in range(col, T):
            acc = Fraction(int(i == col))
            for j in range(col, i):
                acc -= M[i][j] * inv[j][col]
            inv[i][col] = acc / M[i][i]
    return np.array([[float(x) for x in row] for row in inv])


def _one_window_sensitivity(C: np.ndarray) -> float:
    X = C.T @ C
    return math.sqrt(float(np.abs(X).sum()))


def test_the_reported_ill_conditioned_factor_is_refused():
    C = _toeplitz([1.0, -10.0], 20)
    # what was certified and what would have run (the defect, reproduced another way)
    certified = _one_window_sensitivity(C)
    assert certified == pytest.approx(47.958, abs=1e-3)
    realised = _one_window_sensitivity(_realised(np.tril(np.linalg.inv(C))))
    assert realised == pytest.approx(732.8, abs=0.1)
    with pytest.raises(ValueError, match="ill-conditioned"):
        factors.Dense(C)
    with pytest.raises(ValueError, match="ill-conditioned"):
        factors.from_dict({"kind": "dense", "matrix": C})


def test_a_plan_file_with_such_a_factor_is_refused():
    import hashlib

    import edgedp_topologies
    from edgedp import _codec
    from edgedp.errors import PlanError

    p = plan.make_plan(
        "mafalda",
        edgedp_topologies.parse("ring:4"),
        steps=20,
        participation=Participation(20, 1),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=1.0,
        factor=factors.Dense(np.eye(20)),
    )
    d = p.to_dict()
    d["factor"] = {"kind": "dense", "matrix": _toeplitz([1.0, -10.0], 20)}
    digest = hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()
    with pytest.raises(PlanError, match="ill-conditioned"):
        plan.NoisePlan.from_bytes(_codec.encode({"plan": d, "hash": digest}))


@settings(max_examples=40)
@given(
    steps=st.integers(2, 20),
    column=st.lists(st.floats(-12.0, 12.0, allow_nan=False), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_an_accepted_dense_factor_streams_what_is_certified(steps, column, seed):
    """Banded Toeplitz C (1, c₁, c₂) — ill-conditioned when |c₁| > 1 — with a random
    perturbation of its lower triangle."""
    g = np.random.default_rng(seed)
    C = _toeplitz([1.0, *column], steps) + np.tril(g.uniform(-0.1, 0.1, (steps, steps)), -1)
    try:
        f = factors.Dense(C)
    except ValueError as exc:
        assert "ill-conditioned" in str(exc)
        return
    part = Participation(steps, 1)
    certified = factor_sensitivity.sensitivity(f, part, steps=steps)
    stated = certified.value.value if certified.value is not None else certified.upper
    realised = _one_window_sensitivity(_realised(f.materialize(steps)))
    assert realised <= stated * (1 + 2e-9)


def test_planned_dense_factors_are_accepted():
    import edgedp_topologies
    from edgedp import topology
    from edgedp.families.mf import factorization

    W = topology.WEIGHTINGS["metropolis-hastings"](edgedp_topologies.parse("ring:8"))
    for mech in ("dmf", "mafalda"):
        planned = factorization.plan_factor(
            mech, W, steps=64, participation=Participation(64, 1), max_iterations=50
        )
        assert planned.factor.kind == "dense"
        assert planned.factor.stream_error < 1e-12
