"""Optional packages: which extra installs each, and one ImportError that says so.

The device install has numpy, pyzmq, msgpack and PyNaCl only; planning, the simulator and
ONNX building need extras. This module imports only the standard library, so the device
modules that import an optional package on use (:mod:`edgedp.models`) and the Python API
(:mod:`edgedp.api`) share it from below.
"""

from __future__ import annotations

__all__ = ["EXTRAS", "install_extra", "install_hint", "naming_the_extra", "need_extra"]

#: The optional packages and the extra that installs each (``pip install 'edgedp[EXTRA]'``).
EXTRAS = {
    **dict.fromkeys(("simpy", "networkx", "matplotlib", "sklearn", "tqdm", "dask"), "sim"),
    **dict.fromkeys(("scipy", "threadpoolctl", "dp_accounting"), "plan"),
    "distributed": "sim",
    "cvxpy": "reference",
    "onnx": "onnx-build",
    "onnxruntime": "onnx",
}


def install_extra(exc: ImportError) -> tuple[str, str] | None:
    """(missing package, the smallest extra that installs it) for an optional package that
    is missing, else None. The ``sim`` extra includes ``plan`` (the simulator plans).

    >>> install_extra(ModuleNotFoundError("No module named 'simpy'", name="simpy"))
    ('simpy', 'sim')
    >>> install_extra(ModuleNotFoundError("No module named 'scipy'", name="scipy"))
    ('scipy', 'plan')
    """
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if name not in EXTRAS:
        return None
    return name, EXTRAS[name]


def install_hint(exc: ImportError) -> str | None:
    """``pip install 'edgedp[EXTRA]'`` for an optional package that is missing, else None.

    >>> print(install_hint(ModuleNotFoundError("No module named 'simpy'", name="simpy")))
    simpy is not installed (not in the device install): pip install 'edgedp[sim]'
    """
    missing = install_extra(exc)
    if missing is None:
        return None
    name, extra = missing
    return f"{name} is not installed (not in the device install): pip install 'edgedp[{extra}]'"


def need_extra(module: str, *, user: str | None = None):
    """Import ``module``, or raise one ImportError naming the extra that installs it
    (``user`` is who needs it in the message; default the module)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        named = naming_the_extra(exc, user or module)
        if named is None:
            raise
        raise named from None


def naming_the_extra(exc: ImportError, user: str) -> ImportError | None:
    """One ImportError saying ``user`` needs the missing optional package and the extra
    that installs it; None when ``exc`` is not about an optional package."""
    missing = install_extra(exc)
    if missing is None:
        return None
    name, extra = missing
    return ImportError(
        f"{user} needs {name}, not in the device install: pip install 'edgedp[{extra}]'",
        name=name,
    )
