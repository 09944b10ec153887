"""``edgedp plan dome --sketch-dim k``: sketched (k-float) private messages.

``edgedp plan cross --mechanism whisper|decor --sketch-dim k`` plans a ``dome`` plan whose
k-dim noise is correlated across agents (:func:`edgedp.planning.cross_agent.make_plan`
with ``sketch=``).

The options build the plan's :class:`~edgedp.sketch.SketchSpec`; the report adds the floats
and bytes per message and the per-step noise energy relative to DP-D-SGD at the same ε
(paper 002 Lemma 3.1: k ν² instead of d ν²).
"""

from __future__ import annotations

from edgedp_cli._common import UsageError

__all__ = ["add_plan_arguments", "factor_from_args", "report", "sketch_from_args"]


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


def sketch_from_args(args, model_dim: int, graph=None):
    """The SketchSpec of ``args`` (dome; whisper/decor with --sketch-dim), checked against d."""
    if args.mechanism != "dome":
        if args.sketch_dim is None:
            return None
        if args.mechanism not in ("whisper", "decor"):
            raise UsageError("--sketch-dim is only for --mechanism dome, whisper or decor")
    from edgedp.sketch import SketchSpec

    if args.sketch_dim is None:
        raise UsageError("edgedp plan dome needs --sketch-dim k")
    adaptive = {}
    if args.sketch_basis == "adaptive":
        from edgedp import sketch_adaptive

        lag = args.sketch_lag
        if lag == 0 and graph is not None:
            tree = sketch_adaptive.spanning_tree([graph.neighbours(u) for u in range(graph.n)])
            lag = sketch_adaptive.min_lag(tree.height, max(1, args.sketch_refresh))
        adaptive = {
            "energy": args.sketch_energy,
            "probes": args.sketch_probes,
            "lag": lag,
            "mean_removal": args.sketch_mean_removal,
        }
    try:
        spec = SketchSpec(
            **adaptive,
            dim=args.sketch_dim,
            basis=args.sketch_basis,
            clip=args.sketch_clip,
            seed=args.sketch_seed,
            refresh=args.sketch_refresh,
            optimizer=args.optimizer,
            noise_aware=args.noise_aware,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if spec.dim > model_dim:
        raise UsageError(f"--sketch-dim {spec.dim} exceeds the model dimension d={model_dim}")
    return spec


def factor_from_args(args):
    """dome's temporal factor (None: the identity default)."""
    if args.mechanism != "dome" or args.sketch_temporal == "identity":
        return None
    from edgedp import factors

    return factors.AntiPGD()


def report(p, model_dim: int) -> dict:
    """Message size and noise energy of a dome plan."""
    from edgedp.accounting import dome as dome_acc

    energy = dome_acc.noise_energy(p, model_dim=model_dim)
    return {
        "sketch_dim": p.sketch.dim,
        "model_dim": model_dim,
        "sketch_basis": p.sketch.basis,
        # adaptive: a k-float frame up and one down each spanning-tree edge per round
        **(
            {"sketch_lag": p.sketch.lag, "aggregate_floats_per_round": 2 * (p.n - 1) * p.sketch.dim}
            if p.sketch.basis == "adaptive"
            else {}
        ),
        "payload_bytes_per_message": 8 * p.sketch.dim,
        "payload_ratio_to_dp_dsgd": p.sketch.dim / model_dim,
        "noise_energy_ratio_to_dp_dsgd": energy["ratio"],
    }
