"""Keyed work on a Dask cluster: trial blocks merged bit for bit, and independent tasks.

A Monte Carlo run of N trials is cut into **blocks** of consecutive trials
(:func:`split`). Every stream of trial i is keyed by i (the plan's noise, batch order and
initial-state keys of ``(trial, node)``), never by the block or the worker, so a block's
result depends only on (payload, first trial, count), and concatenating the blocks in trial
order gives the single-process run's arrays bit for bit (``tests/test_shards.py`` checks it
for every engine and mechanism family). :func:`run_blocks` runs a block function on a Dask
client — or in this process with ``client=None``, the same blocks one after the other —
and hands the results in block order to the caller's ``merge``.

The payload is bytes (a scenario: :mod:`edgedp_sim.scenario_bytes`), sent once as a task
of its own that every block depends on (not scattered data, which Dask cannot recover when
the worker holding it dies); workers need none of the client's files. Each block is a Dask
task whose key names the payload digest and the trials, so a worker that dies takes no
result with it:
the scheduler re-runs its blocks on the workers left (``distributed``'s
``allowed-failures``, 3 by default, bounds how often one block may kill a worker before it
is reported as failed). Every block returns, beside its value, where it ran and that
process's peak resident memory, which bounds a worker's memory for a block size.

:func:`connect` opens the client: a running scheduler (``--scheduler ADDRESS``) or a local
cluster of worker processes (one thread each, on 127.0.0.1, no dashboard).
:func:`finished` runs independent tasks (sweep points) and yields each result or exception
as it arrives, so one failure stops nothing.

How another Monte Carlo plugs in (audits, leakage): a module-level function
``block(payload, first, count, *args) -> value`` whose trials draw from streams keyed by the
trial index, and a ``merge(values)`` that concatenates the per-trial statistics in trial
order before computing anything across trials.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from edgedp import _validate

__all__ = [
    "Block",
    "BlockInfo",
    "ShardError",
    "block_lines",
    "connect",
    "finished",
    "optional",
    "run_blocks",
    "split",
    "where",
]


class ShardError(RuntimeError):
    """A block failed (the message names its trials and the cause)."""


@dataclass(frozen=True, slots=True)
class Block:
    """Trials ``first`` … ``first + count − 1`` (block ``index`` of a run)."""

    index: int
    first: int
    count: int


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """Where trials ``first`` … ``first + count − 1`` ran: the worker (``"local"`` in this
    process), its process id, the process's peak resident memory (MB, ru_maxrss) after the
    block, and the block's wall seconds."""

    first: int
    count: int
    worker: str
    pid: int
    peak_mb: float
    seconds: float


def block_lines(label: str) -> Callable[[int, int, BlockInfo], None]:
    """A progress line on stderr after each block of a sharded run: trials done, the rate,
    where the block ran and its worker's peak memory."""
    started = time.perf_counter()

    def line(done: int, total: int, info: BlockInfo) -> None:
        rate = done / max(time.perf_counter() - started, 1e-9)
        print(
            f"{label}: {done}/{total} trials ({rate:.2f}/s); block of {info.count} at trial "
            f"{info.first} on {info.worker}, peak {info.peak_mb:.0f} MB",
            file=sys.stderr,
            flush=True,
        )

    return line


def split(trials: int, block_trials: int) -> tuple[Block, ...]:
    """Blocks of ``block_trials`` consecutive trials (the last may be shorter).

    >>> [(b.first, b.count) for b in split(7, 3)]
    [(0, 3), (3, 3), (6, 1)]
    """
    _validate.integer(1, trials=trials, block_trials=block_trials)
    return tuple(
        Block(i, first, min(block_trials, trials - first))
        for i, first in enumerate(range(0, trials, block_trials))
    )


def _peak_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / (1024 * 1024) if sys.platform == "darwin" else kb / 1024


def _run_one(fn: Callable, payload: bytes, first: int, count: int, args: tuple):
    """A block's value and its :class:`BlockInfo` (the Dask task)."""
    started = time.perf_counter()
    value = fn(payload, first, count, *args)
    try:
        from distributed import get_worker

        where = get_worker().address
    except (ImportError, ValueError):
        where = "local"
    seconds = time.perf_counter() - started
    return value, BlockInfo(first, count, where, os.getpid(), round(_peak_mb(), 1), seconds)


def run_blocks(
    client: Any,
    fn: Callable,
    payload: bytes,
    blocks: Sequence[Block],
    merge: Callable[[list], Any],
    *,
    args: tuple = (),
    label: str = "trials",
    progress: Callable[[int, int, BlockInfo], None] | None = None,
) -> tuple[Any, list[BlockInfo]]:
    """``merge([fn(payload, b.first, b.count, *args) for b in blocks])`` and each block's
    :class:`BlockInfo`, the blocks run on ``client`` (None: in this process, in order).

    ``fn`` must be a module-level function (workers import it). ``progress(trials done,
    trials in all, info)`` after each block. A failing block cancels the rest; on a client
    it raises :class:`ShardError` naming its trials (in this process, its own exception).
    """
    blocks = list(blocks)
    total = sum(b.count for b in blocks)
    values: dict[int, Any] = {}
    infos: dict[int, BlockInfo] = {}
    done = 0
    if client is None:
        for b in blocks:
            values[b.index], infos[b.index] = _run_one(fn, payload, b.first, b.count, args)
            done += b.count
            if progress is not None:
                progress(done, total, infos[b.index])
    else:
        from distributed import as_completed

        from edgedp_sim import scenario_bytes

        tag = f"{label}-{scenario_bytes.digest(payload)}-{_args_tag(args)}"
        # the payload as a task of its own (not scattered data): a worker that dies holding
        # its only copy takes nothing the scheduler cannot make again
        shared = client.submit(_payload, payload, key=f"{tag}-payload", pure=False)
        # a copy on every worker before the blocks are placed: with the only copy on one
        # worker the scheduler puts every block beside it (data locality) and the others idle
        client.replicate([shared])
        futures = {
            client.submit(
                _run_one, fn, shared, b.first, b.count, args, key=f"{tag}-{b.first}-{b.count}"
            ): b
            for b in blocks
        }
        try:
            for fut in as_completed(futures, loop=client.loop):
                b = futures[fut]
                try:
                    values[b.index], infos[b.index] = fut.result()
                except Exception as exc:
                    raise _failed(b, exc) from exc
                done += b.count
                if progress is not None:
                    progress(done, total, infos[b.index])
        finally:
            client.cancel(list(futures))
    ordered = [values[b.index] for b in blocks]
    return merge(ordered), [infos[b.index] for b in blocks]


def where(infos: Sequence[BlockInfo]) -> dict[str, Any]:
    """A report's ``blocks`` (each block's first trial, trials, worker and its peak MB),
    ``workers`` and ``peak_worker_mb`` (the largest peak of a worker process)."""
    return {
        "blocks": [
            {"first_trial": b.first, "trials": b.count, "worker": b.worker, "peak_mb": b.peak_mb}
            for b in infos
        ],
        "workers": sorted({b.worker for b in infos}),
        "peak_worker_mb": max(b.peak_mb for b in infos),
    }


def _payload(data: bytes) -> bytes:
    return data


def _args_tag(args: tuple) -> str:
    import hashlib

    return hashlib.sha256(repr(args).encode()).hexdigest()[:8]


def _failed(b: Block, exc: BaseException) -> ShardError:
    return ShardError(
        f"trials {b.first}..{b.first + b.count - 1} failed: {type(exc).__name__}: {exc}"
    )


def finished(
    client: Any, fn: Callable, items: Sequence[tuple[str, tuple]]
) -> Iterator[tuple[str, Any, BaseException | None]]:
    """Run ``fn(*args)`` for every ``(key, args)`` on ``client`` and yield ``(key, value,
    None)`` or ``(key, None, exception)`` as each finishes; one failure stops nothing."""
    from distributed import as_completed

    futures = {client.submit(fn, *args, key=key): key for key, args in items}
    try:
        for fut in as_completed(futures, loop=client.loop):
            try:
                yield futures[fut], fut.result(), None
            except Exception as exc:  # the point's own error, or a worker that kept dying
                yield futures[fut], None, exc
    finally:
        client.cancel(list(futures))


def _code() -> dict[str, Any]:
    """What a block's bits depend on: the edgedp and numpy versions and the git revision."""
    from importlib import metadata

    from edgedp_sim import provenance

    return {
        "edgedp": metadata.version("edgedp"),
        "numpy": metadata.version("numpy"),
        "git_revision": provenance.environment()["git_revision"],
    }


def _same_code(client: Any) -> None:
    """Refuse workers whose :func:`_code` differs from this process's (ShardError)."""
    mine = _code()
    for worker, theirs in client.run(_code).items():
        for key, value in mine.items():
            if theirs.get(key) != value and None not in (value, theirs.get(key)):
                raise ShardError(
                    f"worker {worker} runs {key} {theirs.get(key)}, this process {value}: "
                    "every worker needs the same code for results equal to a single run"
                )


@contextlib.contextmanager
def optional(scheduler: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """None (run in this process) when neither is given, else :func:`connect`'s client of
    ``scheduler`` or of a local cluster of ``workers`` (default 2) processes."""
    if scheduler is None and workers is None:
        yield None
        return
    with connect(scheduler, workers or 2) as client:
        yield client


@contextlib.contextmanager
def connect(
    scheduler: str | None = None, workers: int = 2, *, memory_limit: str | int = "auto"
) -> Iterator[Any]:
    """A Dask client of the scheduler at ``scheduler`` (refused with ShardError if a worker
    runs other code: :func:`_same_code`), or of a local cluster of ``workers`` processes
    (one thread each, 127.0.0.1, no dashboard; ``memory_limit`` per worker, in Dask's units:
    bytes, ``"2GB"``, or ``"auto"`` = the machine's memory / workers)."""
    from dask.distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ShardError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        with client:
            _same_code(client)
            yield client
        return
    _validate.integer(1, workers=workers)
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
            memory_limit=memory_limit,
            silence_logs=logging.CRITICAL,  # a failed task is reported by its caller
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client
