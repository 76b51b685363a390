"""Two runs cell by cell (servebench.view.compare, behind `servebench compare` and the view's compare
page): changes, a cell one run lacks, and an slo cell compared by its load within SLO."""

import pandas as pd
import pytest
from servebench.view.compare import compare_cells, shown_columns


def _cell(run, point, **values):
    return {"run_id": run, "target": "t", "variant": "v", "workload": "w",
            "load_point": point, "status": "ok", **values}


def test_cells_are_compared_by_key_and_slo_cells_by_their_load_within_slo():
    cells = pd.DataFrame([
        _cell("a", "c4", ttft_ms_p95=10.0, output_throughput=100.0),
        _cell("b", "c4", ttft_ms_p95=12.0, output_throughput=90.0, gate_verdict="fail"),
        _cell("a", "slo", ttft_ms_p95=9.0, max_load_within_slo=8.0),
        _cell("b", "slo", ttft_ms_p95=14.0, max_load_within_slo=6.0),
        _cell("b", "c1", ttft_ms_p95=5.0),
    ])
    rows = {r["load_point"]: r for r in compare_cells(cells, "a", "b")}
    assert rows["c4"]["ttft_ms_p95"] == pytest.approx((10.0, 12.0, 20.0))
    assert rows["c4"]["gate"] == (None, "fail")
    assert rows["slo"]["max_load_within_slo"] == pytest.approx((8.0, 6.0, -25.0))
    assert rows["c1"]["ttft_ms_p95"] == (None, 5.0, None)
    assert rows["c1"]["status"] == (None, "ok")
    labels = [label for _, label in shown_columns(list(rows.values()))]
    assert "load within SLO" in labels and "E2E p95" not in labels  # no cell has an E2E
    without = [r for p, r in rows.items() if p != "slo"]
    assert "load within SLO" not in [label for _, label in shown_columns(without)]
