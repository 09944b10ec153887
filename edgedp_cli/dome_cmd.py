"""``edgedp plan dome --sketch-dim k``: sketched (k-float) private messages.

``edgedp plan cross --mechanism whisper|decor --sketch-dim k`` plans a ``dome`` plan whose
k-dim noise is correlated across agents (:func:`edgedp.families.cross.planning.plan_cross_agent`
with ``sketch=``).

The options build the plan's :class:`~edgedp.families.dome.sketch.SketchSpec`
(:func:`edgedp.planning.build.sketch_of`); the report adds the floats
and bytes per message and the per-step noise energy relative to DP-D-SGD at the same ε
(paper 002 Lemma 3.1: k ν² instead of d ν²).
"""

from __future__ import annotations

__all__ = ["add_plan_arguments"]


def add_plan_arguments(p, *, family: str) -> None:
    """The sketch options of ``edgedp plan dome`` (``family="dome"``) and of ``edgedp plan
    cross`` (whisper/decor with --sketch-dim)."""
    who = "dome" if family == "dome" else "whisper/decor --sketch-dim"
    p.add_argument(
        "--sketch-dim",
        type=int,
        help="k, floats per message, 1 <= k <= d "
        + (
            "(required)"
            if family == "dome"
            else "(whisper/decor only: a dome plan whose k-dim noise is correlated across "
            "agents; default: no sketch)"
        ),
    )
    p.add_argument(
        "--sketch-basis",
        default="block",
        choices=["block", "gaussian", "adaptive"],
        help=f"{who}: block (default; O(d) per round, device default), gaussian (CGS2, "
        "O(d k^2)) or adaptive (paper 002 Alg. 2 from a lagged spanning-tree aggregate; "
        "O(d k^2))",
    )
    p.add_argument(
        "--sketch-energy",
        type=float,
        default=0.9,
        help=f"{who} --sketch-basis adaptive: proportion q of spectral energy the kept PCA "
        "columns carry (default 0.9)",
    )
    p.add_argument(
        "--sketch-probes",
        type=int,
        default=1,
        help=f"{who} --sketch-basis adaptive: at least this many random probe columns (default 1)",
    )
    p.add_argument(
        "--sketch-mean-removal",
        action="store_true",
        help=f"{who} --sketch-basis adaptive: remove the lagged network mean before "
        "projecting (Alg. 1 l. 9; default off)",
    )
    p.add_argument(
        "--sketch-lag",
        type=int,
        default=0,
        help=f"{who} --sketch-basis adaptive: windows between an aggregate and its use "
        "(default 0 = the minimum the topology's spanning tree allows)",
    )
    p.add_argument(
        "--sketch-clip",
        default="sketch",
        choices=["sketch", "model"],
        help=f"{who}: clip per-example gradients after projection (default sketch, as the "
        "paper) or before, in R^d (model)",
    )
    p.add_argument(
        "--sketch-refresh",
        type=int,
        default=1,
        help=f"{who}: new shared basis every R rounds (default 1; 0 = one basis for the whole run)",
    )
    p.add_argument(
        "--sketch-seed",
        type=int,
        default=0,
        help=f"{who}: public seed of the bases (default 0)",
    )
    p.add_argument(
        "--optimizer",
        default="sgd",
        choices=["sgd", "adam"],
        help=f"{who}: local optimizer (default sgd)",
    )
    p.add_argument(
        "--noise-aware",
        action="store_true",
        help=f"{who} --optimizer adam: subtract the known noise variance from the second "
        "moment (default off)",
    )
    if family == "dome":
        p.add_argument(
            "--sketch-temporal",
            default="identity",
            choices=["identity", "antipgd"],
            help="temporal noise correlation in the sketched space (default identity; "
            "antipgd needs --sketch-refresh 0 to cancel in the model)",
        )
