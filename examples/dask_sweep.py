"""A sweep on Dask: dropout rate x seed, each point simulated on a worker process.
Needs Dask, which `make demo` does not install: pip install 'edgedp[sim]'."""

import edgedp

try:
    from dask.distributed import Client, LocalCluster
except ModuleNotFoundError:
    raise SystemExit("this example needs Dask: pip install 'edgedp[sim]'") from None

# --- constants (seeded: the output is reproducible) ---
DROPOUTS, SEEDS = (0.0, 0.1, 0.3), (1, 2)


def point(dropout: float, seed: int) -> tuple[float, int, float]:
    plan = edgedp.make_plan("dp-dsgd", "er:16:0.3:1", steps=20, target_epsilon=4, delta=1e-6)
    scenario = {"seed": seed, "faults": {"dropout": dropout}, "network": {"loss": 0.01}}
    run = edgedp.simulate(plan, scenario, engine="event")
    return dropout, seed, run.final_test_loss


if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            grid = [(d, s) for d in DROPOUTS for s in SEEDS]
            futures = client.map(point, *zip(*grid, strict=True), pure=False)
            rows = sorted(client.gather(futures))
    print(f"{'dropout':>8}{'seed':>6}{'final test loss':>17}")
    for dropout, seed, loss in rows:
        print(f"{dropout:>8.2f}{seed:>6}{loss:>17.4f}")
