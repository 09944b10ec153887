"""What a leakage run's estimates rest on, and what the run cost (:mod:`edgedp_sim.leak`).

On a lossy network an attacker does not observe every round of every trial: a curious node
misses the messages that never reach it, and an attack that rebuilds the victim's update
cannot do so in a round whose mix lost a message. Each iteration's mutual information is
then estimated on the trials in which the attacker observed it; this module says which
iterations can be estimated at all (:func:`varying`, :func:`check_enough`), puts the
coverage into the words both the progress line and the report use (:func:`coverage`), and
reads the process's peak memory for the run's stated cost (:func:`peak_memory_mb`).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

__all__ = ["check_enough", "coverage", "peak_memory_mb", "varying"]


def varying(private: np.ndarray) -> np.ndarray:
    """``(T,)`` of ``private`` ``(trials, T, d)``: iterations where the victim's value is not
    the same in every trial that has one, up to rounding (a constant carries no information
    to estimate).

    >>> v = np.zeros((4, 2, 1)); v[:, 1, 0] = [0.0, 1.0, 2.0, np.nan]
    >>> varying(v).tolist()
    [False, True]
    """
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN iterations
        high, low = np.nanmax(private, axis=0), np.nanmin(private, axis=0)  # (T, d)
    spread = np.nan_to_num(high - low, nan=0.0)
    scale = np.nan_to_num(np.maximum(np.abs(high), np.abs(low)), nan=0.0)
    return (spread > 1e-9 * (1.0 + scale)).any(axis=-1)


def check_enough(label: str, observed: np.ndarray, varies: np.ndarray, k: int) -> None:
    """ValueError unless some iteration where the victim's value varies has more than
    2k + 1 trials in which attacker ``label`` observed what its estimate needs
    (``observed``: ``(trials, T)``; k: the KSG neighbours)."""
    counts = observed.sum(axis=0)
    most = int(counts[varies].max()) if varies.any() else 0
    if most > 2 * k + 1:
        return
    trials, steps = observed.shape
    raise ValueError(
        f"too few trials remain for {label}: in none of the {int(varies.sum())} of "
        f"{steps} iterations where the victim's gradient varies did it observe what its "
        f"estimate needs in more than {2 * k + 1} of the {trials} trials (at most {most}: "
        "messages lost, late or not sent), and the k-NN estimate needs more; raise the "
        "trials (--trials) or lower the scenario's loss and dropout"
    )


def coverage(estimated: int, counts: np.ndarray, full: np.ndarray, partial: np.ndarray) -> str:
    """``over E of T iterations ...``: what the estimates ran on. ``counts`` ``(T,)`` the
    observed trials per iteration, ``full``/``partial`` the iterations estimated on every
    trial / on fewer.

    >>> coverage(3, np.array([9, 9, 5, 9]), np.array([0, 1]), np.array([2]))
    'over 3 of 4 iterations (2 on every trial, 1 on the 5-5 trials in which the attacker observed them)'
    """  # noqa: E501
    text = f"over {estimated} of {counts.size} iterations"
    if not len(partial):
        return f"{text} x {int(counts.max()) if counts.size else 0} trials"
    lo, hi = int(counts[partial].min()), int(counts[partial].max())
    return (
        f"{text} ({len(full)} on every trial, {len(partial)} on the {lo}-{hi} trials in "
        "which the attacker observed them)"
    )


def peak_memory_mb() -> float:
    """The process's peak resident memory so far (``ru_maxrss``), in MB; 0 where unknown."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0.0
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20
