"""The release_gate DAG end to end with dag.test(): the local llama.cpp quants against f16 on
this machine, interleaved repetitions, the verdict kept beside the results. The harsh quant
(q2_k, which gets the adder's sums wrong) fails the run; q8_0 passes. An inconclusive gate
waits for a person, who answers in Required actions; their answer is kept with the verdict
and decides the run."""

import datetime as dt
import threading
from contextlib import contextmanager

import pytest
from servebench.settings import PROJECT_ROOT

pytestmark = pytest.mark.integration

BASE = {"target": "adder-llamacpp", "workloads": ["fixed-64x32"], "concurrency": [4]}
# goodput under an SLO no request meets is 0 on both variants: nothing to compare, so the
# gate cannot decide and asks a person
UNDECIDABLE = {**BASE, "candidate": "q8_0", "repetitions": 2, "thresholds": {"goodput": 0.1},
               "slos": {"ttft_ms": 0.001}}


@contextmanager
def _release_gate(tmp):
    """The release_gate DAG, its results and work under ``tmp``, no Slack."""
    from airflow.dag_processing.dagbag import DagBag

    mp = pytest.MonkeyPatch()
    mp.setenv("SERVEBENCH_RESULTS_URI", str(tmp / "data"))
    mp.setenv("SERVEBENCH_WORK_DIR", str(tmp / "runs"))
    mp.delenv("SLACK_BOT_TOKEN", raising=False)
    try:
        yield DagBag(dag_folder=str(PROJECT_ROOT / "dags")).dags["release_gate"]
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def gates(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate")
    with _release_gate(tmp) as dag:
        harsh = dag.test(run_conf={**BASE, "candidate": "q2_k", "repetitions": 2})
        # the tiny model's cells last milliseconds on a shared 2-core VM: generous speed
        # thresholds on robust statistics, so this run shows the pass path, not the host's
        # noise (a single 20 ms stall doubles a TTFT p95 here)
        fine = dag.test(run_conf={**BASE, "candidate": "q8_0", "repetitions": 4,
                                  "thresholds": {"ttft_ms_p50": 2.0, "output_throughput": 0.5}})
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
    assert states["record_decision"] == "upstream_failed"  # nobody asked; the run stays failed
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
    assert states["person_decides"] == states["record_decision"] == "skipped"  # asks nobody
    text = _verdict(data, fine)
    assert "**PASS**" in text.splitlines()[0], text
    assert "| fixed-64x32 | c4 | TTFT p50 |" in text
    rows = _rows(data, fine)
    assert {r["outcome"] for r in rows} == {"ship"} and {r["verdict"] for r in rows} == {"pass"}
    assert {"ttft_ms_p50", "output_throughput", "quality"} <= {r["metric"] for r in rows}


def _answer_when_asked(option: str, comment: str, user: str, since: dt.datetime,
                       answered: list, stop: threading.Event) -> None:
    """A person on the Required actions page: once this test's gate run asks (its
    person_decides task awaiting input), answers it through the Core API's own handler (what
    the page's buttons call), as ``user``; the run's id goes to ``answered``."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
    from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    while not stop.is_set():
        with create_session() as session:
            run_id = session.scalars(
                select(TI.run_id).join(DagRun, (DagRun.dag_id == TI.dag_id)
                                       & (DagRun.run_id == TI.run_id))
                .where(TI.dag_id == "release_gate", TI.task_id == "person_decides",
                       TI.state == TaskInstanceState.AWAITING_INPUT,
                       DagRun.run_after >= since)).first()
            if run_id is not None:
                update_hitl_detail(
                    dag_id="release_gate", dag_run_id=run_id, task_id="person_decides",
                    update_hitl_detail_payload=UpdateHITLDetailPayload(
                        chosen_options=[option], params_input={"comment": comment}),
                    user=SimpleAuthManagerUser(username=user, role="admin"), session=session)
                answered.append(run_id)
                return
        stop.wait(0.5)


@pytest.fixture(scope="module")
def decided(tmp_path_factory):
    """Two undecidable gates: one a person approves, one a person rejects."""
    tmp, runs = tmp_path_factory.mktemp("decided"), {}
    with _release_gate(tmp) as dag:
        for option, user, comment in (("Approve", "ana", "noise, ship it"),
                                      ("Reject", "bo", "p95 too close to call")):
            answered, stop = [], threading.Event()
            person = threading.Thread(target=_answer_when_asked, daemon=True, args=(
                option, comment, user, dt.datetime.now(dt.UTC), answered, stop))
            person.start()
            try:
                runs[option] = dag.test(run_conf=UNDECIDABLE)
            finally:
                stop.set()
                person.join(timeout=30)
            assert answered == [runs[option].run_id], "the gate never asked a person"
    return runs, tmp / "data"


@pytest.mark.timeout(1800)  # a gate that never asks would wait for its person for days
def test_a_persons_approval_is_kept_and_makes_the_run_green(decided):
    runs, data = decided
    approved = runs["Approve"]
    states = {ti.task_id: ti.state for ti in approved.get_task_instances()}
    assert approved.state == "success", states
    assert states["person_decides"] == states["record_decision"] == "success"
    rows = _rows(data, approved)
    assert {(r["outcome"], r["person_decision"], r["person_name"], r["person_comment"])
            for r in rows} == {("needs_person", "approved", "ana", "noise, ship it")}
    at = rows[0]["person_decided_at"]
    assert at is not None and at >= rows[0]["decided_at"]  # after the verdict asked
    text = _verdict(data, approved)
    assert "**NEEDS A PERSON**" in text.splitlines()[0]
    assert f"**approved by ana at {at:%Y-%m-%d %H:%M} UTC**: noise, ship it" in text


@pytest.mark.timeout(1800)
def test_a_persons_rejection_is_kept_and_fails_the_run(decided):
    runs, data = decided
    rejected = runs["Reject"]
    states = {ti.task_id: ti.state for ti in rejected.get_task_instances()}
    assert rejected.state == "failed", states
    # the answer itself was given (the task that asked succeeded); keeping it fails the run
    assert states["person_decides"] == "success" and states["record_decision"] == "failed"
    assert {(r["person_decision"], r["person_name"], r["person_comment"])
            for r in _rows(data, rejected)} == {("rejected", "bo", "p95 too close to call")}
