"""What an operator watches on a device: the published model's held-out loss, and the
metrics as a Prometheus textfile beside the JSON lines.

Held-out evaluation: a shard written by ``edgedp deploy --write-shards`` or ``local-run``
also holds ``x_test`` and ``y_test`` (the task's test split, which the simulator evaluates
on too). At the end the device evaluates the model it publishes on them — the mean loss
and, for a classifier, the accuracy — and reports them in its ``done`` line, its log and
the textfile. The held-out examples are not training data: they enter no gradient and no
message, so the plan's guarantee is untouched; the numbers stay on the device with its
other metrics.

Textfile: ``metrics.prom`` beside the metrics JSON lines (``[run] metrics`` with ``.prom``),
rewritten at the end of a round at most once per :data:`TEXTFILE_INTERVAL` seconds (the first
round's is always written; scrapers read it every 15 s or more, while a rewrite — a new file
renamed over the old one, a metadata change the file system journals — cost an agent at
d = 10⁵ about 0.5 ms of CPU every round of a fraction of a second) and always at the end (a
temporary file renamed over it, as the node exporter's textfile collector requires: it
never reads half a file). The metrics JSON lines stay the record of every round. Like every file
of the state folder it is the agent's alone (0600): run the collector as the agent's user
with ``--collector.textfile.directory`` on that folder. Gauges and counters carry
the labels ``node`` and ``plan`` (the first 16 hex digits of the plan hash).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np

__all__ = ["TEXTFILE_INTERVAL", "Textfile", "evaluate_held_out", "held_out"]

#: Least seconds between two rewrites of the textfile after a round (the ``done`` one is
#: always written).
TEXTFILE_INTERVAL = 1.0

#: name -> (type, help) of every metric written.
METRICS = {
    "edgedp_round": ("gauge", "rounds done"),
    "edgedp_rounds_planned": ("gauge", "rounds of the plan"),
    "edgedp_missing_messages_total": ("counter", "neighbour messages missing at a deadline"),
    "edgedp_rejected_messages_total": ("counter", "received messages rejected, by reason"),
    "edgedp_refused_connections_total": ("counter", "connections refused, by reason"),
    "edgedp_dropped_messages_total": ("counter", "messages dropped by the transport"),
    "edgedp_clipped_examples": ("gauge", "examples clipped in the last round"),
    "edgedp_update_norm": ("gauge", "norm of the last round's update"),
    "edgedp_cpu_seconds_total": ("counter", "CPU seconds of the agent process"),
    "edgedp_done": ("gauge", "1 once the plan's rounds are done and the model published"),
    "edgedp_test_loss": ("gauge", "held-out loss of the published model"),
    "edgedp_test_accuracy": ("gauge", "held-out accuracy of the published model"),
    "edgedp_last_update_timestamp_seconds": ("gauge", "when this file was written"),
}


def held_out(shard: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """``(x_test, y_test)`` of a shard file, or None when it has none (or they are unusable:
    evaluation is a report, never a reason to stop a run)."""
    try:
        with np.load(shard, allow_pickle=False) as z:
            if "x_test" not in z.files or "y_test" not in z.files:
                return None
            x = np.array(z["x_test"], dtype=np.float64)
            y = np.array(z["y_test"], dtype=np.float64)
    except (OSError, ValueError):
        return None
    if x.ndim != 2 or y.shape != (len(x),) or not len(x):
        return None
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return None
    return x, y


def evaluate_held_out(model, theta: np.ndarray, data) -> dict[str, float]:
    """``test_loss`` (and ``test_accuracy`` for a classifier) of ``theta`` on ``data`` —
    the numbers the simulator reports for a node's model (the batch mean of the model's
    loss); {} without data or with features of another width."""
    if data is None or data[0].shape[1] != getattr(model, "features", data[0].shape[1]):
        return {}
    x, y = data
    out = {"test_loss": float(model.loss(theta, x, y))}
    if getattr(model, "classifier", False):
        out["test_accuracy"] = float(model.accuracy(theta, x, y))
    return out


class Textfile:
    """The Prometheus text exposition of one device's metrics, rewritten atomically."""

    def __init__(
        self,
        path: Path,
        *,
        node: int,
        plan_hash: str,
        steps: int,
        interval: float = TEXTFILE_INTERVAL,
    ) -> None:
        self.path = Path(path)
        self.labels = f'node="{int(node)}",plan="{plan_hash[:16]}"'
        self.values: dict[str, float | dict[str, float]] = {"edgedp_rounds_planned": steps}
        self.failed = False
        self.interval = interval
        self._written: float | None = None  # time.monotonic() of the last rewrite

    def update(self, fields: dict) -> None:
        """Take a metrics line's fields (a ``round`` or ``done`` line) and rewrite the file:
        a ``done`` line always, a ``round`` line when the last rewrite is at least
        ``interval`` seconds old (the values are taken in either case)."""
        v = self.values
        for key, name in (
            ("round", "edgedp_round"),
            ("clipped", "edgedp_clipped_examples"),
            ("update_norm", "edgedp_update_norm"),
            ("cpu", "edgedp_cpu_seconds_total"),
            ("dropped", "edgedp_dropped_messages_total"),
            ("test_loss", "edgedp_test_loss"),
            ("test_accuracy", "edgedp_test_accuracy"),
        ):
            if isinstance(fields.get(key), (int, float)):
                v[name] = float(fields[key])
        if "missing" in fields:  # a round's list of missing neighbours, or the done count
            missing = fields["missing"]
            add = len(missing) if isinstance(missing, list) else 0
            total = float(missing) if isinstance(missing, (int, float)) else None
            prior = v.get("edgedp_missing_messages_total", 0.0)
            v["edgedp_missing_messages_total"] = total if total is not None else prior + add
        for key, name in (
            ("rejected", "edgedp_rejected_messages_total"),
            ("refused", "edgedp_refused_connections_total"),
        ):
            if isinstance(fields.get(key), dict):
                v[name] = {str(r): float(n) for r, n in fields[key].items()}
        done = fields.get("event") == "done"
        if done:
            v["edgedp_done"] = 1.0
            v["edgedp_round"] = v.get("edgedp_rounds_planned", 0.0)
        now = time.monotonic()
        if done or self._written is None or now - self._written >= self.interval:
            self._written = now
            self.write()

    def text(self, now: float) -> str:
        lines = []
        values = {**self.values, "edgedp_last_update_timestamp_seconds": now}
        for name, (kind, help_) in METRICS.items():
            value = values.get(name)
            if value is None:
                continue
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            if isinstance(value, dict):
                for reason, n in sorted(value.items()):
                    lines.append(f'{name}{{{self.labels},reason="{_escape(reason)}"}} {_num(n)}')
            else:
                lines.append(f"{name}{{{self.labels}}} {_num(value)}")
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        """Rewrite the file (a temporary renamed over it); a failure is remembered, not
        raised: the metrics JSON lines stay the record."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # as the state
            with os.fdopen(fd, "w") as fh:
                fh.write(self.text(time.time()))
            os.replace(tmp, self.path)
        except OSError:
            self.failed = True


def _num(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
