"""The DOME family (``edgedp plan dome``): gossip of count-sketched, noised models
(paper 002 on gossip).

Rules: :mod:`~edgedp.families.dome.rules`. Sketches: :mod:`~edgedp.families.dome.sketch`
and the adaptive (per-round re-keyed) sketch :mod:`~edgedp.families.dome.sketch_adaptive`.
Accountant: :mod:`~edgedp.families.dome.accounting`.
"""

from __future__ import annotations

from edgedp.mechanisms import Family

__all__ = ["FAMILY"]

#: Its mechanisms differ in nothing but their record.
FAMILY = Family("dome")
