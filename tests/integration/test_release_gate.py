"""The release_gate DAG end to end with dag.test(): the local llama.cpp quants against f16 on
this machine, interleaved repetitions, the verdict kept beside the results. The harsh quant
(q2_k, which gets the adder's sums wrong) fails the run; q8_0 passes."""

import pytest
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration

BASE = {"target": "adder-llamacpp", "workloads": ["fixed-64x32"], "concurrency": [4]}


@pytest.fixture(scope="module")
def gates(tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    tmp = tmp_path_factory.mktemp("gate")
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVEBENCH_RESULTS_URI", str(tmp / "data"))
    mp.setenv("SERVEBENCH_WORK_DIR", str(tmp / "runs"))
    mp.delenv("SLACK_BOT_TOKEN", raising=False)
    try:
        dag = DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["release_gate"]
        harsh = dag.test(run_conf={**BASE, "candidate": "q2_k", "repetitions": 2})
        # the tiny model's cells last milliseconds on a shared 2-core VM: generous speed
        # thresholds on robust statistics, so this run shows the pass path, not the host's
        # noise (a single 20 ms stall doubles a TTFT p95 here)
        fine = dag.test(run_conf={**BASE, "candidate": "q8_0", "repetitions": 4,
                                  "thresholds": {"ttft_ms_p50": 2.0, "output_throughput": 0.5}})
    finally:
        mp.undo()
    return harsh, fine, tmp / "data"


def _verdict(data, dag_run) -> str:
    from servebench.results.store import encode_run_id

    [path] = data.glob(f"release_gates/date=*/{encode_run_id(dag_run.run_id)}.md")
    return path.read_text()


def test_the_harsh_quant_fails_the_run_with_a_readable_verdict(gates):
    harsh, _, data = gates
    states = {ti.task_id: ti.state for ti in harsh.get_task_instances()}
    assert harsh.state == "failed" and states["verdict"] == "failed", states
    assert states["teardown_hosts"] == "success"  # its servers are gone all the same
    text = _verdict(data, harsh)
    assert text.startswith("# Release gate: adder-llamacpp/q2_k vs f16: **FAIL**")
    assert "- **quality**: fail" in text
    assert "2 interleaved repetitions" in text
    rows = _rows(data, harsh)  # and as data, beside it
    assert {r["outcome"] for r in rows} == {"blocked"}
    assert next(r for r in rows if r["metric"] == "quality")["verdict"] == "fail"


def _rows(data, dag_run) -> list[dict]:
    from servebench.results.store import ResultStore

    rows = ResultStore(str(data)).read_log("gate_verdicts").to_pylist()
    return [r for r in rows if r["run_id"] == dag_run.run_id]


def test_q8_0_passes(gates):
    _, fine, data = gates
    assert fine.state == "success"
    states = {ti.task_id: ti.state for ti in fine.get_task_instances()}
    assert states["person_decides"] == "skipped"  # a pass asks nobody
    text = _verdict(data, fine)
    assert "**PASS**" in text.splitlines()[0], text
    assert "| fixed-64x32 | c4 | TTFT p50 |" in text
    rows = _rows(data, fine)
    assert {r["outcome"] for r in rows} == {"ship"} and {r["verdict"] for r in rows} == {"pass"}
    assert {"ttft_ms_p50", "output_throughput", "quality"} <= {r["metric"] for r in rows}
