"""Simulation engines for edgedp: the batch engine (``edgedp_sim.batch``), the SimPy event
engine (``edgedp_sim.engine``), datasets, leakage probes and audits, and the demo.

The simulator may use simpy, networkx, matplotlib, scikit-learn, dask, scipy and, when
installed, numba (``edgedp_sim.kernels``); the device library :mod:`edgedp` never imports
this package (only :mod:`edgedp.api` and the offline plan builder do, when called).
"""

import edgedp._numerics  # noqa: F401  (first: fixes numpy's CPU dispatch before numpy loads)
