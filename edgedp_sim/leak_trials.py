"""A leakage run's trials: the engines with the attackers' probes, then each attacker's estimate.

:func:`observe_batch` (the batch engine, in chunks of trials) and :func:`observe_event` (the
event engine, one trial at a time) run trials ``start … start + trials − 1`` with one
:class:`~edgedp_sim.adversary.Probe` per attacker and a
:class:`~edgedp_sim.adversary.GroundTruth` on the victim, and return ``(truth, info, point,
names, finals)``: the victim's private values 𝒱 per chunk, each attacker's information set and
point estimate per chunk (:func:`estimates`), the estimators' names and ``final`` of the final
models. :func:`edgedp_sim.leak.run` calls them in one process and
:mod:`edgedp_sim.leak_blocks` on a cluster's workers; both then score the same rows.
"""

# ruff: noqa: N803, N806

from __future__ import annotations

import time

import numpy as np

from edgedp import mechanisms, runtime
from edgedp_sim import adversary, attacks, batch, engine, initial, linear_attack
from edgedp_sim.adversary import ObservationLog

__all__ = ["MAX_LINEAR_UNKNOWNS", "estimates", "observe_batch", "observe_event"]

#: Largest linear system (T x unknown nodes) the generic estimator solves densely.
MAX_LINEAR_UNKNOWNS = 3000
#: The families whose updates the generic D-SGD linear view models (read when used, so a
#: mechanism registered later is attacked too).
_DSGD_FAMILIES = ("sgd", "mf")


def estimates(
    log: ObservationLog, plan, *, victim: int, theta0, first_trial: int = 0
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """``(information, point estimate or None, estimator name)``, arrays ``(trials, T, ·)``.

    The information set is what the MI is computed on (paper 004's ℐ_j(k)); the point
    estimate of the victim's gradient is what MSE and cosine score. ``theta0`` is the common
    initial model ``(d,)`` or every node's initial state per trial ``(trials, n, d)``.
    """
    if log.messages is None:
        return attacks.traffic_features(log), None, "traffic (encrypted: sizes, timing)"
    mech = plan.mechanism
    initial = np.asarray(theta0, dtype=np.float64)
    theta0 = initial if initial.ndim == 1 else initial[:, victim]  # the victim's x(0)
    if getattr(plan, "sketch", None) is not None:  # DOME: k-float sketches of the model
        seen = log.sent_by(victim) if victim in log.senders else None
        if seen is not None and np.isfinite(seen).any():
            return seen, None, "the victim's sketched messages as seen (no inversion)"
        return attacks.traffic_features(log), None, "traffic only (no message of the victim seen)"
    attack = attacks.algorithm_attack(mech)
    try:
        info, point = attack.estimate(
            log, plan=plan, victim=victim, theta0=theta0, first_trial=first_trial
        )
        return info, point, attack.description
    except ValueError:
        pass  # the attacker does not see enough messages for the algorithm's own attack
    unknowns = plan.steps * (plan.n - len(log.members))
    small = unknowns <= MAX_LINEAR_UNKNOWNS  # dense pseudo-inverses beyond this are too slow
    # the members' own gradients and noise move to the left-hand side (Lemma 11); the event
    # engine's probes see traffic only, not the members' internals
    small = small and (not log.members or "gradient" in log.own)
    dsgd = mechanisms.get(mech).family in _DSGD_FAMILIES
    if small and dsgd and plan.cross_agent is None:
        view = linear_attack.dsgd_linear_view(
            log,
            mixing_matrix=plan.mixing_matrix(),
            learning_rate=plan.learning_rate,
            noise_std=plan.noise_std,
            batch_size=log.batch_size,
            noise_factor=plan.factor.materialize(plan.steps),
        )
        y = linear_attack.dsgd_linear_observations(
            log, view, mixing_matrix=plan.mixing_matrix(), theta0=initial
        )
        point = view.of(linear_attack.solve(view, y, method="gls"), victim)
        return point, point, "generic linear-Gaussian (GLS on O_A = AG + BZ)"
    cross = plan.cross_agent
    correlated = cross is not None and mechanisms.get(cross.kind).has("correlated")
    if small and correlated:
        view = linear_attack.cross_linear_view(log, plan, batch_size=log.batch_size)
        y = linear_attack.cross_linear_observations(
            log, view, plan, theta0=initial, first_trial=first_trial
        )
        point = view.of(linear_attack.solve(view, y, method="gls"), victim)
        return point, point, "generic linear-Gaussian (GLS, cross-agent noise covariance)"
    if victim in log.senders and np.isfinite(log.sent_by(victim)).any():
        return log.sent_by(victim), None, "the victim's messages as seen (no inversion)"
    if log.link_messages is not None:
        mine = [i for i, (u, _) in enumerate(log.links) if u == victim]
        if mine:
            seen = log.link_messages[:, :, mine]
            return seen.reshape(seen.shape[:2] + (-1,)), None, "the victim's messages as seen"
    return attacks.traffic_features(log), None, "traffic only (no message of the victim seen)"


def _chunks(total: int, size: int):
    first = 0
    while first < total:
        yield first, min(size, total - first)
        first += size


def _estimate(probes, plan, victim, theta0, initial_state, trials, info, point, names) -> None:
    """Each probe's information set and point estimate for trials ``(first, count)``,
    appended to ``info``/``point`` (the attackers are granted every node's x(0))."""
    first, count = trials
    keys = runtime.simulation_keys(plan)  # the batch engine's (edgedp.runtime)
    dim = np.shape(theta0)[-1]
    start = initial.states(
        initial_state, keys, nodes=plan.n, dim=dim, trials=count, first_trial=first
    )
    for i, probe in enumerate(probes):
        a, p, names[i] = estimates(
            probe.log,
            plan,
            victim=victim,
            theta0=theta0 if start is None else start,
            first_trial=first,
        )
        info[i].append(a)
        point[i].append(p)


def observe_batch(
    sc, attackers, *, trials, victim, chunk, progress, data, dim, theta0, initial_state, final,
    start=0,
):  # fmt: skip
    """Trials ``start`` … ``start + trials − 1`` on the batch engine, in chunks."""
    plan = sc.plan
    info: dict[int, list] = {i: [] for i in range(len(attackers))}
    point: dict[int, list] = {i: [] for i in range(len(attackers))}
    names: dict[int, str] = {}
    truth_parts, finals = [], []
    done = 0
    for first, count in _chunks(trials, chunk):
        first += start
        probes = [adversary.Probe(a, plan, trials=count, dim=dim) for a in attackers]
        truth = adversary.GroundTruth([victim], trials=count, steps=plan.steps, dim=dim)
        res = batch.run(
            plan,
            data,
            trials=count,
            first_trial=first,
            eval_every=plan.steps,
            observers=[*probes, truth],
            initial_state=initial_state,
        )
        if final is not None:
            finals.append(np.asarray(final(res.models, first), dtype=np.float64))
        truth_parts.append(truth.of(victim))
        _estimate(probes, plan, victim, theta0, initial_state, (first, count), info, point, names)
        done += count
        if progress is not None:
            progress(f"simulated {done}/{trials} trials")
    return truth_parts, info, point, names, finals


def observe_event(
    sc, attackers, *, trials, victim, progress, data, dim, theta0, initial_state, final, start=0
):
    """Trials ``start`` … ``start + trials − 1`` on the event engine, one at a time."""
    truth_parts = []
    info: dict[int, list] = {i: [] for i in range(len(attackers))}
    point: dict[int, list] = {i: [] for i in range(len(attackers))}
    names: dict[int, str] = {}
    started = time.perf_counter()
    for tr in range(start, start + trials):
        plan = sc.plan
        probes = [adversary.Probe(a, plan, trials=1, dim=dim) for a in attackers]
        truth = adversary.GroundTruth([victim], trials=1, steps=plan.steps, dim=dim)
        engine.run(
            plan,
            data,
            network=sc.network,
            faults=sc.faults,
            seed=sc.seed + tr,
            eval_every=plan.steps,
            observers=[*probes, truth],
            initial_state=initial_state,
            trial=tr,
        )
        truth_parts.append(truth.of(victim))
        _estimate(probes, plan, victim, theta0, initial_state, (tr, 1), info, point, names)
        if progress is not None and tr == start and trials > 1:
            each = time.perf_counter() - started
            progress(
                f"event engine: {each:.2f} s per trial, about {each * trials / 60:.1f} min "
                f"of simulation for {trials} trials"
            )
        done = tr + 1 - start
        if progress is not None and (done % max(1, trials // 20) == 0 or done == trials):
            progress(f"simulated {done}/{trials} trials (event engine)")
    return truth_parts, info, point, names, []
