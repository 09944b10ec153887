"""Device daemon (``edgedp-agent``): config, plan and data loading, ZeroMQ gossip, checkpoints.

:mod:`firmware_py.daemon` is the entry point; docs/DEVICES.md is the operator's guide.
"""

import edgedp._numerics  # noqa: F401  (first: fixes numpy's CPU dispatch before numpy loads)
