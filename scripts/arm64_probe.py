"""Numbers one architecture computes, for comparing an aarch64 device with x86.

Run by ``scripts/arm64_agent.py`` twice, natively and under qemu-aarch64, with only the
device install importable (numpy, pyzmq, msgpack, PyNaCl, edgedp): writes ``OUT.npz``
with the arrays below and prints a JSON line about the interpreter. The driver compares the
two files element by element.

- ``gaussian``, ``laplace``: draws of :mod:`edgedp.rng` (Philox) — the agents' noise;
- ``exp``, ``log1p``, ``logaddexp``: numpy's elementwise functions on fixed inputs (libm or
  numpy's own SIMD code, whichever this build dispatches to);
- ``rowsum``: ``np.sum(x * w, axis=-1)`` on a node's shard (the margin of the linear model);
- ``gradients``: the logistic model's per-example gradients on the shard at fixed θ;
- ``mixed``: the agents' mixing step (``mix_gathered``) on three vectors.
"""

from __future__ import annotations

import json
import platform
import sys
import time

import numpy as np


def main(shard: str, out: str) -> None:
    from edgedp import rng
    from edgedp.gossip import mix_gathered
    from edgedp.models.linear import LinearModel

    t0 = time.perf_counter()
    key = rng.derive_key(b"arm64-probe", "noise", 0)
    gaussian = rng.gaussian(key, 3, (1_000_000,))
    laplace = rng.laplace(key, 4, (200_000,), scale=0.7)
    t_noise = time.perf_counter() - t0

    grid = np.linspace(-40.0, 40.0, 200_001)
    inputs = np.concatenate([grid, rng.gaussian(key, 5, (200_000,)) * 8.0])
    exp = np.exp(inputs)
    log1p = np.log1p(np.abs(inputs))
    logaddexp = np.logaddexp(0.0, inputs)

    with np.load(shard, allow_pickle=False) as data:
        x, y = np.array(data["x"], dtype=np.float64), np.array(data["y"], dtype=np.float64)
    model = LinearModel("logistic", features=x.shape[1])
    theta = rng.gaussian(key, 6, (model.dim,)) * 0.5
    rowsum = np.sum(x * theta[None, :-1], axis=-1)
    gradients = model.per_example_gradients(theta, x, y)
    mixed = mix_gathered(np.array([1 / 3, 1 / 3, 1 / 3]), rng.gaussian(key, 7, (3, 4096)))

    np.savez(
        out,
        gaussian=gaussian,
        laplace=laplace,
        exp=exp,
        log1p=log1p,
        logaddexp=logaddexp,
        rowsum=rowsum,
        gradients=gradients,
        mixed=mixed,
    )
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

        dispatch = [k for k in __cpu_dispatch__ if __cpu_features__.get(k)]
    except ImportError:
        dispatch = []
    import nacl
    import nacl.bindings
    import zmq

    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "numpy": np.__version__,
                "numpy_dispatch": dispatch,
                "pyzmq": zmq.__version__,
                "libzmq": zmq.zmq_version(),
                "pynacl": nacl.__version__,
                "libsodium_x25519_bytes": nacl.bindings.crypto_scalarmult_BYTES,
                "noise_draw_seconds": round(t_noise, 3),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
