"""Time of the full paper 004 Table 4 computation, and its ratio to npeet-plus's ``mi``.

One Table 4 cell set at one ε (sim/scenarios/leakage_table4.toml, ε = 1 by default):
simulation of Alg. 1 (sr-gt) with probes for the colluders (hbc:1,2) and the eavesdropper
(eavesdropper:all), N = 5,000 trials x 1,000 iterations on the batch engine, the Eq. 44
information sets, and per attacker 1,000 estimates I(V; ℐ) (scalar V, 3-dim ℐ) plus the
1,000 normalizers I(V; V) (estimated once, shared by both attackers) — :func:`sim.leak.run`.

The reference is npeet-plus's ``mi`` called once per iteration on the same samples, i.e.
per attacker ``mi(V_k, ℐ_k)`` and ``mi(V_k, V_k)`` for k = 1..1,000. It is **measured on a
subset of iterations (``--reference-iterations``, evenly spaced) and extrapolated** to all
1,000 (per-call time x calls); the output says so. The gap between the two estimates is
from independent tie noise (the exact equality on identical noised samples is a test).
Needs the dev extra (npeet-plus). Run: python benchmarks/leakage.py [--trials 5000]
[--steps 1000] [--reference-iterations 50]
"""

from __future__ import annotations

import argparse
import time
import tomllib

import numpy as np

from sim import adversary, leak, leakage, scenarios

SCENARIO = scenarios.__file__.rsplit("/", 1)[0] + "/leakage_table4.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--reference-iterations", type=int, default=50)
    args = ap.parse_args()
    from npeet_plus import mi as npeet_mi

    raw = tomllib.loads(open(SCENARIO).read())
    raw["steps"], raw["eval_every"] = args.steps, args.steps
    raw["privacy"]["target_epsilon"] = args.epsilon
    sc = scenarios.parse(raw)
    attackers = [adversary.parse_attacker(a) for a in ("hbc:1,2", "eavesdropper:all")]

    # ---- ours: the whole computation, phase by phase
    data = sc.data()
    t0 = time.perf_counter()
    truth_parts, info, _, _, _ = leak._observe_batch(
        sc,
        attackers,
        trials=args.trials,
        victim=0,
        chunk=500,
        progress=None,
        data=data,
        dim=1,
        theta0=np.zeros(1),
        initial_state=sc.initial_state,
        final=None,
    )
    t_sim = time.perf_counter() - t0
    V = np.concatenate(truth_parts)[:, :, :1].swapaxes(0, 1)  # noqa: N806 (iterations, N, 1)
    sets = [np.concatenate(info[i]).swapaxes(0, 1) for i in range(len(attackers))]
    g = np.random.default_rng(0)
    t0 = time.perf_counter()
    first = leakage.leakage_curve(V, sets[0], rng=g)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = leakage.leakage_curve(V, sets[1], rng=g, self_mi=first.self_mi)
    t_second = time.perf_counter() - t0
    ours_mi = t_first + t_second
    ours_total = t_sim + ours_mi
    calls_ours = 3 * args.steps

    # ---- reference: npeet-plus mi, once per iteration, on a subset, extrapolated
    its = np.unique(np.linspace(0, args.steps - 1, args.reference_iterations).astype(int))
    t0 = time.perf_counter()
    ref_vi = [npeet_mi(V[k], sets[0][k]) for k in its]
    t_vi = (time.perf_counter() - t0) / len(its)
    t0 = time.perf_counter()
    ref_vv = [npeet_mi(V[k], V[k]) for k in its]
    t_vv = (time.perf_counter() - t0) / len(its)
    ref_total = len(attackers) * args.steps * (t_vi + t_vv)  # as two NPEET calls per attacker
    gap_vi = np.max(np.abs(np.array(ref_vi) - first.mi[its]))
    gap_vv = np.max(np.abs(np.array(ref_vv) - first.self_mi[its]))

    n, k = args.trials, leakage.DEFAULT_NEIGHBORS
    print(
        f"paper 004 Table 4 at eps = {args.epsilon:g}: N = {n:,} trials x {args.steps} "
        f"iterations, k = {k}, attackers hbc:1,2 and eavesdropper:all (Eq. 44: 3-dim I)"
    )
    print(f"  simulation with probes (batch engine, 500-trial chunks): {t_sim:8.1f} s")
    print(
        f"  M-NMI, hbc:1,2 (I(V;I) + I(V;V), {2 * args.steps} estimates): {t_first:8.1f} s"
        f"   M-NMI {first.m_nmi:.4f}"
    )
    print(
        f"  M-NMI, eavesdropper:all (I(V;I), {args.steps} estimates):    {t_second:8.1f} s"
        f"   M-NMI {second.m_nmi:.4f}"
    )
    print(
        f"  ours, total: {ours_total:8.1f} s ({calls_ours} KSG estimates, "
        f"{ours_mi / calls_ours * 1e3:.1f} ms each)"
    )
    print(
        f"  npeet-plus mi, one call per iteration and attacker ({4 * args.steps} calls): "
        f"{ref_total:8.1f} s  EXTRAPOLATED from {len(its)} iterations "
        f"({t_vi * 1e3:.1f} ms per mi(V, I), {t_vv * 1e3:.1f} ms per mi(V, V))"
    )
    print(
        f"  ratio npeet-only / ours: MI part {ref_total / ours_mi:.1f}x, "
        f"whole computation (ours incl. simulation) {ref_total / ours_total:.1f}x"
    )
    print(
        f"  largest |ours - npeet| on the measured iterations (independent tie noise): "
        f"I(V;I) {gap_vi:.2e}, I(V;V) {gap_vv:.2e} bits"
    )


if __name__ == "__main__":
    main()
