"""A sweep's seeds summarized per grid point: the mean final test loss with the half-width
of its Student-t confidence interval (table, ``sweep.json``) and a bar plot with error bars.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot", "summarize"]


def _point_name(scenario: str) -> str:
    """A sweep row's grid point: its name without the trailing ``seed=S``."""
    head, _, last = scenario.rpartition(",")
    if last.startswith("seed="):
        return head
    return "" if scenario.startswith("seed=") else scenario


def summarize(rows: list[dict[str, Any]], *, confidence: float = 0.95) -> list[dict[str, Any]]:
    """One entry per grid point over its seeds: the mean final test loss (and accuracy) and
    the half-width of its Student-t confidence interval (None with one seed), the seeds'
    standard deviation, the step sizes its runs used (and how each was set), how many of its
    runs ended worse than they started, and the mean dropped messages and simulated seconds.

    >>> rows = [{"scenario": f"a=1,seed={s}", "final_test_loss": v, "dropped_messages": 0,
    ...          "simulated_seconds": None} for s, v in ((1, 0.4), (2, 0.6))]
    >>> p = summarize(rows)[0]
    >>> p["point"], p["seeds"], p["final_test_loss_mean"], round(float(p["final_test_loss_ci"]), 3)
    ('a=1', 2, 0.5, 1.271)
    """
    from scipy import stats

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_point_name(r["scenario"]), []).append(r)
    out = []
    for point, runs in groups.items():
        entry: dict[str, Any] = {"point": point or "(base)", "seeds": len(runs)}
        for key in ("final_test_loss", "final_test_accuracy"):
            values = np.array([r[key] for r in runs if r.get(key) is not None], dtype=float)
            if not len(values):
                continue
            n = len(values)
            std = float(values.std(ddof=1)) if n > 1 else 0.0
            half = (
                float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
                if n > 1
                else None
            )
            entry.update({f"{key}_mean": float(values.mean()), f"{key}_ci": half,
                          f"{key}_std": std, f"{key}_values": values.tolist()})  # fmt: skip
        steps = sorted(
            {(r["learning_rate"], r["step_size_method"]) for r in runs if "learning_rate" in r}
        )
        entry["step_sizes"] = [{"learning_rate": lr, "method": m} for lr, m in steps]
        entry["worse_than_start"] = sum(1 for r in runs if r.get("warnings"))
        entry["dropped_messages_mean"] = float(np.mean([r["dropped_messages"] for r in runs]))
        sim_s = [r["simulated_seconds"] for r in runs if r.get("simulated_seconds") is not None]
        entry["simulated_seconds_mean"] = float(np.mean(sim_s)) if sim_s else None
        entry["confidence"] = confidence
        out.append(entry)
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Bars of the mean final test loss per grid point, error bars the 95% CI over seeds
    (each seed's value a dot)."""
    from matplotlib.figure import Figure

    points = summarize(rows)
    fig = Figure(figsize=(max(5, 0.6 * len(points) + 2), 4.2))
    ax = fig.subplots()
    xs = np.arange(len(points))
    means = [p["final_test_loss_mean"] for p in points]
    errors = [p["final_test_loss_ci"] or 0.0 for p in points]
    ax.bar(xs, means, yerr=errors, capsize=4, color="#4c72b0", alpha=0.8, label="mean, 95% CI")
    for x, p in zip(xs, points, strict=True):
        seeds = p["final_test_loss_values"]
        ax.plot([x] * len(seeds), seeds, "k.", ms=4)
    ax.set_xticks(xs, [p["point"] for p in points], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("final test loss")
    ax.set_title(f"{points[0]['seeds'] if points else 0} seeds per point: mean and 95% CI")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
