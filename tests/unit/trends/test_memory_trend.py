"""Memory is trended like any metric: a unit's figures, copied into each of its cells, make one
series per variant (not one per cell), and the detect step raises a change in it with its
cause. Fourteen published nights of two variants of two cells each: f32's peak memory up ~3x
from night 11, when its launch lost the cache cap; q8's steady."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from servebench.pipeline import detect
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore
from servebench.trends.series import build_series, nightly_runs

DAY0 = dt.date(2026, 11, 1)
CAPPED = '["transformers", "serve", "--cb-num-blocks", "8"]'
UNCAPPED = '["transformers", "serve"]'


def _publish(store, night, rng):
    day = DAY0 + dt.timedelta(days=night)
    run_id = f"scheduled__{day.isoformat()}"
    cells = []
    for variant, peak in (("f32", 4.8e8 if night < 11 else 14.3e8), ("q8", 2.1e8)):
        unit = {"weights_bytes": 7152200, "kv_cache_tokens": 2048,
                "peak_rss_bytes": int(peak * (1 + 0.01 * rng.normal()))}
        for workload in ("w1", "w2"):
            cells.append(dict(
                run_id=run_id, run_date=day, cell_id=f"t/{variant}/{workload}/c1", target="t",
                stack="transformers", variant=variant, workload=workload, load_point="c1",
                concurrency=1, engine_version="5.24", model_file_sha256="a" * 64,
                hardware="cpu", sampling_hash="s", status="ok",
                launch_args=CAPPED if variant == "q8" or night < 11 else UNCAPPED,
                ttft_ms_p95=10.0 * (1 + 0.01 * rng.normal()),
                output_throughput=1000 * (1 + 0.01 * rng.normal()), **unit))
    runs = [dict(run_id=run_id, run_date=day, dag_id="nightly_benchmark", sweep_name="mem",
                 logical_date=dt.datetime.combine(day, dt.time(2), dt.UTC),
                 finished_at=dt.datetime.combine(day, dt.time(3), dt.UTC),
                 suite_git_sha="abc", sweep_hash="h", n_cells=len(cells))]
    store.publish(run_id, day, {"runs": rows_to_table("runs", runs),
                                "cells": rows_to_table("cells", cells)})
    return {"run_id": run_id, "run_date": day.isoformat()}


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory") / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVEBENCH_RESULTS_URI", str(root))
    mp.setenv("SERVEBENCH_ANNOTATIONS", str(root / "none.yaml"))
    store, rng = ResultStore(str(root)), np.random.default_rng(3)
    try:
        for night in range(14):
            detect(_publish(store, night, rng))
        yield store
    finally:
        mp.undo()


def test_a_units_figures_are_one_series_per_variant(history):
    runs = nightly_runs(history.read_table("runs").to_pandas(), "mem")
    series = build_series(history.read_table("cells").to_pandas(), runs)
    memory = series[series["metric"] == "peak_rss_bytes"]
    assert sorted(memory.groupby("series_id")["variant"].first()) == ["f32", "q8"]
    assert memory.groupby("series_id").size().tolist() == [14, 14]  # a value a night
    assert memory["workload"].isna().all()
    assert set(series["metric"]) >= {"weights_bytes", "kv_cache_tokens", "peak_rss_bytes"}


def test_a_memory_regression_is_raised_once_with_its_cause(history):
    alerts = history.read_table("changes").to_pandas()
    found = alerts[alerts["metric"] == "peak_rss_bytes"]
    assert len(found) == 1, found[["series_id", "kind", "run_id"]]
    row = found.iloc[0]
    assert row["kind"] == "regression" and row["variant"] == "f32"
    assert pd.isna(row["workload"])  # the variant's, not a cell's
    assert row["change_date"] == DAY0 + dt.timedelta(days=11)
    assert 180 < row["change_pct"] < 220
    assert row["cause"] == "launch args ---cb-num-blocks 8"  # the cap, removed
    # weights and KV capacity did not move: nothing said of them
    assert not alerts["metric"].isin(["weights_bytes", "kv_cache_tokens"]).any()
