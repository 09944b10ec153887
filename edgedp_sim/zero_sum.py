"""Probe scenario: zero-sum message masking with no residual noise (paper 004 Table 4, row 4).

Paper 004 compares Alg. 1 with a correlated-randomness method ([8], Gao, Wang & Nedić 2023)
whose privacy rests on a topological assumption — every honest agent has an honest
neighbour — and which therefore cannot stop an eavesdropper (M-NMI 1). That method is not
ours to ship (its random stepsizes and coupling weights are not printed in 004); this module
runs the same *kind* of scheme on the Table 4 setting, named for what it is:

**zero-sum masking** — decentralized gradient descent on the nodes' private costs where
node u sends recipient j the mask x_u + r_{u→j}(k), with masks that cancel in the
recipients' weighted sum, Σ_j W[j, u] r_{u→j} = 0 (Zip-DL's message-wise part, paper 000
App. A.6, with no independent part D = 0), and updates
x_u(k+1) = Σ_j W[u, j] m_{j→u}(k) − α ∇f_u(x_u(k)) (its own slot unmasked). The network
average follows exact DGD (masks cancel in it); there is no DP guarantee.

Attackers (node 0 = agent 1 of Fig. 11, the victim; node 1 = agent 2):

* **honest-but-curious agent 2 alone** (agent 3 honest, the method's assumption): what it
  receives from agent 1, ℐ₂(k) = {m_{1→2}(k), m_{1→2}(k+1)};
* **eavesdropper on every link**: cancels the masks in agent 1's weighted outgoing sum,
  rebuilds x₁(k) and x₁(k+1) from agent 1's incoming messages, and inverts the update:
  ℐ_e(k) = (Σ_j W[1,j] m_{j→1}(k) − x₁(k+1))/α = ∇f₁(x₁(k)) exactly (up to rounding).

All draws come from keyed streams of the seed (:mod:`edgedp.rng`).
"""

# ruff: noqa: N803, N806

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgedp import rng
from edgedp_sim.sensor_fusion import SensorFusion

__all__ = ["ZeroSumRun", "simulate"]


@dataclass(frozen=True, slots=True, eq=False)
class ZeroSumRun:
    """``private`` ∇f_victim(x_victim(k)) ``(trials, K, p)``; ``hbc`` and ``eavesdropper``
    information sets ``(trials, K, ·)``; ``residual`` ‖x(K) − 1x*ᵀ‖² per trial."""

    private: np.ndarray
    hbc: np.ndarray
    eavesdropper: np.ndarray
    residual: np.ndarray


def simulate(
    problem: SensorFusion,
    W: np.ndarray,
    *,
    trials: int,
    iterations: int,
    stepsize: float,
    mask_std: float = 1.0,
    seed: int = 0,
    victim: int = 0,
    curious: int = 1,
) -> ZeroSumRun:
    """Run zero-sum masking for ``trials`` independent mask draws (module docstring)."""
    W = np.asarray(W, dtype=np.float64)
    n, p = problem.nodes, problem.dim
    if W.shape != (n, n) or not np.allclose(W, W.T, atol=1e-12):
        raise ValueError(
            "Expected a symmetric n x n mixing matrix (the masks cancel with W[j, u])."
        )
    if not (W[victim, curious] > 0 and victim != curious):
        raise ValueError(f"Expected node {curious} to be a neighbour of the victim {victim}.")
    offdiag = W - np.diag(np.diag(W))
    wsq = np.sum(offdiag**2, axis=0)  # Σ_j W[j, u]² over recipients j ≠ u
    key = rng.derive_key(rng.seed_secret(seed), "zero-sum-masks")
    x = np.zeros((trials, n, p))
    K = iterations
    private = np.empty((trials, K, p))
    sent_to_curious = np.empty((trials, K + 1, p))
    xhat = np.empty((trials, K + 1, p))  # the eavesdropper's x_victim(k)
    incoming = np.empty((trials, K, p))  # Σ_{j≠victim} W[victim, j] m_{j→victim}(k)
    for k in range(K + 1):
        y = rng.gaussian(key, k, (trials, n, n, p))  # y[·, u, j]: u's draw for recipient j
        coef = np.einsum("ju,tujp->tup", offdiag, y) / wsq[None, :, None]
        r = mask_std * (y - offdiag.T[None, :, :, None] * coef[:, :, None, :])
        r = r * (offdiag.T[None, :, :, None] > 0)  # masks on real links only
        m = x[:, :, None, :] + r  # m[·, u, j] = message u → j (own slot unmasked)
        sent_to_curious[:, k] = m[:, victim, curious]
        # eavesdropper: the masks cancel in the victim's weighted outgoing sum
        w_out = offdiag[:, victim]
        xhat[:, k] = np.einsum("j,tjp->tp", w_out, m[:, victim]) / w_out.sum()
        if k == K:
            break
        incoming[:, k] = np.einsum("j,tjp->tp", offdiag[victim], m[:, :, victim])
        grad = problem.gradient(x)
        private[:, k] = grad[:, victim]
        received = np.einsum("uj,tjup->tup", W, m)  # Σ_j W[u, j] m_{j→u} (own slot: x_u)
        x = received - stepsize * grad
    wvv = W[victim, victim]
    eav = (wvv * xhat[:, :-1] + incoming - xhat[:, 1:]) / stepsize
    hbc = np.concatenate([sent_to_curious[:, :-1], sent_to_curious[:, 1:]], axis=-1)
    return ZeroSumRun(private, hbc, eav, problem.residual(x))
