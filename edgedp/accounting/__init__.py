"""Privacy accounting: pure math, numpy + stdlib only (it runs on devices).

Modules (import the module, then call its functions):

- :mod:`~edgedp.accounting.gdp` — μ-GDP δ(ε), ε(δ), calibration (log-space normal tails).
- :mod:`~edgedp.accounting.rdp` — RDP of μ-GDP and the RDP → (ε, δ) conversion.
- :mod:`~edgedp.accounting.participation` — (k, b)-participation patterns.
- :mod:`~edgedp.accounting.sensitivity` — sens_Π(C; B) (paper 000, Thm 7).
- :mod:`~edgedp.accounting.mf` — LDP guarantee of MF-D-SGD (paper 000, §5–6).
- :mod:`~edgedp.accounting.pndp` — pairwise network DP per attacker set and victim, for
  non-adaptive gradients (000 §7.1, App. A).
- :mod:`~edgedp.accounting.pndp_muffliato` — the pairwise accounting of Cyffers et al. 2022
  (Muffliato, Thm 11) for DP-D-SGD, the baseline of 000 Fig. 2.

The accountants of one family live in its package (:mod:`edgedp.families`):
:mod:`edgedp.families.laplace.accounting` (pure ε-DP of the Laplace schedules, 004),
:mod:`edgedp.families.cross.accounting` (GDP of noise correlated across agents, 001, 000
A.4–A.6) and :mod:`edgedp.families.dome.accounting` (DOME's sketched messages, 002).
"""

from edgedp.accounting import gdp, mf, participation, pndp, pndp_muffliato, rdp, sensitivity

__all__ = [
    "gdp",
    "mf",
    "participation",
    "pndp",
    "pndp_muffliato",
    "rdp",
    "sensitivity",
]
