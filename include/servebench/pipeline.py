"""The steps of a nightly run, one function per DAG task; the DAG file only wires them.

plan -> provision (setup) -> bench one unit per (target, variant) -> teardown (always)
-> aggregate + publish -> digest. Steps exchange small JSON dicts (XCom); bulky rows go
through the result store's scratch area so any worker can pick them up.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from slack_sdk.errors import SlackApiError, SlackClientError

from servebench.bench import VariantRunner, cell_identity, unit_id
from servebench.config import SweepSpec, load_sweep
from servebench.cost import paid
from servebench.errors import GoldenSetError, PlanError
from servebench.evals.gate import cross_stack_columns, gate_columns
from servebench.evals.golden import load_golden_set
from servebench.janitor import recently_reaped
from servebench.levers import lever_rows
from servebench.notify.digest import render_digest
from servebench.notify.html import render_report, report_path
from servebench.notify.slack import post_digest
from servebench.provenance import hardware, suite_git_sha
from servebench.provision import get_provisioner, provision_kinds
from servebench.results.contract import enforce, validate_run
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore, encode_run_id
from servebench.settings import Settings, get_settings
from servebench.stacks.adapter import get_stack
from servebench.tokenize import tokenizer_problem
from servebench.workloads import TEMPLATE_OVERHEAD_MAX, draw_prompt_seed, max_sequence_tokens

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)
TABLES = ("cells", "requests", "evals", "units")  # what a bench task leaves per unit
TEARDOWN_SCRATCH = "_teardown"  # the teardown task's scratch rows (the hosts it paid for)
CLI_DAG_ID = "servebench-cli"  # what `servebench run` records as its dag_id (its own history)


def open_store(settings: Settings | None = None) -> ResultStore:
    """The result store (default: the settings' ``results_uri``); for s3:// the credentials
    (and endpoint) of the Airflow AWS connection when one exists, else boto3's default
    chain."""
    settings = settings or get_settings()
    session, endpoint = None, settings.s3_endpoint_url
    if settings.results_uri.startswith("s3://"):
        session, conn_endpoint = _aws_session(settings.aws_conn_id)
        endpoint = endpoint or conn_endpoint
    return ResultStore(settings.results_uri, endpoint_override=endpoint, session=session)


def _airflow_connection(conn_id: str):
    """The Airflow connection ``conn_id``, or None where Airflow is not installed or the
    connection is not defined. Any other failure to read it (a broken secrets backend, a
    malformed connection) is raised: falling back to other credentials, or to no Slack, must
    never hide it."""
    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:
        return None
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.info("no Airflow connection %r", conn_id)
        return None


def _aws_session(conn_id: str):
    """(boto3 session, endpoint_url) from an Airflow AWS connection, or (None, None) when it is
    not defined (then boto3's default chain is used)."""
    if _airflow_connection(conn_id) is None:
        return None, None
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    return hook.get_session(), hook.conn_config.endpoint_url


# -- plan ------------------------------------------------------------------------------------
def plan_run(sweep: str | None = None, run_date: dt.date | None = None,
             settings: Settings | None = None) -> dict:
    """Validate the sweep and everything it names; expand it to units of work.

    ``run_date`` (the logical date's day, UTC) partitions every row of the run.
    """
    settings = settings or get_settings()
    path = settings.resolve(sweep or settings.sweep)
    spec = load_sweep(path)
    problems, longest, warnings = [], {}, []
    for w_idx, workload in enumerate(spec.workloads):
        try:
            longest[workload.name] = max_sequence_tokens(workload, settings.project_root)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: field workloads[{w_idx}](name={workload.name}): {exc}")
    for t_idx, target in enumerate(spec.targets):
        where = f"{path}: field targets[{t_idx}](name={target.name})"
        try:
            adapter = get_stack(target.stack)
        except KeyError as exc:
            problems.append(f"{where}.stack: {exc.args[0]}")
            continue
        for problem in adapter.sampling_problems(spec.sampling):
            problems.append(f"{path}: field sampling: {target.stack} (target {target.name}): "
                            f"{problem}")
        provisioner = get_provisioner(target.provision_kind)
        for v_idx, variant in enumerate(target.variants):
            for problem in provisioner.check(target, variant, adapter, settings):
                problems.append(
                    f"{where}.variants[{v_idx}](name={variant.name}): {target.stack}: {problem}"
                )
            if not adapter.forces_length(variant):
                warnings.append(
                    f"{where}.variants[{v_idx}](name={variant.name}): {target.stack} cannot force "
                    f"exact output lengths ({adapter.natural_length_reason}): its perf cells run "
                    "at natural length (length_control natural), compared only with their own "
                    "history")
            problem = tokenizer_problem(target.stack, adapter.tokenize_api,
                                        variant.tokenizer or variant.model,
                                        settings.project_root, variant.revision)
            if problem:
                problems.append(f"{where}.variants[{v_idx}](name={variant.name}).tokenizer: "
                                f"{problem}")
            outside = adapter.image_problem(variant.image) if variant.image else None
            if outside:  # it may well run; what it does with our flags is unchecked
                warnings.append(f"{where}.variants[{v_idx}](name={variant.name}).image: "
                                f"{variant.image}: {outside}")
            for name, tokens in longest.items():
                if tokens + TEMPLATE_OVERHEAD_MAX > variant.max_model_len:
                    problems.append(
                        f"{where}.variants[{v_idx}](name={variant.name}).max_model_len: "
                        f"{variant.max_model_len} is too short for workload {name!r} "
                        f"({tokens} tokens plus the chat template)")
    for g_idx, ref in enumerate(spec.golden_sets):
        try:
            load_golden_set(settings.resolve(ref.path))
        except GoldenSetError as exc:
            problems.append(f"{path}: field golden_sets[{g_idx}](name={ref.name}).path: {exc}")
    problems += _store_problems(settings)
    if problems:
        raise PlanError(f"{path}: sweep cannot run:\n  " + "\n  ".join(problems))
    units = [
        {"target": t.name, "variant": v.name, "stack": t.stack, "unit_id": unit_id(t.name, v.name),
         "provision": t.provision_kind}
        for t in spec.targets
        for v in t.variants
    ]
    n_cells = len(units) * len(spec.workloads) * len(spec.load.points())
    log.info("plan: %d units, %d cells from %s", len(units), n_cells, path)
    for warning in warnings:
        log.warning("plan: %s", warning)
    return {
        "sweep_file": str(path),
        "run_date": (run_date or dt.datetime.now(dt.UTC).date()).isoformat(),
        "spec": spec.model_dump(mode="json"),
        "sweep_hash": spec.spec_hash(),
        "prompt_seed": draw_prompt_seed(spec.load.prompt_seed),
        "sampling_hash": spec.sampling.spec_hash(),
        "units": units,
        "n_cells": n_cells,
        "warnings": warnings,
    }


def _store_problems(settings: Settings) -> list[str]:
    """Where the results go, checked before anything is provisioned: an s3:// store needs
    credentials (the Airflow AWS connection, else boto3's chain: environment, profile, role)."""
    if not settings.results_uri.startswith("s3://"):
        return []
    session, _ = _aws_session(settings.aws_conn_id)
    if session is None:
        import boto3

        session = boto3.Session()
    if session.get_credentials() is None:
        return [(f"setting results_uri (SERVEBENCH_RESULTS_URI) {settings.results_uri}: no AWS "
                 f"credentials -- no Airflow connection {settings.aws_conn_id!r} and none in "
                 "boto3's chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, a role)")]
    return []


# -- provision / teardown --------------------------------------------------------------------
def provision(plan: dict, run_id: str, settings: Settings | None = None,
              dag_id: str = "") -> dict:
    """The setup task: each provision kind the plan's targets use acquires what they need;
    returns each kind's state for the bench and teardown tasks."""
    settings = settings or get_settings()
    spec = SweepSpec.model_validate(plan["spec"])
    kinds: dict[str, list] = {}
    for target in spec.targets:
        kinds.setdefault(target.provision_kind, []).append(target)
    state = {}
    t0 = time.monotonic()
    for kind, targets in kinds.items():
        state[kind] = get_provisioner(kind).acquire(run_id, targets, settings, dag_id=dag_id)
        log.info("provisioned %s for %s", kind, [t.name for t in targets])
    return {"run_id": run_id, "kinds": state, "acquire_s": time.monotonic() - t0}


def teardown(provisioned: dict | None, run_id: str, settings: Settings | None = None,
             plan: dict | None = None) -> list:
    """The teardown task: every kind releases what the run still holds. Works without the
    setup task's output (it failed, or was cleared): each kind the plan uses (every kind,
    without a plan) then finds the run's leftovers from the run id. A kind that fails to
    release is raised after the others released."""
    settings = settings or get_settings()
    states = (provisioned or {}).get("kinds")
    if not states:
        kinds = sorted({t.provision_kind for t in SweepSpec.model_validate(plan["spec"])
                        .targets}) if plan else provision_kinds()
        states = {kind: None for kind in kinds}
    released, errors, paid = [], [], []
    for kind, state in states.items():
        provisioner = get_provisioner(kind).attach(run_id, state, settings)
        try:
            released += provisioner.release()
            paid += [{**host, "provision": kind} for host in provisioner.paid_hosts()]
        except (OSError, RuntimeError) as exc:  # the others must still release theirs
            log.exception("releasing %s failed", kind)
            errors.append(f"{kind}: {exc}")
    if released:
        log.warning("teardown stopped what the run left: %s", released)
    if paid and plan:  # the publish prices them (it runs after this task)
        rows = [{"run_id": run_id, "run_date": plan["run_date"] if plan else None, **host}
                for host in paid]
        open_store(settings).write_scratch(run_id, TEARDOWN_SCRATCH, "hosts",
                                           rows_to_table("hosts", rows))
    if errors:
        raise RuntimeError("teardown could not release everything: " + "; ".join(errors))
    return released


def release_run(provisioned: dict | None, run_id: str, plan: dict | None,
                settings: Settings | None = None) -> dict:
    """The DAG's teardown task: :func:`teardown`, timed; what the publish records of setup
    and teardown (``acquire_s``, ``teardown_s``) and what was released."""
    t0 = time.monotonic()
    released = teardown(provisioned, run_id, settings, plan=plan)
    return {"released": released, "acquire_s": (provisioned or {}).get("acquire_s"),
            "teardown_s": time.monotonic() - t0}


# -- bench -----------------------------------------------------------------------------------
def bench_unit(plan: dict, unit: dict, provisioned: dict, run_id: str,
               settings: Settings | None = None,
               on_cell: Callable[[dict], None] | None = None) -> dict:
    """The bench task: one (target, variant) run, its rows kept as the unit's scratch.
    ``on_cell`` is told of each cell as it is made (the CLI's progress bars)."""
    settings = settings or get_settings()
    spec = SweepSpec.model_validate(plan["spec"])
    target = spec.target(unit["target"])
    variant = next(v for v in target.variants if v.name == unit["variant"])
    kind = target.provision_kind
    provisioner = get_provisioner(kind).attach(run_id, provisioned["kinds"].get(kind), settings)
    runner = VariantRunner(spec, target, variant, run_id=run_id, settings=settings,
                           provisioner=provisioner, on_cell=on_cell,
                           prompt_seed=plan.get("prompt_seed"))
    result = runner.run()
    store = open_store(settings)
    for name in TABLES:
        found = ([result.unit] if result.unit else []) if name == "units" else \
            getattr(result, name)
        rows = [{"run_id": run_id, "run_date": plan["run_date"], **row} for row in found]
        store.write_scratch(run_id, unit["unit_id"], name, rows_to_table(name, rows))
    statuses = [c["status"] for c in result.cells]
    return {"unit_id": unit["unit_id"], "cells": len(statuses),
            "ok": statuses.count("ok"), "invalid": statuses.count("invalid"),
            "failed": statuses.count("failed"), "evals": len(result.evals)}


# -- aggregate + publish ---------------------------------------------------------------------
def aggregate_and_publish(plan: dict, run_id: str, logical_date: dt.datetime | None,
                          dag_id: str, started_at: dt.datetime | None = None,
                          settings: Settings | None = None,
                          released: dict | None = None) -> dict:
    """Collect every unit's rows (a unit that left none becomes failed cells), price what
    the run paid for (the teardown's hosts, the units' server time), publish. ``released``
    is :func:`release_run`'s answer (setup and teardown times)."""
    settings = settings or get_settings()
    spec = SweepSpec.model_validate(plan["spec"])
    store = open_store(settings)
    scratch = store.read_scratch(run_id)
    run_date = dt.date.fromisoformat(plan["run_date"])
    tables: dict[str, list[pa.Table]] = {name: [] for name in TABLES}
    for unit in plan["units"]:
        found = scratch.get(unit["unit_id"], {})
        if "cells" not in found:
            found = {"cells": rows_to_table(
                "cells", _missing_unit_cells(spec, unit, run_id, plan["run_date"]))}
        for name, table in found.items():
            tables[name].append(table)
    combined = {
        name: pa.concat_tables(parts) if parts else rows_to_table(name, [])
        for name, parts in tables.items()
    }
    # the quality gate needs every variant's answers, so it runs here, not in a bench task
    evals = combined["evals"].to_pylist()
    gates, cross = gate_columns(spec, evals), cross_stack_columns(spec, evals)
    now = dt.datetime.now(dt.UTC)
    hosts = scratch.get(TEARDOWN_SCRATCH, {}).get("hosts")
    units = combined["units"].to_pylist()
    bill = paid(hosts.to_pylist() if hosts is not None else [], units,
                {t.name: t.price_per_hour(spec.price_per_hour) for t in spec.targets}, now)
    combined["hosts"] = rows_to_table("hosts", bill.hosts)
    cells = [{**row, **gates.get((row["target"], row["variant"]), {}),
              **cross.get((row["target"], row["variant"]), {})}
             for row in combined["cells"].to_pylist()]
    cells = [{**row, **bill.cell_fields(row)} for row in cells]
    combined["cells"] = rows_to_table("cells", cells)
    statuses = combined["cells"].column("status").to_pylist()
    combined["runs"] = rows_to_table("runs", [{
        "run_id": run_id, "run_date": run_date, "logical_date": logical_date or now,
        "dag_id": dag_id, "sweep_name": spec.name, "sweep_file": plan["sweep_file"],
        "sweep_hash": plan["sweep_hash"], "sampling_hash": plan["sampling_hash"],
        "prompt_seed": plan.get("prompt_seed"),
        "sampling_json": spec.sampling.model_dump_json(), "suite_git_sha": suite_git_sha(),
        # what the cells ran on (a provisioned host's, not this worker's), one of each
        "hardware": "; ".join(sorted({c["hardware"] for c in cells if c.get("hardware")}))
                    or hardware(), "started_at": started_at or now, "finished_at": now,
        "n_cells": len(statuses), "n_ok": statuses.count("ok"),
        "n_invalid": statuses.count("invalid"), "n_failed": statuses.count("failed"),
        "spec_json": spec.model_dump_json(),
        "acquire_s": (released or {}).get("acquire_s"),
        "teardown_s": (released or {}).get("teardown_s"),
        **{phase: sum(u.get(phase) or 0.0 for u in units)
           for phase in ("load_s", "warmup_s", "golden_s", "stop_s")},
        "paid_s": sum(bill.paid_s.values()), "measure_s": sum(bill.measure_s.values()),
        "sweep_efficiency": bill.sweep_efficiency, "paid_usd": sum(bill.paid_usd.values()),
    }])
    # the contract: a batch that breaks it is not published (the run fails, with the report)
    expected = [(u["target"], u["variant"], w.name, p.label)
                for u in plan["units"] for w in spec.workloads for p in spec.load.points()]
    report = validate_run(combined, expected)
    store.put_text(f"contracts/date={run_date.isoformat()}/{encode_run_id(run_id)}.txt",
                   report.render())
    enforce(report)
    manifest = store.publish(run_id, run_date, combined)
    store.drop_scratch(run_id)
    return {
        "run_id": run_id, "run_date": run_date.isoformat(), "results_uri": settings.results_uri,
        "n_cells": len(statuses), "n_ok": statuses.count("ok"),
        "n_invalid": statuses.count("invalid"), "n_failed": statuses.count("failed"),
        "rows": {name: entry.rows for name, entry in manifest.tables.items()},
    }


def _missing_unit_cells(spec: SweepSpec, unit: dict, run_id: str, run_date: str) -> list[dict]:
    target = spec.target(unit["target"])
    variant = next(v for v in target.variants if v.name == unit["variant"])
    return [
        {"run_id": run_id, "run_date": run_date,
         **cell_identity(spec, target, variant, w.name, p), "status": "failed",
         "reason": "the bench task left no results (it crashed, was killed or timed out)"}
        for w in spec.workloads
        for p in spec.load.points()
    ]


# -- detect ----------------------------------------------------------------------------------
def detect_regressions(summary: dict, settings: Settings | None = None) -> dict:
    """Compare the published night with the nights before it; attach what it raises to the
    run as its ``regressions`` table (replacing an earlier detect of the same run)."""
    from servebench.trends.annotations import load_annotations
    from servebench.trends.nightly import detect_night

    settings = settings or get_settings()
    store = open_store(settings)
    run_id = summary["run_id"]
    annotations = load_annotations(settings.resolve(settings.annotations))
    rows = detect_night(store, run_id, annotations=annotations)
    rows = [{"run_id": run_id, "run_date": summary["run_date"], **row} for row in rows]
    store.attach(run_id, summary["run_date"], {"regressions": rows_to_table("regressions", rows)})
    kinds = [r["kind"] for r in rows]
    return {**summary, "alerts": {k: kinds.count(k) for k in sorted(set(kinds))}}


def redetect(sweep_name: str, *, dag_id: str = "nightly_benchmark",
             since: dt.date | None = None, settings: Settings | None = None) -> list[dict]:
    """Judge the committed nights of ``sweep_name``'s DAG runs again, oldest first (from
    ``since``), exactly as the DAG's detect task did each night, each night's ``regressions``
    replaced: after an annotation written late (an expected change nobody recorded in time)
    or a new detector. A night sees the nights before it as re-judged. The digests sent stay
    as they were. Returns each night's summary with its alert counts."""
    from servebench.trends.series import nightly_runs

    settings = settings or get_settings()
    runs = nightly_runs(open_store(settings).read_table("runs").to_pandas(), sweep_name, dag_id)
    if runs.empty:
        raise ValueError(f"no committed runs of sweep {sweep_name!r} by DAG {dag_id!r}")
    if since is not None:
        runs = runs[runs["run_date"] >= since]
    return [detect_regressions({"run_id": run.run_id, "run_date": run.run_date.isoformat()},
                               settings) for run in runs.itertuples()]


# -- digest ----------------------------------------------------------------------------------
def slack_credentials(settings: Settings) -> tuple[str | None, str | None]:
    """(token, base_url) from $SLACK_BOT_TOKEN or the Airflow Slack connection; else None."""
    token = os.environ.get("SLACK_BOT_TOKEN")
    base_url = os.environ.get("SERVEBENCH_SLACK_BASE_URL")
    if token:
        return token, base_url
    conn = _airflow_connection(settings.slack_conn_id)
    if conn is None:  # the digest goes to a file
        return None, None
    extra = conn.extra_dejson or {}
    return conn.password or None, extra.get("base_url") or base_url


def _draw_charts(store: ResultStore, run_id: str, run_date: str, cells, regressions):
    """PNG charts beside the digest: one per regression or improvement, one latency-vs-
    throughput per target. Returns ({series_id or "target:<name>": path relative to the
    digest's folder}, [(title, filename, png)] for Slack's thread, {key: png} for the HTML
    report)."""
    import hashlib

    from servebench.notify.charts import latency_throughput_chart, trend_chart
    from servebench.trends.nightly import MOVES, load_history

    folder = f"charts-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"
    charts: dict[str, str] = {}
    files: list[tuple[str, str, bytes]] = []
    pngs: dict[str, bytes] = {}

    def keep(key: str, name: str, title: str, png: bytes) -> None:
        rel = f"{folder}/{name}"
        store.put_bytes(f"digests/date={run_date}/{rel}", png)
        charts[key] = rel
        files.append((title, name, png))
        pngs[key] = png

    moved = regressions[regressions["kind"].isin(MOVES)]
    if not moved.empty:
        _, _, series = load_history(store, run_id)
        for i, alert in enumerate(moved.to_dict("records")):
            points = series[series["series_id"] == alert["series_id"]]
            keep(alert["series_id"], f"change-{i}.png",
                 f"{alert['kind']}: {alert['series_id'].split('#')[0]}",
                 trend_chart(points, alert))
    for i, target in enumerate(dict.fromkeys(cells["target"])):
        png = latency_throughput_chart(cells, target)
        if png is not None:
            keep(f"target:{target}", f"target-{i}.png", f"{target}: latency vs throughput", png)
    return charts, files, pngs


def _airflow_url(settings: Settings) -> str | None:
    """The Airflow UI's base URL: ours, else Airflow's own ``[api] base_url`` (unset on a
    local install: then the digest names runs without links)."""
    if settings.airflow_url:
        return settings.airflow_url
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback=None) or None


@dataclass
class _Night:
    """What the digest and the report of one committed run are made of."""

    run_id: str
    run_date: str
    cells: pd.DataFrame
    run: dict
    regressions: pd.DataFrame
    charts: dict[str, str]
    files: list
    pngs: dict[str, bytes]
    levers: list[dict]

    @classmethod
    def load(cls, store: ResultStore, run_id: str) -> _Night:
        runs = store.read_table("runs", run_ids=[run_id]).to_pylist()
        if not runs:
            raise ValueError(f"run {run_id!r} is not committed in {store.uri}")
        run, run_date = runs[0], str(runs[0]["run_date"])
        cells = store.read_table("cells", run_ids=[run_id]).to_pandas()
        regressions = store.read_table("regressions", run_ids=[run_id]).to_pandas()
        charts, files, pngs = _draw_charts(store, run_id, run_date, cells, regressions)
        requests = store.read_table("requests", run_ids=[run_id]).to_pandas()
        return cls(run_id, run_date, cells, run, regressions, charts, files, pngs,
                   lever_rows(cells, requests))

    def put_report(self, store: ResultStore, settings: Settings) -> str:
        return store.put_text(
            report_path(self.run_date, self.run_id),
            render_report(self.cells, self.run, settings.results_uri, self.regressions,
                          self.pngs, self.levers))


def write_report(run_id: str, settings: Settings | None = None) -> str:
    """(Re)write the HTML report of committed run ``run_id`` beside the results; where."""
    settings = settings or get_settings()
    store = open_store(settings)
    return _Night.load(store, run_id).put_report(store, settings)


def send_digest(summary: dict, settings: Settings | None = None) -> str:
    """Render the run's digest; post it to Slack when a token is configured, and always
    keep the Markdown (with its charts) and the HTML report beside the results. Returns
    where the digest went."""
    settings = settings or get_settings()
    store = open_store(settings)
    run_id = summary["run_id"]
    night = _Night.load(store, run_id)
    markdown = render_digest(night.cells, night.run, settings.results_uri, night.regressions,
                             night.charts, night.levers, airflow_url=_airflow_url(settings),
                             reaped=recently_reaped(store))
    where = store.put_text(f"digests/date={night.run_date}/{encode_run_id(run_id)}.md",
                           markdown)
    report = night.put_report(store, settings)
    log.info("report: %s", report)
    token, base_url = slack_credentials(settings)
    try:
        ts = post_digest(markdown, token=token, channel=settings.slack_channel,
                         base_url=base_url, files=night.files)
    except (SlackClientError, OSError) as exc:
        # the night's results and digest file stand; a Slack outage must not fail the run
        log.exception("posting the digest to Slack %s failed", settings.slack_channel)
        reason = exc.response.get("error") if isinstance(exc, SlackApiError) else str(exc)
        return where + f" (Slack {settings.slack_channel} failed: {reason})"
    if ts:
        where += f" and Slack {settings.slack_channel} (ts={ts})"
    log.info("digest: %s", where)
    return where


# -- a whole sweep in one process ------------------------------------------------------------
def run_sweep(sweep: str | None = None, run_id: str | None = None, *,
              on_units: Callable[[dict], None] | None = None,
              on_unit: Callable[[dict], None] | None = None,
              on_unit_done: Callable[[dict], None] | None = None,
              on_cell: Callable[[dict], None] | None = None,
              on_units_done: Callable[[], None] | None = None) -> dict:
    """The nightly DAG's steps in this process, in its order: plan (``SpecError`` before
    anything is provisioned), provision, each unit (a crashed unit becomes failed cells, as
    the DAG's all_done publish makes it), release in every path, publish, detect, digest.
    Its runs are a history of their own (dag_id ``servebench-cli``), so ad-hoc runs never
    enter the nightly trends. The hooks see the units go by (``on_units`` gets the plan
    before the first, ``on_units_done`` comes after the last, whatever happened). Returns the
    detect step's summary with ``released`` (what the release step found left) and
    ``digest`` (where it went)."""
    now = dt.datetime.now(dt.UTC)
    run_id = run_id or f"cli__{now.isoformat(timespec='seconds')}"
    plan = plan_run(sweep, run_date=now.date())
    provisioned = None
    try:
        provisioned = provision(plan, run_id, dag_id=CLI_DAG_ID)
        if on_units:
            on_units(plan)
        try:
            for unit in plan["units"]:
                if on_unit:
                    on_unit(unit)
                try:
                    bench_unit(plan, unit, provisioned, run_id, on_cell=on_cell)
                except Exception:  # what the DAG's all_done publish does
                    # the unit's cells are published as failed with the reason; the
                    # traceback stays in the log
                    log.exception("unit %s failed", unit["unit_id"])
                if on_unit_done:
                    on_unit_done(unit)
        finally:
            if on_units_done:
                on_units_done()
    finally:
        released = release_run(provisioned, run_id, plan)
    summary = aggregate_and_publish(plan, run_id, now, CLI_DAG_ID, started_at=now,
                                    released=released)
    summary = detect_regressions(summary)
    return {**summary, "released": released["released"], "digest": send_digest(summary)}
