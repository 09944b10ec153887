"""DECOR: D-SGD with pairwise-cancelling noise on every edge (Allouah et al. 2024).

Paper 001 §II-B / §III: v_i = u_i + Σ_{j∈N(i)} v_ij with u_i ~ N(0, σ²_pair) and
v_ij = −v_ji ~ N(0, σ²_cor) drawn from a secret shared by i and j, i.e. R = σ²_pair I +
σ²_cor L (L the graph Laplacian); the pair terms cancel in any sum over nodes. The plan
stores D = σ²_pair and c_e = σ²_cor (normalized); the calibration is 001 §V-C (R_pair put in
Eq. 10; :func:`edgedp.families.cross.covariance.pair_covariance`). Update rules are D-SGD's.

Trust model SecLDP (paper 000 App. A.5): an eavesdropper without secrets gets μ = 1/σ; a
curious node knows its own edges' secrets, and a node whose neighbours all collude keeps
only σ²_pair — both reported by :func:`edgedp.families.cross.accounting.trust_report`.
Per-edge keys: plan seed in simulations, :func:`edgedp.keys.pairwise_secret` on devices.
"""

from __future__ import annotations

from edgedp import factors, mechanisms
from edgedp import gossip as _gossip
from edgedp.families import cross as family
from edgedp.families.cross import accounting as cross_agent

__all__ = [
    "MECHANISMS",
    "NAME",
    "RULES",
    "TRUST_MODEL",
    "check_plan",
]

NAME = "decor"
TRUST_MODEL = (
    "SecLDP: eavesdroppers without pairwise secrets get the planned guarantee; colluders "
    "remove their own edges' secrets (reported separately)"
)


def check_plan(plan) -> None:
    """DECOR plans: constant D, one constant c on every edge, no shared-seed part."""
    spec = getattr(plan, "cross_agent", None)
    if spec is None or spec.kind != NAME:
        raise ValueError(
            "Expected a cross_agent section of kind 'decor' (edgedp.families.cross.planning)."
        )
    c = spec.edge_variance
    if spec.rank or spec.gossip_rounds != 1 or spec.message_variance != 0:
        raise ValueError("DECOR noise is independent + pairwise only (no seed, no messages).")
    if spec.diag.min() != spec.diag.max() or (c.size and c.min() != c.max()):
        raise ValueError("DECOR uses one sigma_pair and one sigma_cor for every node and edge.")


#: The round rules: D-SGD's (:mod:`edgedp.gossip`) with this plan check.
RULES = _gossip.rules(check_plan)
#: The mechanisms these rules run (registered by :mod:`edgedp.families`).
MECHANISMS = (
    mechanisms.Mechanism(
        "decor",
        RULES,
        family="cross",
        noise="gaussian",
        trust_model=TRUST_MODEL,
        accountant=cross_agent.guarantee,
        factor=factors.Identity,
        attack="decor-known-secrets",
        traits=family.CrossTraits(correlated=True, sketchable=True),
        examples={
            "decor": family.EXAMPLE,
            "decor-ridge": {**family.EXAMPLE, "ridge": 1e-4},
            "decor-sketched": {**family.EXAMPLE, "sketch_dim": 8},
        },
    ),
)
