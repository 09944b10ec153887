"""Plans that fit a board: plan load without T×T matrices, certified bounds and signatures
for Gram-only factors, and refusals of plans too large for the device."""

import hashlib
import itertools
import re
import subprocess
import sys

import numpy as np
import pytest

import edgedp_topologies
from edgedp import _codec, factors, footprint, signing
from edgedp.accounting import factor_sensitivity
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError
from edgedp.families.cross import accounting as cross_acc
from edgedp.families.cross.noise import CrossAgentSpec
from edgedp.plan import NoisePlan, TaskSpec, make_plan

T = 13
RNG = np.random.default_rng(7)


def _bands(width, signed):
    b = RNG.standard_normal((T, width)) * 0.4
    b = b if signed else np.abs(b)
    for j in range(width):
        b[:j, j] = 0.0
    b[:, 0] = 1.0 + RNG.random(T)
    return b


C_POS = np.tril(RNG.random((T, T))) + np.eye(T)
C_NEG = C_POS.copy()
C_NEG[6, 1], C_NEG[9, 4] = -0.8, -0.5  # negative entries: X has negative entries too
C_MIXED = np.tril(RNG.standard_normal((T, T)) * 0.5) + 2.0 * np.eye(T)  # many signs

FACTORS = {
    "identity": factors.Identity(),
    "antipgd": factors.AntiPGD(),
    "blt": factors.BLT((0.5, 0.9), (0.2, 0.05)),
    "blt-signed": factors.BLT((0.5, 0.8), (0.6, -0.3)),
    "banded": factors.Banded(_bands(3, signed=False)),
    "banded-signed": factors.Banded(_bands(4, signed=True)),
    "dense": factors.Dense(C_POS),
    "dense-signed": factors.Dense(C_NEG),
    "dense-mixed": factors.Dense(C_MIXED),
}
PARTICIPATIONS = [Participation(k, b) for k, b in itertools.product([1, 2, 3, 13], [1, 2, 5, 13])]


def brute_force(C, part, steps):
    """Paper 000 Thm 7 (squared) by definition: every window's block of |CᵀC|."""
    C = C[:steps, :steps]
    X = C.T @ C
    best, exact = 0.0, True
    for p in part.patterns(steps):
        block = X[np.ix_(p, p)]
        total = float(np.abs(block).sum())
        if total > best:
            best, exact = total, bool(np.all(block >= 0))
        elif total == best:
            exact = exact or bool(np.all(block >= 0))
    return np.sqrt(best), exact


@pytest.mark.parametrize("name", sorted(FACTORS))
def test_compact_sensitivity_equals_the_gram_definition(name, monkeypatch):
    f = FACTORS[name]
    for part, steps in itertools.product(PARTICIPATIONS, (1, 6, T)):
        ref, ref_exact = brute_force(f.strategy(T), part, steps)
        got = factor_sensitivity.sensitivity(f, part, steps=steps)
        # rounding only: the compact forms sum in another order (tolerance 1e-12 relative)
        assert got.value.value == pytest.approx(ref, rel=1e-12, abs=1e-14), (part, steps)
        assert got.value.exact == ref_exact, (part, steps)
    monkeypatch.setattr(factor_sensitivity, "DENSE_STEPS", 0)  # bounds only, as for large T
    for part in PARTICIPATIONS:
        ref, _ = brute_force(f.strategy(T), part, T)
        got = factor_sensitivity.sensitivity(f, part, steps=T)
        assert got.lower <= ref * (1 + 1e-12) and ref <= got.upper * (1 + 1e-12)
        if name in ("identity", "antipgd", "blt", "banded", "banded-signed", "dense"):
            assert got.value is not None  # exact without the Gram matrix
        elif part.count(T) == 1:  # one step per window: the diagonal, exact
            assert got.value.value == pytest.approx(ref, rel=1e-12) and got.value.exact
        else:
            assert got.value is None and got.lower < got.upper


@pytest.mark.parametrize("width", [1, 2, 5])
def test_banded_noise_row_norms_are_the_rows_of_the_inverse(width):
    f = factors.Banded(_bands(width, signed=True))
    dense = np.sqrt(np.sum(np.linalg.inv(f.strategy(T)) ** 2, axis=1))
    np.testing.assert_allclose(f.noise_row_norms(T), dense, rtol=1e-12)


def test_muffliato_participations_count_gradient_rounds_without_patterns():
    spec = CrossAgentSpec("muffliato", np.ones(2), np.zeros((2, 0)), [], gossip_rounds=3)
    for part, done in itertools.product(PARTICIPATIONS, (None, 0, 5, 12)):
        steps = 12
        t = steps if done is None else done
        want = max(
            (int(np.count_nonzero((p[p < t] % 3) == 0)) for p in part.patterns(steps)), default=0
        )
        assert cross_acc.participations(spec, part, steps, steps_done=done) == want


# ---------------------------------------------------------------- certificates
def _dense_plan(steps=12, matrix=None):
    C = matrix if matrix is not None else C_MIXED[:steps, :steps]
    return make_plan(
        "dense",
        edgedp_topologies.parse("ring:3"),
        steps=steps,
        participation=Participation(3, 4),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        factor=factors.Dense(C),
        task=TaskSpec(dataset="synthetic-logistic"),
    )


def _rewrite(data: bytes, signing_key=None, **changes) -> bytes:
    """The plan file with fields changed, its hash recomputed and optionally re-signed."""
    outer = _codec.decode(data)
    d = dict(outer["plan"], **changes)
    outer["plan"] = d
    outer["hash"] = hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()
    if signing_key is not None:
        outer["signature"] = signing.sign(outer["hash"], signing_key)
    else:
        outer.pop("signature", None)
    return _codec.encode(outer)


def test_a_gram_only_sensitivity_is_accepted_signed_and_checked_by_bounds(monkeypatch):
    monkeypatch.setattr(factor_sensitivity, "DENSE_STEPS", 8)  # T = 12 needs the certificate
    p = _dense_plan()
    fs = factor_sensitivity.sensitivity(p.factor, p.participation, steps=p.steps)
    assert fs.value is None and fs.lower < p.sensitivity < fs.upper
    secret, public = signing.generate_planner_key()
    signed = p.to_bytes(signing_key=secret)
    loaded = NoisePlan.from_bytes(signed, trusted_key=public)
    assert loaded.certified_sensitivity == p.sensitivity
    assert loaded.guarantee().mu == pytest.approx(1.0)
    assert loaded.guarantee(steps_done=4).mu <= 1.0
    # unsigned, or signed by a key the device does not trust: refused
    with pytest.raises(PlanError, match="signed by its planning key"):
        NoisePlan.from_bytes(p.to_bytes())
    with pytest.raises(PlanError, match="not by the trusted planning key"):
        NoisePlan.from_bytes(signed, trusted_key=signing.generate_planner_key()[1])
    # a tampered certificate: smaller, re-hashed; the signature no longer verifies
    smaller = 0.9 * p.sensitivity
    with pytest.raises(PlanError, match="does not verify"):
        NoisePlan.from_bytes(
            _tampered_keep_signature(signed, sensitivity=smaller), trusted_key=public
        )
    # even the trusted key cannot certify a value below the lower bound
    below = _rewrite(signed, signing_key=secret, sensitivity=0.99 * fs.lower)
    with pytest.raises(PlanError, match="below .* a lower bound"):
        NoisePlan.from_bytes(below, trusted_key=public)
    # a value at the upper bound is certainly enough noise: accepted without a signature
    above = NoisePlan.from_bytes(_rewrite(p.to_bytes(), sensitivity=fs.upper))
    assert above.certified_sensitivity == fs.upper
    # planner-side tools recompute it from the Gram matrix instead
    assert NoisePlan.from_bytes(p.to_bytes(), gram=True).certified_sensitivity is None


def _tampered_keep_signature(data: bytes, **changes) -> bytes:
    outer = _codec.decode(data)
    d = dict(outer["plan"], **changes)
    outer["plan"] = d
    outer["hash"] = hashlib.sha256(_codec.canonical_bytes(d)).hexdigest()
    return _codec.encode(outer)  # the old signature: of the old hash


def test_a_compact_factor_sensitivity_must_match_exactly():
    bands = factors.Banded.from_matrix(np.tril(C_POS) - np.tril(C_POS, -3), 3)
    p = make_plan(
        "banded",
        edgedp_topologies.parse("ring:3"),
        steps=T,
        participation=Participation(4, 4),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        factor=bands,
    )
    for wrong in (0.999 * p.sensitivity, 1.5 * p.sensitivity):
        with pytest.raises(PlanError, match="does not match the accountant"):
            NoisePlan.from_bytes(_rewrite(p.to_bytes(), sensitivity=wrong))


# ---------------------------------------------------------------- sizes
def _identity_plan(steps=4):
    return make_plan(
        "dp-dsgd",
        edgedp_topologies.parse("ring:3"),
        steps=steps,
        participation=Participation(steps, 1),
        clip_norm=1.0,
        learning_rate=0.3,
        noise_multiplier=1.0,
        task=TaskSpec(dataset="synthetic-logistic"),
        seed=2,
    )


def test_a_plan_too_large_is_refused_before_it_is_built():
    huge = _rewrite(_identity_plan().to_bytes(), steps=10**9, participation=[10**9, 1])
    with pytest.raises(footprint.PlanTooLargeError, match=r"T=1,000,000,000"):
        NoisePlan.from_bytes(huge, max_memory=2**30)
    data = _dense_plan(12, C_POS[:12, :12]).to_bytes()
    with pytest.raises(footprint.PlanTooLargeError, match=r"dense factor 12x12"):
        NoisePlan.from_bytes(data, max_memory=3 * len(data))  # the file fits, C does not


def test_the_agent_refuses_a_plan_too_large_with_exit_3(tmp_path):
    """A real agent process, given a re-hashed plan with T = 10⁹: exit 3, one line, no trace."""
    from tests.test_operator_trust import _device_folders

    p = _identity_plan()
    _device_folders(tmp_path, p, signed=False)
    dev = tmp_path / "dev0"
    huge = _rewrite((dev / "run.plan").read_bytes(), steps=10**9, participation=[10**9, 1])
    (dev / "run.plan").write_bytes(huge)
    toml = (dev / "node.toml").read_text()
    toml = re.sub(r"(?m)^hash = .*\n", "", toml)  # the operator pinned the old hash
    (dev / "node.toml").write_text(toml.replace("[run]\n", "[run]\nmax_memory_mb = 512\n"))
    out = subprocess.run(
        [sys.executable, "-m", "firmware_py.daemon", "--config", "node.toml"],
        cwd=dev,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    line = [x for x in out.stderr.splitlines() if "refused" in x]
    assert len(line) == 1 and "T=1,000,000,000" in line[0] and "max_memory_mb" in line[0]


# ---------------------------------------------------------------- agent memory
@pytest.mark.parametrize("mechanism", ["dp-dsgd", "banded", "dome"])
def test_agents_clipping_in_chunks_equal_the_batch_engine_bitwise(mechanism, monkeypatch):
    """Per-example gradients held 3 examples at a time (as at d = 10⁶, one at a time): the
    event engine's agents give the batch engine's bits."""
    from edgedp import agent as agent_mod
    from edgedp.families.dome.sketch import SketchSpec
    from edgedp_sim import batch, datasets, engine

    data = datasets.partition(datasets.load("synthetic-logistic", seed=2), 6, seed=2)
    steps, bs = 6, 8
    per_epoch = data.local_size // bs
    extra = {}
    if mechanism == "banded":
        extra["factor"] = factors.Banded.from_matrix(np.tril(C_POS[:steps, :steps]) * 0.5, steps)
    if mechanism == "dome":
        extra["sketch"] = SketchSpec(dim=4)
    p = make_plan(
        mechanism,
        edgedp_topologies.parse("ring:6"),
        steps=steps,
        participation=Participation(-(-steps // per_epoch), per_epoch),
        clip_norm=0.5,
        learning_rate=0.3,
        noise_multiplier=1.0,
        task=TaskSpec(dataset="synthetic-logistic", batch_size=bs),
        seed=4,
        **extra,
    )
    whole = engine.run(p, data).model_digest
    monkeypatch.setattr(agent_mod, "CHUNK_FLOATS", 3 * (data.features + 1))
    chunked = engine.run(p, data).model_digest
    assert chunked == whole == batch.run(p, data).digests[0]
