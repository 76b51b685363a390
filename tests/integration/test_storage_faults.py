"""Storage faults: S3 answering SlowDown and 5xx mid-publish (through a proxy in front of moto
on loopback), and two publishes of one run racing, on S3 and on a local folder. A publish
either commits whole or not at all, its retries are bounded, and the run's partition is always
one publish's rows -- never a mix, never twice."""

import datetime as dt
import threading

import pytest
from s3_fault_proxy import S3FaultProxy
from servebench.results.schema import rows_to_table
from servebench.results.store import LOCKS, S3_MAX_ATTEMPTS, ResultStore

pytestmark = pytest.mark.integration

DAY = dt.date(2026, 11, 30)
RUN = "scheduled__2026-11-30T02:00:00+00:00"


def _tables(tag: str, n: int) -> dict:
    cells = [dict(run_id=RUN, run_date=DAY, cell_id=f"t/{tag}/w/c{i}", target="t",
                  stack="llama_cpp", variant=tag, workload="w", load_point=f"c{i}",
                  concurrency=i + 1, status="ok") for i in range(n)]
    return {"runs": rows_to_table("runs", [dict(run_id=RUN, run_date=DAY, sweep_name=tag)]),
            "cells": rows_to_table("cells", cells)}


def _variants(store: ResultStore) -> list[str]:
    return store.read_table("cells").column("variant").to_pylist()


def test_slowdown_mid_publish_is_retried_and_commits_once(s3_endpoint):
    puts = []

    def throttle(method, path):  # the first two uploads are throttled
        if method == "PUT" and "_locks" not in path:
            puts.append(path)
            return 503 if len(puts) <= 2 else None
        return None

    with S3FaultProxy(s3_endpoint, throttle) as proxy:
        store = ResultStore("s3://bench/throttled", endpoint_override=proxy.url)
        store.publish(RUN, DAY, _tables("a", 3))
    assert [status for _, _, status in proxy.injected] == [503, 503]
    direct = ResultStore("s3://bench/throttled", endpoint_override=s3_endpoint)
    assert direct.committed_run_ids() == [RUN] and _variants(direct) == ["a"] * 3


def test_an_s3_that_keeps_failing_commits_nothing_and_the_rerun_commits_once(s3_endpoint):
    def broken_commit(method, path):  # every write of the manifest fails
        return 500 if method == "PUT" and "/_manifests/" in path else None

    with S3FaultProxy(s3_endpoint, broken_commit) as proxy:
        store = ResultStore("s3://bench/broken", endpoint_override=proxy.url)
        with pytest.raises(OSError, match="INTERNAL_FAILURE"):
            store.publish(RUN, DAY, _tables("a", 3))
    # bounded: the SDK's attempts, then the error -- and nothing half-visible
    assert len(proxy.injected) == S3_MAX_ATTEMPTS
    direct = ResultStore("s3://bench/broken", endpoint_override=s3_endpoint)
    assert direct.committed_run_ids() == [] and direct.read_table("cells").num_rows == 0
    assert not direct.find(LOCKS)  # the lease went with the failed publish
    direct.publish(RUN, DAY, _tables("a", 3))  # the task's retry
    assert _variants(direct) == ["a"] * 3


def _race(store_a: ResultStore, store_b: ResultStore) -> None:
    start = threading.Barrier(2)
    errors = []

    def publish(store, tag, n):
        start.wait()
        try:
            store.publish(RUN, DAY, _tables(tag, n))
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=publish, args=(store_a, "a", 3)),
               threading.Thread(target=publish, args=(store_b, "b", 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_publishes_of_one_run_racing_leave_one_whole(where, s3_endpoint, tmp_path):
    def store():
        if where == "s3":
            return ResultStore("s3://bench/race", endpoint_override=s3_endpoint)
        return ResultStore(str(tmp_path / "data"))

    for _ in range(3):  # a race can fall either way; each must end whole
        _race(store(), store())
        final = store()
        assert final.committed_run_ids() == [RUN]
        variants = _variants(final)
        assert variants in (["a"] * 3, ["b"] * 5), variants  # one publish's rows, once
        runs = final.read_table("runs").column("sweep_name").to_pylist()
        assert runs == variants[:1]  # every table from that same publish
        assert not final.find(LOCKS)
