"""The demo end to end on a short horizon (the embedded default runs in `make demo`)."""

import json
import math

from sim import demo


def test_demo_writes_results_and_plot(tmp_path):
    config = demo.DemoConfig(steps=20, trials=2, eval_every=5)
    summary = demo.run_demo(tmp_path, config, show_progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "test_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {r["mechanism"]: r for r in data["results"]}
    assert set(rows) == {"dsgd", "dp-dsgd", "antipgd"}
    assert summary["nodes"] >= 50
    # same privacy level for both private algorithms, at the configured target
    assert math.isclose(rows["dp-dsgd"]["mu"], rows["antipgd"]["mu"], rel_tol=1e-12)
    assert math.isclose(rows["dp-dsgd"]["epsilon"], config.target_epsilon, rel_tol=1e-6)
    assert rows["dsgd"]["mu"] == "inf"
    # AntiPGD needs far more noise for the same mu: sens^2 = T(T+1)(2T+1)/6 vs T
    assert math.isclose(rows["antipgd"]["sensitivity"], math.sqrt(20 * 21 * 41 / 6), rel_tol=1e-12)
    assert rows["dsgd"]["final_test_loss"] < rows["dp-dsgd"]["final_test_loss"]
    assert "DP-D-SGD" in demo.format_table(summary)
