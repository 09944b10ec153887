"""numpy's CPU dispatch is pinned so that exp/log give the C library's bits on every machine.

The golden digests (tests/test_golden_mechanisms.py) were pinned on CPUs without AVX-512;
on a CPU with it, numpy's own float64 exp differs from libm in the last bit for some
arguments and every digest that goes through a sigmoid or a log would move.
"""

import math
import os
import subprocess
import sys

import numpy as np

from edgedp import _numerics

PROBE = (
    "import math, numpy as np; x = np.linspace(-30.0, 30.0, 4099); "
    "print(all(float(a) == math.exp(float(v)) for a, v in zip(np.exp(x), x)))"
)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != _numerics.VARIABLE}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, **env},
    )


def test_this_test_process_computes_libm_bits():
    x = np.linspace(-30.0, 30.0, 4099)
    assert all(float(a) == math.exp(float(v)) for a, v in zip(np.exp(x), x, strict=True))
    assert _numerics.libm_transcendentals()


def test_every_entry_package_pins_the_dispatch_before_numpy_loads():
    for package in ("edgedp", "edgedp_sim", "edgedp_cli.main", "firmware_py.daemon"):
        out = _run(f"import {package}; " + PROBE).stdout.split()
        assert out == ["True"], package


def test_a_process_that_imported_numpy_first_is_told_when_it_imports_edgedp():
    unpinned = _run(PROBE).stdout.split() == ["True"]
    code = (
        "import warnings, numpy; warnings.simplefilter('error')\n"
        "try:\n    import edgedp\n    print('quiet')\n"
        "except RuntimeWarning as w:\n    print('warned', w)\n"
    )
    out = _run(code).stdout
    if unpinned:  # this CPU has no AVX-512 kernels: numpy calls libm anyway
        assert out.split() == ["quiet"]
    else:
        assert out.startswith("warned") and _numerics.VARIABLE in out


def test_a_users_setting_is_kept():
    out = _run(
        "import os, edgedp; print(os.environ['NPY_DISABLE_CPU_FEATURES'])",
        NPY_DISABLE_CPU_FEATURES="X86_V4",
    ).stdout.split()
    if _numerics.disabled_features() is not None:
        assert out == ["X86_V4"]
