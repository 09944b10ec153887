"""The D-SGD family (``edgedp plan sgd``): gossip of the local step, without noise (``dsgd``)
or with independent Gaussian noise per node and step (``dp-dsgd``, paper 000's DP-D-SGD).

Its rules are :mod:`~edgedp.families.sgd.dsgd` and :mod:`~edgedp.families.sgd.dp_dsgd`;
its accountant is the matrix-factorization one with the identity factor
(:mod:`edgedp.accounting.mf`, shared with the ``mf``, ``cross`` and ``dome`` families).
"""

from __future__ import annotations

from edgedp.mechanisms import Family

__all__ = ["FAMILY"]

#: Its mechanisms differ in nothing but their record.
FAMILY = Family("sgd")
