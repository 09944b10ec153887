import math

import numpy as np
import pytest

import edgedp_topologies
from edgedp import _codec, factors, plan
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError

GRAPH = edgedp_topologies.parse("er:12:0.4:1")


def _plan(mechanism="dp-dsgd", **kw):
    args = dict(
        steps=20,
        participation=Participation.every_step(20),
        clip_norm=1.0,
        learning_rate=0.1,
        noise_multiplier=2.0,
    )
    if mechanism == "dsgd":
        args.pop("noise_multiplier")
    args.update(kw)
    return plan.make_plan(mechanism, GRAPH, **args)


@pytest.mark.parametrize("mechanism", ["dsgd", "dp-dsgd", "antipgd"])
def test_round_trip_keeps_hash_and_fields(mechanism):
    p = _plan(mechanism)
    q = plan.NoisePlan.from_bytes(p.to_bytes())
    assert q.plan_hash == p.plan_hash
    assert q.to_bytes() == p.to_bytes()
    np.testing.assert_array_equal(q.mixing_matrix(), p.mixing_matrix())


def test_sensitivity_and_noise_std_closed_forms():
    # closed form: C = I with T participations -> sens = sqrt(T); nu = sigma * sens * clip
    p = _plan("dp-dsgd", clip_norm=0.5)
    assert p.sensitivity == pytest.approx(math.sqrt(20), rel=1e-12)
    assert p.noise_std == pytest.approx(2.0 * math.sqrt(20) * 0.5, rel=1e-12)
    assert p.mu == 0.5
    # AntiPGD, C = ones: sens^2 = sum_{s,t<T} (T - max(s,t)) = sum_m (2m+1)(T-m) = T(T+1)(2T+1)/6
    a = _plan("antipgd")
    assert a.sensitivity == pytest.approx(math.sqrt(20 * 21 * 41 / 6), rel=1e-12)


def test_target_epsilon_calibration_hits_the_target():
    p = _plan("antipgd", noise_multiplier=None, target_epsilon=3.0, delta=1e-6)
    assert p.guarantee().epsilon(1e-6) == pytest.approx(3.0, rel=1e-6)


def test_tampered_plan_is_refused():
    data = bytearray(_plan().to_bytes())
    data[len(data) // 2] ^= 0x01
    with pytest.raises(PlanError):
        plan.NoisePlan.from_bytes(bytes(data))


def test_stale_sensitivity_is_refused_even_with_a_valid_hash():
    d = _plan().to_dict()
    d["sensitivity"] = d["sensitivity"] / 2  # claims half the noise is enough
    blob = _codec.encode(
        {"plan": d, "hash": __import__("hashlib").sha256(_codec.canonical_bytes(d)).hexdigest()}
    )
    with pytest.raises(PlanError, match="does not match the accountant"):
        plan.NoisePlan.from_bytes(blob)


def test_unsupported_version_and_garbage():
    d = _plan().to_dict()
    d["version"] = 99
    with pytest.raises(PlanError, match="version"):
        plan.NoisePlan.from_bytes(_codec.encode({"plan": d, "hash": "x"}))
    with pytest.raises(PlanError):
        plan.NoisePlan.from_bytes(b"\x00\x01garbage")


def test_share_holds_only_the_nodes_row():
    p = _plan()
    s = p.share(3)
    assert s.neighbours == tuple(int(v) for v in p.mixing_index[3])
    assert 3 in s.neighbours and set(s.neighbours) - {3} == set(GRAPH.neighbours(3))
    assert math.isclose(sum(s.weights), 1.0)
    assert s.noise_std == p.noise_std and s.plan_hash == p.plan_hash
    assert not hasattr(s, "mixing_index") and not hasattr(s, "seed")
    with pytest.raises(ValueError):
        p.share(12)


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="exactly one"):
        _plan("dp-dsgd", noise_multiplier=None)
    with pytest.raises(ValueError, match="adds no noise"):
        _plan("dsgd", noise_multiplier=1.0)
    with pytest.raises(ValueError, match="Unknown mechanism"):
        _plan("magic")
    with pytest.raises(ValueError, match="fixes its own"):
        _plan("antipgd", factor=factors.Identity())
    with pytest.raises(ValueError, match="clip_norm"):
        _plan(clip_norm=-1.0)
    with pytest.raises(ValueError, match="horizon"):
        _plan("dense", factor=factors.Dense(np.eye(10)))


def test_dense_and_banded_plans_certify_their_factor():
    C = np.tril(np.ones((20, 20))) * 0.2 + np.eye(20)
    p = _plan("dense", factor=factors.Dense(C))
    q = plan.NoisePlan.from_bytes(p.to_bytes())
    assert q.sensitivity == p.sensitivity and q.factor.kind == "dense"
    b = _plan(
        "banded",
        factor=factors.Banded.from_matrix(np.tril(C) - np.tril(C, -3), 3),
        participation=Participation(4, 5),
    )
    assert b.sensitivity_exact
