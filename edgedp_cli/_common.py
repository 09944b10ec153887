"""Helpers shared by the ``edgedp`` command modules: errors, output, argument parsing.

Exit status of every command (the numbering of ``edgedp-agent``, firmware_py/daemon.py):
0 done, 1 the run failed (:class:`RunFailedError`), 2 bad usage (:class:`UsageError`, and
argparse's own errors), 3 refused (:class:`RefusedError`: a plan that fails its checks, or an
optional extra this install lacks).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from edgedp import strict_json

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "CommandError",
    "RefusedError",
    "RunFailedError",
    "UsageError",
    "add_delta_flag",
    "add_output_flags",
    "chatty",
    "check_out",
    "delta_of",
    "emit",
    "key_value_lines",
    "load_plan",
    "load_target",
    "out_folder",
    "parse_graph",
    "parse_participation",
    "participation_hint",
    "progress_lines",
    "write_plan",
]


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3


class CommandError(Exception):
    """A command that cannot finish; reported as one line on stderr with ``code``."""

    code = EXIT_FAILED


class RunFailedError(CommandError):
    """The run itself failed (agents exited with errors, the model diverged): status 1."""

    code = EXIT_FAILED


class UsageError(CommandError):
    """A bad argument; reported as one line, exit status 2."""

    code = EXIT_USAGE


class RefusedError(CommandError):
    """Valid usage the command refuses (a plan failing its checks, a missing extra): 3."""

    code = EXIT_REFUSED


def add_output_flags(p) -> None:
    """``--json`` and ``-q`` of a command (also accepted before the command name)."""
    p.add_argument(
        "--json",
        action="store_true",
        help="print exactly one strict JSON object on stdout (NaN as null, infinities as "
        'the strings "inf" and "-inf")',
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress lines on stderr (warnings and errors are still printed)",
    )


def chatty(args) -> bool:
    """Whether progress lines go to stderr (neither --json nor -q)."""
    return not (getattr(args, "json", False) or getattr(args, "quiet", False))


def progress_lines(args):
    """``say(line)``: a progress line on stderr unless --json or -q."""

    def say(line: str) -> None:
        if chatty(args):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    return say


def out_folder(out: str) -> Path:
    """The output folder ``--out``, created if missing (UsageError naming why it cannot be)."""
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror or exc}") from None
    return Path(out)


def key_value_lines(payload: dict) -> str:
    """``key  value`` lines with the values aligned after the longest key; a list of
    strings takes one line per item."""
    width = max((len(str(k)) for k in payload), default=0) + 2
    lines = []
    for k, v in payload.items():
        items = v if isinstance(v, list) and v and all(isinstance(x, str) for x in v) else [v]
        lines += [f"{k if i == 0 else '':<{width}}{x}" for i, x in enumerate(items)]
    return "\n".join(lines)


def emit(args, payload: dict, text: str) -> None:
    """Print ``payload`` as one strict JSON object (--json), else ``text``."""
    if args.json:
        sys.stdout.write(strict_json.dumps(payload, sort_keys=True) + "\n")
    else:
        sys.stdout.write(text.rstrip() + "\n")


def parse_participation(text: str):
    from edgedp.accounting.participation import Participation

    try:
        return Participation.from_string(text)
    except ValueError as exc:
        raise UsageError(f"--participation {text!r}: {exc} (use k,b, e.g. 100,1)") from None


def parse_graph(spec: str):
    import edgedp_topologies

    try:
        return edgedp_topologies.parse(spec)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None


def participation_hint(args) -> str:
    """`` (this task runs K,B)`` for plan's arguments, or "" if the task cannot be read."""
    from edgedp.planning import build
    from edgedp.planning.request import PlanRequest

    try:
        request = PlanRequest.from_namespace(args)
        run = build.default_participation(dataclasses.replace(request, participation=None))
    except (ValueError, TypeError, OSError):
        return ""
    return f" (this task runs --participation {run.k},{run.b})"


def check_out(args) -> None:
    """Refuse a plan file OUT that cannot be written: a folder, or in a missing one."""
    out = Path(args.out)
    if args.out.endswith(("/", "\\")) or out.is_dir():
        raise UsageError(f"OUT {args.out}: is a folder; give a file name, e.g. {out / 'run.plan'}")
    if not out.parent.is_dir():
        raise UsageError(
            f"OUT {args.out}: folder {out.parent} does not exist (create it: mkdir -p {out.parent})"
        )


def write_plan(args, plan) -> None:
    """Write ``plan`` to ``args.out``, signed with ``args.sign`` (a planning key file) if set."""
    from edgedp import signing

    key = None
    if getattr(args, "sign", None):
        try:
            key = signing.read_key(Path(args.sign), kind="secret")
        except signing.SignatureError as exc:
            raise UsageError(f"--sign: {exc}") from None
    check_out(args)
    out = Path(args.out)
    try:
        out.write_bytes(plan.to_bytes(signing_key=key))
    except OSError as exc:
        raise UsageError(f"OUT {args.out}: {exc.strerror}") from None


def load_plan(path: str):
    from edgedp.errors import PlanError
    from edgedp.plan import NoisePlan

    try:
        return NoisePlan.from_bytes(Path(path).read_bytes(), gram=True)
    except OSError as exc:
        raise UsageError(f"cannot read plan {path!r}: {exc.strerror}") from None
    except PlanError as exc:
        raise RefusedError(f"{path}: {exc}") from None


def load_target(path: str):
    """A scenario (``.toml``) or a plan file as a scenario on an ideal network."""
    from edgedp_sim import scenarios

    if path.endswith(".toml"):
        try:
            return scenarios.load(path)
        except scenarios.ScenarioError as exc:
            raise UsageError(str(exc)) from None
    return scenarios.from_plan(load_plan(path))


def add_delta_flag(p, what: str = "the epsilon printed") -> None:
    """``--delta D``: δ of ``what``, default the plan's own δ (:func:`delta_of` checks it)."""
    p.add_argument(
        "--delta",
        type=float,
        help=f"delta of {what}, in (0, 1) (default: the plan's delta, which its report names)",
    )


def delta_of(args) -> float | None:
    """``args.delta`` (None: the plan's own δ); UsageError outside (0, 1)."""
    if args.delta is not None and not 0 < args.delta < 1:
        raise UsageError(f"--delta {args.delta} must be in (0, 1)")
    return args.delta


def add_cluster_flags(p, what: str) -> None:
    """``--workers N``, ``--scheduler ADDRESS``, ``--block-trials K``: run ``what`` in keyed
    blocks on Dask (:func:`cluster`)."""
    p.add_argument(
        "--scheduler",
        help=f"address of a running Dask scheduler: the {what} run there in blocks",
    )
    p.add_argument(
        "--workers",
        type=int,
        help=f"run the {what} in blocks on a local Dask cluster of this many worker processes",
    )
    p.add_argument(
        "--block-trials",
        type=int,
        help="trials per block on Dask (default: about four blocks per worker)",
    )


def cluster(args):
    """A context giving the Dask client of ``args`` (:func:`add_cluster_flags`), or None
    when neither ``--workers`` nor ``--scheduler`` is given (UsageError for a count < 1)."""
    import contextlib

    for flag in ("workers", "block_trials"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value} must be >= 1")
    if args.scheduler is None and args.workers is None:
        return contextlib.nullcontext(None)
    from edgedp_sim import shards

    return shards.connect(args.scheduler, args.workers or 2)
