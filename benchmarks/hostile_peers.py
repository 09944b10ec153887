"""Hostile peers at full size: 20,000 authenticated frames (and strangers) at a live agent.

Runs the campaign of tests/test_hostile_peers.py (tests/hostile/campaign.py) with
``--frames`` authenticated frames (default 20,000) and prints the result table: frames per
category, rejection reasons (in-process oracle vs the target's own metrics), crashes,
bricked agents, the model digest against the clean run, and the target's RSS.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from edgedp_sim import provenance

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostile import campaign  # noqa: E402  (the harness lives with the tests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = campaign.run(Path(tmp), total=args.frames, seed=args.seed)
    print(campaign.report(result))
    if args.json:
        provenance.write_json(args.json, result, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
