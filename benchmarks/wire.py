"""Wire codec throughput for a 10^6-float32 payload, as a ratio to a plain memory copy.

Encode builds the header and a zero-copy view of the array; decode parses and validates
the header and returns a read-only view. The baseline copies the same 4 MB buffer once
(``bytes(memoryview)``) in the same run. A socket sends the frames without another copy
(``copy=False``).
"""

from __future__ import annotations

import edgedp._numerics  # noqa: F401  (before numpy: the CPU dispatch edgedp pins)

# isort: split
import numpy as np
from _timing import median_seconds

from edgedp import wire


def main() -> None:
    arr = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    msg = wire.Message(b"h" * 32, 7, 1, "model", (arr,))
    frames = [bytes(f) for f in wire.encode(msg)]
    copy = median_seconds(lambda: bytes(memoryview(arr).cast("B")), 50)
    enc = median_seconds(lambda: wire.encode(msg), 50)
    dec = median_seconds(lambda: wire.decode(frames), 50)
    ctx = wire.Context(
        plan_hash=b"h" * 32,
        neighbours=frozenset({1}),
        shapes=((arr.size,),),
        dtype="<f4",
        max_bytes=1 << 26,
    )
    chk = median_seconds(lambda: wire.check(wire.decode(frames), ctx, round_lo=0, round_hi=10), 50)
    mb = arr.nbytes / 1e6
    print(
        f"payload: 10^6 float32 = {mb:.1f} MB; baseline memory copy {copy * 1e3:.3f} ms "
        f"({mb / copy / 1e3:.2f} GB/s)"
    )
    print(f"{'operation':<34}{'ms':>9}{'GB/s':>9}{'ratio to copy':>15}")
    for name, sec in [
        ("encode", enc),
        ("decode (zero-copy)", dec),
        ("encode + decode", enc + dec),
        ("decode + check (finite, shape)", chk),
    ]:
        print(f"{name:<34}{sec * 1e3:>9.3f}{mb / sec / 1e3:>9.2f}{sec / copy:>15.3f}")


if __name__ == "__main__":
    main()
