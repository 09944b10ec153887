"""``edgedp plan FAMILY OUT``: one subcommand per mechanism family, each with its own flags.

=========  ==============================================  ===============================
family     mechanisms (``--mechanism``; first = default)    its own flags
=========  ==============================================  ===============================
sgd        dp-dsgd, dsgd                                    (the shared ones only)
mf         mafalda, antipgd, dmf, banded, blt               planner: --bandwidth, --buffers,
                                                            --tolerance, --max-iterations
laplace    sr-gt, dpop                                      paper 004: --gamma, --beta, --q1,
                                                            --q2, --delta-grad, --adjacency
cross      whisper, decor, zipdl, muffliato                 --form, --rank, --ridge,
                                                            --message-variance,
                                                            --gossip-rounds, --sketch-*
dome       dome                                             --sketch-*, --optimizer
=========  ==============================================  ===============================

The shared flags (topology, steps, task, seed, clip norm, δ, target ε, weighting, --sign)
come from
one parent parser; the Gaussian families add --participation, --noise-multiplier and
--learning-rate. :func:`complete` gives every other family's option its default, so
:func:`build_plan` reads one namespace whatever the family.
"""

from __future__ import annotations

import argparse

from edgedp import mechanisms as registry

__all__ = ["FAMILIES", "build_plan", "complete", "family_of", "namespace", "register"]

#: The default of ``--mechanism`` where a family's first registered one is not it.
_DEFAULT = {"sgd": "dp-dsgd", "mf": "mafalda"}


def _families() -> dict[str, tuple[str, ...]]:
    out = {}
    for family in registry.families():
        names = registry.names(family=family, command_line=True)
        first = _DEFAULT.get(family, names[0])
        out[family] = (first, *(n for n in names if n != first))
    return out


#: family -> its mechanisms (from :mod:`edgedp.mechanisms`), the first being the default of
#: ``--mechanism``, when this module was imported; the parsers read the registry when built.
FAMILIES: dict[str, tuple[str, ...]] = _families()

_HELP = {
    "sgd": "D-SGD without noise (dsgd) or with i.i.d. Gaussian noise (dp-dsgd)",
    "mf": "noise correlated over time by a factor C (antipgd; dmf, mafalda, banded and blt "
    "are planned for the topology)",
    "laplace": "pure epsilon-DP Laplace schedules of paper 004 (sr-gt, dpop)",
    "cross": "Gaussian noise correlated across agents (whisper, decor, zipdl, muffliato)",
    "dome": "sketched k-float private messages (paper 002)",
}


def family_of(mechanism: str) -> str:
    """The family whose subcommand plans ``mechanism``; ValueError for an unknown one."""
    families = _families()
    for family, mechanisms in families.items():
        if mechanism in mechanisms:
            return family
    known = sorted(m for ms in families.values() for m in ms)
    raise ValueError(f"mechanism={mechanism!r}; expected one of {known}")


def _common_parent() -> argparse.ArgumentParser:
    from edgedp import topology

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--topology",
        required=True,
        help="the gossip graph: er:N:P[:SEED], ring:N, torus:R:C, smallworld:N:K:P[:SEED], "
        "complete:N, star:N, florentine, karate, or an edge-list file (required)",
    )
    p.add_argument("--steps", type=int, required=True, help="gossip steps T (required)")
    p.add_argument(
        "--target-eps",
        type=float,
        help="the epsilon to calibrate the noise to (Gaussian families: with --delta; "
        "laplace: the pure epsilon, required)",
    )
    p.add_argument(
        "--delta",
        type=float,
        help="delta in (0, 1) of --target-eps (Gaussian families), recorded in the plan: "
        "every report of its epsilon is at it (default 1e-6 with --noise-multiplier; "
        "laplace: delta of its PLD (epsilon, delta) line)",
    )
    p.add_argument(
        "--clip-norm",
        type=float,
        default=1.0,
        help="per-example L2 clip norm Delta (default 1.0; laplace --adjacency problem allows inf)",
    )
    p.add_argument(
        "--weighting",
        default="metropolis-hastings",
        choices=sorted(topology.WEIGHTINGS),
        help="gossip matrix W of the topology (default metropolis-hastings)",
    )
    p.add_argument(
        "--model",
        default="logistic",
        help="task model: logistic (default), linear, softmax:C, "
        "mlp:IN-H1-..-OUT[:relu|tanh] or onnx:PATH",
    )
    p.add_argument(
        "--loss", choices=["mse", "bce", "ce"], help="task loss (default: the model's own)"
    )
    p.add_argument(
        "--dataset", default="digits-parity", help="task dataset (default digits-parity)"
    )
    p.add_argument(
        "--partition",
        default="iid",
        help="how the dataset is split over the nodes: iid (default) or dirichlet:ALPHA",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="examples per local step (default 0: the whole local dataset each step)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the plan's noise streams (default 0)"
    )
    p.add_argument(
        "--sign",
        metavar="KEY",
        help="sign the plan with this planning secret key file (edgedp keys planner; "
        "default: unsigned, or sign it later with edgedp sign)",
    )
    return p


def _gaussian_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--participation",
        help="k,b: each example participates at most k times, exactly b steps apart "
        "(b = batches per epoch of the local data); must match the task (required)",
    )
    p.add_argument(
        "--noise-multiplier",
        type=float,
        help="sigma, noise std over sensitivity (instead of --target-eps; dsgd: none)",
    )
    p.add_argument(
        "--learning-rate",
        type=float,
        help="stepsize of the local SGD step (default: private plans take the planner's "
        "noise-budget rule, from public quantities only, recorded in the plan; 0.5 without "
        "noise)",
    )
    return p


def _family_arguments(family: str, p) -> None:
    from edgedp_cli import cross_cmd, dome_cmd, mf_cmd, tune_cmd

    if family == "mf":
        mf_cmd.add_plan_arguments(p)
    elif family == "laplace":
        tune_cmd.add_plan_arguments(p)
    elif family == "cross":
        cross_cmd.add_plan_arguments(p)
        dome_cmd.add_plan_arguments(p, family="cross")
    elif family == "dome":
        dome_cmd.add_plan_arguments(p, family="dome")


def register(sub, add) -> None:
    """Add ``plan`` and its family subcommands to the ``edgedp`` parser."""
    del add  # the families build their own leaves
    from edgedp_cli import _common

    group = sub.add_parser(
        "plan",
        help="write a NoisePlan and print its guarantee (one subcommand per family)",
        description="Write a NoisePlan to OUT and print its certified guarantee. "
        "Choose the mechanism family; `edgedp plan FAMILY --help` lists its flags.",
    )
    families = group.add_subparsers(dest="family", required=True, metavar="FAMILY")
    common, gaussian = _common_parent(), _gaussian_parent()
    for family, mechanisms in _families().items():
        parents = [common] if family == "laplace" else [common, gaussian]
        p = families.add_parser(
            family, parents=parents, help=_HELP[family], description=_HELP[family]
        )
        p.add_argument("out", metavar="OUT", help="the plan file to write")
        _common.add_output_flags(p)
        if len(mechanisms) > 1:
            p.add_argument(
                "--mechanism",
                default=mechanisms[0],
                choices=mechanisms,
                help=f"which {family} mechanism (default {mechanisms[0]})",
            )
        else:
            p.set_defaults(mechanism=mechanisms[0])
        _family_arguments(family, p)
        p.set_defaults(func=cmd_plan)


def _family_parsers() -> dict[str, argparse.ArgumentParser]:
    top = argparse.ArgumentParser()
    register(top.add_subparsers(dest="command"), None)
    action = next(a for a in top._subparsers._group_actions if a.dest == "command")
    group = action.choices["plan"]
    leaves = next(a for a in group._subparsers._group_actions if a.dest == "family")
    return dict(leaves.choices)


def complete(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every plan option of every family present (absent ones at their default).

    :func:`build_plan` reads options of other families (``sketch_dim`` of a
    dp-dsgd plan is None); a family's own values are kept.
    """
    for parser in _family_parsers().values():
        for action in parser._actions:
            if action.dest != "help" and not hasattr(args, action.dest):
                setattr(args, action.dest, action.default)
    return args


def namespace(mechanism: str, topology: str, steps: int) -> argparse.Namespace:
    """The defaults of ``edgedp plan`` for ``mechanism`` (every family's options present)."""
    import os

    family = family_of(mechanism)
    argv = ["--topology", str(topology), "--steps", str(steps), os.devnull]
    if len(_families()[family]) > 1:
        argv += ["--mechanism", mechanism]
    return complete(_family_parsers()[family].parse_args(argv))


def build_plan(args):
    """Everything ``edgedp plan FAMILY`` does but writing the file: the parsed flags as a
    :class:`~edgedp.planning.request.PlanRequest`, built by
    :func:`edgedp.planning.build.build` (the builder of scenario files and
    :func:`edgedp.make_plan` too).

    Returns ``(plan, report, text)``: the NoisePlan, the report ``plan`` prints (a dict) and
    a function turning the report (with ``out`` added) into the human-readable text.
    Raises :class:`UsageError` naming the bad option.
    """
    import sys

    from edgedp.planning import build as builder
    from edgedp.planning.request import PlanRequest
    from edgedp_cli import _common

    laplace = registry.get(args.mechanism).family == "laplace"
    _common.parse_graph(args.topology)  # a typo there first: the participation hint needs the graph
    if not laplace and args.participation is None:
        # the command line wants the participation said: the ε is for it
        hint = _common.participation_hint(args)
        raise _common.UsageError(f"--mechanism {args.mechanism} needs --participation k,b{hint}")

    def progress(iteration, loss, bound):
        if _common.chatty(args):
            sys.stderr.write(
                f"\r  planning {args.mechanism}: iteration {iteration}, "
                f"gap {(loss - bound) / bound:.2e}   "
            )
            sys.stderr.flush()

    def warn(line: str) -> None:  # said even with --json: the factor is further from optimal
        sys.stderr.write(f"edgedp plan: warning: {line}\n")

    try:
        built = builder.build(PlanRequest.from_namespace(args), progress=progress, warn=warn)
    except (ValueError, TypeError) as exc:
        raise _common.UsageError(str(exc)) from None
    finally:
        if _common.chatty(args) and registry.get(args.mechanism).has("planned"):
            sys.stderr.write("\n")
    assert built.report is not None
    if registry.get(args.mechanism).family == "cross":
        from edgedp_cli import cross_cmd

        return built.plan, built.report, cross_cmd.text
    return built.plan, built.report, _common.key_value_lines


def cmd_plan(args) -> None:
    """``edgedp plan FAMILY OUT``: plan, write OUT, print the guarantee."""
    from edgedp_cli import _common

    complete(args)
    _common.check_out(args)  # a bad OUT fails before any planning
    p, payload, text = build_plan(args)
    _common.write_plan(args, p)
    payload["out"] = args.out
    _common.emit(args, payload, text(payload))
