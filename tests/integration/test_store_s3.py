"""ResultStore against a real S3-compatible server (moto) on loopback."""
import datetime as dt

import pytest
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore

pytestmark = pytest.mark.integration

D1 = dt.date(2025, 3, 1)
RUN = "scheduled__2025-03-01T00:00:00+00:00"


def _tables(run_id, n):
    cells = [dict(run_id=run_id, run_date=D1, cell_id=f"c{i}", target="t", stack="s",
                  variant="v", workload="w", status="ok", concurrency=i + 1) for i in range(n)]
    return {"runs": rows_to_table("runs", [dict(run_id=run_id, run_date=D1)]),
            "cells": rows_to_table("cells", cells)}


def test_publish_and_read_back_over_s3(s3_endpoint):
    import boto3

    store = ResultStore("s3://bench/servebench", endpoint_override=s3_endpoint)
    assert "testing-secret" not in repr(store)
    store.publish(RUN, D1, _tables(RUN, 2))
    store.publish(RUN, D1, _tables(RUN, 3))  # idempotent: replaces

    keys = sorted(o["Key"] for o in boto3.client("s3", endpoint_url=s3_endpoint)
                  .list_objects_v2(Bucket="bench")["Contents"])
    assert "servebench/_manifests/scheduled__2025-03-01T00%3A00%3A00%2B00%3A00.json" in keys
    files = [k for k in keys if not k.endswith("/")]  # pyarrow leaves empty "dir/" markers
    assert not [k for k in files if "/_staging/" in k]
    assert sum("/cells/" in k for k in files) == 1

    assert store.committed_run_ids() == [RUN]
    cells = store.read_table("cells")
    assert cells.num_rows == 3
    assert set(cells.column("run_id").to_pylist()) == {RUN}
    assert store.read_table("cells", filters=[("date", ">", D1)]).num_rows == 0
    assert store.uri_for("cells") == "s3://bench/servebench/cells"

    # a fresh store (new process, same bucket) sees the same committed data
    assert ResultStore("s3://bench/servebench", endpoint_override=s3_endpoint) \
        .read_table("runs").num_rows == 1
