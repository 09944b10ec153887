"""``edgedp account --trust pndp``: per-pair guarantees against curious nodes or link taps.

The PNDP numbers hold for non-adaptive gradients only (paper 000's model); every report
says so and prints the LDP guarantee, certified for adaptive training, beside them.
"""

from __future__ import annotations

import math
import sys

from edgedp_cli._common import UsageError, chatty, emit

__all__ = ["cmd_account_pndp"]

_OBSERVED = {
    "node": "curious nodes: the messages they receive, their own gradients and noise",
    "eavesdropper": "a tap on every link into the set, links between members included; "
    "it knows no noise or gradient",
}


def cmd_account_pndp(p, args) -> None:
    """``account --trust pndp``: per-pair PNDP guarantees (paper 000 §7.1, App. A.2).

    Pair μ/ε hold for non-adaptive gradients (``pndp.MODEL``); the LDP μ/ε printed beside
    them are certified for adaptive training.
    """
    from edgedp.accounting import pndp

    attackers = _attackers(p, args)
    show = chatty(args) and sys.stderr.isatty()
    try:  # said before any T x T matrix is built
        pndp.check_size(p.steps, p.n - (len(attackers) if attackers else 1))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    res = pndp.pndp_guarantees(
        p,
        attackers=attackers,
        observer=args.observer,
        progress=(lambda i, k: print(f"attacker set {i}/{k}", file=sys.stderr)) if show else None,
    )
    delta = p.delta if args.delta is None else args.delta
    cyffers = _cyffers(p, res, args, delta) if args.cyffers else None
    payload = _payload(p, res, delta, cyffers)
    emit(args, payload, _text(p, res, cyffers, payload))


def _attackers(p, args) -> list[int] | None:
    """The ``--attacker`` ids (None: every node in turn), after refusing what PNDP does not
    account (Laplace, cross-agent and sketched plans, partial runs, noiseless plans)."""
    if p.laplace is not None:
        raise UsageError(f"--trust pndp is not available for Laplace plans ({p.mechanism})")
    if p.cross_agent is not None:  # its noise is correlated across agents: not 000 App. A.2
        raise UsageError(
            f"--trust pndp is not available for {p.mechanism} plans; `edgedp plan` reports "
            "their insider and colluding-neighbourhood guarantees"
        )
    if p.sketch is not None:
        raise UsageError(
            "--trust pndp is not available for dome plans (sketched messages): they are "
            "certified under LDP only"
        )
    if args.steps_done is not None:
        raise UsageError("--steps-done is not supported with --trust pndp (full run only)")
    if p.noise_multiplier == 0:
        raise UsageError(f"plan mechanism {p.mechanism!r} adds no noise: nothing to account")
    if args.attacker is None:
        return None
    try:
        attackers = [int(x) for x in args.attacker.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--attacker {args.attacker!r}: expected ids like 0,3,5") from None
    bad = [a for a in attackers if not 0 <= a < p.n]
    if not attackers or bad or len(set(attackers)) != len(attackers):
        raise UsageError(
            f"--attacker {args.attacker!r}: expected distinct node ids in [0, {p.n - 1}]"
        )
    return attackers


def _payload(p, res, delta: float, cyffers: dict | None) -> dict:
    """The JSON report: the plan's facts, the LDP guarantee and one row per pair."""
    from edgedp.accounting import pndp

    eps, rdp2 = res.epsilon(delta), res.rdp(2.0)
    rows = [
        {
            "attackers": list(res.attacker_sets[a]),
            "victim": int(v),
            "distance": float(d),
            "mu": float(m),
            "epsilon": float(e),
            "rdp_alpha2": float(r),
            "sensitivity": float(sv),
            "exact": bool(x),
        }
        for a, v, d, m, e, r, sv, x in zip(
            res.attacker_index.tolist(),
            res.victim,
            res.distance,
            res.mu,
            eps,
            rdp2,
            res.sensitivity,
            res.exact,
            strict=True,
        )
    ]
    payload = {
        "trust": "pndp",
        "observer": res.observer,
        "model": res.model,
        "ldp_model": pndp.LDP_MODEL,
        "assumption": pndp.ASSUMPTION,
        "mechanism": p.mechanism,
        "topology": p.topology,
        "n": p.n,
        "steps": p.steps,
        "participation": f"{p.participation.k},{p.participation.b}",
        "noise_multiplier": p.noise_multiplier,
        "delta": delta,
        "adjacency": p.adjacency,
        "ldp_mu": res.ldp_mu,
        "ldp_epsilon": res.ldp.epsilon(delta),
        "ldp_sensitivity": res.ldp.sensitivity,
        "method": res.method,
        "plan_hash": p.plan_hash,
        "pairs": rows,
    }
    if cyffers is not None:
        payload["cyffers"] = cyffers["about"]
        for row, (c_eps, c_rdp, capped) in zip(rows, cyffers["pairs"], strict=True):
            row.update(cyffers_epsilon=c_eps, cyffers_rdp_alpha2=c_rdp, cyffers_capped=capped)
    return payload


def _text(p, res, cyffers: dict | None, payload: dict) -> str:
    """The human-readable table of :func:`_payload`'s rows, every ε with its δ."""
    rows, delta, ldp_eps = payload["pairs"], payload["delta"], payload["ldp_epsilon"]
    head = (
        f"PNDP ({res.observer}: {_OBSERVED[res.observer]}) for {p.mechanism} on {p.topology}: "
        f"n={p.n}, T={p.steps}, participation {p.participation.k},{p.participation.b}, "
        f"sigma={p.noise_multiplier:g}, delta={delta:g}, {p.adjacency} adjacency"
    )
    lines = [
        head,
        "  mu, eps, rdp_a2: paper 000's model, every node's gradients fixed in advance "
        "(non-adaptive); not certified for adaptive training",
        f"  ldp_mu={res.ldp_mu:.6g}, ldp_eps={ldp_eps:.6g}: LDP, certified for adaptive training",
        f"{'attacker':>10} {'victim':>7} {'dist':>5} {'mu':>10} {'eps':>10} "
        f"{'rdp_a2':>11} {'ldp_mu':>9} {'ldp_eps':>9}",
    ]
    if cyffers is not None:
        about = cyffers["about"]
        lines[1:1] = [
            f"  cyf_eps, cyf_rdp_a2: {about['source']}; against {about['trust_model']}; "
            "non-adaptive gradients; '*': capped at the LDP value"
        ]
        lines[-1] += f" {'cyf_eps':>10} {'cyf_rdp_a2':>11}"
    for i, row in enumerate(rows):
        att = ",".join(str(a) for a in row["attackers"])
        dist = res.distance[i]
        line = (
            f"{att:>10} {row['victim']:>7} {dist if math.isinf(dist) else int(dist)!s:>5} "
            f"{row['mu']:>10.4g} {row['epsilon']:>10.4g} {row['rdp_alpha2']:>11.4g} "
            f"{res.ldp_mu:>9.4g} "
            f"{ldp_eps:>9.4g}"
        )
        if cyffers is not None:
            c_eps, c_rdp, capped = cyffers["pairs"][i]
            line += f" {c_eps:>10.4g} {c_rdp:>10.4g}{'*' if capped else ' '}"
        lines.append(line)
    return "\n".join(lines)


def _cyffers(p, res, args, delta: float) -> dict:
    """Cyffers et al.'s bound for each (attacker, victim) pair of ``res``, in its order:
    [(ε at ``delta``, ε(α = 2), capped at the LDP value)] and what it holds against."""
    from edgedp.accounting import pndp_muffliato

    if args.observer != "node":
        raise UsageError("--cyffers: Cyffers et al.'s bound is for a curious node, not a link tap")
    if any(len(s) != 1 for s in res.attacker_sets):
        raise UsageError("--cyffers: Cyffers et al.'s bound is for one curious node per set")
    attackers = sorted({int(s[0]) for s in res.attacker_sets})
    try:
        c = pndp_muffliato.pndp_guarantees(p, attackers=attackers)
    except ValueError as exc:
        raise UsageError(f"--cyffers: {exc}") from None
    at = {(int(a), int(v)): i for i, (a, v) in enumerate(zip(c.attacker, c.victim, strict=True))}
    # both guarantees hold at once, so the pair has the smaller ε of the two (the bound's
    # linear RDP curve converts to (ε, δ) less tightly than the LDP μ-GDP does)
    c_eps, c_rdp, ldp_eps = c.epsilon(delta), c.rdp(2.0), c.ldp.epsilon(delta)
    pairs = []
    for a, v in zip(res.attacker_index.tolist(), res.victim, strict=True):
        i = at[(int(res.attacker_sets[a][0]), int(v))]
        capped = bool(c.capped[i]) or ldp_eps <= c_eps[i]
        pairs.append((float(min(c_eps[i], ldp_eps)), float(c_rdp[i]), capped))
    about = {
        "source": pndp_muffliato.SOURCE,
        "trust_model": pndp_muffliato.TRUST_MODEL,
        "model": pndp_muffliato.MODEL,
        "delta": delta,
    }
    return {"about": about, "pairs": pairs}
