"""History readers: per-target, date-bounded loads and DuckDB views over committed runs only."""

import datetime as dt
import os
import shutil

import pytest
from servebench.results.history import duckdb_connection, load_history, register_views
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore, encode_run_id

DAYS = [dt.date(2025, 3, 1), dt.date(2025, 3, 2), dt.date(2025, 3, 3)]
RUNS = [f"scheduled__{d.isoformat()}T00:00:00+00:00" for d in DAYS]
TARGETS = ("llama", "tf")


def run_tables(run_id, day, ttft):
    cells, requests = [], []
    for t in TARGETS:
        for c in (1, 4):
            cid = f"{t}/q4/chat/c{c}"
            cells.append(dict(run_id=run_id, run_date=day, cell_id=cid, target=t, stack="s",
                              variant="q4", workload="chat", concurrency=c, status="ok",
                              ttft_ms_p50=ttft))
            requests += [dict(run_id=run_id, run_date=day, cell_id=cid, request_id=f"{cid}#{i}",
                              warmup=False) for i in range(3)]
    evals = [dict(run_id=run_id, run_date=day, target=t, variant="q4", golden_set="g",
                  item_id="1", score=1.0, correct=True) for t in TARGETS]
    return {
        "runs": rows_to_table("runs", [dict(run_id=run_id, run_date=day, n_cells=len(cells))]),
        "cells": rows_to_table("cells", cells),
        "requests": rows_to_table("requests", requests),
        "evals": rows_to_table("evals", evals),
    }


@pytest.fixture
def store(tmp_path):
    s = ResultStore(str(tmp_path / "data"))
    for i, (run_id, day) in enumerate(zip(RUNS, DAYS)):
        s.publish(run_id, day, run_tables(run_id, day, ttft=10.0 + i))
    return s


def crash_publish(store, tmp_path, run_id, day):
    """Leave a run's partitions behind without a manifest (a publish that died before commit)."""
    store.publish(run_id, day, run_tables(run_id, day, ttft=99.0))
    os.remove(tmp_path / "data" / "_manifests" / f"{encode_run_id(run_id)}.json")


def test_one_target_with_date_bounds(store):
    t = load_history(store, "cells", target="llama", since=DAYS[1], until="2025-03-03")
    assert t.num_rows == 4
    assert set(t.column("target").to_pylist()) == {"llama"}
    assert t.column("run_id").to_pylist() == [RUNS[1]] * 2 + [RUNS[2]] * 2  # ordered by date
    assert t.column("ttft_ms_p50").to_pylist() == [11.0, 11.0, 12.0, 12.0]

    only = load_history(store, target="tf", until=DAYS[0], columns=["run_date", "date", "cell_id"])
    assert only.column_names == ["run_date", "date", "cell_id"]
    assert only.column("date").to_pylist() == [DAYS[0]] * 2
    assert only.column("cell_id").to_pylist() == ["tf/q4/chat/c1", "tf/q4/chat/c4"]

    assert load_history(store).num_rows == 12  # all targets, all dates
    assert load_history(store, since=dt.date(2026, 1, 1)).num_rows == 0
    assert load_history(store, "requests", target="tf", since=DAYS[2]).num_rows == 6
    assert load_history(store, "evals", target=["llama", "tf"], until=DAYS[1]).num_rows == 4
    with pytest.raises(ValueError):
        load_history(store, "runs", target="llama")
    with pytest.raises(ValueError):
        load_history(store, since=DAYS[2], until=DAYS[0])


def test_history_ignores_uncommitted_runs(store, tmp_path):
    crash_publish(store, tmp_path, "manual__crashed", DAYS[1])
    t = load_history(store, target="llama", since=DAYS[1], until=DAYS[1])
    assert set(t.column("run_id").to_pylist()) == {RUNS[1]}


def test_duckdb_views_show_committed_runs_only(store, tmp_path):
    crash_publish(store, tmp_path, "manual__crashed", DAYS[2])
    staged = tmp_path / "data" / "cells" / f"date={DAYS[2]}" / "run_id=manual__crashed"
    assert staged.is_dir()  # the files are there, an external glob would see them

    con = duckdb_connection(store)
    assert con.execute("select count(*) from runs").fetchone() == (3,)
    got = con.execute("select run_id, count(*) from cells group by run_id order by run_id").fetchall()
    assert got == [(r, 4) for r in RUNS]
    assert con.execute("select count(*) from requests").fetchone() == (36,)
    assert con.execute("select count(*) from evals").fetchone() == (6,)
    assert con.execute("select max(ttft_ms_p50) from cells").fetchone() == (12.0,)
    # the partition column is there, and filters on it work
    day2 = con.execute("select distinct date, run_id from cells where date = DATE '2025-03-02'")
    assert day2.fetchall() == [(DAYS[1], RUNS[1])]

    # a re-publish replaces, never duplicates; a newly committed run shows after re-registering
    store.publish(RUNS[0], DAYS[0], run_tables(RUNS[0], DAYS[0], ttft=50.0))
    store.publish("manual__crashed", DAYS[2], run_tables("manual__crashed", DAYS[2], ttft=7.0))
    register_views(con, store)
    assert con.execute("select count(*) from cells").fetchone() == (16,)
    assert con.execute(f"select max(ttft_ms_p50) from cells where run_id = '{RUNS[0]}'"
                   ).fetchone() == (50.0,)


def test_empty_store(tmp_path):
    s = ResultStore(str(tmp_path / "empty"))
    assert load_history(s, target="x").num_rows == 0
    con = duckdb_connection(s)
    assert con.execute("select count(*) from cells").fetchone() == (0,)
    assert "ttft_ms_p50" in [c[0] for c in con.execute("describe cells").fetchall()]
    shutil.rmtree(tmp_path / "empty", ignore_errors=True)
