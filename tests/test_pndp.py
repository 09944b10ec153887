"""PNDP accountant (paper 000 §7.1, App. A.2): brute force, closed forms, properties, CLI."""

# ruff: noqa: N803, N806, E741

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

import edgedp_topologies
from edgedp import factors, topology
from edgedp.accounting import _pndp_gram, pndp
from edgedp.accounting import sensitivity as sens_lib
from edgedp.accounting.participation import Participation
from edgedp.plan import make_plan


def _workload(W, T):
    """W_T: block (t, τ) = W^{t−τ} for τ <= t (paper 000 Eq. 5), built independently."""
    n = W.shape[0]
    WT = np.zeros((n * T, n * T))
    for t in range(T):
        for tau in range(t + 1):
            WT[t * n : (t + 1) * n, tau * n : (tau + 1) * n] = np.linalg.matrix_power(W, t - tau)
    return WT


def _brute(graph, W, C_local, attackers, victim, part, observer="node"):
    """Thm 7 with the full App. A.2 matrices, through sensitivity.sensitivity(decoder=B)."""
    n, T = W.shape[0], C_local.shape[0]
    A = set(attackers)
    O = sorted({v for a in attackers for v in graph.neighbours(a)})
    if observer == "node":  # members' messages to each other are functions of what they know
        O = sorted(set(O) - A)
    # a tap on every link into A also carries what members send each other: they stay in O
    PW = _workload(W, T)[[t * n + i for t in range(T) for i in O]]
    C = np.kron(C_local, np.eye(n))
    B = PW @ np.kron(np.linalg.inv(C_local), np.eye(n))
    if observer == "node":  # attackers know their gradients (Lemma 11) and their noise (K_Z)
        rows = [t * n + a for t in range(T) for a in sorted(A)]
        D = np.eye(n * T)
        D[rows, rows] = 0
        B, C = np.vstack([B, np.eye(n * T)[rows]]), C @ D
    pats = [p * n + victim for p in part.patterns(T)]
    return sens_lib.sensitivity(C, pats, decoder=B).value


def _setting(graph, C_local, part, sigma=1.0):
    W = topology.metropolis_hastings(graph)
    return pndp.PNDPSetting(W, C_local, part, sigma, np.asarray(graph.edges))


STRATEGIES = {
    "identity": lambda T: np.eye(T),
    "antipgd": lambda T: np.tril(np.ones((T, T))),
    "dense": lambda T: np.tril(np.random.default_rng(T).uniform(0.5, 1.5, (T, T))),
}


@pytest.mark.parametrize("spec,T", [("er:5:0.6:3", 6), ("ring:5", 5), ("star:4", 4)])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("observer", pndp.OBSERVERS)
def test_matches_brute_force_thm7(spec, T, strategy, observer):
    g = edgedp_topologies.parse(spec)
    W = topology.metropolis_hastings(g)
    C = STRATEGIES[strategy](T)
    for part in (Participation(T, 1), Participation(2, 2), Participation(1, T)):
        s = pndp.PNDPSetting(W, C, part, 1.0, np.asarray(g.edges))
        for attackers in ([0], [1, 3]):
            r = pndp.pndp_guarantees(s, attackers=attackers, observer=observer)
            for v, got in zip(r.victim, r.sensitivity, strict=True):
                want = min(_brute(g, W, C, attackers, int(v), part, observer), r.ldp.sensitivity)
                assert got == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("observer", pndp.OBSERVERS)
def test_view_matrices_factorize_and_match_the_independent_build(observer):
    g = edgedp_topologies.parse("er:5:0.6:3")
    W = topology.metropolis_hastings(g)
    C_local = STRATEGIES["dense"](4)
    A_, B, C = pndp.view_matrices(
        W, attackers=[2], strategy=C_local, edges=g.edges, observer=observer
    )
    np.testing.assert_allclose(A_, B @ C, atol=1e-12)  # A = BC (Thm 5)
    for v in (0, 1, 3, 4):
        pats = [np.arange(4) * 5 + v]
        got = sens_lib.sensitivity(C, pats, decoder=B).value
        assert got == pytest.approx(_brute(g, W, C_local, [2], v, Participation(4, 1), observer))


def test_statespace_steady_state_equals_dense_on_a_longer_horizon():
    # T well past the Kalman transient, so the time-invariant shortcut is exercised
    g = edgedp_topologies.parse("er:14:0.5:2")
    W = topology.metropolis_hastings(g)
    cases = [([0], np.eye(60), "node"), ([3, 7], np.tril(np.ones((60, 60))), "node")]
    cases.append(([3, 7], np.eye(60), "eavesdropper"))
    for attackers, C, observer in cases:
        kw = dict(attackers=attackers, strategy=C, observer=observer)
        v1, X1 = pndp.victim_grams(W, method="statespace", **kw)
        v2, X2 = pndp.victim_grams(W, method="dense", **kw)
        np.testing.assert_array_equal(v1, v2)
        np.testing.assert_allclose(X1, X2, atol=1e-9 * np.abs(X2).max())


def test_closed_form_path_of_three_T2():
    # attacker 0 sees node 1; victim 2: S_1 = 1 + (1/3)^2, X = diag(1/10, 0) by hand
    W = np.array([[2, 1, 0], [1, 1, 1], [0, 1, 2]]) / 3
    _, X = pndp.victim_grams(W, attackers=[0], strategy=np.eye(2), victims=[2])
    np.testing.assert_allclose(X[0], [[0.1, 0.0], [0.0, 0.0]], atol=1e-15)
    r = pndp.pndp_guarantees(
        pndp.PNDPSetting(W, np.eye(2), Participation(2, 1), 2.0), attackers=[0], victims=[2]
    )
    assert r.mu[0] == pytest.approx(math.sqrt(0.1) / (2.0 * math.sqrt(2)), rel=1e-12)
    assert r.rdp(2.0)[0] == pytest.approx(r.mu[0] ** 2, rel=1e-15)
    assert bool(r.exact[0])


def test_complete_graph_gives_no_amplification():
    # W = 11ᵀ/n: every node receives every message, X_vv = I, so PNDP = LDP exactly
    n, T = 6, 8
    g = edgedp_topologies.complete(n)
    r = pndp.pndp_guarantees(_setting(g, np.eye(T), Participation(T, 1), sigma=3.0))
    np.testing.assert_allclose(r.sensitivity, math.sqrt(T), rtol=1e-12)
    np.testing.assert_allclose(r.mu, 1 / 3.0, rtol=1e-12)
    assert r.exact.all() and not r.capped.any() and len(r) == n * (n - 1)


def test_pndp_never_exceeds_ldp_and_gains_beyond_neighbours():
    g = edgedp_topologies.parse("er:30:0.2:1")
    r = pndp.pndp_guarantees(_setting(g, np.eye(40), Participation(40, 1), sigma=0.7))
    assert np.all(r.mu <= r.ldp_mu) and r.ldp_mu == pytest.approx(1 / 0.7)
    far = r.distance >= 2
    assert far.any() and np.all(r.mu[far] < 0.6 * r.ldp_mu) and not r.capped[far].any()
    assert np.all(r.epsilon(1e-5) <= r.ldp.epsilon(1e-5) + 1e-9)


def test_larger_colluding_set_learns_at_least_as_much():
    g = edgedp_topologies.parse("er:12:0.3:4")
    W = topology.metropolis_hastings(g)
    T, small, big = 12, [0], [0, 5]
    vs = [v for v in range(12) if v not in big]
    _, Xs = pndp.victim_grams(W, attackers=small, strategy=np.eye(T), victims=vs)
    _, Xb = pndp.victim_grams(W, attackers=big, strategy=np.eye(T), victims=vs)
    for a, b in zip(Xs, Xb, strict=True):  # the bigger view's projector dominates (PSD)
        assert np.linalg.eigvalsh(b - a).min() >= -1e-10
    s = _setting(g, np.eye(T), Participation(T, 1))
    rs = pndp.pndp_guarantees(s, attackers=small, victims=vs)
    mu_b = pndp.pndp_guarantees(s, attackers=big, victims=vs).mu
    # where the smaller set's bound is exact, sens² = 1ᵀX_s1 <= 1ᵀX_b1 <= Σ|X_b|; Thm 7's
    # Σ|X| bound itself is not monotone when X has negative entries (near-LDP neighbours)
    assert rs.exact.sum() >= 5 and np.all(mu_b[rs.exact] >= rs.mu[rs.exact] - 1e-12)


def test_far_nodes_leak_less_on_a_path():
    n, T = 7, 30
    g = topology.Graph(n, [(i, i + 1) for i in range(n - 1)], name="path")
    r = pndp.pndp_guarantees(_setting(g, np.eye(T), Participation(T, 1)), attackers=[0])
    np.testing.assert_array_equal(r.distance, np.arange(1, n))
    assert np.all(np.diff(r.mu) < 0)


def test_identity_dense_factor_equals_dp_dsgd_and_antipgd_plan_works():
    g = edgedp_topologies.parse("er:8:0.5:0")
    common = dict(steps=10, participation=Participation(10, 1), clip_norm=1.0, learning_rate=0.1)
    dp = make_plan("dp-dsgd", g, noise_multiplier=1.5, **common)
    eye = make_plan("dense", g, noise_multiplier=1.5, factor=factors.Dense(np.eye(10)), **common)
    r1, r2 = pndp.pndp_guarantees(dp), pndp.pndp_guarantees(eye)
    np.testing.assert_allclose(r1.mu, r2.mu, rtol=1e-12)
    assert r2.method == "statespace"
    anti = make_plan("antipgd", g, noise_multiplier=1.5, **common)
    r3 = pndp.pndp_guarantees(anti, attackers=[0, 4])
    assert r3.ldp_mu == pytest.approx(1 / 1.5) and np.all(r3.mu <= r3.ldp_mu)
    W = anti.mixing_matrix()
    C = anti.factor.strategy(10)
    for v, got in zip(r3.victim, r3.sensitivity, strict=True):
        want = min(_brute(g, W, C, [0, 4], int(v), anti.participation), r3.ldp.sensitivity)
        assert got == pytest.approx(want, abs=1e-9)


def test_eavesdropper_learns_no_more_than_the_node():
    g = edgedp_topologies.florentine_families()
    s = _setting(g, np.eye(25), Participation(25, 1))
    node = pndp.pndp_guarantees(s, attackers=[8])
    eav = pndp.pndp_guarantees(s, attackers=[8], observer="eavesdropper")
    assert np.all(eav.mu <= node.mu + 1e-12) and np.any(eav.mu < node.mu - 1e-6)


@pytest.mark.parametrize("spec,attackers", [("ring:8", [0, 1]), ("florentine", [0, 8, 2])])
@pytest.mark.parametrize("method", ["statespace", "dense"])
def test_tap_on_a_connected_set_sees_what_its_members_know(spec, attackers, method):
    # 𝒜 connected, |𝒜| >= 2: every member's messages and its neighbours' are on tapped links,
    # so the tap recovers each member's input x_t^a = m_t^a − Σ_w W_aw m_{t−1}^w, gradient
    # plus noise; the gradient is fixed under adjacency, so the tap's Gram equals the nodes'
    g = edgedp_topologies.parse(spec)
    W = topology.metropolis_hastings(g)
    kw = dict(attackers=attackers, strategy=np.eye(6), edges=g.edges, method=method)
    _, Xn = pndp.victim_grams(W, observer="node", **kw)
    _, Xe = pndp.victim_grams(W, observer="eavesdropper", **kw)
    np.testing.assert_allclose(Xe, Xn, atol=1e-10)


def test_pairs_records_and_noise_extremes():
    g = edgedp_topologies.parse("ring:5")
    r = pndp.pndp_guarantees(_setting(g, np.eye(3), Participation(3, 1)), attackers=[0])
    p = r.pairs()
    assert [x.victim for x in p] == [1, 2, 3, 4] and p[0].attackers == (0,)
    assert p[1].rdp_alpha2 == pytest.approx(p[1].mu ** 2) and p[1].ldp_mu == 1.0
    assert p[1].epsilon(1e-5) == pytest.approx(r.epsilon(1e-5)[1])
    assert np.all(
        pndp.pndp_guarantees(_setting(g, np.eye(3), Participation(3, 1), math.inf)).mu == 0
    )


def test_numerical_failure_falls_back_to_ldp(monkeypatch):
    def broken(*args, **kwargs):
        raise FloatingPointError("injected")

    monkeypatch.setattr(_pndp_gram, "statespace_grams", broken)
    g = edgedp_topologies.parse("ring:6")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = pndp.pndp_guarantees(_setting(g, np.eye(4), Participation(4, 1)), attackers=[0])
    assert any("failed a numerical check" in str(w.message) for w in caught)
    np.testing.assert_array_equal(r.mu, r.ldp_mu)
    assert r.capped.all() and not r.exact.any()


def test_bad_arguments_are_named():
    g = edgedp_topologies.parse("ring:4")
    s = _setting(g, np.eye(3), Participation(3, 1))
    with pytest.raises(ValueError, match="attackers"):
        pndp.pndp_guarantees(s, attackers=[7])
    with pytest.raises(ValueError, match="outside the attacker set"):
        pndp.pndp_guarantees(s, attackers=[0], victims=[0, 1])
    with pytest.raises(ValueError, match="observer"):
        pndp.pndp_guarantees(s, attackers=[0], observer="spy")
    with pytest.raises(ValueError, match="Toeplitz"):
        pndp.victim_grams(
            s.mixing, attackers=[0], strategy=STRATEGIES["dense"](3), method="statespace"
        )
    with pytest.raises(TypeError, match="sequence"):
        pndp.pndp_guarantees(s, attackers=0)


def test_accounting_module_stays_numpy_only():
    code = (
        "import sys, edgedp.accounting.pndp\n"
        "print(sorted(m for m in ('scipy', 'networkx', 'edgedp_sim', 'matplotlib')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_account_pndp(tmp_path):
    path = tmp_path / "p.plan"
    run = [sys.executable, "-m", "edgedp_cli"]
    subprocess.run(
        [
            *run,
            "plan",
            "sgd",
            str(path),
            "--topology",
            "florentine",
            "--steps",
            "12",
            "--participation",
            "12,1",
            "--mechanism",
            "dp-dsgd",
            "--noise-multiplier",
            "2",
        ],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [*run, "account", str(path), "--trust", "pndp", "--attacker", "0,8", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    d = json.loads(out.stdout)
    assert d["trust"] == "pndp" and d["ldp_mu"] == 0.5 and len(d["pairs"]) == 13
    g = edgedp_topologies.florentine_families()
    ref = pndp.pndp_guarantees(_setting(g, np.eye(12), Participation(12, 1), 2.0), attackers=[0, 8])
    assert [p["mu"] for p in d["pairs"]] == pytest.approx(ref.mu.tolist(), rel=1e-12)
    assert all(p["attackers"] == [0, 8] and p["rdp_alpha2"] <= 0.25 for p in d["pairs"])
    text = subprocess.run(
        [*run, "account", str(path), "--trust", "pndp", "--attacker", "3"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # header, the two model lines (non-adaptive PNDP, adaptive LDP), column names, 14 pairs
    assert "ldp_mu" in text and len(text.strip().splitlines()) == 4 + 14
    bad = subprocess.run(
        [*run, "account", str(path), "--trust", "pndp", "--attacker", "0,99"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--attacker" in bad.stderr


def test_pndp_refuses_plans_with_correlated_or_laplace_noise():
    from types import SimpleNamespace

    from edgedp.accounting import pndp as pndp_mod

    for extra in (
        {"cross_agent": object(), "laplace": None},
        {"cross_agent": None, "laplace": object()},
    ):
        fake = SimpleNamespace(mechanism="x", **extra)
        with pytest.raises(ValueError, match="independent Gaussian"):
            pndp_mod.PNDPSetting.from_plan(fake)


def test_cli_account_pndp_beside_cyffers_et_al(tmp_path):
    from edgedp.accounting import pndp_muffliato

    path = tmp_path / "p.plan"
    run = [sys.executable, "-m", "edgedp_cli"]
    plan = [*run, "plan", "sgd", str(path), "--topology", "florentine", "--steps", "12"]
    subprocess.run(
        [*plan, "--participation", "12,1", "--mechanism", "dp-dsgd", "--noise-multiplier", "2"],
        check=True,
        capture_output=True,
    )
    account = [*run, "account", str(path), "--trust", "pndp", "--cyffers"]
    d = json.loads(
        subprocess.run(
            [*account, "--attacker", "3", "--json"], check=True, capture_output=True, text=True
        ).stdout
    )
    assert d["cyffers"]["source"] == pndp_muffliato.SOURCE and d["cyffers"]["delta"] == d["delta"]
    g = edgedp_topologies.florentine_families()
    setting = _setting(g, np.eye(12), Participation(12, 1), 2.0)
    ref = pndp_muffliato.pndp_guarantees(setting, attackers=[3])
    by_victim = dict(zip(ref.victim.tolist(), ref.rdp(2.0).tolist(), strict=True))
    assert len(d["pairs"]) == 14
    for p in d["pairs"]:
        assert p["cyffers_rdp_alpha2"] == pytest.approx(by_victim[p["victim"]], rel=1e-12)
        # the pair keeps the smaller of the two guarantees: never above the LDP ε
        assert p["cyffers_epsilon"] <= d["ldp_epsilon"] + 1e-12
    text = subprocess.run(
        [*account, "--attacker", "3"], check=True, capture_output=True, text=True
    ).stdout
    assert "cyf_eps" in text and "Cyffers et al. 2022" in text
    for extra, word in (
        (["--attacker", "0,8"], "one curious node"),
        (["--observer", "eavesdropper"], "link tap"),
    ):
        bad = subprocess.run([*account, *extra], capture_output=True, text=True)
        assert bad.returncode == 2 and word in bad.stderr, bad.stderr
    ldp_only = subprocess.run(
        [*run, "account", str(path), "--cyffers"], capture_output=True, text=True
    )
    assert ldp_only.returncode == 2 and "--trust pndp" in ldp_only.stderr
