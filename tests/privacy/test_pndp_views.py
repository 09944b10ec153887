"""PNDP guarantees recomputed from DP-D-SGD's update equations (paper 000 §7.1, App. A.2).

The attacker's observation matrix is built here by running the update rules on unit inputs,
without any helper of ``edgedp.accounting.pndp`` / ``_pndp_gram``; only the public
``pndp_guarantees`` and the CLI are called, to compare what they print.

How a μ is computed (the same formula for every test below). DP-D-SGD on scalar models,
θ_0 = 0, gossip matrix W, step size η, noise std ν:

    θ_{t+½}^u = θ_t^u − η(g_t^u + ν z_t^u),   θ_{t+1}^u = Σ_v W_uv θ_{t+½}^v,

and θ_{t+½}^u is the message u sends on each of its edges at step t. The observed messages
are linear in (gradients, noises): o = F_g g + F_z z with z ~ N(0, I), column j of each map
being the run on the j-th unit input. Inputs the attacker knows (its own noise and gradients
for curious nodes) and the gradients of every other node (equal in both adjacent runs) only
shift the mean identically, so they drop out. The victim v's record moves each of its T
gradients by some d_t with ‖d_t‖ <= Δ = 1 ((T, 1) participation, §7.1's user-level case), so
the two views are Gaussians with the same covariance Σ = F_z,u F_z,uᵀ (u: unknown noises)
and means apart by F_v d. The attacker's guarantee is then μ-GDP with

    μ² = max_d Σ_{s,t} X_st ⟨d_s, d_t⟩,   X = F_vᵀ Σ⁻¹ F_v  (T × T),

the Mahalanobis distance of the means. Thm 7 with the square bounds it by Σ_{s,t} |X_st|,
which is what the accountant certifies; where X >= 0 entrywise the bound is attained (all
d_t equal), so it is the exact μ, and the tests check X >= 0 wherever they call a number
exact. The plan calibrates ν = σ · sens_LDP · Δ with sens_LDP = √T for C = I and (T, 1)
(``test_full_view_is_the_ldp_guarantee`` rederives it from the all-messages view).
"""

# Paper letters W, T, X, F; see docs/NOTATION.md.
# ruff: noqa: N803, N806

import itertools
import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from edgedp.accounting import pndp
from edgedp.accounting.participation import Participation
from edgedp_cli import main as cli

ETA = 0.1  # step size η: it scales the view's mean and noise alike, so μ does not depend on it


# ----------------------------------------------------------------------------- instances
def _ring(n):
    return [(i, (i + 1) % n) for i in range(n)]


def _path(n):
    return [(i, i + 1) for i in range(n - 1)]


def _metropolis_hastings(n, edges):
    """W_uv = 1 / (1 + max(deg u, deg v)) on edges, the rest on the diagonal."""
    deg = np.zeros(n, dtype=int)
    for u, v in edges:
        deg[u] += 1
        deg[v] += 1
    W = np.zeros((n, n))
    for u, v in edges:
        W[u, v] = W[v, u] = 1.0 / (1 + max(deg[u], deg[v]))
    W[np.arange(n), np.arange(n)] = 1.0 - W.sum(axis=1)
    return W


def _senders(edges, attackers, observer):
    """Whose messages the attacker sees: senders on links into the set (the threat model).

    Curious nodes ("node") know their own messages, so only outsiders' count. A tap on every
    link into the set ("eavesdropper") also carries a member's message to another member.
    """
    A = set(attackers)
    into = {u for u, v in edges if v in A} | {v for u, v in edges if u in A}
    return sorted(into - A) if observer == "node" else sorted(into)


# ----------------------------------------------------------------------------- the view
def _view(W, T, senders, *, noise_std, feedback=None):
    """(F_g, F_z): maps from all gradients / noises to the messages of ``senders``.

    Columns t·n + u (input of node u at step t), rows t·|senders| + i. With ``feedback`` c,
    node u's gradient is g_t^u + c_u θ_t^u (its model enters its gradient); g is then the
    exogenous part, and the maps are still linear.
    """
    n = W.shape[0]
    c = np.zeros(n) if feedback is None else np.asarray(feedback, dtype=float)

    def run(g, z):
        theta, out = np.zeros(n), []
        for t in range(T):
            half = theta - ETA * (g[t] + c * theta + noise_std * z[t])
            out.append(half[senders])
            theta = W @ half
        return np.concatenate(out)

    zero = np.zeros((T, n))
    units = np.eye(n * T).reshape(n * T, T, n)
    Fg = np.stack([run(e, zero) for e in units], axis=1)
    Fz = np.stack([run(zero, e) for e in units], axis=1)
    return Fg, Fz


def _victim_gram(Fg, Fz, *, n, T, victim, known=()):
    """X = F_vᵀ Σ⁻¹ F_v with Σ from the noise of every node outside ``known``."""
    F_v = Fg[:, [t * n + victim for t in range(T)]]
    F_u = Fz[:, [t * n + u for t in range(T) for u in range(n) if u not in known]]
    return F_v.T @ np.linalg.solve(F_u @ F_u.T, F_v)


def _thm7_mu(X):
    """sqrt(Σ|X|): Thm 7's bound for the (T, 1) pattern, exact when X >= 0."""
    return math.sqrt(np.abs(X).sum())


def _corner_mu(X):
    """max over d ∈ {±1}^T of sqrt(dᵀXd): exact for scalar models, a lower bound for vectors."""
    signs = np.array(list(itertools.product((1, -1), repeat=X.shape[0])))
    return math.sqrt(np.einsum("ks,st,kt->k", signs, X, signs).max())


def _independent_gram(W, edges, attackers, victim, *, T, sigma, observer, feedback=None):
    """Victim X of the attacker view written from the update equations (module docstring)."""
    n = W.shape[0]
    nu = sigma * math.sqrt(T)  # ν = σ · sens_LDP · Δ, sens_LDP = √T, Δ = 1
    known = tuple(attackers) if observer == "node" else ()
    Fg, Fz = _view(W, T, _senders(edges, attackers, observer), noise_std=nu, feedback=feedback)
    return _victim_gram(Fg, Fz, n=n, T=T, victim=victim, known=known)


def _accountant(W, edges, attackers, *, T, sigma, observer, method="auto"):
    s = pndp.PNDPSetting(W, np.eye(T), Participation(T, 1), sigma, np.asarray(edges))
    return pndp.pndp_guarantees(s, attackers=attackers, observer=observer, method=method)


@dataclass(frozen=True)
class Case:
    name: str
    n: int
    edges: list
    attackers: list
    far: int  # a victim at distance >= 2, where X >= 0 (exact bound)
    T: int
    sigma: float

    @property
    def W(self):
        return _metropolis_hastings(self.n, self.edges)


CASES = [
    Case("ring8", 8, _ring(8), [0, 1], far=4, T=4, sigma=1.0),
    Case("ring6", 6, _ring(6), [0, 1], far=3, T=3, sigma=0.7),
    Case("path6", 6, _path(6), [2, 3], far=0, T=4, sigma=1.0),
]


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("method", ["statespace", "dense"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eavesdropper_sees_links_between_members(case, method):
    # the tap's view includes what members send each other (0 → 1 is a link into 1); tolerance
    # 1e-9 relative: both sides are exact linear algebra on matrices of size <= 32
    c = case
    res = _accountant(
        c.W, c.edges, c.attackers, T=c.T, sigma=c.sigma, observer="eavesdropper", method=method
    )
    for v, mu in zip(res.victim, res.mu, strict=True):
        X = _independent_gram(
            c.W, c.edges, c.attackers, int(v), T=c.T, sigma=c.sigma, observer="eavesdropper"
        )
        assert mu == pytest.approx(min(_thm7_mu(X), 1 / c.sigma), rel=1e-9)
    X = _independent_gram(
        c.W, c.edges, c.attackers, c.far, T=c.T, sigma=c.sigma, observer="eavesdropper"
    )
    assert X.min() >= -1e-12 and _corner_mu(X) == pytest.approx(_thm7_mu(X), rel=1e-9)  # exact
    # the view without the members' messages (senders outside the set only, all noise
    # unknown) is strictly less informative: the optimistic number the tap must not get
    outside = _senders(c.edges, c.attackers, "node")
    Fg, Fz = _view(c.W, c.T, outside, noise_std=c.sigma * math.sqrt(c.T))
    assert _thm7_mu(_victim_gram(Fg, Fz, n=c.n, T=c.T, victim=c.far)) < _thm7_mu(X) - 1e-3


@pytest.mark.parametrize("observer", pndp.OBSERVERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_view_matrices_are_the_observed_messages(case, observer):
    # view_matrices' first rows are P W_T (gradients) and P W_T C⁻¹ (noise), C = I: the
    # observed messages per unit of −η g and of −η ν z, senders sorted within each step;
    # curious nodes' gradient columns are zeroed (Lemma 11: they know their own gradients)
    c = case
    A_, B, _ = pndp.view_matrices(
        c.W, attackers=c.attackers, strategy=np.eye(c.T), edges=c.edges, observer=observer
    )
    Fg, Fz = _view(c.W, c.T, _senders(c.edges, c.attackers, observer), noise_std=1.0)
    if observer == "node":
        Fg[:, [t * c.n + a for t in range(c.T) for a in c.attackers]] = 0.0
    np.testing.assert_allclose(A_[: len(Fg)], -Fg / ETA, atol=1e-12)
    np.testing.assert_allclose(B[: len(Fz)], -Fz / ETA, atol=1e-12)
    assert len(A_) == len(Fg) + (c.T * len(c.attackers) if observer == "node" else 0)


def test_eavesdropper_ring8_pinned():
    # ring:8, MH weights, 𝒜 = {0, 1}, victim 4, T = 4, σ = 1, (4, 1). μ² computed exactly,
    # in fractions.Fraction, through the same update equations (X >= 0, so μ² = ΣX):
    # 73215310/7266224649 with the members' messages; 5783701/668721040 (μ = 0.0930) without
    # them, which the accountant printed before it kept the links between members
    want = math.sqrt(73215310 / 7266224649)  # 0.100380
    W = _metropolis_hastings(8, _ring(8))
    X = _independent_gram(W, _ring(8), [0, 1], 4, T=4, sigma=1.0, observer="eavesdropper")
    assert _thm7_mu(X) == pytest.approx(want, rel=1e-12)
    res = _accountant(W, _ring(8), [0, 1], T=4, sigma=1.0, observer="eavesdropper")
    assert res.mu[res.victim == 4][0] == pytest.approx(want, rel=1e-9)
    outside = _senders(_ring(8), [0, 1], "node")
    Fg, Fz = _view(W, 4, outside, noise_std=2.0)
    dropped = _thm7_mu(_victim_gram(Fg, Fz, n=8, T=4, victim=4))
    assert dropped == pytest.approx(math.sqrt(5783701 / 668721040), rel=1e-12)


@pytest.mark.parametrize("method", ["statespace", "dense"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_curious_nodes_match_the_update_equations(case, method):
    # App. A.2 (non-adaptive): received messages plus the members' own gradients and noise
    c = case
    res = _accountant(
        c.W, c.edges, c.attackers, T=c.T, sigma=c.sigma, observer="node", method=method
    )
    for v, mu in zip(res.victim, res.mu, strict=True):
        X = _independent_gram(
            c.W, c.edges, c.attackers, int(v), T=c.T, sigma=c.sigma, observer="node"
        )
        assert mu == pytest.approx(min(_thm7_mu(X), 1 / c.sigma), rel=1e-9)


def test_full_view_is_the_ldp_guarantee():
    # every message seen: X = I_T for any victim, so sens² = T and μ = 1/σ (the calibration)
    W = _metropolis_hastings(3, _path(3))
    Fg, Fz = _view(W, 3, [0, 1, 2], noise_std=2.0 * math.sqrt(3))
    X = _victim_gram(Fg, Fz, n=3, T=3, victim=2)
    np.testing.assert_allclose(X, np.eye(3) / (4.0 * 3), atol=1e-12)  # ν² = σ² T, σ = 2


# Adaptive training: path 0–1–2 (MH weights), curious node 0, victim 2, T = 3, σ = 1, (3, 1).
# Node 1's gradient is c·θ_t^1 (a linear model, unclipped): it carries θ_{t−½}^2, which node 0
# never receives, into node 1's messages. μ² computed exactly, in fractions.Fraction, through
# the same update equations (X >= 0 in both, so μ² = ΣX):
PATH_T, PATH_SIGMA = 3, 1.0
PINNED_NON_ADAPTIVE = math.sqrt(3 / 26)  # c = 0: 0.339683, the accountant's PNDP μ
PINNED_ADAPTIVE = math.sqrt(13 / 30)  # ηc = −2: 0.658281; numerically → √((T−1)/T) as ηc → −∞


def _path_gram(eta_c):
    W = _metropolis_hastings(3, _path(3))
    feedback = [0.0, eta_c / ETA, 0.0]
    return _independent_gram(
        W, _path(3), [0], 2, T=PATH_T, sigma=PATH_SIGMA, observer="node", feedback=feedback
    )


def test_adaptive_hidden_node_exceeds_the_printed_pndp_mu():
    W = _metropolis_hastings(3, _path(3))
    res = _accountant(W, _path(3), [0], T=PATH_T, sigma=PATH_SIGMA, observer="node")
    printed = res.mu[res.victim == 2][0]
    assert res.model == "non-adaptive"  # the label this test shows to be needed
    X0 = _path_gram(0.0)
    assert printed == pytest.approx(_thm7_mu(X0), rel=1e-9)
    assert printed == pytest.approx(PINNED_NON_ADAPTIVE, rel=1e-12)
    X = _path_gram(-2.0)
    assert X.min() >= -1e-12 and _corner_mu(X) == pytest.approx(_thm7_mu(X), rel=1e-9)
    assert _corner_mu(X) == pytest.approx(PINNED_ADAPTIVE, rel=1e-12)
    assert _corner_mu(X) > 1.9 * printed  # a real training run leaks more than printed
    assert res.ldp_mu == 1 / PATH_SIGMA


@pytest.mark.parametrize("eta_c", [-10.0, -5.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 5.0, 10.0])
def test_adaptive_hidden_node_stays_within_ldp(eta_c):
    # Thm 7's bound Σ|X| (an upper bound on the scalar and vector μ alike) never passes LDP's
    # 1/σ; and the all-messages view with the same feedback is exactly 1/σ (adaptive LDP)
    assert _thm7_mu(_path_gram(eta_c)) <= 1 / PATH_SIGMA + 1e-12
    W = _metropolis_hastings(3, _path(3))
    Fg, Fz = _view(
        W, PATH_T, [0, 1, 2], noise_std=PATH_SIGMA * math.sqrt(PATH_T), feedback=[0, eta_c / ETA, 0]
    )
    X = _victim_gram(Fg, Fz, n=3, T=PATH_T, victim=2)
    assert _thm7_mu(X) == pytest.approx(1 / PATH_SIGMA, rel=1e-9)


def test_cli_states_the_non_adaptive_model_beside_ldp(tmp_path, capsys):
    plan = str(tmp_path / "r8.plan")
    argv = ["plan", "sgd", plan, "--topology", "ring:8", "--steps", "4", "--participation", "4,1"]
    argv += ["--mechanism", "dp-dsgd", "--noise-multiplier", "1"]
    assert cli.main([*argv, "--weighting", "metropolis-hastings"]) == 0
    capsys.readouterr()
    account = ["account", plan, "--trust", "pndp", "--attacker", "0,1"]
    account += ["--observer", "eavesdropper"]
    assert cli.main(account) == 0
    text = capsys.readouterr().out
    assert "links between members included" in text
    assert "non-adaptive" in text and "not certified for adaptive training" in text
    assert "ldp_mu=1, ldp_eps=" in text and "LDP, certified for adaptive training" in text
    assert cli.main([*account, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "non-adaptive" and d["ldp_model"] == "adaptive"
    assert "not certified for adaptive training" in d["assumption"]
    assert d["ldp_mu"] == 1.0 and d["ldp_epsilon"] > max(p["epsilon"] for p in d["pairs"])
    far = next(p for p in d["pairs"] if p["victim"] == 4)
    W = _metropolis_hastings(8, _ring(8))
    X = _independent_gram(W, _ring(8), [0, 1], 4, T=4, sigma=1.0, observer="eavesdropper")
    assert far["mu"] == pytest.approx(_thm7_mu(X), rel=1e-9)
