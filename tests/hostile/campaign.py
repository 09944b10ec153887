"""One attack campaign against a live target (used by tests/test_hostile_peers.py and
benchmarks/hostile_peers.py).

A ring of four agents (node 0 the target, node 1 played by the harness, nodes 2 and 3 real
processes). From round 1 to T−2 the harness sends, on node 1's authenticated link, equal
shares of every :data:`frames.REJECTED` category (same-round replays after the honest
frame, the rest before it), and a tenth as many frames again from strangers. The result
records frames per category, the reasons an in-process oracle rejects them for, the
target's own rejection counters, exit codes, a restart of the target, the model digest
against the clean run and the target's RSS before and after.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np

from hostile import frames as frames_mod
from hostile import harness

#: Reasons whose split depends on whether the target is still in the round (timing): a
#: frame of a round already seen from that neighbour is a replay if it repeats its message,
#: an equivocation if it differs, and out of the window once the target moved on (then
#: an equivocation again if its round is within the fingerprints kept).
ROUND_REASONS = ("Replayed", "Equivocation", "RoundOutOfWindow")


def forge_for(plan, oracle: harness.Oracle, seed: int) -> frames_mod.Forge:
    """Frames as node 1 of ``plan`` against node 0 (node 3 the other neighbour, 2 a
    non-neighbour), sized by the oracle's bound, window and transport caps."""
    return frames_mod.Forge(
        plan_hash=bytes.fromhex(plan.plan_hash),
        dim=oracle.agent.message_dim,
        sender=1,
        other=3,
        stranger_id=2,
        steps=plan.steps,
        window=oracle.agent.round_window,
        bound=oracle.bound,
        max_bytes=oracle.agent.context.max_bytes,
        rng=np.random.default_rng(seed),
        max_frame=oracle.max_frame,
        max_parts=oracle.max_parts,
    )


def run(directory: Path, *, total: int, seed: int = 0, steps: int = 6) -> dict:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plan = harness.write_plan(directory / "run.plan", steps=steps)
    started = time.monotonic()
    net = harness.Network(directory / "run", directory / "run.plan", peer=1, target=0)
    target_cfg = net.config(0)
    oracle = harness.Oracle(target_cfg)
    forge = forge_for(plan, oracle, seed)
    strangers = harness.Strangers(net.endpoint(0), net.public_key(0))
    attack_rounds = list(range(1, plan.steps - 1))
    per_category = max(1, -(-total // (len(frames_mod.REJECTED) * len(attack_rounds))))
    stranger_frames = max(1, per_category * len(frames_mod.REJECTED) // 10)
    sent, expected, rss = Counter(), Counter(), {}
    pid = net.run.processes[0].pid

    def send(category: str, r: int, batch: list[list[bytes]], first=None) -> None:
        expected.update(oracle.classify(r, batch, sender=1, first=first))
        for f in batch:
            net.honest.attack(f)
        sent[category] += len(batch)

    def before(r: int) -> None:
        if r == plan.steps - 1:
            rss["after"] = harness.rss_kib(pid)
        if r not in attack_rounds:
            return
        if r == attack_rounds[0]:
            rss["before"] = harness.rss_kib(pid)
        for category in frames_mod.REJECTED:
            if category not in frames_mod.AFTER_HONEST:
                batch = [forge.make(category, r, net.honest.frames) for _ in range(per_category)]
                send(category, r, batch)
        for i in range(stranger_frames):
            category = frames_mod.REJECTED[i % len(frames_mod.REJECTED)]
            strangers.send(forge.make(category, r, net.honest.frames))
        strangers.raw_tcp([forge.rng.bytes(int(n)) for n in forge.rng.integers(0, 4096, 3)])

    def after(r: int) -> None:
        if r not in attack_rounds:
            return
        honest = net.honest.frames[r]
        for category in frames_mod.AFTER_HONEST:
            batch = [forge.make(category, r, net.honest.frames) for _ in range(per_category)]
            send(category, r, batch, first=honest)

    try:
        net.honest.play(before=before, after=after)
        codes = net.wait()
    finally:
        strangers.close()
        net.close()
    done = net.last_metrics(0)
    restart = net.run.start(0).wait(timeout=120)  # a bricked device would refuse here
    final = np.load(target_cfg.final_model)
    return {
        "frames_by_category": dict(sent),
        "authenticated_frames": sum(sent.values()),
        "stranger_frames": strangers.attempted,
        "expected_reasons": dict(expected),
        "target_rejected": {
            **done["rejected"],
            **{f"transport:{k}": v for k, v in done.get("refused", {}).items()},
        },
        "target_received": done["received"],
        "refused_handshakes": done["refused_handshakes"],
        "exit_codes": codes,
        "restart_exit_code": restart,
        "final_model_finite": bool(np.all(np.isfinite(final))),
        "digest_equal": net.final_digest() == harness.clean_digest(plan),
        "rss_kib": rss,
        "steps": plan.steps,
        "bound": oracle.bound,
        "seconds": round(time.monotonic() - started, 1),
    }


def report(result: dict) -> str:
    """The result table and a summary, as printed by the test and the benchmark."""
    rows = [(c, n) for c, n in sorted(result["frames_by_category"].items())]
    rows.append(("(strangers: refused at the handshake)", result["stranger_frames"]))
    out = [harness.table(rows, ("category", "frames"))]
    reasons = sorted(set(result["expected_reasons"]) | set(result["target_rejected"]))
    out.append(
        harness.table(
            [
                (k, result["expected_reasons"].get(k, 0), result["target_rejected"].get(k, 0))
                for k in reasons
            ],
            ("rejection reason", "oracle", "target's metrics"),
        )
    )
    crashes = sum(c not in (0, None) for c in result["exit_codes"])
    out.append(
        f"authenticated frames {result['authenticated_frames']}, strangers "
        f"{result['stranger_frames']} (refused handshakes {result['refused_handshakes']}); "
        f"crashes {crashes}; bricked {int(result['restart_exit_code'] != 0)}; "
        f"digest equal to the clean run {result['digest_equal']}; RSS KiB before "
        f"{result['rss_kib'].get('before')} after {result['rss_kib'].get('after')}; "
        f"bound {result['bound']:.4g}; {result['seconds']} s"
    )
    return "\n\n".join(out)
