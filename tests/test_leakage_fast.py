"""The fast KSG paths equal npeet-plus bit for bit, and the Table 4 leakage values are pinned."""

import hashlib
import json
import tomllib

import numpy as np
import pytest

from edgedp_sim import adversary, kernels, leak, leakage, scenarios

npeet = pytest.importorskip("npeet_plus.estimators")
PATHS = ["compiled", "numpy"] if kernels.AVAILABLE else ["numpy"]


@pytest.fixture(params=PATHS, autouse=True)
def path(request, monkeypatch):
    """Every test on both paths: numba's scans (edgedp_sim.kernels) and numpy/scipy/sklearn's."""
    if request.param == "numpy":
        monkeypatch.setattr(kernels, "AVAILABLE", False)
    return request.param


@pytest.fixture
def npeet_mi(monkeypatch):
    """NPEET's ``mi`` on the samples as given: its global-RNG tie noise switched off."""
    monkeypatch.setattr(npeet, "add_noise", lambda x, intens=1e-10: x)
    return npeet.mi


def _noised(g, a):
    return leakage.add_tie_noise(a, g)


def test_self_mi_windows_equal_npeet(npeet_mi):
    # I(V; V): the 2-D joint resolved by sorted windows, at scales from 1e-6 to 1e6
    g = np.random.default_rng(21)
    for scale in (1e-6, 1.0, 50.0, 1e6):
        v = scale * g.standard_normal((1500, 1))
        x, y = _noised(g, v), _noised(g, v)
        assert float(leakage.ksg_mi(x, y, prenoised=True)) == npeet_mi(x, y)


def test_scalar_pairs_mixing_windows_and_tree_equal_npeet(npeet_mi):
    # weakly dependent scalars: most points fall back to the tree, some are resolved by windows
    g = np.random.default_rng(22)
    for rho in (0.0, 0.5, 0.999):
        x = g.standard_normal((1200, 1))
        y = rho * x + np.sqrt(1 - rho**2) * g.standard_normal((1200, 1))
        x, y = _noised(g, x), _noised(g, y)
        assert float(leakage.ksg_mi(x, y, prenoised=True)) == npeet_mi(x, y)


@pytest.mark.parametrize("dims", [(1, 3), (3, 3), (2, 1)])
def test_vector_marginals_equal_npeet(npeet_mi, dims):
    # Table 4's shape: scalar V, a 3-dim I whose parts differ in scale by 10^3 (Eq. 44)
    g = np.random.default_rng(23)
    dx, dy = dims
    v = 40.0 * g.standard_normal((1500, dx))
    scales = np.array([0.3, 60.0, 200.0])[:dy]
    i = v[:, :1] * scales / 40.0 + scales * g.standard_normal((1500, dy))
    x, y = _noised(g, v), _noised(g, i)
    batched = leakage.ksg_mi(np.stack([x, x[::-1]]), np.stack([y, y[::-1]]), prenoised=True)
    assert batched.tolist() == [npeet_mi(x, y), npeet_mi(x[::-1], y[::-1])]


def test_table4_leakage_values_are_pinned():
    # edgedp_sim/scenarios/leakage_table4.toml at eps = 1 reduced to 400 trials x 40 iterations;
    # numbers computed with the per-stream Laplace draws and cKDTree counts (before the bulk
    # paths), pinned again when plan version 3 moved the plan hash that keys the noise: the
    # bulk draws and the fast KSG must not move a bit of them
    raw = tomllib.loads((scenarios_dir() / "leakage_table4.toml").read_text())
    raw["steps"] = raw["eval_every"] = 40
    sc = scenarios.parse(raw)
    att = [adversary.parse_attacker(a) for a in ("hbc:1,2", "eavesdropper:all")]
    rep = leak.run(sc, att, trials=400, chunk=150, standardized=True)
    got = {}
    for e in rep["attackers"]:
        blob = json.dumps([e["nmi_curve"], e["nmi_curve_standardized"]]).encode()
        got[e["attacker"]] = (e["m_nmi"], e["m_nmi_standardized"], hashlib.sha256(blob).hexdigest())
    assert got["hbc:1,2"][:2] == (0.10461181753962819, 0.5666068346278119)
    assert got["eavesdropper:all"][:2] == (0.10461181753962819, 0.5667847995249976)
    assert got["hbc:1,2"][2][:16] == "e39403da587068fa"
    assert got["eavesdropper:all"][2][:16] == "9afe52bb6e0f8828"


def scenarios_dir():
    from pathlib import Path

    return Path(scenarios.__file__).parent


@pytest.mark.parametrize("discrete", [False, True])
def test_knn_memo_reuses_neighbours_without_changing_a_bit(discrete, monkeypatch):
    # two estimates on the same raw samples with fresh tie noise (two attackers with one
    # information set): the second takes its radii from the first's kept neighbours (the
    # trees' path: the compiled scans keep none)
    monkeypatch.setattr(kernels, "AVAILABLE", False)
    g = np.random.default_rng(24)
    v = 30.0 * g.standard_normal((3, 800, 1))
    i = np.concatenate([v * 0.01, 50.0 * g.standard_normal((3, 800, 2))], axis=-1)
    if discrete:  # ties everywhere: most points are not safe and go back to the tree
        v, i = np.round(v / 10.0), np.round(i / 10.0)
    memo: dict = {}
    first = leakage.ksg_mi(v, i, rng=np.random.default_rng(1), knn_memo=memo)
    second = leakage.ksg_mi(v, i, rng=np.random.default_rng(2), knn_memo=memo)
    assert len(memo) == 3  # one entry per joint; the second estimate added none
    safe = np.mean([entry[1].mean() for entry in memo.values()])
    assert (safe < 0.5) if discrete else (safe > 0.95)
    assert first.tolist() == leakage.ksg_mi(v, i, rng=np.random.default_rng(1)).tolist()
    assert second.tolist() == leakage.ksg_mi(v, i, rng=np.random.default_rng(2)).tolist()


@pytest.mark.parametrize("wide", [1e3, 1e6, 1e12])
def test_widest_coordinate_windows_and_run_counts_equal_npeet(npeet_mi, wide):
    # Table 4's late iterations: the third part of Eq. 44 outspreads the others by 10^3 to
    # 10^12, so windows in its order settle the 4-D k-NN and short runs the 3-D counts
    g = np.random.default_rng(25)
    v = 18.0 * g.standard_normal((1500, 1))
    i = np.concatenate(
        [0.16 * g.standard_normal((1500, 1)), 96.0 * g.standard_normal((1500, 1))], axis=1
    )
    i = np.concatenate([i, wide * g.standard_t(3, (1500, 1))], axis=1)  # heavy tails
    x, y = _noised(g, v), _noised(g, i)
    assert float(leakage.ksg_mi(x, y, prenoised=True)) == npeet_mi(x, y)
    assert float(leakage.ksg_mi(y, x, prenoised=True)) == npeet_mi(y, x)


def test_run_counts_with_ties_and_long_runs_equal_npeet(npeet_mi, monkeypatch):
    # discrete samples (many points at distance 0: radii below 0 count nothing) and the
    # run length limit moved so that both the runs and the tree count every marginal
    g = np.random.default_rng(26)
    v = np.round(3.0 * g.standard_normal((900, 2)))
    i = np.concatenate([v[:, :1] + np.round(g.standard_normal((900, 1))), v * 0.0], axis=1)
    for limit in (0, 10**9):
        monkeypatch.setattr(leakage, "_MAX_MEAN_RUN", limit)
        for x, y in ((v, i), (v + 1e-10 * g.random(v.shape), i + 1e-10 * g.random(i.shape))):
            assert float(leakage.ksg_mi(x, y, prenoised=True)) == npeet_mi(x, y)


def test_tree_counts_without_a_narrow_coordinate_equal_npeet(npeet_mi, monkeypatch):
    # Table 4's early iterations: the first part of Eq. 44 spans less than any radius, so the
    # tree counts in the other two coordinates (here the tree for every count)
    monkeypatch.setattr(leakage, "_MAX_MEAN_RUN", 0)
    g = np.random.default_rng(27)
    v = 17.0 * g.standard_normal((1200, 1))
    i = np.concatenate(
        [1e-3 * g.random((1200, 1)), v + 50.0 * g.standard_normal((1200, 2))], axis=1
    )
    x, y = _noised(g, v), _noised(g, i)
    assert float(leakage.ksg_mi(x, y, prenoised=True)) == npeet_mi(x, y)
