"""The pipeline steps end to end against S3 (moto's server on loopback) and a real
llama-server: bench rows go through the store's scratch area in S3, publish is atomic and
idempotent there, and the digest lands beside the results."""

import json

import pytest
import yaml
from measured import assert_measured
from servebench import connections, pipeline
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration
RUN = "scheduled__2026-11-30T02:00:00+00:00"


@pytest.fixture
def small_sweep(tmp_path):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    # 32 tokens, not fewer: a tiny model streams 8 in ~8 ms, and one scheduling hiccup of
    # the client then reads a whole response at once (timing_unresolved, rightly invalid)
    data["workloads"] = [{"kind": "fixed", "name": "fixed", "input_tokens": 32,
                          "output_tokens": 32, "num_requests": 6}]
    data["load"]["concurrency"] = [1]
    data["cross_stack"] = []
    target = data["targets"][0]
    target["variants"] = [v for v in target["variants"] if v["name"] in ("f16", "q2_k")]
    data["targets"] = [target]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_pipeline_publishes_to_s3_idempotently(s3_endpoint, small_sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", "s3://bench/nightly")
    monkeypatch.setenv("SERVEBENCH_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)

    plan = pipeline.plan_run(small_sweep)
    hosts = pipeline.provision(plan, RUN)
    [host] = {u["host"] for u in plan["units"]}  # both variants on this machine, in turn
    summary = pipeline.bench_host(plan, host, hosts, RUN)
    assert [(u["cells"], u["evals"]) for u in summary["units"].values()] == [(1, 200)] * 2
    assert pipeline.bench_host(plan, host, hosts, RUN)["units"] == {}  # a retry: all kept
    assert pipeline.teardown(hosts, RUN) == []  # every server already stopped

    first = pipeline.aggregate_and_publish(plan, RUN, None, "nightly_benchmark")
    store = ResultStore("s3://bench/nightly", endpoint_override=s3_endpoint)
    assert store.committed_run_ids() == [RUN]
    assert store.read_scratch(RUN) == {}  # scratch is cleared once published

    # a re-run of the same run id replaces its rows and never duplicates them
    pipeline.bench_host(plan, host, hosts, RUN)
    second = pipeline.aggregate_and_publish(plan, RUN, None, "nightly_benchmark")
    assert first["rows"] == second["rows"] == {"cells": 2, "requests": 16, "evals": 400,
                                               "runs": 1, "units": 2, "hosts": 0}
    cells = store.read_table("cells").to_pandas()
    assert sorted(cells["variant"]) == ["f16", "q2_k"]
    assert cells.set_index("variant").loc["q2_k", "gate_verdict"] == "fail"

    where = pipeline.send_digest(second)
    assert where.startswith("s3://bench/nightly/digests/")
    assert store.find("contracts")  # the contract report is kept beside the data


def test_store_takes_credentials_and_endpoint_from_the_airflow_connection(s3_endpoint,
                                                                          monkeypatch):
    # no endpoint and no keys in the environment: only the connection knows them
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", "s3://bench/viaconn")
    monkeypatch.delenv("SERVEBENCH_S3_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": "conn-key", "password": "conn-secret",
        "extra": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}}))
    from servebench.results.schema import rows_to_table
    from servebench.settings import get_settings

    store = connections.open_store(get_settings())
    assert "conn-secret" not in repr(store)
    store.publish(RUN, "2026-11-30", {"runs": rows_to_table("runs", [
        {"run_id": RUN, "run_date": "2026-11-30"}])})
    assert store.committed_run_ids() == [RUN]


def _s3_env(monkeypatch, s3_endpoint, prefix):
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", f"s3://bench/{prefix}")
    monkeypatch.setenv("SERVEBENCH_S3_ENDPOINT_URL", s3_endpoint)
    return ResultStore(f"s3://bench/{prefix}", endpoint_override=s3_endpoint)


def test_crash_between_stage_and_commit_leaves_no_half_visible_run(s3_endpoint, monkeypatch):
    from servebench.results.schema import rows_to_table

    store = _s3_env(monkeypatch, s3_endpoint, "crash")
    cells = [{"run_id": RUN, "run_date": "2026-11-30", "cell_id": f"t/v/w/c{i}", "target": "t",
              "stack": "llama_cpp", "variant": "v", "workload": "w", "status": "ok"}
             for i in range(3)]
    tables = {"cells": rows_to_table("cells", cells)}

    def crash(path, text):
        raise OSError("worker killed before the manifest")

    monkeypatch.setattr(store, "_write_text", crash)
    with pytest.raises(OSError):
        store.publish(RUN, "2026-11-30", tables)
    monkeypatch.undo()
    _s3_env(monkeypatch, s3_endpoint, "crash")
    assert store.committed_run_ids() == [] and store.read_table("cells").num_rows == 0
    store.publish(RUN, "2026-11-30", tables)  # the retry commits, once
    assert store.read_table("cells").num_rows == 3


def test_a_batch_that_breaks_the_contract_is_not_published(s3_endpoint, small_sweep,
                                                           monkeypatch):
    from servebench.results.contract import ContractError
    from servebench.results.schema import rows_to_table

    store = _s3_env(monkeypatch, s3_endpoint, "contract")
    plan = pipeline.plan_run(small_sweep)
    for unit in plan["units"]:
        row = {"run_id": RUN, "run_date": plan["run_date"], "target": unit["target"],
               "stack": unit["stack"], "variant": unit["variant"], "workload": "fixed",
               "load_point": "c1", "load_mode": "closed", "concurrency": 1,
               "cell_id": f"{unit['target']}/{unit['variant']}/fixed/c1", "status": "ok",
               "n_requests": 6, "n_ok": 6, "n_errors": 0, "error_rate": 0.0}
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            row.update({f"{m}_mean": 5.0, f"{m}_p50": 5.0, f"{m}_p90": 6.0, f"{m}_p95": 7.0,
                        f"{m}_p99": 8.0})
        row["ttft_ms_p50"] = 50.0  # p50 above p95: a broken aggregate
        store.write_scratch(RUN, unit["unit_id"], "cells", rows_to_table("cells", [row]))
    with pytest.raises(ContractError, match=r"ttft_ms_p95.*ttft_ms_p50"):
        pipeline.aggregate_and_publish(plan, RUN, None, "nightly_benchmark")
    assert store.committed_run_ids() == []
    [report] = store.find("contracts")
    assert "adder-llamacpp/f16/fixed/c1" in store._fs.open_input_stream(
        report.removeprefix("s3://")).read().decode()
    assert store.read_scratch(RUN)  # kept, so a fixed re-run can publish


def test_the_nightly_dag_publishes_to_s3(s3_endpoint, small_sweep, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    store = _s3_env(monkeypatch, s3_endpoint, "dag")
    monkeypatch.setenv("SERVEBENCH_WORK_DIR", str(tmp_path / "runs"))
    dag = DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["nightly_benchmark"]
    dag_run = dag.test(run_conf={"sweep": small_sweep})
    assert dag_run.state == "success"
    [run_id] = store.committed_run_ids()
    cells = store.read_table("cells").to_pandas()
    assert sorted(cells["variant"]) == ["f16", "q2_k"]
    assert_measured(cells.to_dict("records"))
    assert store.read_table("evals").num_rows == 400
    assert store.find("digests") and not store.read_scratch(run_id)
