"""The audit's test statistic per attacker: the strongest test its view allows.

For a canary planted on node U (:mod:`edgedp_sim.canary`), the attacker's observations are
O = o₀ + R_g(g + canary) + R_s s with the sources s it cannot regenerate (:mod:`edgedp_sim.
linear_view`). With the zero background every other gradient is known (zero), so for a
Gaussian mechanism the two worlds are N(m₀, Σ) and N(m₀ + Δm, Σ), Σ = R_s Var(s) R_sᵀ over
the sources the attacker does not hold, Δm = R_g·shift — and the Neyman–Pearson test is the
likelihood ratio

    S = Δmᵀ Σ⁺ (O − m₀) − ½ Δmᵀ Σ⁺ Δm,       S ~ N(∓μ²/2, μ²),   μ² = Δmᵀ Σ⁺ Δm,

the canary direction whitened by the noise covariance the attacker cannot remove (temporal
factor, cross-agent covariance minus its secrets, mixing). μ is the exact GDP parameter of
that view (``mu_view``); a component of Δm outside the range of Σ (a noiseless direction
carrying the canary) gives μ = ∞ and the statistic is that component.

Laplace mechanisms (sr-gt, DPOP): an attacker that sees the victim's whole mixing row
inverts the update (paper 004 Eq. 44, :func:`edgedp_sim.attacks.sr_gt_estimate`) to
v_t = ∇f_U(z_U(t)) − ξ_U(t+1)/α_t, whose conditional law given the past is Laplace around the
gradient; the test is the exact Laplace log-likelihood ratio
S = Σ_t Σ_j (|v_tj − a⁰_tj| − |v_tj − a¹_tj|)·α_t/ν_{t+1}, bounded by ``epsilon_view``. Other
Laplace views use the linear statistic with the Laplace variances (valid, not optimal).

With the data background, other gradients are not subtracted (nuisance): the statistic is
the same and remains a valid test, only weaker. An encrypted tap has no statistic (its
observations do not depend on the data): S = 0.
"""

# Paper letters (R, O, T) inside; see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgedp import clipping, mechanisms
from edgedp_sim import attacks, linear_view
from edgedp_sim.adversary import Attacker, ObservationLog

__all__ = ["View", "build"]

_RANK_TOL = 1e-10


@dataclass(frozen=True, slots=True, eq=False)
class View:
    """One attacker's test: how to turn an :class:`ObservationLog` into S per trial."""

    attacker: Attacker
    method: str
    senders: tuple[int, ...]
    links: tuple[tuple[int, int], ...]
    members: tuple[int, ...]
    rows: np.ndarray | None = None  # (R, 3): round, sender/link index, coordinate
    weights: np.ndarray | None = None  # (vd, R)
    const: np.ndarray | None = None  # (R, vd) predicted world-0 mean without known inputs
    known: np.ndarray | None = None  # source indices the attacker regenerates
    known_gain: np.ndarray | None = None  # (R, K, cd)
    member_gain: np.ndarray | None = None  # (R, Tm, cd) members' gradient entries
    member_cols: tuple = ()
    half_mu2: float = 0.0
    mu_view: float | None = None
    epsilon_view: float | None = None
    null: bool = False
    per_slot: bool = False

    @property
    def informative(self) -> bool:
        """The statistic depends on the observations (not an encrypted tap, not blind)."""
        return self.weights is not None or self.epsilon_view is not None


def build(*, attacker, plan, tr: linear_view.Trace, src, canary, theta0: np.ndarray) -> View:
    """The :class:`View` of ``attacker`` auditing ``canary`` on ``plan`` (module docstring)."""
    links, senders, members = attacker.resolve(plan.edges, plan.n)
    if canary.victim in members:
        raise ValueError(f"The victim {canary.victim} cannot be one of the attackers {members}.")
    base = dict(attacker=attacker, senders=senders, links=links, members=members)
    if attacker.encrypted:
        return View(method="none: encrypted links (sizes and timing only)", **base)
    row = {int(v) for v in plan.mixing_index[canary.victim]}
    if plan.laplace is not None and row <= set(senders):
        eps = _laplace_epsilon(plan, canary)
        return View(
            method="Laplace likelihood ratio on the victim's inverted update (exact)",
            epsilon_view=eps,
            **base,
        )
    rows = _rows(tr, plan, senders, links)
    if len(rows) == 0:
        return View(method="none: the attacker sees no message", **base)
    gain = _gains(tr, plan, rows, senders, links)  # (R, I)
    T = tr.steps
    cd = 1 if tr.isotropic else tr.ndim
    gd = 1 if tr.isotropic else tr.gdim
    noise_cols = tr.noise_offset.reshape(-1)  # (E,) scalar noise entries, first coordinate
    Rs = np.stack([gain[:, noise_cols + c] @ src.coef for c in range(cd)], axis=-1)  # (R, S, cd)
    held = linear_view.known(
        src,
        members=members,
        knows_seed=attacker.kind == "hbc"
        and plan.cross_agent is not None
        and mechanisms.get(plan.cross_agent.kind).has("shared_seed"),
    )
    unk = ~held
    Ru = (Rs[:, unk] * np.sqrt(src.var[unk])[None, :, None]).reshape(len(rows), -1)
    Sigma = Ru @ Ru.T
    del Ru  # (the arrays of a whole-network view are large: each is freed once used)
    victim_cols = tr.grad_offset[:, canary.victim]  # (T,)
    Rv = np.stack([gain[:, victim_cols + c] for c in range(gd)], axis=-1)  # (R, T, gd)
    if tr.isotropic:  # per model coordinate j: Δm_j = Σ_t shift[t, j] R_g[:, (t, U)]
        dm = np.einsum("rt,tj->jr", Rv[:, :, 0], canary.shift)  # (vd, R)
        m0 = np.einsum("rt,tj->jr", Rv[:, :, 0], canary.rows0)
        const = np.outer(gain[:, 0], theta0) + m0.T  # (R, vd)
    else:  # DOME (coupled coordinates): a Gaussian zero-out plan, world 0 adds nothing
        if np.any(canary.rows0):
            raise ValueError("A dome audit expects zero-out adjacency (world 0 adds nothing).")
        dm = np.einsum("rtc,tc->r", Rv, canary.shift)[None]
        const = gain[:, :1]
    mem_cols = [(t, u) for t in range(T) for u in members]
    member_gain = None
    if mem_cols and canary.background == "data":
        member_gain = np.stack(
            [
                np.stack([gain[:, tr.grad_offset[t, u] + c] for c in range(gd)], -1)
                for t, u in mem_cols
            ],
            axis=1,
        )
    known_gain = Rs[:, held]
    del gain, Rs, Rv
    w, mu2, null = _whiten(Sigma, dm)
    laplace = plan.laplace is not None
    method = (
        "linear test, Laplace noise approximated by its covariance (valid, not optimal)"
        if laplace
        else "Gaussian likelihood ratio, whitened by the noise the attacker cannot remove"
    )
    if canary.background == "data":
        method += "; other gradients left in as nuisance"
    if canary.kind == "example":
        method += "; template: the canary's gradient at the initial model"
    return View(
        method=method,
        rows=rows,
        weights=w,
        const=const,
        known=np.flatnonzero(held),
        known_gain=known_gain,
        member_gain=member_gain,
        member_cols=tuple(mem_cols),
        half_mu2=0.0 if null else 0.5 * mu2,
        mu_view=None if laplace else (math.inf if null else math.sqrt(mu2)),
        null=null,
        per_slot=tr.per_slot,
        **base,
    )


def _whiten(Sigma: np.ndarray, dm: np.ndarray):
    """(Σ⁺Δm per replicate, Δmᵀ Σ⁺ Δm, noiseless?) — with the null-space component of Δm
    as the statistic when there is one (a perfect test)."""
    lam, V = np.linalg.eigh(Sigma)
    top = float(lam.max()) if lam.size else 0.0
    keep = lam > _RANK_TOL * max(top, 1e-300)
    Vr, Vn = V[:, keep], V[:, ~keep]
    null_part = (dm @ Vn) @ Vn.T
    if np.linalg.norm(null_part) > 1e-8 * max(np.linalg.norm(dm), 1e-300):
        return null_part, float(np.sum(null_part * dm)), True
    w = ((dm @ Vr) / lam[keep]) @ Vr.T
    return w, float(np.sum(w * dm)), False


def _rows(tr, plan, senders, links) -> np.ndarray:
    width = tr.messages[0].shape[-1]
    out = []
    for t in range(tr.steps):
        count = len(links) if tr.per_slot else len(senders)
        for i in range(count):
            for c in range(width):
                out.append((t, i, c))
    return np.array(out, dtype=np.int64).reshape(-1, 3)


def _gains(tr, plan, rows, senders, links) -> np.ndarray:
    """(R, I): the impulse responses of the observed entries (per tapped link for Zip-DL's
    per-recipient messages, per sender otherwise)."""
    out = np.empty((len(rows), tr.impulses))
    if tr.per_slot:
        slot = [int(np.flatnonzero(np.asarray(plan.mixing_index[u]) == v)[0]) for u, v in links]
        for r, (t, i, c) in enumerate(rows):
            out[r] = tr.messages[t][:, links[i][0], slot[i], c]
        return out
    for r, (t, i, c) in enumerate(rows):
        out[r] = tr.messages[t][:, senders[i], c]
    return out


def _laplace_epsilon(plan, canary) -> float:
    """ε of the victim's inverted releases: Σ_t ‖a¹_t − a⁰_t‖₁ α_t / ν_{t+1} (gradient canary)."""
    s = plan.laplace
    B = canary.batch_size
    total = 0.0
    for t in canary.steps:
        if t + 1 < plan.steps:
            total += float(np.abs(canary.shift[t]).sum()) / B * s.stepsize(t) / s.noise_scale(t + 1)
    return total


def statistic(view: View, log: ObservationLog, *, plan, canary, model, src, keys) -> np.ndarray:
    """S for every trial of ``log`` (larger in world 1); ``keys`` one (RunKeys, trial) each."""
    trials = log.sizes.shape[0]
    if view.weights is None and view.epsilon_view is None:
        return np.zeros(trials)
    if view.epsilon_view is not None:
        return _laplace_statistic(log, plan=plan, canary=canary, model=model)
    resid = _observed(view, log, coupled=plan.sketch is not None)  # (n, R, vd), a copy
    vd = view.const.shape[1]
    resid -= view.const  # in place: one (n, R, vd) array (NaN where nothing was seen)
    if view.known.size:
        vals = linear_view.regenerate(plan, src, view.known, keys, dim=_value_dim(view, vd))
        resid -= _apply(view.known_gain, vals, vd)
    if view.member_gain is not None and "gradient" in log.own:
        g = log.own["gradient"] * log.batch_size  # (n, T, members, gd)
        vals = np.stack([g[:, t, log.members.index(u)] for t, u in view.member_cols], axis=1)
        vals = np.where(np.isfinite(vals), vals, 0.0)  # rounds without a gradient (Muffliato)
        resid -= _apply(view.member_gain, vals, vd)
    np.copyto(resid, 0.0, where=~np.isfinite(resid))  # unseen: their expected value
    return np.einsum("nrj,jr->n", resid, view.weights) - view.half_mu2


def _value_dim(view: View, vd: int) -> int:
    return vd if view.known_gain.shape[2] == 1 else view.known_gain.shape[2]


def _apply(gain: np.ndarray, vals: np.ndarray, vd: int) -> np.ndarray:
    """Σ_k gain[r, k, c]·vals[n, k, ·]: isotropic (cd = 1) per coordinate j, else over c."""
    if gain.shape[2] == 1:
        return np.einsum("rk,nkj->nrj", gain[:, :, 0], vals)
    return np.einsum("rkc,nkc->nr", gain, vals)[:, :, None]


def _observed(view: View, log: ObservationLog, coupled: bool) -> np.ndarray:
    """(n, R, vd): the observed entries (NaN where a message was not seen)."""
    t, i, c = view.rows.T
    m = log.link_messages if view.per_slot else log.messages
    if m is None:  # e.g. no Zip-DL message crossed the tapped links
        return np.full((log.sizes.shape[0], len(t), view.const.shape[1]), np.nan)
    if coupled:  # DOME: every coordinate of the k-float message is its own row
        return m[:, t, i, c][:, :, None]
    return m[:, t, i, :]


def _laplace_statistic(log, *, plan, canary, model) -> np.ndarray:
    s = plan.laplace
    u = canary.victim
    point = attacks.algorithm_attack(plan.mechanism).point
    if point is None:
        raise ValueError(f"{plan.mechanism}: its attack gives no point estimate to audit with.")
    v = point(log, victim=u, plan=plan)
    B = canary.batch_size
    a0 = canary.rows0 / B
    a1 = np.broadcast_to(canary.rows1 / B, v.shape)
    if canary.kind == "example":  # its gradient at the observed noisy state z_U(t)
        z = log.sent_by(u)
        g = canary._crafted(model, z.reshape(-1, z.shape[-1])).reshape(z.shape)
        a1 = clipping.clip_l2(g, plan.clip_norm)[0] / B
    total = np.zeros(v.shape[0])
    for t in canary.steps:
        if t + 1 < plan.steps:
            w = s.stepsize(t) / s.noise_scale(t + 1)
            term = np.abs(v[:, t] - a0[t]) - np.abs(v[:, t] - a1[:, t])
            # a round without the victim's next message (dropout, loss) tells nothing here
            total += w * np.sum(np.where(np.isfinite(term), term, 0.0), axis=-1)
    return total
