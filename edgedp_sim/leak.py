"""Leakage runs: Monte Carlo trials with adversary probes, scored by M-NMI and reconstruction.

:func:`run` takes a scenario and attackers, runs ``trials`` noise draws — the batch engine
in chunks of trials, or the event engine one trial at a time (the plan's keys of that trial) when
the scenario has network effects (latency, loss, dropouts, crashes, churn) — with one
:class:`~edgedp_sim.adversary.Probe` per attacker and a
:class:`~edgedp_sim.adversary.GroundTruth` on the victim, then per attacker:

* what it computes about the victim's private value 𝒱(k) (its mean clipped gradient):
  :func:`estimates` picks the algorithm's own attack (paper 004 Eq. 44 for sr-gt, the
  update inversion for the D-SGD family, Whisper and DECOR minus the secrets the attacker
  holds, Zip-DL's cancelling weighted sum) and, when the attacker does not see enough
  messages for it, the generic linear-Gaussian estimator (GLS on O_A = AG + BZ) for
  D-SGD-family plans and for Whisper/DECOR (under their cross-agent noise covariance; up to
  :data:`MAX_LINEAR_UNKNOWNS` unknown gradients), or
  just the victim's messages it saw;
  encrypted links leave sizes and timing only;
* the per-iteration NMI and M-NMI (paper 004 Eq. 43; KSG with k = 3, NPEET-exact), with
  N, k and the iterations where 𝒱 barely varies across trials;
* MSE and cosine similarity of the point estimate (when the attack yields one).

Each result carries the plan's formal guarantee and trust model, and whether that
guarantee covers the attacker.
"""

# ruff: noqa: N803, N806

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgedp import models
from edgedp_sim import (
    attacks,
    initial,
    leak_blocks,
    leak_coverage,
    leak_trials,
    leakage,
    probing,
    shards,
)
from edgedp_sim.adversary import Attacker
from edgedp_sim.leak_trials import MAX_LINEAR_UNKNOWNS, estimates

__all__ = [
    "MAX_LINEAR_UNKNOWNS",
    "MIN_TRIALS_PER_DIMENSION",
    "estimates",
    "run",
    "sample_warnings",
]

#: Trials per dimension of (V, ℐ) below which an M-NMI is flagged: k-NN (KSG) estimates are
#: biased towards 0 when the samples are few for the joint dimension (a rule of thumb, not a
#: bound; ``experiments/ksg_vs_gaussian.py`` compares KSG with the exact Gaussian MI).
MIN_TRIALS_PER_DIMENSION = 10


def sample_warnings(entry: dict[str, Any], *, trials: int, dim: int) -> list[str]:
    """Why an attacker's M-NMI may mislead: too few trials for the dimension, negative
    estimates clipped to 0, or M-NMI near 0 next to a reconstruction that works.

    >>> sample_warnings({"information_dim": 6, "negative_iterations": [], "m_nmi": 0.4,
    ...                  "cosine": 0.9}, trials=200, dim=3)
    []
    >>> len(sample_warnings({"information_dim": 65, "negative_iterations": [2, 5],
    ...                      "m_nmi": 0.0, "cosine": 0.32}, trials=45, dim=65))
    3
    """
    out = []
    joint = dim + entry["information_dim"]
    if trials < MIN_TRIALS_PER_DIMENSION * joint:
        out.append(
            f"N = {trials} trials for a {dim}+{entry['information_dim']}-dimensional MI "
            f"estimate (fewer than {MIN_TRIALS_PER_DIMENSION * joint}): k-NN estimates are "
            "biased towards 0, a low M-NMI is no evidence of low leakage; use more trials"
        )
    if entry["negative_iterations"]:
        out.append(
            f"{len(entry['negative_iterations'])} iteration(s) had a negative NMI estimate "
            "(estimator bias; mutual information is >= 0): shown as 0"
        )
    m_nmi, cosine = entry.get("m_nmi"), entry.get("cosine")
    if m_nmi is not None and cosine is not None and m_nmi < 0.05 and abs(cosine) >= 0.3:
        out.append(
            f"M-NMI {m_nmi:.3f} but reconstruction cosine {cosine:.2f}: the attacker "
            "recovers the gradient's direction that the MI estimate misses"
        )
    return out


def _zscore(a: np.ndarray) -> np.ndarray:
    """Each coordinate centred and scaled to unit std across trials (axis 0), per iteration;
    constant coordinates are only centred."""
    sd = a.std(axis=0, keepdims=True)
    return (a - a.mean(axis=0, keepdims=True)) / np.where(sd > 0, sd, 1.0)


class _Scorer:
    """The MI and reconstruction scores of one leakage run, attacker by attacker.

    Holds what the attackers share: the victim's values V, the KSG generator (one stream,
    drawn attacker after attacker in order), the reference self-MI and the k-NN memo of
    attackers with equal information sets (paper 004 Table 4: the eavesdropper's Eq. 44 set
    is the colluders'); :meth:`score` is one attacker's report entry.
    """

    def __init__(self, V_full, seen_full, *, plan, dim, coordinate, k, seed, workers, delta):
        self.plan, self.dim, self.coordinate = plan, dim, coordinate
        self.k, self.workers, self.delta = k, workers, delta
        self.V_full = V_full
        self.V = V_full if coordinate is None else V_full[..., [coordinate]]
        self.valid_v = np.isfinite(self.V).all(axis=(0, 2))
        self.seen = [self.pick(a) for a in seen_full]
        # (trials, T): the trials in which the attacker observed what its estimate of round
        # t needs (on lossy networks a lost or late message leaves the rounds that need it out)
        finite_v = np.isfinite(self.V).all(axis=2)
        self.observed = [finite_v & np.isfinite(a).all(axis=2) for a in self.seen]
        self.varies = leak_coverage.varying(self.V)
        # equal information sets share the k-NN of their joints: one tree per joint
        n = len(self.seen)
        self.repeated = [
            any(i != j and np.array_equal(self.seen[i], self.seen[j]) for j in range(n))
            for i in range(n)
        ]
        self.knn_memo: dict = {}
        self.g = np.random.default_rng(seed)
        self.self_mi: tuple | None = None
        self.self_mi_std: tuple | None = None

    def pick(self, a: np.ndarray) -> np.ndarray:
        """The coordinate's entries of each d-block (all of ``a`` without a coordinate)."""
        if self.coordinate is None or a.shape[-1] % self.dim:
            return a
        return a[..., self.coordinate :: self.dim]

    def _curve(self, V, seen, **kw):
        return leakage.leakage_curve(V, seen, rng=self.g, k=self.k, workers=self.workers, **kw)

    def score(self, i, att, estimator, points, standardized, point_curve, *, progress):
        """Attacker ``i``'s entry: its NMI curve and M-NMI, the standardized and point-estimate
        curves when asked, MSE and cosine of its point estimate, and the formal guarantee."""
        t0 = time.perf_counter()
        V, seen, fin, k = self.V, self.seen[i], self.observed[i], self.k
        ok = self.valid_v & np.isfinite(seen).all(axis=(0, 2))
        its = np.flatnonzero(ok)
        counts = fin.sum(axis=0)
        enough = counts > 2 * k + 1
        # iterations where some trials lack a value (the event engine's dropouts and lost
        # messages): estimated alone on the trials that have one, N_k reported
        partial = np.flatnonzero(~ok & enough)
        estimated = len(its) + len(partial)
        if progress is not None:
            said = leak_coverage.coverage(estimated, counts, its, partial)
            progress(f"{att.label}: KSG estimates {said}")
        cached = self.self_mi is not None and np.array_equal(its, self.self_mi[0])
        part = self._curve(
            V[:, its].swapaxes(0, 1),
            seen[:, its].swapaxes(0, 1),
            self_mi=self.self_mi[1] if cached else None,
            knn_memo=self.knn_memo if self.repeated[i] else None,
        )
        if not cached:
            self.self_mi = (its, part.self_mi)
        extra = self._standardized(V, seen, its) if standardized else {}
        nmi = np.full(self.plan.steps, np.nan)
        nmi[its] = part.nmi
        low = set(its[part.degenerate].tolist())
        for t in partial:
            m = fin[:, t]
            c = self._curve(V[m, t][None], seen[m, t][None])
            nmi[t] = c.nmi[0]
            if c.degenerate[0]:
                low.add(int(t))
        with np.errstate(invalid="ignore"):
            negative = np.flatnonzero(nmi < 0)  # estimator bias: the MI itself is >= 0
        nmi[negative] = 0.0
        best = int(np.nanargmax(nmi)) if np.isfinite(nmi).any() else None
        entry: dict[str, Any] = {
            "attacker": att.label,
            "estimator": estimator,
            "m_nmi": None if best is None else float(nmi[best]),
            "argmax_iteration": best,
            "observed_iterations": estimated,
            "n_trials_per_iteration": [int(x) for x in counts],
            "n_trials": int(V.shape[0]),
            "k_neighbors": k,
            "reference_self_mi_bits": part.reference_self_mi,
            "nmi_curve": leakage.json_floats(nmi),
            "low_variance_iterations": sorted(low),
            "skipped_iterations": [int(x) for x in np.flatnonzero(~ok & ~enough)],
            "information_dim": int(seen.shape[-1]),
            **extra,
            "mi_seconds": round(time.perf_counter() - t0, 3),
            **probing.formal_guarantee(self.plan, att, delta=self.delta),
        }
        if points and all(p is not None for p in points):
            entry.update(self._point(np.concatenate(points), point_curve))
        else:
            entry.update(mse=None, cosine=None)
        entry["negative_iterations"] = [int(t) for t in negative]
        used = int(counts[enough].min()) if enough.any() else 0
        entry["warnings"] = sample_warnings(entry, trials=used, dim=int(V.shape[-1]))
        return entry

    def _standardized(self, V, seen, its) -> dict[str, Any]:
        """The NMI on z-scored samples (``standardized``: :func:`run`'s argument)."""
        vz, iz = _zscore(V[:, its]), _zscore(seen[:, its])
        cached = self.self_mi_std is not None and np.array_equal(its, self.self_mi_std[0])
        curve = self._curve(
            vz.swapaxes(0, 1),
            iz.swapaxes(0, 1),
            self_mi=self.self_mi_std[1] if cached else None,
        )
        if not cached:
            self.self_mi_std = (its, curve.self_mi)
        values = np.full(self.plan.steps, np.nan)
        values[its] = curve.nmi
        return {
            "m_nmi_standardized": None if math.isnan(curve.m_nmi) else curve.m_nmi,
            "nmi_curve_standardized": leakage.json_floats(values),
        }

    def _point(self, P_full, point_curve: bool) -> dict[str, Any]:
        """MSE and cosine of the point estimate, pooled over the (trial, iteration) pairs
        that have both; with ``point_curve`` its own NMI curve too."""
        out: dict[str, Any] = {}
        V_full = self.V_full
        keep = np.isfinite(P_full).all(axis=(0, 2)) & self.valid_v
        pairs = np.isfinite(P_full).all(axis=2) & np.isfinite(V_full).all(axis=2)
        if pairs.any():
            rec = attacks.reconstruction_error(P_full[pairs][:, None], V_full[pairs][:, None])
            out.update(mse=rec.mse_mean, cosine=rec.cosine_mean)
        else:
            out.update(mse=None, cosine=None)
        if not point_curve:
            return out
        P = self.pick(P_full)
        its_p = np.flatnonzero(keep)
        pos = {int(t): j for j, t in enumerate(self.self_mi[0])}
        given = (
            np.array([self.self_mi[1][pos[int(t)]] for t in its_p])
            if all(int(t) in pos for t in its_p)
            else None
        )
        pc = self._curve(self.V[:, its_p].swapaxes(0, 1), P[:, its_p].swapaxes(0, 1), self_mi=given)
        curve = np.full(self.plan.steps, np.nan)
        curve[its_p] = pc.nmi
        out["m_nmi_point"] = None if math.isnan(pc.m_nmi) else pc.m_nmi
        out["nmi_curve_point"] = leakage.json_floats(curve)
        return out


def _score_all(plan, attackers, parts, *, dim, standardized, point_curve, progress, **scores):
    """(V, one report entry per attacker) from what the engine observed (``parts``)."""
    truth_parts, info, point, names, _ = parts
    scorer = _Scorer(
        np.concatenate(truth_parts),  # (trials, T, d)
        [np.concatenate(info[i]) for i in range(len(attackers))],
        plan=plan,
        dim=dim,
        **scores,
    )
    for att, fin in zip(attackers, scorer.observed, strict=True):
        leak_coverage.check_enough(att.label, fin, scorer.varies, scores["k"])
    results = []
    for i, att in enumerate(attackers):
        entry = scorer.score(
            i, att, names[i], point[i], standardized, point_curve, progress=progress
        )
        results.append(entry)
        if progress is not None:
            progress(f"{att.label}: M-NMI {entry['m_nmi']} ({entry['mi_seconds']:.1f} s of MI)")
    return scorer.V, results


def run(
    sc,
    attackers: Sequence[Attacker],
    *,
    trials: int,
    victim: int = 0,
    engine_name: str = "auto",
    chunk: int = 500,
    k: int = leakage.DEFAULT_NEIGHBORS,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
    point_curve: bool = False,
    coordinate: int | None = None,
    standardized: bool = False,
    data: Any = None,
    audit_trials: int = 0,
    audit_confidence: float = 0.95,
    initial_state: str | None = None,
    final: Callable[[np.ndarray, int], np.ndarray] | None = None,
    delta: float | None = None,
    client: Any = None,
    block_trials: int | None = None,
    block_progress: Callable | None = None,
) -> dict[str, Any]:
    """Leakage of ``sc``'s victim to each attacker; a JSON-ready report (module docstring).

    Args:
      sc: a :class:`~edgedp_sim.scenarios.Scenario`.
      attackers: who attacks (:func:`edgedp_sim.adversary.parse_attacker`).
      trials: Monte Carlo trials N (the MI is estimated over them, per iteration).
      victim: the node whose private gradients are targeted.
      engine_name: ``"auto"`` (event engine iff the scenario has network effects),
        ``"batch"`` or ``"event"``.
      chunk: trials per batch-engine call (memory).
      k: KSG neighbours.
      seed: the generator of the KSG tie noise.
      workers: threads for the k-NN queries.
      progress: called with a line of text now and then.
      point_curve: also score the point estimate alone as the information set
        (``m_nmi_point``, ``nmi_curve_point``; paper 004's sets for sr-gt have three parts).
      coordinate: estimate the MI on this coordinate of the gradient only (and the matching
        coordinates of the information set); None: the whole vectors (KSG in d dimensions).
      standardized: also estimate every NMI on z-scored samples (each coordinate of V and
        of ℐ centred and scaled to unit std across trials, per iteration):
        ``m_nmi_standardized``, ``nmi_curve_standardized``. Mutual information is invariant
        to such rescaling, the KSG estimate (max norm, no standardization in NPEET) is not:
        components of very different scale in ℐ hide the dependence from it.
      data: the engines' data instead of ``sc.data()`` — e.g. a
        :class:`~edgedp_sim.datasets.PerTrialData` with a fresh private dataset in every trial.
      audit_trials: also audit every attacker with this many trials (:func:`edgedp_sim.audit.run`,
        gradient canary) and report ``epsilon_lb`` beside M-NMI and the formal ε; 0: no audit.
      audit_confidence: the confidence of ``epsilon_lb``.
      initial_state: ``"model"`` or ``"normal[:STD]"``: x_i(0) ~ N(0, STD² I) per node and
        trial (:mod:`edgedp_sim.initial`; paper 004's Table 4 setup); default the scenario's. The
        attackers are granted x(0) (the DP definition quantifies over every initial state).
      final: ``final(models, first_trial) -> (trials,)`` of each chunk's final models
        ``(trials, nodes, d)`` (e.g. paper 004's residual ‖x(K) − 1x*ᵀ‖²), summarized as
        ``final_mean`` / ``final_std`` (batch engine).
      delta: δ of each attacker's certified ε (and of the audit's ε_lb); default the plan's.
      client: a Dask client (:func:`edgedp_sim.shards.connect`): the trials (and the audit's)
        run there in keyed blocks of ``block_trials`` (default about four per worker,
        :mod:`edgedp_sim.leak_blocks`); the MI is estimated here on the merged trials, so the
        report is this process's bit for bit, plus ``blocks``, ``workers`` and
        ``peak_worker_mb``. ``final`` travels to the workers (a module-level function).
        ``block_trials`` without a client runs the same blocks here, one after the other.
      block_progress: called with (trials done, trials, BlockInfo) after each block.

    Each iteration's NMI uses the trials in which the attacker observed what its estimate
    of that round needs (``n_trials_per_iteration``; all of them on an ideal network);
    ValueError (before any MI) when no iteration of some attacker has more than 2k + 1.
    ``cost`` holds the run's seconds (simulation, per trial, MI, audit, total) and the
    process's peak memory.
    """
    plan = sc.plan
    delta = _check_arguments(plan, delta, victim=victim, trials=trials, k=k)
    engine_name = probing.engine_for(sc, engine_name)
    if data is not None and (client is not None or block_trials is not None):
        raise ValueError("data cannot be shipped to workers: give it in the scenario instead.")
    data = sc.data() if data is None else data
    if engine_name == "event" and data.x.ndim == 4:
        raise ValueError("Per-trial data runs on the batch engine only.")
    model = models.for_task(plan.task, data.features)
    dim = model.dim
    started = time.perf_counter()
    initial_state = sc.initial_state if initial_state is None else initial_state
    initial.parse(initial_state)  # a bad spec fails before any work
    common = dict(
        victim=victim,
        progress=progress,
        data=data,
        dim=dim,
        theta0=model.init_params(),
        initial_state=initial_state,
        final=final,
    )
    if client is not None or block_trials is not None:
        parts, blocks = leak_blocks.observe(
            client,
            sc,
            attackers,
            trials=trials,
            engine_name=engine_name,
            chunk=chunk,
            victim=victim,
            initial_state=initial_state,
            final=final,
            block_trials=block_trials,
            progress=block_progress,
        )
    else:
        parts, blocks = _observe_here(sc, attackers, engine_name, trials, chunk, common), None
    finals = parts[-1]
    sim_seconds = time.perf_counter() - started
    scores = dict(coordinate=coordinate, k=k, seed=seed, workers=workers, delta=delta)
    curves = dict(standardized=standardized, point_curve=point_curve, progress=progress)
    V, results = _score_all(plan, attackers, parts, dim=dim, **curves, **scores)
    out = {
        "scenario": sc.name,
        "mechanism": plan.mechanism,
        "engine": engine_name,
        "victim": victim,
        "n_trials": int(V.shape[0]),
        "k_neighbors": k,
        "iterations": plan.steps,
        "coordinate": coordinate,
        "initial_state": initial_state,
        "simulation_seconds": round(sim_seconds, 3),
        "attackers": results,
    }
    if finals:
        values = np.concatenate(finals)
        out.update(final_mean=float(values.mean()), final_std=float(values.std()))
    if audit_trials:
        audit = dict(trials=audit_trials, confidence=audit_confidence, delta=delta)
        cluster = dict(client=client, block_trials=block_trials, block_progress=block_progress)
        where = dict(victim=victim, engine_name=engine_name, progress=progress)
        _audit_beside(out, sc, attackers, **where, **audit, **cluster)
    if blocks is not None:
        out.update(shards.where(blocks))
    out["cost"] = _cost(out, started=started, sim_seconds=sim_seconds, trials=trials)
    return out


def _check_arguments(plan, delta: float | None, *, victim: int, trials: int, k: int) -> float:
    """Refuse what :func:`run` cannot estimate; the δ of the report (default the plan's)."""
    delta = plan.delta if delta is None else delta
    if not 0 < delta < 1:
        raise ValueError(f"Expected delta={delta!r} in (0, 1).")
    if not 0 <= victim < plan.n:
        raise ValueError(f"victim={victim} is not a node of the {plan.n}-node scenario.")
    if trials <= k:
        raise ValueError(f"Expected trials={trials} > k={k} for the MI estimates.")
    return delta


def _observe_here(sc, attackers, engine_name: str, trials: int, chunk: int, common) -> tuple:
    """The trials in this process: the batch engine in chunks, or the event engine."""
    if engine_name == "batch":
        return leak_trials.observe_batch(sc, attackers, trials=trials, chunk=chunk, **common)
    return leak_trials.observe_event(sc, attackers, trials=trials, **common)


def _cost(out, *, started: float, sim_seconds: float, trials: int) -> dict[str, Any]:
    """The run's seconds (simulation, per trial, MI, audit, total) and peak memory."""
    total = time.perf_counter() - started
    audit = out["audit"]["seconds"] if "audit" in out else 0.0
    return {
        "total_seconds": round(total, 3),
        "simulation_seconds": round(sim_seconds, 3),
        "seconds_per_trial": round(sim_seconds / trials, 4),
        "mi_seconds": round(total - sim_seconds - audit, 3),
        "audit_seconds": round(audit, 3),
        "peak_memory_mb": round(leak_coverage.peak_memory_mb(), 1),
    }


#: What :func:`run` copies from the audit of each attacker into its entry (prefix ``audit_``
#: except ``epsilon_lb``).
_AUDIT_KEYS = (
    "epsilon_lb",
    "confidence",
    "test",
    "mu_lb",
    "mu_hat",
    "mu_low",
    "mu_high",
    "mu_view",
    "epsilon_view",
    "ratio",
    "violation",
)


def _audit_beside(out, sc, attackers, *, trials, victim, engine_name, confidence, progress, delta,
                  client, block_trials, block_progress):  # fmt: skip
    """The audit of every attacker (gradient canary) next to its M-NMI and formal ε (on
    ``client`` when given)."""
    from edgedp_sim import audit

    rep = audit.run(
        sc,
        attackers,
        trials=trials,
        victim=victim,
        engine_name=engine_name,
        confidence=confidence,
        delta=delta,
        progress=progress,
        client=client,
        block_trials=block_trials,
        block_progress=block_progress,
    )
    for entry, a in zip(out["attackers"], rep["attackers"], strict=True):
        for key in _AUDIT_KEYS:
            if key in a:
                entry[key if key == "epsilon_lb" else f"audit_{key}"] = a[key]
        entry["audit_trials"] = rep["n_trials"]
    out["audit"] = {
        k: rep[k] for k in ("canary", "background", "n_trials", "confidence", "method", "seconds")
    }
