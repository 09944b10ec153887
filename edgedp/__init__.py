"""edgedp: differentially private decentralized learning with correlated noise.

The device library. It imports numpy, pyzmq, msgpack and PyNaCl only (onnxruntime for ONNX
models); offline planning lives in :mod:`edgedp.planning` and may use scipy. Importing it
first (:mod:`edgedp._numerics`) turns numpy's AVX-512 dispatch off before numpy loads, so
every CPU computes the same bits: import edgedp before numpy.
Import modules, not names: ``from edgedp import factors``.

The Python API (:mod:`edgedp.api`, docs/API.md) is re-exported here: ``edgedp.make_plan``,
``edgedp.account``, ``edgedp.simulate``, ``edgedp.leak``, ``edgedp.save_dataset`` (numpy
arrays as a dataset file a plan can name) and ``edgedp.export_model``. It imports planning
and the simulator only when called, so ``import edgedp`` stays a device import. Importing
the package enters the built-in families and mechanisms (:data:`edgedp.families.FAMILIES`,
:data:`edgedp.families.BUILTIN`) in the registry (:mod:`edgedp.mechanisms`), before any
module can look one up.
"""

# _numerics first: it fixes numpy's CPU dispatch before numpy loads (the names load in order).
from edgedp import _numerics, families, mechanisms  # noqa: F401
from edgedp.api import (
    AttackerLeak,
    Guarantee,
    LeakResult,
    SimulationResult,
    account,
    export_model,
    leak,
    make_plan,
    save_dataset,
    simulate,
)

# the registry's explicit lists, entered once
mechanisms.install_builtin(families.FAMILIES, families.BUILTIN)

__version__ = "0.1.0"

__all__ = [
    "AttackerLeak",
    "Guarantee",
    "LeakResult",
    "SimulationResult",
    "__version__",
    "account",
    "export_model",
    "leak",
    "make_plan",
    "save_dataset",
    "simulate",
]
