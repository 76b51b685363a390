"""Before a release: may the candidate ship? Trigger by hand with the form.

The candidate variant (a new engine version, a quant, a flag) and its baseline run in one DAG
run on one host, in interleaved repetitions, and are decided on performance (per-metric
thresholds against a confidence interval from the repetitions) and on quality (the golden
set's three-way gate). The run fails on a regression; the verdict is kept beside the results
(Markdown, and the ``gate_verdicts`` table) and posted to Slack. An inconclusive verdict needs
a person: the run waits for their answer in Airflow's Required actions (Approve or Reject,
and a comment), which is kept with the verdict; rejecting, or no answer, fails the run, so a
run is green only when the candidate may ship. The logic lives in ``servebench.release.gate``
and ``servebench.release.decision``; this file wires it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param, dag, setup, task, teardown
from servebench.dag_callbacks import on_task_failure
from servebench.defaults import DEFAULT_SWEEP, GATE_PERSON_OPTIONS, RELEASE_GATE_THRESHOLDS


@dag(
    dag_id="release_gate",
    schedule=None,  # only ever triggered, before a release
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # two gates on one host would measure each other
    tags=["servebench", "release", "manual"],
    # a task that fails for good is heard (a failing verdict was announced already)
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2),
                  "on_failure_callback": on_task_failure},
    params={
        "sweep": Param(DEFAULT_SWEEP, type="string",
                       description="sweep whose sampling, workloads and golden sets apply"),
        "target": Param("adder-llamacpp", type="string"),
        "candidate": Param("q8_0", type="string", description="the variant to release"),
        "baseline": Param(None, type=["null", "string"],
                          description="default: the target's baseline"),
        "workloads": Param(None, type=["null", "array"], items={"type": "string"}),
        "concurrency": Param(None, type=["null", "array"],
                             items={"type": "integer", "minimum": 1}),
        "repetitions": Param(3, type="integer", minimum=2, maximum=20),
        "thresholds": Param(RELEASE_GATE_THRESHOLDS, type="object",
                            additionalProperties={"type": "number", "minimum": 0},
                            description="metric -> largest relative worsening allowed"),
        "on_inconclusive": Param("needs_person", enum=["needs_person", "fail"]),
    },
    doc_md=__doc__,
)
def release_gate():
    @task(retries=0)  # bad params do not heal
    def plan(params=None, dag_run=None) -> dict:
        from servebench.release.gate import plan_gate

        return plan_gate(params, dag_run.run_after.date()).to_xcom()

    @setup
    @task(execution_timeout=timedelta(minutes=30))
    def provision(plan: dict, run_id=None, dag_run=None) -> dict:
        from servebench.pipeline import provision as provision_hosts

        return provision_hosts(plan, run_id, dag_id=dag_run.dag_id)

    # the host's launch (an ec2 instance, or a quota's wait for one) and every repetition;
    # no retry: a retry would mix hosts' drift
    @task(retries=0, execution_timeout=timedelta(hours=5, minutes=15))
    def measure(plan: dict, provisioned: dict, run_id=None, dag_run=None, ti=None) -> dict:
        from servebench.release.gate import measure_gate

        # a cleared task's next try draws prompts of its own (the host may have cached them)
        return measure_gate(plan, provisioned, run_id, dag_id=dag_run.dag_id,
                            try_number=ti.try_number)

    @teardown
    @task(execution_timeout=timedelta(minutes=30))
    def teardown_hosts(provisioned: dict | None, plan: dict | None, run_id=None) -> list:
        from servebench.pipeline import teardown

        return teardown(provisioned, run_id, plan=plan)

    @task(retries=0)  # the verdict fails the run: a retry would only repeat it
    def verdict(plan: dict, measured: dict, run_id=None) -> dict:
        from servebench.plan import Plan
        from servebench.release.gate import ReleaseGateParams, conclude, decide

        plan = Plan.from_xcom(plan)
        decision = decide(plan.spec, ReleaseGateParams.model_validate(plan.gate), measured)
        return conclude(decision, run_id)

    @task.branch(retries=0)
    def needs_a_person(concluded: dict) -> list[str]:
        return ["person_decides"] if concluded["outcome"] == "needs_person" else []

    # either answer returns who, when and what (an ApprovalOperator's Reject would return
    # nothing to keep), and so does no answer in three days: Reject, by nobody
    person_decides = HITLOperator(
        task_id="person_decides", retries=0, options=list(GATE_PERSON_OPTIONS),
        defaults=["Reject"], response_timeout=timedelta(days=3),
        subject="Release gate {{ params.target }}/{{ params.candidate }}: inconclusive, "
                "may it ship?",
        body="{{ ti.xcom_pull(task_ids='verdict')['verdict'] }}",
        params={"comment": Param(None, type=["null", "string"],
                                 description="why (kept with the verdict)")})

    # keeps the answer with the verdict; anything but Approve fails it, and so the run, on
    # purpose: a retry would only repeat it
    @task(retries=0)
    def record_decision(run_id=None, dag_run=None, ti=None) -> dict:
        from servebench.release.decision import record_decision as record

        return record(run_id, ti.xcom_pull(task_ids="person_decides"),
                      since=dag_run.run_after.date())

    planned = plan()
    hosts = provision(planned)
    measured = measure(planned, hosts)
    measured >> teardown_hosts(hosts, planned)
    needs_a_person(verdict(planned, measured)) >> person_decides >> record_decision()


release_gate()
