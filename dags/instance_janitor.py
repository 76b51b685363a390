"""Hourly: terminate every servebench instance that no run should still hold.

An instance is reaped when its ``expires_at`` tag has passed or the DAG run that launched it is
no longer queued or running (killed mid-way, its teardown never ran or was itself killed).
What it reaps goes to the ``reaped`` table beside the results; the next nightly digest names
it. The logic lives in ``servebench.janitor``; this file wires it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task
from servebench.dag_callbacks import on_task_failure


@dag(
    dag_id="instance_janitor",
    schedule="17 * * * *",  # hourly, off the hour the nightly starts at
    start_date=datetime(2026, 1, 1),
    catchup=False,  # only the present matters: the next sweep finds everything anyway
    max_active_runs=1,
    tags=["servebench", "janitor", "cost"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5),
                  "on_failure_callback": on_task_failure},  # a janitor that fails is heard
    doc_md=__doc__,
)
def instance_janitor():
    @task(execution_timeout=timedelta(minutes=20))
    def reap(ti=None, run_id=None) -> list[dict]:
        from servebench.janitor import airflow_run_is_live, sweep_instances

        rows = sweep_instances(airflow_run_is_live(ti.get_dr_count), run_id)
        return [{k: str(v) for k, v in row.items()} for row in rows]  # JSON for XCom

    reap()


instance_janitor()
