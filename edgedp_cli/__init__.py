"""The ``edgedp`` command line: :mod:`edgedp_cli.main` and one module per command group."""

import edgedp._numerics  # noqa: F401  (first: fixes numpy's CPU dispatch before numpy loads)
