"""Every DAG file imports cleanly and follows the house rules (no DB needed)."""

from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from servebench.defaults import PARALLEL_HOSTS

DAGS = Path(__file__).resolve().parents[2] / "dags"
# tasks that must not retry, and why
NO_RETRY = {
    ("nightly_benchmark", "plan"),  # a bad spec does not heal
    ("release_gate", "plan"),  # nor bad params
    ("release_gate", "measure"),  # a retry would mix two hosts' drift into one comparison
    ("release_gate", "verdict"),  # the verdict fails the run on purpose
    ("release_gate", "needs_a_person"),  # a branch on the verdict
    ("release_gate", "person_decides"),  # a person's answer is not retried
    ("release_gate", "record_decision"),  # a rejection fails the run on purpose
}


@pytest.fixture(scope="module")
def bag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(bag):
    assert bag.import_errors == {}
    assert "nightly_benchmark" in bag.dags


def test_house_rules(bag):
    for dag_id, dag in bag.dags.items():
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.catchup is False, f"{dag_id} must set catchup=False"
        assert dag.schedule is not None or "manual" in dag.tags, f"{dag_id}: explicit schedule"
        for task in dag.tasks:
            assert task.retries >= 1 or (dag_id, task.task_id) in NO_RETRY, (
                f"{dag_id}.{task.task_id} has retries={task.retries}"
            )
            # a task that fails for good is heard (servebench.notify.failure)
            assert task.on_failure_callback, f"{dag_id}.{task.task_id}: no failure callback"


def test_nightly_shape(bag):
    dag = bag.dags["nightly_benchmark"]
    tasks = dag.task_dict
    assert tasks["provision"].is_setup
    # each recipe's checkpoint is made after the plan and before anything is held
    assert tasks["quantize"].upstream_task_ids == {"plan"}
    assert "quantize" in tasks["provision"].upstream_task_ids
    assert tasks["teardown_hosts"].is_teardown
    assert "provision" in tasks["teardown_hosts"].upstream_task_ids
    assert "bench" in tasks["teardown_hosts"].upstream_task_ids
    assert tasks["publish"].trigger_rule == "all_done"
    # mapped per host: hosts side by side, a host's units one after another in its task
    assert tasks["bench"].max_active_tis_per_dag == PARALLEL_HOSTS > 1
    assert "hosts" in tasks["bench"].upstream_task_ids
    assert {"bench"} <= tasks["publish"].upstream_task_ids
    assert "publish" in tasks["detect"].upstream_task_ids
    # the digest leads with what changed, as the same morning's relaunches confirmed it; a
    # confirmation that failed still leaves the digest
    assert tasks["confirm"].upstream_task_ids == {"plan", "detect"}
    assert tasks["digest"].upstream_task_ids == {"detect", "confirm"}
    assert tasks["digest"].trigger_rule == "all_done"
    # the instances held for the relaunches end after the confirm in every path; outside the
    # setup's scope (its failure must not skip the release), so not one of its followers
    assert tasks["release"].upstream_task_ids == {"plan", "confirm"}
    assert tasks["release"].trigger_rule == "all_done" and not tasks["release"].is_teardown
    # every task that holds an instance is time-limited: a hung call must not keep a GPU
    for held in ("provision", "bench", "teardown_hosts", "confirm", "release"):
        assert tasks[held].execution_timeout is not None, held


def test_an_inconclusive_release_gate_waits_for_a_person(bag):
    tasks = bag.dags["release_gate"].task_dict
    person = tasks["person_decides"]
    # Approve and Reject alike return who answered, when, and the comment
    assert type(person).__name__ == "HITLOperator"
    assert person.options == ["Approve", "Reject"] and list(person.params) == ["comment"]
    assert person.upstream_task_ids == {"needs_a_person"}
    # unanswered is rejected (by nobody), never shipped
    assert person.response_timeout is not None and person.defaults == ["Reject"]
    # the answer is kept; a gate that asked nobody, or failed, keeps none (and stays failed)
    record = tasks["record_decision"]
    assert record.upstream_task_ids == {"person_decides"}
    assert record.trigger_rule == "all_success"


def test_a_late_night_is_watched_for_hourly(bag):
    dag = bag.dags["nightly_deadline"]
    assert dag.schedule == "47 * * * *" and dag.max_active_runs == 1
    assert dag.task_dict["check"].execution_timeout is not None


def test_janitor_shape(bag):
    dag = bag.dags["instance_janitor"]
    assert dag.schedule == "17 * * * *" and dag.max_active_runs == 1
    assert dag.task_dict["reap"].execution_timeout is not None


@pytest.mark.parametrize("dag_file", sorted(p.name for p in DAGS.glob("*.py")))
def test_dag_file_has_no_heavy_top_level_imports(dag_file):
    text = (DAGS / dag_file).read_text()
    # servebench.defaults (names and defaults shown at parse time) and servebench.dag_callbacks
    # import nothing at top level
    top = text.split("@dag(")[0].replace("from servebench.defaults import", "").replace(
        "from servebench.dag_callbacks import", "")
    for heavy in ("servebench", "pandas", "pyarrow", "httpx", "boto3"):
        assert f"import {heavy}" not in top and f"from {heavy}" not in top


def test_the_defaults_the_dags_import_import_nothing():
    import ast

    import servebench.dag_callbacks
    import servebench.defaults

    tree = ast.parse(open(servebench.defaults.__file__).read())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    # os: a default the environment overrides (the nightly's deadline); the metric catalogue:
    # the release gate's default thresholds (a standard-library leaf itself,
    # tests/unit/test_metric_catalogue.py)
    modules = [a.name for n in imports if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module for n in imports if isinstance(n, ast.ImportFrom)]
    assert modules == ["os", "servebench.metric_catalogue"]
    tree = ast.parse(open(servebench.dag_callbacks.__file__).read())
    top = [n.module for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert set(top) <= {"__future__", "collections.abc"}, top
