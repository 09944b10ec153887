"""The demo: D-SGD vs DP-D-SGD vs MF-D-SGD (AntiPGD) at the same privacy level.

A logistic-regression task on the bundled 8×8 digits (label: the digit is odd), split
IID over the nodes of a connected Erdős–Rényi graph with Metropolis–Hastings weights.
Every example participates at every step (full local batches, participation (T, 1)); the
two private runs share one μ, each with the noise its factor's sensitivity requires.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from edgedp import plan as plan_mod
from edgedp.accounting.participation import Participation
from sim import batch, datasets

__all__ = ["DemoConfig", "run_demo"]


@dataclass(frozen=True, slots=True)
class DemoConfig:
    # --- constants of the embedded default (seeded: the run is reproducible) ---
    topology: str = "er:64:0.1:7"
    steps: int = 200
    target_epsilon: float = 8.0
    delta: float = 1e-6
    clip_norm: float = 1.0
    learning_rate: float = 0.5
    trials: int = 3
    seed: int = 2026
    dataset: str = "digits-parity"
    eval_every: int = 5


MECHANISMS = (
    ("D-SGD (no privacy)", "dsgd"),
    ("DP-D-SGD", "dp-dsgd"),
    ("MF-D-SGD AntiPGD", "antipgd"),
)


def make_plans(config: DemoConfig) -> dict[str, plan_mod.NoisePlan]:
    import topologies

    graph = topologies.parse(config.topology)
    task = plan_mod.TaskSpec(
        model="logistic", dataset=config.dataset, partition="iid", batch_size=0
    )
    part = Participation.every_step(config.steps)
    plans = {}
    for _, mech in MECHANISMS:
        kwargs = (
            {}
            if mech == "dsgd"
            else {"target_epsilon": config.target_epsilon, "delta": config.delta}
        )
        plans[mech] = plan_mod.make_plan(
            mech,
            graph,
            steps=config.steps,
            participation=part,
            clip_norm=config.clip_norm,
            learning_rate=config.learning_rate,
            task=task,
            seed=config.seed,
            topology_name=config.topology,
            **kwargs,
        )
    return plans


def run_demo(
    out_dir: str | Path, config: DemoConfig = DemoConfig(), *, show_progress: bool = True
) -> dict:
    """Run the three algorithms, write results.json and test_loss.png, return the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plans = make_plans(config)
    n = next(iter(plans.values())).n
    data = datasets.partition(datasets.load(config.dataset, seed=config.seed), n, seed=config.seed)
    rows, curves = [], {}
    for label, mech in MECHANISMS:
        p = plans[mech]
        bar = _progress(f"{label:<20}", p.steps, show_progress)
        res = batch.run(p, data, trials=config.trials, eval_every=config.eval_every, progress=bar)
        bar(None)
        g = p.guarantee() if p.noise_multiplier > 0 else None
        final = res.test_loss[-1]
        rows.append(
            {
                "algorithm": label,
                "mechanism": mech,
                "final_test_loss": float(final.mean()),
                "final_test_loss_std": float(final.std()),
                "final_test_accuracy": float(res.test_accuracy[-1].mean()),
                "mu": g.mu if g else math.inf,
                "epsilon": g.epsilon(config.delta) if g else math.inf,
                "delta": config.delta,
                "noise_multiplier": p.noise_multiplier,
                "sensitivity": p.sensitivity,
                "noise_std": p.noise_std,
                "model_digest": res.digests[0],
                "plan_hash": p.plan_hash,
            }
        )
        curves[mech] = {
            "steps": res.eval_steps,
            "test_loss_mean": [float(v.mean()) for v in res.test_loss],
            "test_loss_std": [float(v.std()) for v in res.test_loss],
        }
    summary = {
        "config": asdict(config),
        "nodes": n,
        "local_examples": data.local_size,
        "test_examples": int(len(data.y_test)),
        "results": rows,
        "curves": curves,
    }
    (out / "results.json").write_text(json.dumps(json_safe(summary), indent=2) + "\n")
    _plot(curves, out / "test_loss.png", config, n)
    summary["files"] = [str(out / "results.json"), str(out / "test_loss.png")]
    return summary


def json_safe(x):
    """Strict JSON: infinities (no privacy) become the string "inf"."""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def _progress(label: str, total: int, enabled: bool):
    if not enabled:
        return lambda step: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="step", leave=True)

    def update(step):
        if step is None:
            bar.close()
        else:
            bar.n = step
            bar.refresh() if step % 20 == 0 or step == total else None

    return update


def _plot(curves: dict, path: Path, config: DemoConfig, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, mech in MECHANISMS:
        c = curves[mech]
        m, s = np.array(c["test_loss_mean"]), np.array(c["test_loss_std"])
        ax.plot(c["steps"], m, label=label)
        ax.fill_between(c["steps"], m - s, m + s, alpha=0.2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("test loss (mean over nodes)")
    ax.set_title(
        f"{config.dataset}, {n} nodes ({config.topology}), "
        f"ε={config.target_epsilon:g} at δ={config.delta:g} (LDP)"
    )
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(summary: dict) -> str:
    head = f"{'algorithm':<22}{'test loss':>16}{'accuracy':>10}{'mu (GDP)':>10}{'eps@delta':>11}"
    lines = [head, "-" * len(head)]
    for r in summary["results"]:
        loss = f"{r['final_test_loss']:.4f}±{r['final_test_loss_std']:.4f}"
        mu = "inf" if math.isinf(r["mu"]) else f"{r['mu']:.4f}"
        eps = "inf" if math.isinf(r["epsilon"]) else f"{r['epsilon']:.3f}"
        lines.append(
            f"{r['algorithm']:<22}{loss:>16}{r['final_test_accuracy']:>10.3f}{mu:>10}{eps:>11}"
        )
    lines.append(
        f"delta = {summary['results'][0]['delta']:g}; {summary['nodes']} nodes × "
        f"{summary['local_examples']} examples; mean ± std over "
        f"{summary['config']['trials']} noise draws"
    )
    return "\n".join(lines)
