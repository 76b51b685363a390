"""Nightly benchmark of the serving stacks named in a sweep spec.

plan -> quantize (each recipe's checkpoint, cached) -> provision (setup) -> bench each host's
(target, variant) units -> teardown (always)
-> publish Parquet -> detect (changes against the nights before) -> confirm (the suspects
re-measured by interleaved relaunches) -> digest, and release (always, after the confirm).
Hosts run side by side, each its units one at a time; a paid instance is launched when its
host's first unit is due and terminated when its last ends, or, where the sweep confirms,
held for the relaunches: the teardown spares it, the confirm relaunches on it and ends it,
the release ends whatever the confirm left. The logic lives in ``servebench.pipeline``;
this file wires it.
Trigger with ``{"sweep": "include/sweeps/<name>.yaml"}`` to run another sweep.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Param, dag, get_current_context, setup, task, teardown
from servebench.dag_callbacks import on_task_failure
from servebench.defaults import (
    DEFAULT_SWEEP,
    NIGHTLY_DAG_ID,
    NIGHTLY_SCHEDULE,
    PARALLEL_HOSTS,
)


@dag(
    dag_id=NIGHTLY_DAG_ID,
    schedule=NIGHTLY_SCHEDULE,  # 02:00 UTC: results and digest ready before the morning
    start_date=datetime(2026, 1, 1),
    catchup=False,  # a missed night is not worth a backfill of GPU hours
    max_active_runs=1,  # two runs on the same hosts would measure each other
    tags=["servebench", "nightly", "benchmark"],
    # a task that fails for good posts why (a broken night is never silent)
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2),
                  "on_failure_callback": on_task_failure},
    params={"sweep": Param(DEFAULT_SWEEP, type="string", description="sweep spec path"),
            "nightly": Param(False, type="boolean",
                             description="count this manual run as a night of the trends "
                             "(e.g. a failed night run again); scheduled runs always are")},
    doc_md=__doc__,
)
def nightly_benchmark():
    @task(retries=0)  # a bad spec does not fix itself on retry
    def plan(params=None, dag_run=None) -> dict:
        from servebench.pipeline import plan_run

        logical = get_current_context().get("logical_date") or dag_run.run_after
        return plan_run(params["sweep"], run_date=logical.date())

    @task
    def hosts(plan: dict) -> list[str]:
        from servebench.plan import Plan

        return Plan.from_xcom(plan).hosts()  # one mapped bench task per host

    # before anything is held: a recipe's checkpoint is made once (cached by its inputs' hash);
    # one that fails is its units' failed cells, and the night goes on
    @task(execution_timeout=timedelta(hours=6))
    def quantize(plan: dict, run_id=None) -> dict:
        from servebench.pipeline import quantize_recipes

        return quantize_recipes(plan, run_id)

    # every task that holds an instance has a time limit: a hung call must not keep a GPU
    @setup
    @task(execution_timeout=timedelta(minutes=30))
    def provision(plan: dict, run_id=None, dag_run=None) -> dict:
        from servebench.pipeline import provision as provision_hosts

        # each provision kind sets up (a state folder); ec2 says only where its instances
        # will be: each host's bench task launches its own when its first unit is due
        return provision_hosts(plan, run_id, dag_id=dag_run.dag_id)

    # a host's units one at a time (cells on one machine must not measure each other), hosts
    # side by side; a hung unit lets its instance's lease lapse (the janitor ends it)
    @task(max_active_tis_per_dag=PARALLEL_HOSTS, execution_timeout=timedelta(hours=12),
          map_index_template="{{ host }}")
    def bench(host: str, plan: dict, provisioned: dict, run_id=None, dag_run=None,
              ti=None) -> dict:
        from servebench.pipeline import bench_host

        get_current_context()["host"] = host  # the mapped task's name in the UI
        # a retry's units draw prompts of their own: its server may have kept the first try's
        return bench_host(plan, host, provisioned, run_id, dag_id=dag_run.dag_id,
                          try_number=ti.try_number)

    @teardown
    @task(execution_timeout=timedelta(minutes=30))
    def teardown_hosts(provisioned: dict | None, plan: dict | None, run_id=None) -> dict:
        from servebench.pipeline import teardown_run

        return teardown_run(provisioned, run_id, plan)  # with the phase times the runs row keeps

    # all_done: a unit that crashed becomes failed cells with a reason, never a missing row
    @task(trigger_rule="all_done")
    def publish(plan: dict, torn_down: dict | None, run_id=None, dag_run=None,
                params=None) -> dict:
        from airflow.sdk.exceptions import AirflowFailException
        from servebench.pipeline import aggregate_and_publish
        from servebench.trends.series import counts_as_night

        if plan is None:  # a retry would not plan it either; the run stays failed
            raise AirflowFailException("nothing was planned (the plan task failed)")
        logical = get_current_context().get("logical_date") or dag_run.run_after
        # an ad-hoc trigger is judged against the nights but never becomes one of them
        return aggregate_and_publish(plan, run_id, logical, dag_run.dag_id,
                                     started_at=dag_run.start_date, torn_down=torn_down,
                                     nightly=counts_as_night(dag_run.run_type,
                                                             params["nightly"]))

    @task
    def detect(summary: dict) -> dict:
        from servebench import pipeline

        return pipeline.detect(summary)

    # the night's suspects relaunched beside a reference on their hosts (an instance its units
    # held; a local folder or namespace acquired again and torn down in every path): a change
    # is confirmed or dismissed before the digest says it
    @task(execution_timeout=timedelta(hours=2))
    def confirm(plan: dict, summary: dict, dag_run=None, ti=None) -> dict:
        from servebench import pipeline

        return pipeline.confirm(plan, summary, dag_id=dag_run.dag_id, try_number=ti.try_number)

    # all_done, not a teardown: whatever happened before, the instances held for the
    # relaunches end here (the janitor ends them should this run be killed). The setup's
    # state is pulled, not an argument: a follower of the setup would be skipped with it
    @task(trigger_rule="all_done", execution_timeout=timedelta(minutes=30))
    def release(plan: dict | None, run_id=None, ti=None) -> list:
        from servebench.pipeline import release_held

        return release_held(ti.xcom_pull(task_ids="provision"), run_id, plan)

    # all_done: a confirmation that failed still leaves the night's digest, as detected
    @task(trigger_rule="all_done")
    def digest(summary: dict | None) -> str:
        from airflow.sdk.exceptions import AirflowFailException
        from servebench.pipeline import send_digest

        # the night was not detected: no digest, and the run fails (a skip here, its last
        # task, would end a broken night as a success); kept like publish's "nothing was
        # planned", the night posted once (notify.failure)
        if summary is None:
            raise AirflowFailException("no digest: the detect task did not run to the end")
        return send_digest(summary)

    planned = plan()
    held = provision(planned)  # nothing is provisioned for a sweep that fails to plan
    quantize(planned) >> held  # no instance waits on a quantization
    benched = bench.partial(plan=planned, provisioned=held).expand(host=hosts(planned))
    torn_down = teardown_hosts(held, planned)  # the argument links the teardown to its setup
    benched >> torn_down
    # after the teardown: the instances' billed time is final, and the cells are priced by it
    published = publish(planned, torn_down)
    benched >> published
    detected = detect(published)
    # the digest leads with what tonight changed, as the relaunches confirmed it
    confirmed = confirm(planned, detected)
    confirmed >> digest(detected)
    confirmed >> release(planned)


nightly_benchmark()
