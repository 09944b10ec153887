"""The cross-agent family (``edgedp plan cross``): noise correlated across agents (Whisper,
DECOR; paper 001) or added per message or per gossip round (Zip-DL, Muffliato; paper 000 A).

Rules: :mod:`~edgedp.families.cross.whisper`, ``decor``, ``zipdl``, ``muffliato``. The plan
section and each device's share of the noise: :mod:`~edgedp.families.cross.noise`.
Accountant: :mod:`~edgedp.families.cross.accounting`. Planner:
:mod:`~edgedp.families.cross.planning`, with Whisper's covariance program
(:mod:`~edgedp.families.cross.covariance`) and its compact forms
(:mod:`~edgedp.families.cross.compact_covariance`).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgedp.mechanisms import GAUSSIAN_EXAMPLE, Family

__all__ = ["EXAMPLE", "FAMILY", "CrossTraits"]


@dataclass(frozen=True, slots=True)
class CrossTraits:
    """correlated: its noise is correlated across agents by a planned covariance R̃ (ε per
    trust model and the cross-agent linear-Gaussian attack apply; False: node-private);
    shared_seed: part of its noise comes from a seed all agents share (known to an
    honest-but-curious coalition); message_noise: its nodes add noise to each outgoing
    message as well (Zip-DL); gossip_rounds: its plan's steps count K gossip rounds per
    gradient round (Muffliato); sketchable: a ``dome`` plan may carry its noise in the
    sketched space."""

    correlated: bool = False
    shared_seed: bool = False
    message_noise: bool = False
    gossip_rounds: bool = False
    sketchable: bool = False


FAMILY = Family("cross", CrossTraits)
#: Example options (:data:`edgedp.mechanisms.EXAMPLE_FRAME`) its mechanisms share.
EXAMPLE = {**GAUSSIAN_EXAMPLE, "clip_norm": 0.1}
