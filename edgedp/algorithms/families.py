"""The five planner families, what their mechanisms may differ in, and shared examples.

Each :class:`~edgedp.mechanisms.Family` names the traits type its mechanisms carry
(:attr:`~edgedp.mechanisms.Mechanism.traits`); code that must treat one mechanism of a
family unlike another asks its trait (``mechanisms.get(name).has("message_noise")``) instead
of comparing names. :data:`FAMILIES` is the explicit list the registry starts from, in the
order of ``edgedp plan``'s subcommands.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgedp.mechanisms import Family

__all__ = [
    "CROSS",
    "CROSS_EXAMPLE",
    "CrossTraits",
    "DOME",
    "FAMILIES",
    "GAUSSIAN_EXAMPLE",
    "LAPLACE",
    "LAPLACE_EXAMPLE",
    "LaplaceTraits",
    "MF",
    "MfTraits",
    "SGD",
]


@dataclass(frozen=True, slots=True)
class MfTraits:
    """planned: its factor comes from :mod:`edgedp.planning.factorization`;
    factor_options: the planner options its factor takes (``bandwidth``, ``buffers``), spelled
    as ``edgedp plan`` flags with ``_`` for ``-``."""

    planned: bool = False
    factor_options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LaplaceTraits:
    """tracking: its Laplace schedule carries the gradient-tracking stepsize β (sr-gt)."""

    tracking: bool = False


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


SGD = Family("sgd")
MF = Family("mf", MfTraits)
LAPLACE = Family("laplace", LaplaceTraits)
CROSS = Family("cross", CrossTraits)
DOME = Family("dome")
#: The families, in the order of ``edgedp plan``'s subcommands.
FAMILIES = (SGD, MF, LAPLACE, CROSS, DOME)

#: Example options (:data:`edgedp.mechanisms.EXAMPLE_FRAME`) several mechanisms share.
GAUSSIAN_EXAMPLE = {"target_epsilon": 4.0, "delta": 1e-6}
CROSS_EXAMPLE = {**GAUSSIAN_EXAMPLE, "clip_norm": 0.1}
LAPLACE_EXAMPLE = {"target_epsilon": 1.0, "gamma": 0.001, "q1": 0.97, "q2": 0.98}
