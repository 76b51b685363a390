"""Before a release: may the candidate ship? Trigger by hand with the form.

The candidate variant (a new engine version, a quant, a flag) and its baseline run in one DAG
run on one host, in interleaved repetitions, and are decided on performance (per-metric
thresholds against a confidence interval from the repetitions) and on quality (the golden
set's three-way gate). The run fails on a regression; the verdict is kept beside the results
and posted to Slack. The logic lives in ``servebench.release``; this file wires it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Param, dag, setup, task, teardown

THRESHOLDS = {"ttft_ms_p95": 0.25, "tpot_ms_p50": 0.15, "output_throughput": 0.10,
              "goodput": 0.10}  # the library's defaults, shown in the form


@dag(
    dag_id="release_gate",
    schedule=None,  # only ever triggered, before a release
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # two gates on one host would measure each other
    tags=["servebench", "release", "manual"],
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2)},
    params={
        "sweep": Param("include/sweeps/local.yaml", type="string",
                       description="sweep whose sampling, workloads and golden sets apply"),
        "target": Param("adder-llamacpp", type="string"),
        "candidate": Param("q8_0", type="string", description="the variant to release"),
        "baseline": Param(None, type=["null", "string"],
                          description="default: the target's baseline"),
        "workloads": Param(None, type=["null", "array"], items={"type": "string"}),
        "concurrency": Param(None, type=["null", "array"],
                             items={"type": "integer", "minimum": 1}),
        "repetitions": Param(3, type="integer", minimum=2, maximum=20),
        "thresholds": Param(THRESHOLDS, type="object",
                            additionalProperties={"type": "number", "minimum": 0},
                            description="metric -> largest relative worsening allowed"),
        "on_inconclusive": Param("needs_person", enum=["needs_person", "fail"]),
    },
    doc_md=__doc__,
)
def release_gate():
    @task(retries=0)  # bad params do not heal
    def plan(params=None, dag_run=None) -> dict:
        from servebench.release import ReleaseGateParams, gate_spec
        from servebench.workloads import draw_prompt_seed

        chosen = ReleaseGateParams.model_validate(
            {k: v for k, v in params.items() if v is not None})
        spec = gate_spec(chosen)
        return {"params": chosen.model_dump(mode="json"), "spec": spec.model_dump(mode="json"),
                "run_date": dag_run.run_after.date().isoformat(),
                # the prompts' text for every repetition (workloads.prompt_key)
                "prompt_seed": draw_prompt_seed(spec.load.prompt_seed)}

    @setup
    @task(execution_timeout=timedelta(hours=1, minutes=15))
    def provision(plan: dict, run_id=None, dag_run=None) -> dict:
        from servebench.pipeline import provision as provision_hosts

        return provision_hosts(plan, run_id, dag_id=dag_run.dag_id)

    @task(retries=0, execution_timeout=timedelta(hours=4))  # a retry would mix hosts' drift
    def measure(plan: dict, provisioned: dict, run_id=None) -> dict:
        from servebench.release import measure_gate

        return measure_gate(plan, provisioned, run_id)

    @teardown
    @task(execution_timeout=timedelta(minutes=30))
    def release(provisioned: dict | None, plan: dict | None, run_id=None) -> list:
        from servebench.pipeline import teardown as teardown_hosts

        return teardown_hosts(provisioned, run_id, plan=plan)

    @task(retries=0)  # the verdict fails the run: a retry would only repeat it
    def verdict(plan: dict, measured: dict, run_id=None) -> str:
        from servebench.config import SweepSpec
        from servebench.release import ReleaseGateParams, conclude, decide

        decision = decide(SweepSpec.model_validate(plan["spec"]),
                          ReleaseGateParams.model_validate(plan["params"]), measured)
        return conclude(decision, run_id)

    planned = plan()
    hosts = provision(planned)
    measured = measure(planned, hosts)
    measured >> release(hosts, planned)
    verdict(planned, measured)


release_gate()
