"""The pipeline steps end to end against S3 (moto's server on loopback) and a real
llama-server: bench rows go through the store's scratch area in S3, publish is atomic and
idempotent there, and the digest lands beside the results."""

import pytest
import yaml

from servebench import pipeline
from servebench.results.store import ResultStore
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration
RUN = "scheduled__2026-11-30T02:00:00+00:00"


@pytest.fixture
def small_sweep(tmp_path):
    data = yaml.safe_load((PROJECT_ROOT / "include/sweeps/local.yaml").read_text())
    data["workloads"] = [{"kind": "fixed", "name": "fixed", "input_tokens": 32,
                          "output_tokens": 8, "num_requests": 6}]
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
    hosts = pipeline.provision(RUN)
    for unit in plan["units"]:
        summary = pipeline.bench_unit(plan, unit, hosts, RUN)
        assert summary["cells"] == 1 and summary["evals"] == 200
    assert pipeline.teardown(hosts, RUN) == []  # every server already stopped

    first = pipeline.aggregate_and_publish(plan, RUN, None, "nightly_benchmark")
    store = ResultStore("s3://bench/nightly", endpoint_override=s3_endpoint)
    assert store.committed_run_ids() == [RUN]
    assert store.read_scratch(RUN) == {}  # scratch is cleared once published

    # a re-run of the same run id replaces its rows and never duplicates them
    for unit in plan["units"]:
        pipeline.bench_unit(plan, unit, hosts, RUN)
    second = pipeline.aggregate_and_publish(plan, RUN, None, "nightly_benchmark")
    assert first["rows"] == second["rows"] == {"cells": 2, "requests": 16, "evals": 400,
                                               "runs": 1}
    cells = store.read_table("cells").to_pandas()
    assert sorted(cells["variant"]) == ["f16", "q2_k"]
    assert cells.set_index("variant").loc["q2_k", "gate_verdict"] == "fail"

    where = pipeline.send_digest(second)
    assert where.startswith("s3://bench/nightly/digests/")
    assert store.find("contracts")  # the contract report is kept beside the data
