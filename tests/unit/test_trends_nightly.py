"""The detect step over a real result store: 30 published nights of a two-variant sweep, q4's
TTFT p95 up 15% from night 20 when the engine version changed. The step finds it once, names
the cause, says nothing about f16, does not duplicate on a re-run, and reports newly failing
cells and gate failures; the digest leads with it."""

import datetime as dt

import numpy as np
import pytest
from servebench.notify.digest import render_digest
from servebench.pipeline import detect_regressions
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore

DAY0 = dt.date(2026, 10, 1)
NIGHTS = 30


def _publish(store, night, rng):
    day = DAY0 + dt.timedelta(days=night)
    run_id = f"scheduled__{day.isoformat()}"
    engine = "b1" if night < 20 else "b2"
    cells = []
    for variant, slow in (("f16", 1.0), ("q4", 1.15 if night >= 20 else 1.0)):
        failed = variant == "f16" and night == 25
        cell = dict(run_id=run_id, run_date=day, cell_id=f"t/{variant}/w/c1", target="t",
                    stack="llama_cpp", variant=variant, workload="w", load_point="c1",
                    concurrency=1, engine_version=engine, model_file_sha256="a" * 64,
                    hardware="cpu; isa avx2", sampling_hash="s", accuracy=0.9,
                    golden_set="g", gate_verdict="fail" if (variant, night) == ("q4", 26)
                    else "pass", gate_reason="accuracy 0.80 vs 0.90" if night == 26 else None)
        if failed:
            cell.update(status="failed", reason="launch failed: killed by SIGSEGV (-11)")
        else:
            cell.update(status="ok", ttft_ms_p95=10.0 * slow * (1 + 0.01 * rng.normal()),
                        output_throughput=1000 * (1 + 0.01 * rng.normal()))
        cells.append(cell)
    runs = [dict(run_id=run_id, run_date=day, dag_id="nightly_benchmark", sweep_name="local",
                 logical_date=dt.datetime.combine(day, dt.time(2), dt.UTC),
                 finished_at=dt.datetime.combine(day, dt.time(3), dt.UTC),
                 suite_git_sha="abc", sweep_hash="h", n_cells=2)]
    store.publish(run_id, day, {"runs": rows_to_table("runs", runs),
                                "cells": rows_to_table("cells", cells)})
    return {"run_id": run_id, "run_date": day.isoformat()}


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("history") / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVEBENCH_RESULTS_URI", str(root))
    mp.setenv("SERVEBENCH_ANNOTATIONS", str(root / "none.yaml"))
    rng = np.random.default_rng(11)
    store = ResultStore(str(root))
    summaries = []
    try:
        for night in range(NIGHTS):  # as the DAG does: publish, then detect, night by night
            summaries.append(detect_regressions(_publish(store, night, rng)))
        yield store, summaries, mp
    finally:
        mp.undo()


def test_the_regression_is_raised_once_with_its_cause(history):
    store, _, _ = history
    alerts = store.read_table("regressions").to_pandas()
    found = alerts[alerts["kind"] == "regression"]
    assert len(found) == 1, found[["series_id", "run_id", "change_date"]]
    row = found.iloc[0]
    assert row["variant"] == "q4" and row["metric"] == "ttft_ms_p95"
    assert row["change_date"] == DAY0 + dt.timedelta(days=20)
    assert row["run_date"] <= DAY0 + dt.timedelta(days=23)  # within three nights
    assert 12 < row["change_pct"] < 18
    assert row["cause"] == "engine_version b1 -> b2"
    assert not (alerts["variant"] == "f16").any() or set(
        alerts[alerts["variant"] == "f16"]["kind"]) == {"newly_failing"}


def test_newly_failing_and_gate_failure(history):
    store, _, _ = history
    alerts = store.read_table("regressions").to_pandas()
    failing = alerts[alerts["kind"] == "newly_failing"]
    assert failing["run_date"].tolist() == [DAY0 + dt.timedelta(days=25)]
    assert "SIGSEGV" in failing.iloc[0]["reason"]
    gates = alerts[alerts["kind"] == "gate_failure"]
    assert gates[["variant", "run_date"]].values.tolist() == [["q4",
                                                               DAY0 + dt.timedelta(days=26)]]


def test_rerunning_a_night_replaces_its_alerts(history):
    store, summaries, _ = history
    night = summaries[22]
    before = store.read_table("regressions", run_ids=[night["run_id"]]).num_rows
    detect_regressions(night)
    detect_regressions(night)
    assert store.read_table("regressions", run_ids=[night["run_id"]]).num_rows == before
    assert store.read_table("cells", run_ids=[night["run_id"]]).num_rows == 2


def test_the_digest_leads_with_the_regression(history):
    store, _, _ = history
    alerts = store.read_table("regressions").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"].iloc[0]["run_id"]
    cells = store.read_table("cells", run_ids=[run_id]).to_pandas()
    run = store.read_table("runs", run_ids=[run_id]).to_pylist()[0]
    text = render_digest(cells, run, "data", alerts[alerts["run_id"] == run_id])
    assert "## Regressions (1)" in text
    assert "**TTFT p95 +" in text and "`t / q4 / w / c1`" in text
    assert "cause: engine_version b1 -> b2" in text
    assert text.index("## Regressions") < text.index("## t")


def test_the_digest_file_links_a_chart_of_each_change(history, monkeypatch):
    import re
    from pathlib import Path

    from servebench.pipeline import send_digest

    store, summaries, _ = history
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    alerts = store.read_table("regressions").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"].iloc[0]["run_id"]
    summary = next(s for s in summaries if s["run_id"] == run_id)
    where = send_digest(summary)
    digest = Path(where.split(" and ")[0])
    text = digest.read_text()
    [chart] = re.findall(r"\(\[chart\]\(([^)]+)\)\)", text)
    [target_chart] = re.findall(r"!\[t: latency vs throughput\]\(([^)]+)\)", text)
    for rel in (chart, target_chart):
        png = (digest.parent / rel).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000
