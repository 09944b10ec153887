"""Simulation engines for edgedp: the batch engine (``edgedp_sim.batch``), datasets and the demo.

The simulator may use simpy, networkx, matplotlib and scikit-learn; the device library
:mod:`edgedp` never imports this package.
"""

import edgedp._numerics  # noqa: F401  (first: fixes numpy's CPU dispatch before numpy loads)
