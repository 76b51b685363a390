import datetime as dt

import pyarrow as pa
import pytest
from servebench.results.schema import (
    SCHEMA_VERSION,
    TABLES,
    SchemaError,
    conform,
    rows_to_table,
)

DAY = dt.date(2025, 3, 1)


def cell(**kw):
    base = dict(run_id="r1", run_date=DAY, cell_id="c1", target="llama", stack="llama.cpp",
                variant="q4", workload="chat", status="ok", concurrency=4)
    return {**base, **kw}


def test_every_table_has_schema_version_and_run_keys():
    assert set(TABLES) == {"runs", "cells", "requests", "evals", "changes",
                           "detectability", "confirmations", "reaped", "units", "hosts",
                           "gate_verdicts"}
    for name, schema in TABLES.items():
        assert schema.field("schema_version").type == pa.int32(), name
        assert schema.field("run_id").type == pa.string()
        assert schema.field("run_date").type == pa.date32()
        assert schema.metadata[b"servebench.schema_version"] == str(SCHEMA_VERSION).encode()


def test_cells_types():
    s = TABLES["cells"]
    assert s.field("concurrency").type == pa.int32()
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        for st in ("mean", "p50", "p90", "p95", "p99"):
            assert s.field(f"{m}_{st}").type == pa.float64()
    assert s.field("prefix_cache_hit_rate").nullable
    assert TABLES["runs"].field("logical_date").type == pa.timestamp("us", tz="UTC")
    r = TABLES["requests"]
    assert r.field("chunk_times").type == pa.list_(pa.float64())
    assert r.field("chunk_tokens").type == pa.list_(pa.int32())
    assert r.field("output_tokens").type == pa.int32() and r.field("output_tokens").nullable


def test_missing_nullable_columns_are_null_and_version_filled():
    t = rows_to_table("cells", [cell()])
    assert t.schema == TABLES["cells"]
    row = t.to_pylist()[0]
    assert row["schema_version"] == SCHEMA_VERSION
    assert row["ttft_ms_p50"] is None and row["reason"] is None
    assert row["concurrency"] == 4


def test_unknown_column_rejected_with_name():
    with pytest.raises(SchemaError, match="ttft_p50"):
        rows_to_table("cells", [cell(ttft_p50=1.0)])


def test_unknown_table():
    with pytest.raises(SchemaError, match="unknown table"):
        rows_to_table("cellz", [])


def test_required_column_missing():
    with pytest.raises(SchemaError, match="cell_id"):
        rows_to_table("cells", [{k: v for k, v in cell().items() if k != "cell_id"}])


def test_status_and_reason_rules():
    with pytest.raises(SchemaError, match="status"):
        rows_to_table("cells", [cell(status="weird")])
    with pytest.raises(SchemaError, match="reason"):
        rows_to_table("cells", [cell(status="failed")])
    with pytest.raises(SchemaError, match="reason"):
        rows_to_table("cells", [cell(reason="why")])
    t = rows_to_table("cells", [cell(status="invalid", reason="finish_reason=stop")])
    assert t.column("reason").to_pylist() == ["finish_reason=stop"]


def test_wrong_type_is_schema_error():
    with pytest.raises(SchemaError, match="fit"):
        rows_to_table("cells", [cell(concurrency="many")])


def test_iso_strings_and_timezones():
    t = rows_to_table("runs", [dict(
        run_id="scheduled__2025-03-01T00:00:00+00:00", run_date="2025-03-01",
        logical_date="2025-03-01T02:00:00+02:00",
        started_at=dt.datetime(2025, 3, 1, 1, tzinfo=dt.timezone.utc))])
    row = t.to_pylist()[0]
    assert row["run_date"] == DAY
    assert row["logical_date"] == dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


def test_requests_lists_and_evals():
    t = rows_to_table("requests", [dict(
        run_id="r1", run_date=DAY, cell_id="c1", request_id="0", warmup=False,
        sent_at=1.0, chunk_times=[1.1, 1.2], chunk_tokens=[1, 1], output_tokens=None)])
    assert t.column("chunk_tokens").to_pylist() == [[1, 1]]
    e = rows_to_table("evals", [dict(run_id="r1", run_date=DAY, target="t", variant="v",
                                     golden_set="g", item_id="1", correct=True, score=1.0)])
    assert e.num_rows == 1


def test_conform_casts_and_fills():
    raw = pa.table({"run_id": ["r1"], "run_date": [DAY], "cell_id": ["c"], "target": ["t"],
                    "stack": ["s"], "variant": ["v"], "workload": ["w"], "status": ["ok"],
                    "concurrency": pa.array([8], pa.int64())})
    t = conform("cells", raw)
    assert t.schema == TABLES["cells"]
    assert t.column("schema_version").to_pylist() == [SCHEMA_VERSION]
    with pytest.raises(SchemaError, match="bogus"):
        conform("cells", raw.append_column("bogus", pa.array([1])))


def test_a_cells_gate_verdict_is_one_the_gate_gives():
    for verdict in ("pass", "fail", "inconclusive", "not_judged", "baseline", None):
        t = rows_to_table("cells", [cell(gate_verdict=verdict)])
        assert t.column("gate_verdict").to_pylist() == [verdict]
    with pytest.raises(SchemaError, match=r"gate_verdict 'no golden set' not in .*not_judged"):
        rows_to_table("cells", [cell(gate_verdict="no golden set")])
