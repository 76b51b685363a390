"""Which runs are nights, and which nights are missing. Ad-hoc runs are judged against the
nights but never become one of them: a developer's manual trigger between two nights
(``runs.nightly`` false) is not in the next night's series, and a scheduled, backfill or marked
manual run is. A scheduled night with no committed run is named in the next digest."""

import datetime as dt

import numpy as np
import pytest
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore
from servebench.trends.series import counts_as_night

DAY0 = dt.date(2026, 9, 1)


def _publish(store, run_id, day, hour, slow, rng, nightly):
    cells = [dict(run_id=run_id, run_date=day, cell_id="t/f16/w/c1", target="t",
                  stack="llama_cpp", variant="f16", workload="w", load_point="c1",
                  concurrency=1, engine_version="b1", model_file_sha256="a" * 64,
                  hardware="cpu", sampling_hash="s", status="ok",
                  ttft_ms_p95=10.0 * slow * (1 + 0.01 * rng.normal()),
                  output_throughput=1000 / slow * (1 + 0.01 * rng.normal()),
                  e2e_ms_p50=50.0 * slow * (1 + 0.01 * rng.normal()))]
    runs = [dict(run_id=run_id, run_date=day, dag_id="nightly_benchmark", sweep_name="local",
                 nightly=nightly, logical_date=dt.datetime.combine(day, dt.time(hour), dt.UTC),
                 finished_at=dt.datetime.combine(day, dt.time(hour, 30), dt.UTC),
                 suite_git_sha="abc", sweep_hash="h", n_cells=1)]
    store.publish(run_id, day, {"runs": rows_to_table("runs", runs),
                                "cells": rows_to_table("cells", cells)})
    return {"run_id": run_id, "run_date": day.isoformat()}


@pytest.mark.parametrize(("run_type", "marked", "night"), [
    ("scheduled", False, True), ("backfill", False, True), ("manual", False, False),
    ("manual", True, True), ("asset_triggered", False, False)])
def test_which_dag_runs_are_nights(run_type, marked, night):
    from airflow.sdk.api.datamodels._generated import DagRunType

    assert counts_as_night(run_type, marked) is night
    assert counts_as_night(DagRunType(run_type), marked) is night  # the task SDK's enum


def test_a_manual_trigger_between_two_nights_is_judged_but_never_a_night(tmp_path,
                                                                        monkeypatch):
    from servebench.pipeline import detect
    from servebench.trends.nightly import load_nights

    root = tmp_path / "data"
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(root))
    monkeypatch.setenv("SERVEBENCH_ANNOTATIONS", str(root / "none.yaml"))
    store, rng = ResultStore(str(root)), np.random.default_rng(5)
    for night in range(20):
        day = DAY0 + dt.timedelta(days=night)
        detect(_publish(store, f"scheduled__{day}", day, 2, 1.0, rng, True))
    # a developer tries a broken build at noon on day 19: 2.5x slower
    day = DAY0 + dt.timedelta(days=19)
    adhoc = detect(_publish(store, "manual__try", day, 12, 2.5, rng, False))
    runs, _, series = load_nights(store, "manual__try")
    assert runs["run_id"].iloc[-1] == "manual__try" and len(runs) == 21  # judged on the nights
    assert adhoc["alerts"].get("regression", 0) >= 1, adhoc
    # the next night does not see it: 21 nights, the ad-hoc run not among them
    day = DAY0 + dt.timedelta(days=20)
    tonight = detect(_publish(store, f"scheduled__{day}", day, 2, 1.0, rng, True))
    runs, _, series = load_nights(store, tonight["run_id"])
    assert "manual__try" not in set(runs["run_id"]) and len(runs) == 21
    assert "manual__try" not in set(series["run_id"])
    assert tonight["alerts"] == {}, tonight  # neither a regression nor a recovery


def test_the_next_digest_names_the_scheduled_nights_without_a_run(tmp_path, monkeypatch):
    from servebench.defaults import NIGHTLY_SCHEDULE
    from servebench.pipeline import send_digest
    from servebench.trends.series import missing_nights

    root = tmp_path / "data"
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(root))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    store, rng = ResultStore(str(root)), np.random.default_rng(6)
    for night in (0, 1, 2, 5):  # nights 3 and 4 broke before publishing
        day = DAY0 + dt.timedelta(days=night)
        last = _publish(store, f"scheduled__{day}", day, 2, 1.0, rng, True)
    _publish(store, "manual__try", DAY0 + dt.timedelta(days=5), 12, 1.0, rng, False)
    runs = store.read_table("runs").to_pandas()
    run = runs[runs["run_id"] == last["run_id"]].iloc[0].to_dict()
    assert [t.date() for t in missing_nights(runs, run, NIGHTLY_SCHEDULE)] == [
        DAY0 + dt.timedelta(days=3), DAY0 + dt.timedelta(days=4)]
    adhoc = runs[runs["run_id"] == "manual__try"].iloc[0].to_dict()
    assert missing_nights(runs, adhoc, NIGHTLY_SCHEDULE) == []  # an ad-hoc run misses nothing
    # manual runs marked nightly at midnight stand in for the night they ran in
    marked = runs.assign(logical_date=runs["logical_date"] - dt.timedelta(hours=2))
    night2 = marked[marked["run_id"] == f"scheduled__{DAY0 + dt.timedelta(days=2)}"]
    assert missing_nights(marked, night2.iloc[0].to_dict(), NIGHTLY_SCHEDULE) == []
    digest = open(send_digest(last).split(" ")[0]).read()
    assert "**Missing nights: 2026-09-04 02:00, 2026-09-05 02:00 (UTC)**" in digest, digest
    first = {"run_id": f"scheduled__{DAY0}", "run_date": DAY0.isoformat()}
    assert "Missing nights" not in open(send_digest(first).split(" ")[0]).read()
