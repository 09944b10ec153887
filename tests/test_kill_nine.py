"""kill -9 at random times (also inside checkpoint writes), restart: no noise reused.

Real agents with private noise secrets on 127.0.0.1 (tests/hostile/kill.py). Every
re-sent round repeats its noise and message digests exactly, every noise digest is the
node's own stream at that round, no restart refuses, and no checkpoint holds noise.
``EDGEDP_KILL_ITERATIONS`` sets the number of kills (default 6; benchmarks/kill_nine.py
runs 30).
"""

import os

from hostile import kill

ITERATIONS = int(os.environ.get("EDGEDP_KILL_ITERATIONS", "6"))


def test_kill_nine_at_random_times_never_reuses_noise(tmp_path):
    result = kill.run(tmp_path, iterations=ITERATIONS, seed=1, steps=120 * ITERATIONS + 60)
    print("\n" + kill.report(result))
    assert result["refusals"] == [] and result["exit_codes"] == [0, 0, 0, 0]
    assert result["digest_mismatches"] == [] and result["wrong_stream"] == []
    assert result["noise_in_checkpoints"] == []
    assert sum(result["restarts"].values()) == ITERATIONS
