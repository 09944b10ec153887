"""kill -9 at random times, 30 times, against real agents with private noise.

Runs the campaign of tests/test_kill_nine.py (tests/hostile/kill.py) with ``--iterations``
kills (default 30) and prints where the kills landed (start-up, mid-round, inside a
checkpoint or sent-record write), restarts, re-sent rounds, digest mismatches across
incarnations, noise off its stream, refusals and noise found in checkpoints.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from edgedp_sim import provenance

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostile import kill  # noqa: E402  (the harness lives with the tests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = kill.run(Path(tmp), iterations=args.iterations, seed=args.seed)
    print(kill.report(result))
    if args.json:
        provenance.write_json(args.json, result, indent=2, sort_keys=True, default=str)


if __name__ == "__main__":
    main()
