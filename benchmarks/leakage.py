"""Time of the paper 004 Table 4 computation, and its ratios to npeet-plus and the per-stream draws.

Three measurements, each against a baseline measured in the same run (the machine's load
average is printed before and after):

1. **Table 4 workload** (edgedp_sim/scenarios/leakage_table4.toml, ε = 1 by default): simulation of
   Alg. 1 (sr-gt) with probes for the colluders (hbc:1,2) and the eavesdropper
   (eavesdropper:all) on the batch engine (500-trial chunks, as ``edgedp leak``), the Eq. 44
   information sets, and per attacker one KSG estimate I(V; ℐ) per iteration (scalar V,
   3-dim ℐ) plus the normalizers I(V; V) (estimated once, shared by both attackers) — what
   :func:`edgedp_sim.leak.run` does. Reference: npeet-plus's ``mi`` called once per iteration on the
   same samples (per attacker ``mi(V_k, ℐ_k)`` and ``mi(V_k, V_k)``), **measured on
   ``--reference-iterations`` evenly spaced iterations and extrapolated** (per-call time x
   calls); the output says so. The gap between the estimates is from independent tie noise
   (equality on identical noised samples is a test: tests/test_leakage_fast.py).
2. **Keyed Laplace streams**: the draw of one step for every (trial, node) stream
   (``noise.laplace_draw``, bulk; ``rng.LaplaceAhead``, 16 steps per numpy pass;
   ``edgedp_sim.kernels.LaplaceAhead``, 64 steps per compiled pass as the batch engine draws
   them with numba) against one generator per stream (``rng.stacked``, the per-stream
   path), on a few steps; the bits are compared too.
3. **Multi-dimensional KSG** against npeet-plus on Gaussian samples (N = ``--trials``) with
   scalar V and 3-dim I, and 3-dim V and I, on the same noised samples (values compared).

Needs the dev extra (npeet-plus). Run: python benchmarks/leakage.py [--trials 5000]
[--iterations 1000] [--reference-iterations 50]; reduced: --trials 200 --iterations 100.
"""

from __future__ import annotations

import argparse
import math
import os
import time
import tomllib

import edgedp  # noqa: F401 (first: numpy loads with the dispatch edgedp pins, as `edgedp leak`)

# isort: split
import numpy as np

from edgedp import noise, rng, streams
from edgedp_sim import adversary, kernels, leak_trials, leakage, scenarios

SCENARIO = scenarios.__file__.rsplit("/", 1)[0] + "/leakage_table4.toml"


def _load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _best(f, repeats: int) -> float:
    """Smallest CPU time of this process over ``repeats`` calls (robust to a loaded machine)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        f()
        best = min(best, time.process_time() - t0)
    return best


class _Seconds(tuple):
    """(wall, CPU) seconds; arithmetic element-wise; ratios print as 'wall x / CPU x'."""

    def __new__(cls, wall: float, cpu: float):
        return super().__new__(cls, (wall, cpu))

    def __add__(self, other):
        return _Seconds(self[0] + other[0], self[1] + other[1])

    def __mul__(self, c):
        return _Seconds(self[0] * c, self[1] * c)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, _Seconds):
            return _Ratio(self[0] / other[0], self[1] / other[1])
        return _Seconds(self[0] / other, self[1] / other)

    def __format__(self, spec):
        return f"{self[0]:.1f} / {self[1]:.1f} s"


class _Ratio(tuple):
    def __new__(cls, wall: float, cpu: float):
        return super().__new__(cls, (wall, cpu))

    def __format__(self, spec):
        return f"{self[0]:.2f}x wall / {self[1]:.2f}x CPU"


def _ms(t: _Seconds) -> str:
    return f"{t[0] * 1e3:.1f} / {t[1] * 1e3:.1f} ms"


class _Clock:
    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> _Seconds:
        wall, cpu = time.perf_counter(), time.process_time()
        out = _Seconds(wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return out


def table4(args, npeet_mi) -> None:
    raw = tomllib.loads(open(SCENARIO).read())
    raw["steps"], raw["eval_every"] = args.iterations, args.iterations
    raw["privacy"]["target_epsilon"] = args.epsilon
    sc = scenarios.parse(raw)
    attackers = [adversary.parse_attacker(a) for a in ("hbc:1,2", "eavesdropper:all")]
    data = sc.data()
    clock = _Clock()
    truth_parts, info, _, _, _ = leak_trials.observe_batch(
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
    t_sim = clock.lap()
    V = np.concatenate(truth_parts)[:, :, :1].swapaxes(0, 1)  # noqa: N806 (iterations, N, 1)
    sets = [np.concatenate(info[i]).swapaxes(0, 1) for i in range(len(attackers))]
    # as edgedp_sim.leak.run: equal information sets (here ℐ_e = ℐ₂) share their joints' k-NN
    memo = {} if np.array_equal(sets[0], sets[1]) else None
    g = np.random.default_rng(0)
    clock = _Clock()
    first = leakage.leakage_curve(V, sets[0], rng=g, knn_memo=memo)
    t_first = clock.lap()
    second = leakage.leakage_curve(V, sets[1], rng=g, self_mi=first.self_mi, knn_memo=memo)
    t_second = clock.lap()
    ours_mi = t_first + t_second
    ours_total = t_sim + ours_mi
    steps = args.iterations
    its = np.unique(np.linspace(0, steps - 1, min(args.reference_iterations, steps)).astype(int))
    clock = _Clock()
    ref_vi = [npeet_mi(V[k], sets[0][k]) for k in its]
    t_vi = clock.lap() / len(its)
    ref_vv = [npeet_mi(V[k], V[k]) for k in its]
    t_vv = clock.lap() / len(its)
    ref_total = len(attackers) * steps * (t_vi + t_vv)  # two NPEET calls per attacker
    gap_vi = np.max(np.abs(np.array(ref_vi) - first.mi[its]))
    gap_vv = np.max(np.abs(np.array(ref_vv) - first.self_mi[its]))
    print(
        f"1. paper 004 Table 4 at eps = {args.epsilon:g}: N = {args.trials:,} trials x {steps} "
        f"iterations, k = {leakage.DEFAULT_NEIGHBORS}, attackers hbc:1,2 and eavesdropper:all "
        "(seconds: wall / CPU of this process)"
    )
    print(f"   simulation with probes (batch engine, 500-trial chunks): {t_sim}")
    print(f"   M-NMI hbc:1,2 (I(V;I) + I(V;V)):  {t_first}   M-NMI {first.m_nmi:.4f}")
    print(f"   M-NMI eavesdropper:all (I(V;I)):  {t_second}   M-NMI {second.m_nmi:.4f}")
    print(f"   ours, total: {ours_total} ({3 * steps} KSG estimates: {ours_mi})")
    print(
        f"   npeet-plus mi once per iteration and attacker ({4 * steps} calls): {ref_total}"
        f"  EXTRAPOLATED from {len(its)} iterations (per mi(V, I): {_ms(t_vi)}, per "
        f"mi(V, V): {_ms(t_vv)})"
    )
    print(
        f"   ratio npeet / ours: MI part {ref_total / ours_mi}, whole computation "
        f"(ours incl. simulation) {ref_total / ours_total}"
    )
    print(
        f"   largest |ours - npeet| on those iterations (independent tie noise): "
        f"I(V;I) {gap_vi:.2e}, I(V;V) {gap_vv:.2e} bits"
    )


def laplace_streams(args) -> None:
    plan_hash = "ab" * 32
    keys = streams.RunKeys(rng.seed_secret(0), plan_hash, streams.SIMULATION_RUN)
    trials = min(args.trials, 5000)
    stack = np.array(
        [[keys.noise(u, trial=t) for u in range(3)] for t in range(trials)], dtype=object
    )
    steps = range(3)
    bulk = _best(lambda: [noise.laplace_draw(stack, s, 1, 0.7) for s in steps], 3) / 3
    per = _best(
        lambda: [rng.stacked(stack, s, (1,), lambda g: g.laplace(0.0, 0.7, 1)) for s in steps],
        1,
    )
    per /= 3
    same = all(
        noise.laplace_draw(stack, s, 1, 0.7).tobytes()
        == rng.stacked(stack, s, (1,), lambda g: g.laplace(0.0, 0.7, 1)).tobytes()
        for s in steps
    )
    words = rng.key_words(stack)

    def ahead_steps():  # the batch engine's draws: 16 steps per pass
        ahead = rng.LaplaceAhead(words, (1,))
        return [ahead.draw(s, scale=0.7) for s in range(16)]

    def compiled_steps():  # the batch engine's draws with numba: 64 steps per compiled pass
        ahead = kernels.LaplaceAhead(words, (1,))
        return [ahead.draw(s, scale=0.7) for s in range(64)]

    ahead = _best(ahead_steps, 3) / 16
    same = same and all(
        a.tobytes() == noise.laplace_draw(stack, s, 1, 0.7).tobytes()
        for s, a in enumerate(ahead_steps())
    )
    compiled = math.nan
    if kernels.AVAILABLE:
        compiled_steps()  # compiled (or loaded from numba's cache) outside the timing
        compiled = _best(compiled_steps, 3) / 64
        same = same and all(
            a.tobytes() == noise.laplace_draw(stack, s, 1, 0.7).tobytes()
            for s, a in enumerate(compiled_steps()[:16])
        )
    print(
        f"2. keyed Laplace draws of one step for {stack.size:,} (trial, node) streams (CPU): bulk "
        f"{bulk * 1e3:.1f} ms, 16 steps ahead in numpy (rng.LaplaceAhead) {ahead * 1e3:.1f} ms, "
        f"64 steps ahead compiled (kernels.LaplaceAhead, the batch engine's with numba) "
        f"{compiled * 1e3:.2f} ms, one generator per stream {per * 1e3:.1f} ms: "
        f"{per / bulk:.1f}x / {per / ahead:.1f}x / {per / compiled:.1f}x (bit-identical: {same})"
    )


def multi_dim(args, npeet_mi) -> None:
    g = np.random.default_rng(5)
    n = args.trials
    for dx, dy in ((1, 1), (1, 3), (3, 3)):
        v = g.standard_normal((n, dx))
        i = 0.6 * v[:, :1].repeat(dy, 1) + 0.8 * g.standard_normal((n, dy))
        x, y = leakage.add_tie_noise(v, g), leakage.add_tie_noise(i, g)
        ours = _best(lambda x=x, y=y: leakage.ksg_mi(x, y, prenoised=True), 3)
        ref = _best(lambda x=x, y=y: npeet_mi(x, y), 3)
        same = float(leakage.ksg_mi(x, y, prenoised=True)) == npeet_mi(x, y)
        print(
            f"3. KSG ({dx}, {dy}) at N = {n:,} (CPU): ours {ours * 1e3:.1f} ms, npeet-plus "
            f"{ref * 1e3:.1f} ms: {ref / ours:.2f}x (equal values: {same})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5000)
    ap.add_argument("--iterations", "--steps", type=int, default=1000, dest="iterations")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--reference-iterations", type=int, default=50)
    args = ap.parse_args()
    if args.trials <= leakage.DEFAULT_NEIGHBORS or args.iterations < 1:
        ap.error("expected --trials > 3 and --iterations >= 1")
    from npeet_plus import estimators

    print(f"before: {_load()} ({os.cpu_count()} cores)")
    table4(args, estimators.mi)  # npeet-plus as it is called, tie noise included
    laplace_streams(args)
    noisy = estimators.add_noise
    estimators.add_noise = lambda x, intens=1e-10: x  # both on the same noised samples
    try:
        multi_dim(args, estimators.mi)
    finally:
        estimators.add_noise = noisy
    print(f"after: {_load()}")


if __name__ == "__main__":
    main()
