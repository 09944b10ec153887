import edgedp._numerics  # noqa: F401  (first: fixes numpy's CPU dispatch before numpy loads)
