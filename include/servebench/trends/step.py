"""The detect step's work on committed nights: a night's alerts attached to its run as its
``changes`` table (``detect_night``, the DAG's detect task), and a sweep's history detected
again (``redetect``)."""

from __future__ import annotations

import datetime as dt

from servebench.connections import open_store
from servebench.defaults import NIGHTLY_DAG_ID
from servebench.results.schema import rows_to_table
from servebench.settings import Settings, get_settings
from servebench.trends.annotations import load_annotations
from servebench.trends.nightly import night_changes
from servebench.trends.series import nightly_runs


def detect_night(summary: dict, settings: Settings) -> dict:
    """Compare the published night (``summary``: its ``run_id``, ``run_date``) with the nights
    before it; attach what it raises to the run as its ``changes`` table, and what each
    series can catch from tomorrow on as its ``detectability`` table (replacing an earlier
    judgement of the same run). The summary with its alert counts."""
    store, run_id = open_store(settings), summary["run_id"]
    annotations = load_annotations(settings.resolve(settings.annotations))
    judged = night_changes(store, run_id, annotations=annotations)
    ids = {"run_id": run_id, "run_date": summary["run_date"]}
    store.attach(run_id, summary["run_date"], {
        name: rows_to_table(name, [{**ids, **row} for row in rows])
        for name, rows in (("changes", judged.alerts),
                           ("detectability", judged.detectability))})
    kinds = [r["kind"] for r in judged.alerts]
    return {**summary, "alerts": {k: kinds.count(k) for k in sorted(set(kinds))}}


def redetect(sweep_name: str, *, dag_id: str = NIGHTLY_DAG_ID, since: dt.date | None = None,
             settings: Settings | None = None) -> list[dict]:
    """Judge the committed nights of ``sweep_name``'s DAG runs again, oldest first (from
    ``since``), as the DAG's detect task did, each night's ``changes`` replaced: after an
    annotation written late or a new detector. A night sees the nights before it as
    re-judged; the digests sent stay as they were. Each night's summary with its alert
    counts."""
    settings = settings or get_settings()
    runs = nightly_runs(open_store(settings).read_table("runs").to_pandas(), sweep_name, dag_id)
    if runs.empty:
        raise ValueError(f"no committed runs of sweep {sweep_name!r} by DAG {dag_id!r}")
    if since is not None:
        runs = runs[runs["run_date"] >= since]
    return [detect_night({"run_id": run.run_id, "run_date": run.run_date.isoformat()}, settings)
            for run in runs.itertuples()]
