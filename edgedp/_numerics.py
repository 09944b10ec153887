"""The numeric environment that makes the bits the same on every machine.

numpy picks its loops at import time by the CPU's SIMD level. On a CPU with AVX-512 its
float64 ``exp``, ``log`` and friends come from vectorised implementations (SVML and its
own AVX-512 kernels) that differ from the C library's results in the last bit for some
inputs; on CPUs without AVX-512 (most laptops, every ARM board) numpy calls the C library
(libm) for each element. A model digest, a noise draw through ``log`` or a sigmoid then
depends on the machine, and a plan run on a Raspberry Pi would not compute the simulator's
bits. So edgedp turns numpy's AVX-512 dispatch off, the way numpy documents it: the
environment variable ``NPY_DISABLE_CPU_FEATURES``, read once when numpy is imported.

:func:`pin_dispatch` sets it (stdlib only: it must run before the first ``import numpy``,
which is why every edgedp package imports this module first); a value the user set is
kept. :func:`libm_transcendentals` checks, after the import, that numpy's ``exp`` and
``log`` give the C library's bits, and :func:`check` warns once when they do not (numpy
imported before edgedp, or the variable set otherwise): results then stay identical across
this process's engines but may differ from other machines' in the last bits. Importing
edgedp runs :func:`check` itself when numpy was imported first on a CPU where edgedp would
have turned dispatch levels off.

Other subprocesses started by edgedp (agents, workers) inherit the variable.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings

VARIABLE = "NPY_DISABLE_CPU_FEATURES"

# numpy >= 2.4 groups the AVX-512 levels as X86_V4 (+ ICL, SPR); earlier releases name each.
_AVX512_NOW = "X86_V4 AVX512_ICL AVX512_SPR"
_AVX512_BEFORE = (
    "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
)
_warned = False


def _numpy_version() -> tuple[int, int]:
    from importlib import metadata

    try:
        parts = metadata.version("numpy").split(".")
        return int(parts[0]), int(parts[1])
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return (0, 0)


def disabled_features() -> str | None:
    """The value of ``NPY_DISABLE_CPU_FEATURES`` edgedp wants on this machine (None: none)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    return _AVX512_NOW if _numpy_version() >= (2, 4) else _AVX512_BEFORE


def pin_dispatch() -> None:
    """Set ``NPY_DISABLE_CPU_FEATURES`` before numpy is imported (a user's value is kept);
    with numpy already imported, :func:`check` whether its dispatch gives libm's bits."""
    if VARIABLE in os.environ:
        return
    value = disabled_features()
    if value is None:
        return
    if "numpy" in sys.modules:
        check()
    else:
        os.environ[VARIABLE] = value


def libm_transcendentals() -> bool:
    """True when numpy's float64 ``exp`` and ``log`` give the C library's bits.

    Probes a fixed set of arguments (including ones where numpy's AVX-512 kernels round
    differently) against :mod:`math`, which calls the C library one value at a time.
    """
    import math

    import numpy as np

    x = np.linspace(-30.0, 30.0, 4099)
    y = np.linspace(1e-300, 1e6, 4099) + np.linspace(0.0, 1.0, 4099) ** 7
    same_exp = all(float(a) == math.exp(float(v)) for a, v in zip(np.exp(x), x, strict=True))
    same_log = all(float(a) == math.log(float(v)) for a, v in zip(np.log(y), y, strict=True))
    return same_exp and same_log


def check() -> bool:
    """:func:`libm_transcendentals`, with one RuntimeWarning per process when it is False."""
    global _warned
    ok = libm_transcendentals()
    if not ok and not _warned:
        _warned = True
        warnings.warn(
            "numpy's exp/log are not the C library's here (numpy was imported before edgedp "
            f"or {VARIABLE} was set otherwise): results are identical across this process's "
            "engines but may differ in the last bits from other machines'. Import edgedp "
            f"before numpy, or start Python with {VARIABLE}={disabled_features()!r}.",
            RuntimeWarning,
            stacklevel=2,
        )
    return ok


pin_dispatch()
