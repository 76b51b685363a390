import datetime as dt
import os

import pyarrow.parquet as pq
import pytest
from servebench.results.schema import rows_to_table
from servebench.results.store import (
    Manifest,
    ResultStore,
    decode_run_id,
    encode_run_id,
)

D1, D2 = dt.date(2025, 3, 1), dt.date(2025, 3, 2)
AIRFLOW_ID = "scheduled__2025-03-01T00:00:00+00:00"


def run_tables(run_id, day, n_cells=2, n_requests=3, ttft=10.0):
    cells = [dict(run_id=run_id, run_date=day, cell_id=f"c{i}", target="t", stack="llama.cpp",
                  variant="q4", workload="chat", concurrency=2 ** i, status="ok",
                  ttft_ms_p50=ttft) for i in range(n_cells)]
    reqs = [dict(run_id=run_id, run_date=day, cell_id="c0", request_id=str(i), warmup=False,
                 chunk_times=[0.1, 0.2], chunk_tokens=[1, 2]) for i in range(n_requests)]
    return {
        "runs": rows_to_table("runs", [dict(run_id=run_id, run_date=day, n_cells=n_cells)]),
        "cells": rows_to_table("cells", cells),
        "requests": rows_to_table("requests", reqs),
    }


@pytest.fixture
def store(tmp_path):
    return ResultStore(str(tmp_path / "data"))


def test_run_id_encoding_is_reversible_and_path_safe():
    enc = encode_run_id(AIRFLOW_ID)
    assert ":" not in enc and "+" not in enc and "/" not in enc
    assert decode_run_id(enc) == AIRFLOW_ID
    assert decode_run_id(encode_run_id("manual/a b%")) == "manual/a b%"
    with pytest.raises(ValueError):
        encode_run_id("..")


def test_publish_layout_and_read_back(store, tmp_path):
    m = store.publish(AIRFLOW_ID, D1, run_tables(AIRFLOW_ID, D1))
    assert m.tables["cells"].rows == 2 and m.tables["requests"].rows == 3
    enc = encode_run_id(AIRFLOW_ID)
    root = tmp_path / "data"
    assert (root / "cells" / "date=2025-03-01" / f"run_id={enc}" / "part-0.parquet").is_file()
    assert (root / "_manifests" / f"{enc}.json").is_file()
    assert not (root / "_staging" / enc).exists()
    assert store.committed_run_ids() == [AIRFLOW_ID]
    assert store.manifest(AIRFLOW_ID) == Manifest.from_json(m.to_json())

    cells = store.read_table("cells")
    assert cells.num_rows == 2
    assert set(cells.column("run_id").to_pylist()) == {AIRFLOW_ID}
    assert cells.column_names == store.read_table("cells", run_ids=["nope"]).column_names
    assert "date" not in cells.column_names
    reqs = store.read_table("requests")
    assert reqs.column("chunk_tokens").to_pylist()[0] == [1, 2]
    assert store.read_table("evals").num_rows == 0


def test_republish_same_run_id_replaces(store):
    store.publish("r1", D1, run_tables("r1", D1, ttft=10.0))
    store.publish("r2", D1, run_tables("r2", D1))
    store.publish("r1", D1, run_tables("r1", D1, n_cells=3, ttft=99.0))
    cells = store.read_table("cells", run_ids=["r1"]).to_pylist()
    assert len(cells) == 3
    assert {c["ttft_ms_p50"] for c in cells} == {99.0}
    assert store.read_table("cells").num_rows == 5
    assert store.read_table("runs").num_rows == 2


def test_republish_with_other_date_removes_old_partition(store, tmp_path):
    store.publish("r1", D1, run_tables("r1", D1))
    store.publish("r1", D2, run_tables("r1", D2))
    cells = store.read_table("cells")
    assert set(cells.column("run_date").to_pylist()) == {D2}
    assert not list((tmp_path / "data" / "cells").glob("date=2025-03-01/*"))


def test_uncommitted_run_is_invisible(store, tmp_path):
    store.publish("good", D1, run_tables("good", D1))
    # a publish that crashed after moving files into place, before the manifest
    store.publish("crashed", D1, run_tables("crashed", D1))
    os.remove(tmp_path / "data" / "_manifests" / "crashed.json")
    # and one that crashed while staging
    staged = tmp_path / "data" / "_staging" / "staged" / "cells"
    staged.mkdir(parents=True)
    pq.write_table(run_tables("staged", D1)["cells"], staged / "part-0.parquet")

    assert store.committed_run_ids() == ["good"]
    assert set(store.read_table("cells").column("run_id").to_pylist()) == {"good"}
    assert store.read_table("cells", run_ids=["crashed"]).num_rows == 0


def test_partition_pruning_by_date(store, tmp_path):
    store.publish("a", D1, run_tables("a", D1))
    store.publish("b", D2, run_tables("b", D2))
    # corrupt b's file: only a read that prunes date=D2 can still succeed
    bad = tmp_path / "data" / "cells" / "date=2025-03-02" / "run_id=b" / "part-0.parquet"
    bad.write_bytes(b"not parquet")
    t = store.read_table("cells", filters=[("date", "=", D1)])
    assert set(t.column("run_id").to_pylist()) == {"a"}
    with pytest.raises(Exception):
        store.read_table("cells")


def test_publish_rejects_mismatched_run_id_and_unknown_table(store):
    with pytest.raises(ValueError, match="run_id"):
        store.publish("other", D1, run_tables("r1", D1))
    with pytest.raises(ValueError, match="unknown table"):
        store.publish("r1", D1, {"bogus": run_tables("r1", D1)["runs"]})
    assert store.committed_run_ids() == []


def test_uri_for(store, tmp_path):
    assert store.uri_for("cells") == str(tmp_path / "data" / "cells")
    with pytest.raises(ValueError):
        store.uri_for("nope")


def test_a_lease_left_by_a_crashed_publish_is_taken_over_and_a_live_one_waited_for(
        store, tmp_path, monkeypatch):
    import json
    import time

    from servebench.results import store as store_module

    lock = tmp_path / "data" / store_module.LOCKS / f"{encode_run_id(AIRFLOW_ID)}.json"
    lock.parent.mkdir(parents=True)
    # a publish that crashed an hour ago: its lease is stale, taken over
    lock.write_text(json.dumps({"token": "dead", "since": time.time() - 2 * store_module.LEASE_S}))
    store.publish(AIRFLOW_ID, D1, run_tables(AIRFLOW_ID, D1))
    assert store.committed_run_ids() == [AIRFLOW_ID] and not lock.exists()
    # a live one is waited for, then the conflict is named
    lock.write_text(json.dumps({"token": "alive", "since": time.time()}))
    monkeypatch.setattr(store_module, "LEASE_POLL_S", 0.01)
    with pytest.raises(store_module.PublishConflict, match="another publish still holds"), \
            store._lease(AIRFLOW_ID, wait_s=0.05):
        pass
    assert json.loads(lock.read_text())["token"] == "alive"  # not ours: left alone


def test_create_text_writes_only_where_nothing_is(store, tmp_path):
    assert store.create_text("failures/r/posted.json", "first") is True
    assert store.create_text("failures/r/posted.json", "second") is False
    assert (tmp_path / "data" / "failures" / "r" / "posted.json").read_text() == "first"


def test_a_run_stored_before_the_memory_columns_still_reads(store, tmp_path):
    """Units and cells files written without the memory columns (every run before them) read
    with those columns null, beside a run that has them."""
    from servebench.bench.memory import CELL_COLUMNS

    units = [dict(run_id=AIRFLOW_ID, run_date=D1, unit_id="t--q4", target="t", variant="q4")]
    store.publish(AIRFLOW_ID, D1, {**run_tables(AIRFLOW_ID, D1),
                                   "units": rows_to_table("units", units)})
    enc = encode_run_id(AIRFLOW_ID)
    memory = [*CELL_COLUMNS, "weights_source", "kv_cache_source", "peak_rss_source",
              "peak_device_memory_source"]
    for table in ("units", "cells"):  # as an older release wrote them
        path = tmp_path / "data" / table / "date=2025-03-01" / f"run_id={enc}" / "part-0.parquet"
        old = pq.read_table(path)
        pq.write_table(old.drop_columns([c for c in memory if c in old.column_names]), path)
        assert "peak_rss_bytes" not in pq.read_schema(path).names
    newer = "manual__2025-03-02"
    store.publish(newer, D2, {**run_tables(newer, D2), "units": rows_to_table("units", [
        {**units[0], "run_id": newer, "run_date": D2, "peak_rss_bytes": 483_000_000,
         "peak_rss_source": "sampled"}])})
    read = store.read_table("units").to_pandas().set_index("run_id")
    assert read["peak_rss_bytes"].isna()[AIRFLOW_ID]
    assert read.loc[newer, "peak_rss_bytes"] == 483_000_000
    cells = store.read_table("cells", run_ids=[AIRFLOW_ID])
    assert cells.column("kv_cache_tokens").null_count == cells.num_rows == 2


def test_a_store_written_before_the_changes_table_was_named_so_still_loads(store, tmp_path):
    """A night's alerts were once kept as the ``regressions`` table: a store with only those
    files reads them as ``changes`` (through the store, ``load_history`` and DuckDB), beside
    a night written since; the detect step run again on the old night replaces them, never
    doubles them."""
    import json

    from servebench.results.history import duckdb_connection, load_history

    def alerts(run_id, day, kind="regression"):
        return rows_to_table("changes", [dict(run_id=run_id, run_date=day, series_id="s1",
                                              target="t", metric="ttft_ms_p95", kind=kind)])

    store.publish(AIRFLOW_ID, D1, run_tables(AIRFLOW_ID, D1))
    store.attach(AIRFLOW_ID, D1, {"changes": alerts(AIRFLOW_ID, D1)})
    root, enc = tmp_path / "data", encode_run_id(AIRFLOW_ID)
    (root / "changes").rename(root / "regressions")  # as an older release wrote it
    manifest = json.loads((root / "_manifests" / f"{enc}.json").read_text())
    entry = manifest["tables"].pop("changes")
    entry["files"] = [f.replace("changes/", "regressions/", 1) for f in entry["files"]]
    manifest["tables"]["regressions"] = entry
    (root / "_manifests" / f"{enc}.json").write_text(json.dumps(manifest))
    assert not (root / "changes").exists()

    assert store.read_table("changes").column("kind").to_pylist() == ["regression"]
    newer = "manual__2025-03-02"
    store.publish(newer, D2, run_tables(newer, D2))
    store.attach(newer, D2, {"changes": alerts(newer, D2, "improvement")})
    both = store.read_table("changes").to_pandas().set_index("run_id")["kind"].to_dict()
    assert both == {AIRFLOW_ID: "regression", newer: "improvement"}
    assert load_history(store, "changes", target="t").num_rows == 2
    assert duckdb_connection(store).execute("select count(*) from changes").fetchone() == (2,)

    store.attach(AIRFLOW_ID, D1, {"changes": alerts(AIRFLOW_ID, D1, "host_change")})
    assert store.read_table("changes", run_ids=[AIRFLOW_ID]).column("kind").to_pylist() == [
        "host_change"]
    assert set(store.manifest(AIRFLOW_ID).tables) == {"runs", "cells", "requests", "changes"}
    assert not list((root / "regressions").rglob("*.parquet"))
