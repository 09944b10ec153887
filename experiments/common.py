"""The command line every experiment script shares: ``--quick`` and ``--out-dir``.

``--quick`` runs the small version of an experiment (seconds to a minute; what CI re-runs
and compares, experiments/results.py); its outputs go to experiments/out/quick unless
``--out-dir`` says otherwise. The full version writes to experiments/out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
QUICK_OUT = OUT / "quick"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with ``--quick`` and ``--out-dir``, described by ``doc``'s first line."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the small version (what CI re-runs); outputs in experiments/out/quick",
    )
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="folder of the outputs (default: experiments/out, or experiments/out/quick)",
    )
    return ap


def out_dir(args: argparse.Namespace) -> Path:
    """The output folder ``args`` asks for (created)."""
    folder = args.out_dir or (QUICK_OUT if args.quick else OUT)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def defaults(args: argparse.Namespace, **values: tuple[object, object]) -> argparse.Namespace:
    """Fill each option left at None with its (full, quick) value for this run."""
    for name, (full, quick) in values.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args
