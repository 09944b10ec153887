"""edgedp: differentially private decentralized learning with correlated noise.

The device library. It imports numpy, pyzmq and msgpack only (onnxruntime for ONNX
models); offline planning lives in :mod:`edgedp.planning` and may use scipy.
Import modules, not names: ``from edgedp import factors``.
"""

__version__ = "0.1.0"

__all__ = [
    "__version__",
]
