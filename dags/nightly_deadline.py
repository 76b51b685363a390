"""Hourly: a night with no committed run by its deadline is heard before the morning.

The latest night of ``nightly_benchmark`` whose deadline has passed (``NIGHTLY_DEADLINE_HOURS``
after its scheduled time; ``SERVEBENCH_NIGHTLY_DEADLINE_HOURS`` where DAGs are parsed) and that
has no committed run is posted once through the digest's notifier, saying whether a run is
still queued or running. The logic lives in ``servebench.notify.failure``; this file wires it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task
from servebench.dag_callbacks import on_task_failure
from servebench.defaults import NIGHTLY_DAG_ID


@dag(
    dag_id="nightly_deadline",
    schedule="47 * * * *",  # hourly, off the janitor's minute and the nightly's hour
    start_date=datetime(2026, 1, 1),
    catchup=False,  # the latest night is the one that matters; each is said once
    max_active_runs=1,
    tags=["servebench", "nightly", "operations"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5),
                  "on_failure_callback": on_task_failure},  # a watch that breaks is heard
    doc_md=__doc__,
)
def nightly_deadline():
    @task(execution_timeout=timedelta(minutes=10))
    def check(ti=None) -> str | None:
        from servebench.notify.failure import watch_deadline

        # the Task SDK's count of the nightly's runs (asked of the API server, not the DB)
        return watch_deadline(lambda: ti.get_dr_count(dag_id=NIGHTLY_DAG_ID,
                                                      states=["queued", "running"]))

    check()


nightly_deadline()
