"""The two axes of a :class:`~edgedp.plan.NoisePlan`: what a node adds × what a message is.

Every plan sits at one point of a small grid, and its per-family sections follow from it:

============  =========================================================================
axis          values and the section each one requires
============  =========================================================================
noise kind    :attr:`NoiseKind.NONE` (``dsgd``), :attr:`NoiseKind.GAUSSIAN` (the
              factor, σ and sensitivity fields), :attr:`NoiseKind.LAPLACE` (a
              ``laplace`` section, paper 004); given by the mechanism's registry record
message kind  :attr:`MessageKind.MODEL` (a noised model), :attr:`MessageKind.SKETCH`
              (k coefficients, DOME: a ``sketch`` section, paper 002), each with noise
              correlated across agents when a ``cross_agent`` section is present
              (:attr:`MessageKind.MODEL_CROSS`, :attr:`MessageKind.SKETCH_CROSS`)
============  =========================================================================

Laplace mechanisms (``sr-gt``, ``dpop``) carry a
:class:`~edgedp.families.laplace.accounting.LaplaceSchedule` (γ, β, q₁, q₂, δ, ε, adjacency). Their
Gaussian fields are inert: identity factor, σ = 0, participation (T, 1) (every round is
counted), and ``learning_rate`` holds γ = α₁ for display only — the schedule is
authoritative. Cross-agent mechanisms (``whisper``, ``decor``, ``zipdl``, ``muffliato``;
papers 001, 000 App. A.4–A.6) carry a :class:`~edgedp.families.cross.noise.CrossAgentSpec` with the
normalized covariance factors (build them with
:func:`edgedp.families.cross.planning.plan_cross_agent`);
``sensitivity`` is then the Mahalanobis one, so ν = σ·sens·Δ and μ = 1/σ as everywhere.
Pairwise secrets and the shared seed are never in a plan. DOME plans carry a
:class:`~edgedp.families.dome.sketch.SketchSpec` (k, basis family, public seed, refresh,
optimizer), and may carry a ``cross_agent`` section of a sketchable kind. Each section is part of
the plan's encoding and hash only when present, so plans without it keep their hashes; the axes
themselves are never encoded (they follow from the mechanism and the sections).

>>> MessageKind.of(sketch=True, cross=False)
<MessageKind.SKETCH: 'sketch'>
>>> MessageKind.MODEL_CROSS == "model+cross", MessageKind.MODEL_CROSS.cross
(True, True)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from edgedp import mechanisms
from edgedp.errors import PlanError

__all__ = ["MessageKind", "NoiseKind", "axes"]


class NoiseKind(StrEnum):
    """What a node adds to its message (:data:`edgedp.mechanisms.NOISE_KINDS`)."""

    NONE = "none"
    GAUSSIAN = "gaussian"
    LAPLACE = "laplace"


class MessageKind(StrEnum):
    """What a message carries: a model or a sketch, with or without cross-agent noise."""

    MODEL = "model"
    SKETCH = "sketch"
    MODEL_CROSS = "model+cross"
    SKETCH_CROSS = "sketch+cross"

    @property
    def sketched(self) -> bool:
        """True when a message carries k sketch coefficients (a ``sketch`` section)."""
        return self in (MessageKind.SKETCH, MessageKind.SKETCH_CROSS)

    @property
    def cross(self) -> bool:
        """True when the noise is correlated across agents (a ``cross_agent`` section)."""
        return self in (MessageKind.MODEL_CROSS, MessageKind.SKETCH_CROSS)

    @classmethod
    def of(cls, *, sketch: bool, cross: bool) -> MessageKind:
        """The message kind of a plan with (or without) each section."""
        return cls(("sketch" if sketch else "model") + ("+cross" if cross else ""))


def axes(
    mechanism: str, *, laplace: Any, cross_agent: Any, sketch: Any
) -> tuple[NoiseKind, MessageKind]:
    """The plan's ``(noise kind, message kind)``; PlanError when a section does not belong.

    The noise kind is the mechanism's (registry); a ``laplace`` section belongs exactly to
    Laplace noise, a ``sketch`` section exactly to ``dome``, a ``cross_agent`` section
    exactly to the cross-agent family or to a ``dome`` plan of a sketchable kind.
    """
    try:
        mech = mechanisms.get(mechanism)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    noise = NoiseKind(mech.noise)
    if (laplace is not None) != (noise is NoiseKind.LAPLACE):
        raise PlanError(
            f"A laplace section belongs exactly to mechanisms {mechanisms.names(noise='laplace')}, "
            f"not {mechanism!r}."
        )
    if sketch is not None and mech.family != "dome":
        raise PlanError(f"A sketch section belongs exactly to 'dome' plans, not {mechanism!r}.")
    sketchable = mechanisms.names(sketchable=True)
    if mech.family == "dome" and cross_agent is not None:
        if cross_agent.kind not in sketchable or sketch is None:
            raise PlanError(
                f"A dome plan may carry a cross_agent section of kind {sketchable}, "
                f"not {cross_agent.kind!r}."
            )
    elif (cross_agent is not None) != (mech.family == "cross"):
        raise PlanError(
            "A cross_agent section belongs exactly to mechanisms "
            f"{mechanisms.names(family='cross')}, not {mechanism!r}; build them with "
            "edgedp.families.cross.planning.plan_cross_agent."
        )
    return noise, MessageKind.of(sketch=sketch is not None, cross=cross_agent is not None)
