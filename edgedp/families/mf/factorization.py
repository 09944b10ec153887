"""Temporal factors for the MF-D-SGD family, planned for a topology (offline; scipy).

| mechanism | C_local                                       | optimal for       |
|-----------|-----------------------------------------------|-------------------|
| dp-dsgd   | I                                             | —                 |
| antipgd   | lower-triangular ones (paper 000 App. A.3)    | —                 |
| dmf       | 003 Eq. 5–6 optimum for the prefix sum        | centralized SGD   |
|           | (used locally, paper 000 App. C)              |                   |
| mafalda   | optimum for H = Σᵢ AᵢᵀAᵢ (paper 000 Lemma 10) | this gossip W     |
| banded    | banded C (bandwidth p) fitted to MAFALDA's H  | this gossip W     |
| blt       | buffered-linear-Toeplitz C fitted to that H   | this gossip W     |

The compact forms (banded, blt) stream noise on devices with O(p·d) / O(buffers·d) state;
their plans report the loss ratio to the dense MAFALDA optimum.

:func:`relative_loss` scores any C_local on the MAFALDA objective of the topology,
sens(C)²·tr(H (CᵀC)⁻¹), as a ratio to DP-D-SGD's (C = I): below 1 means less error on the
decentralized workload at the same privacy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgedp import factors, mechanisms
from edgedp.accounting.participation import Participation
from edgedp.families.mf import mafalda
from edgedp.planning import mf_optimal, workload

__all__ = ["PLANNED", "PlannedFactor", "plan_factor", "relative_loss"]

#: Mechanisms whose factor is computed here (the registry's ``planned`` ones).
PLANNED = mechanisms.names(planned=True)


@dataclass(frozen=True, slots=True, eq=False)
class PlannedFactor:
    factor: object
    loss: float | None
    dual_bound: float | None
    gap: float | None
    iterations: int
    seconds: float
    loss_ratio_to_dense: float | None = None
    converged: bool = True  # the dense optimization reached its tolerance
    skipped: tuple[str, ...] = ()  # what a long horizon does not compute (CompactFit.skipped)


def plan_factor(
    mechanism: str,
    mixing_matrix: np.ndarray,
    *,
    steps: int,
    participation: Participation,
    tolerance: float = 1e-4,
    max_iterations: int = 1000,
    progress: Callable[[int, float, float], None] | None = None,
    bandwidth: int | None = None,
    buffers: int | None = None,
    workload_gram: np.ndarray | workload.SpectralWorkload | None = None,
) -> PlannedFactor:
    """The temporal factor for ``mechanism``: optimal (dmf, mafalda) or fitted (banded, blt).

    The dense optimization stops at ``tolerance`` (relative duality gap) or after
    ``max_iterations``; ``converged`` says which (an unconverged factor is still a valid,
    certified factor, only further from optimal: ``gap`` bounds how far). ``workload_gram``:
    ``mafalda.workload_gram(mixing_matrix, steps=steps)`` when the caller already has it (a
    :class:`~edgedp.planning.workload.SpectralWorkload` above ``workload.DENSE_MAX_STEPS``)."""
    if mechanism in ("banded", "blt"):
        return _compact(
            mechanism,
            mixing_matrix,
            steps=steps,
            participation=participation,
            tolerance=tolerance,
            max_iterations=max_iterations,
            bandwidth=bandwidth,
            buffers=buffers,
            workload_gram=workload_gram,
        )
    if mechanism == "dmf":
        H = mf_optimal.prefix_sum_gram(steps)  # noqa: N806
    elif mechanism == "mafalda":
        H = _mafalda_gram(mixing_matrix, steps, workload_gram)  # noqa: N806
    else:
        raise ValueError(f"mechanism={mechanism!r} is not planned here; expected one of {PLANNED}.")
    res = mf_optimal.optimize(
        H,
        participation=participation,
        tolerance=tolerance,
        max_iterations=max_iterations,
        progress=progress,
    )
    return PlannedFactor(
        factors.Dense(np.tril(res.C)),
        res.loss,
        res.dual_bound,
        res.gap,
        res.iterations,
        res.seconds,
        converged=res.converged,
    )


def _mafalda_gram(mixing_matrix, steps: int, given) -> np.ndarray:
    if given is None:
        return mafalda.workload_gram(mixing_matrix, steps=steps)
    given = np.asarray(given, dtype=np.float64)
    if given.shape != (steps, steps):
        raise ValueError(f"Expected workload_gram shaped ({steps}, {steps}), got {given.shape}.")
    return given


def _compact(
    mechanism,
    mixing_matrix,
    *,
    steps,
    participation,
    tolerance,
    max_iterations,
    bandwidth,
    buffers,
    workload_gram,
):
    from edgedp.families.mf import compact_banded, compact_blt

    if mechanism == "banded" and bandwidth is None:
        raise ValueError("mechanism='banded' needs a bandwidth (e.g. --bandwidth 8).")
    if mechanism == "blt" and buffers is None:
        raise ValueError("mechanism='blt' needs a number of buffers (e.g. --buffers 2).")
    dense = None
    if steps > workload.DENSE_MAX_STEPS:  # no T × T matrix: W's eigenvalues, no dense optimum
        H = _spectral(mixing_matrix, steps, workload_gram)  # noqa: N806
    else:
        H = _mafalda_gram(mixing_matrix, steps, workload_gram)  # noqa: N806
        dense = mf_optimal.optimize(
            H, participation=participation, tolerance=tolerance, max_iterations=max_iterations
        )
    known = None if dense is None else dense.loss
    if mechanism == "banded":
        fit = compact_banded.fit_banded(
            H, participation=participation, bandwidth=bandwidth, dense_loss=known
        )
    else:
        fit = compact_blt.fit_blt(H, participation=participation, buffers=buffers, dense_loss=known)
    return PlannedFactor(
        fit.factor,
        fit.loss,
        None if dense is None else dense.dual_bound,
        None if dense is None else dense.gap,
        fit.evaluations,
        fit.seconds + (0.0 if dense is None else dense.seconds),
        fit.loss_ratio,
        converged=True if dense is None else dense.converged,
        skipped=fit.skipped,
    )


def _spectral(mixing_matrix, steps: int, given) -> workload.SpectralWorkload:
    if isinstance(given, workload.SpectralWorkload):
        return given
    return workload.SpectralWorkload.of_mixing(mixing_matrix, steps=steps)


def relative_loss_compact(
    factor,
    mixing_matrix: np.ndarray,
    *,
    participation: Participation,
    steps: int,
    spectral: workload.SpectralWorkload | None = None,
) -> float | None:
    """:func:`relative_loss` of a Toeplitz factor without T × T matrices (long horizons):
    the factor's compact sensitivity (``accounting.factor_sensitivity``) and the spectral
    energy of its inverse column; None if the factor is not Toeplitz or its sensitivity is
    only bounded."""
    from edgedp.accounting import factor_sensitivity

    columns = workload.toeplitz_columns(factor, steps)
    ours = factor_sensitivity.sensitivity(factor, participation, steps=steps).value
    base = factor_sensitivity.sensitivity(factors.Identity(), participation, steps=steps).value
    if columns is None or ours is None or base is None:
        return None
    S = spectral or workload.SpectralWorkload.of_mixing(mixing_matrix, steps=steps)  # noqa: N806
    return float(ours.value**2 * S.energy(columns[1])[0] / (base.value**2 * S.trace()))


def relative_loss(
    strategy: np.ndarray,
    mixing_matrix: np.ndarray,
    *,
    participation: Participation,
    workload_gram: np.ndarray | None = None,
) -> float:
    """MAFALDA objective of ``strategy`` divided by that of C = I (DP-D-SGD); pass the
    ``workload_gram`` of (mixing_matrix, steps) when it is already computed."""
    steps = strategy.shape[0]
    H = _mafalda_gram(mixing_matrix, steps, workload_gram)  # noqa: N806
    ours = mf_optimal.loss(strategy, H, participation)
    base = mf_optimal.loss(np.eye(steps), H, participation)
    return float(ours / base)
