"""Step sizes of private runs: the old default 0.5, the planner's noise-budget rule, and a
step size tuned in simulation on a public proxy — final test loss per mechanism and seed.

Scenarios (every mechanism calibrated to the same ε at δ = 1e-5, zero-out adjacency):

* ``er200``: the reported one — Erdős–Rényi, 200 nodes, mean degree ≈ 10, 20% of the nodes
  sit out each round, 50 ms one-way latency (event engine), logistic regression on
  digits-parity, T = 100, ε = 2;
* ``torus64``: a 8 × 8 torus (another graph family), 10% dropouts, 2% message loss,
  lognormal latency (median 10 ms; event engine), digits-parity, T = 100, ε = 1;
* ``diabetes20``: another dataset and model — linear regression on diabetes over a
  20-node small world, 10% dropouts (batch engine), T = 100, ε = 1;
* ``digits50``: softmax regression over the 10 digits on a 50-node small world, 10%
  dropouts (batch engine), T = 60, ε = 4 (no public proxy of this task: not tuned).

Variants: ``old`` — learning rate 0.5, the default before the rule; ``rule`` — the plan's
default (edgedp.planning.step_rule: each mechanism its own step size, from public
quantities); ``tuned`` — ``edgedp tune step-size`` (edgedp_sim.step_tune) on the task's
public synthetic proxy, each mechanism its own step size, 3 seeds per step size, in the
batch engine with the latency dropped; the tuned plan then runs the scenario as written.
Each variant runs noise seeds 0..4 (the plan's trials). ``er200-all``: every other
Gaussian mechanism at its rule step size on er200's graph and faults (batch engine).

Writes experiments/out/step_size.json, .md and .png. ``--quick``: 2 seeds, no er200 event
runs (a smoke test of the script; outputs in experiments/out/quick).

    python experiments/step_size.py [--quick] [--out-dir DIR]
"""

# --- constants (seeded: the output is reproducible) ---
SEEDS = 5
DELTA = 1e-5
OLD_DEFAULT = 0.5
COMPARED = ("dp-dsgd", "mafalda", "whisper")
OTHERS = ("antipgd", "dmf", "banded", "blt", "decor", "zipdl", "muffliato", "dome")
OPTIONS = {"banded": {"bandwidth": 8}, "blt": {"buffers": 4}, "dome": {"sketch_dim": 16}}
WORKERS = 2

import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from multiprocessing import get_context  # noqa: E402
from pathlib import Path  # noqa: E402

import edgedp  # noqa: E402  (before numpy: the CPU dispatch edgedp pins)
from edgedp_sim import provenance, step_tune, training_check  # noqa: E402

import common  # noqa: E402


def _scenario(name, seed, steps, spec, task, epsilon, faults, network=None) -> dict:
    """A scenario's tables (the scenario file's layout) with DP-D-SGD as its mechanism."""
    model, dataset = task
    return {
        "name": name,
        "seed": seed,
        "steps": steps,
        "eval_every": 10,
        "topology": {"spec": spec},
        "task": {"model": model, "dataset": dataset},
        "privacy": {"mechanism": "dp-dsgd", "target_epsilon": epsilon, "delta": DELTA},
        "network": network or {},
        "faults": faults,
    }


LOGISTIC = ("logistic", "digits-parity")
SCENARIOS = {
    "er200": _scenario(
        "er200", 1, 100, "er:200:0.05:1", LOGISTIC, 2.0, {"dropout": 0.2},
        {"latency": {"kind": "constant", "ms": 50}},
    ),
    "torus64": _scenario(
        "torus64", 2, 100, "torus:8:8", LOGISTIC, 1.0, {"dropout": 0.1},
        {"latency": {"kind": "lognormal", "median_ms": 10, "sigma": 0.5}, "loss": 0.02},
    ),
    "diabetes20": _scenario(
        "diabetes20", 3, 100, "smallworld:20:4:0.2:1", ("linear", "diabetes"), 1.0,
        {"dropout": 0.1},
    ),
    "digits50": _scenario(
        "digits50", 4, 60, "smallworld:50:4:0.1:1", ("softmax:10", "digits"), 4.0,
        {"dropout": 0.1},
    ),
}  # fmt: skip
TUNED = ("er200", "torus64", "diabetes20")  # digits50: no public proxy (10 classes)


def _plan(raw: dict, mechanism: str, learning_rate: float | None):
    from edgedp_sim import scenarios

    tables = step_tune._raw_for(raw, mechanism, raw["task"]["dataset"], learning_rate)
    tables["privacy"].update(OPTIONS.get(mechanism, {}))
    return scenarios.parse(tables).plan


def _network(raw: dict, batch: bool) -> dict:
    out = {"seed": raw["seed"], "eval_every": raw["eval_every"], "faults": raw.get("faults", {})}
    net = dict(raw.get("network", {}))
    if batch:
        net.pop("latency", None)
    out["network"] = net
    return out


def run_job(name: str, mechanism: str, variant: str, seeds: int, plan_bytes: bytes | None):
    """One (scenario, mechanism, variant): ``seeds`` noise draws; the scenario's engine
    (``er200-all``: the batch engine without the latency)."""
    started = time.perf_counter()
    raw = SCENARIOS[name.removesuffix("-all")]
    if plan_bytes is not None:
        from edgedp.plan import NoisePlan

        plan = NoisePlan.from_bytes(plan_bytes)
    else:
        plan = _plan(raw, mechanism, OLD_DEFAULT if variant == "old" else None)
    run = edgedp.simulate(plan, _network(raw, name.endswith("-all")), trials=seeds)
    return {
        "scenario": name,
        "mechanism": mechanism,
        "variant": variant,
        "engine": run.engine,
        "learning_rate": plan.learning_rate,
        "step_size": run.step_size,
        "start_loss": run.test_loss[:, 0].tolist(),
        "final_loss": run.test_loss[:, -1].tolist(),
        "final_accuracy": None
        if run.test_accuracy.size == 0
        else run.test_accuracy[:, -1].tolist(),
        "warnings": list(run.warnings),
        "entry": training_check.step_size_entry(plan),
        "wall_seconds": time.perf_counter() - started,
    }


def tune_job(name: str, seeds: int):
    """``edgedp tune step-size`` on the scenario's public proxy; the tuned plans' bytes."""
    raw = SCENARIOS[name]
    report = step_tune.tune(
        raw, compare=COMPARED, seeds=seeds, proxy="public", protocol="own", engine="batch"
    )
    plans = {m: step_tune.tuned_plan(raw, report, m).to_bytes() for m in COMPARED}
    return name, report, plans


def _table(rows: list[dict], names: list[str]) -> list[str]:
    lines = []
    for name in names:
        sel = [r for r in rows if r["scenario"] == name]
        if not sel:
            continue
        lines += [
            "",
            f"### {name} ({sel[0]['engine']} engine)",
            "",
            "| mechanism | variant | step size | start | final loss per seed | mean | "
            "below start |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in sorted(sel, key=lambda r: (r["mechanism"], ORDER.index(r["variant"]))):
            finals = r["final_loss"]
            below = sum(f < s for f, s in zip(finals, r["start_loss"], strict=True))
            lines.append(
                f"| {r['mechanism']} | {r['variant']} | {r['learning_rate']:g} | "
                f"{r['start_loss'][0]:.3f} | {' '.join(f'{f:.3f}' for f in finals)} | "
                f"{sum(finals) / len(finals):.3f} | {below}/{len(finals)} |"
            )
        for variant in ORDER:
            entries = [r["entry"] for r in sel if r["variant"] == variant]
            if len({e["mechanism"] for e in entries}) > 1:
                lines.append(f"\n{variant}: {training_check.comparison_protocol(entries)}")
    return lines


ORDER = ("old", "rule", "tuned")


def _plot(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    names = [n for n in (*SCENARIOS, "er200-all") if any(r["scenario"] == n for r in rows)]
    fig = Figure(figsize=(4 * len(names), 4))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        sel = [r for r in rows if r["scenario"] == name]
        mechs = sorted({r["mechanism"] for r in sel})
        width = 0.8 / len(ORDER)
        for j, variant in enumerate(ORDER):
            xs, ys, es = [], [], []
            for i, m in enumerate(mechs):
                r = next((r for r in sel if r["mechanism"] == m and r["variant"] == variant), None)
                if r is None:
                    continue
                f = r["final_loss"]
                mean = sum(f) / len(f)
                xs.append(i + (j - 1) * width)
                ys.append(min(mean, 5.0))
                es.append((sum((v - mean) ** 2 for v in f) / len(f)) ** 0.5)
            ax.bar(xs, ys, width, yerr=es, capsize=2, label=variant)
        ax.axhline(sel[0]["start_loss"][0], color="k", lw=1, ls="--", label="start")
        ax.set_xticks(range(len(mechs)), mechs, rotation=45, ha="right", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("final test loss (mean ± std over seeds; capped at 5)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    args = common.parser(__doc__).parse_args()
    seeds = 2 if args.quick else SEEDS
    started = time.perf_counter()
    out = common.out_dir(args)
    stem = "step_size"
    names = [n for n in SCENARIOS if not (args.quick and n == "er200")]
    rows, reports = [], {}
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=WORKERS, mp_context=ctx) as pool:
        tunes = [pool.submit(tune_job, n, 3) for n in TUNED if n in names]
        jobs = [
            pool.submit(run_job, n, m, v, seeds, None)
            for n in names
            for m in COMPARED
            for v in ("old", "rule")
        ]
        jobs += [pool.submit(run_job, "er200-all", m, "rule", seeds, None) for m in OTHERS]
        for fut in as_completed(tunes):
            name, report, plans = fut.result()
            reports[name] = report
            print(
                f"tuned {name}: "
                + ", ".join(
                    f"{r['mechanism']} {r['tuned_step_size']:g}" for r in report["results"]
                ),
                flush=True,
            )
            jobs += [pool.submit(run_job, name, m, "tuned", seeds, b) for m, b in plans.items()]
        for fut in as_completed(jobs):
            r = fut.result()
            rows.append(r)
            mean = sum(r["final_loss"]) / len(r["final_loss"])
            print(
                f"{r['scenario']:<11}{r['mechanism']:<10}{r['variant']:<6} step "
                f"{r['learning_rate']:<7g} final {mean:.4f} (start {r['start_loss'][0]:.4f}; "
                f"{r['wall_seconds']:.0f} s)",
                flush=True,
            )
    rows.sort(key=lambda r: (r["scenario"], r["mechanism"], ORDER.index(r["variant"])))
    md = [
        "# Step sizes of private runs: old default, noise-budget rule, tuned",
        "",
        "Written by `python experiments/step_size.py` (module docstring: the scenarios and",
        f"variants). {seeds} noise seeds per row; `below start`: seeds whose final test loss",
        "is below the untrained model's. Tuned step sizes: `edgedp tune step-size` on the",
        "task's public synthetic proxy (no private example read), own step size per",
        "mechanism, batch engine without latency, 3 seeds per step size.",
        *_table(rows, [*SCENARIOS, "er200-all"]),
    ]
    for name, report in reports.items():
        md += ["", f"tuning {name}: {report['assumption']}"]
    (out / f"{stem}.md").write_text("\n".join(md) + "\n")
    provenance.write_json(
        out / f"{stem}.json",
        {
            "seeds": seeds,
            "rows": rows,
            "tuning": reports,
            "wall_seconds": time.perf_counter() - started,
        },
    )
    _plot(rows, out / f"{stem}.png")
    print(f"wrote {out}/{stem}.json, .md, .png in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
