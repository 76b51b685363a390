"""The instance janitor: what no run may leave behind is terminated, and recorded.

The hourly ``instance_janitor`` DAG calls :func:`sweep_instances`: every instance tagged by
this project whose ``expires_at`` has passed, or whose DAG run is no longer queued or running
(a run killed mid-way whose teardown never ran, a teardown that was itself killed), is
terminated; each becomes a row of the ``reaped`` log table, which the next nightly digest
names. Runs of ``servebench run`` (no Airflow DAG run behind them) are judged by
``expires_at`` alone.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from servebench.defaults import CLI_DAG_ID
from servebench.results.schema import rows_to_table
from servebench.settings import Settings, get_settings

log = logging.getLogger(__name__)

LIVE_RUN_STATES = ["queued", "running"]


def airflow_run_is_live(count_runs: Callable[..., int]) -> Callable[[str, str], bool]:
    """``run_is_live(dag_id, run_id)`` from Airflow's count of DAG runs (the task instance's
    ``get_dr_count``: the Task SDK's way to ask the API server, not the metadata DB)."""
    def run_is_live(dag_id: str, run_id: str) -> bool:
        if dag_id == CLI_DAG_ID:
            return True  # no Airflow run to ask about: expires_at decides
        return count_runs(dag_id=dag_id, run_ids=[run_id], states=LIVE_RUN_STATES) > 0
    return run_is_live


def sweep_instances(run_is_live: Callable[[str, str], bool], janitor_run_id: str,
                    settings: Settings | None = None, now: dt.datetime | None = None) -> list[dict]:
    """Every provision kind reaps what no run should still hold (ec2 instances, kubernetes
    pods); what was ended is recorded; the rows."""
    from servebench.connections import open_store
    from servebench.provision import get_provisioner, provision_kinds

    settings = settings or get_settings()
    now = now or dt.datetime.now(dt.UTC)
    reaped, errors = [], []
    for kind in provision_kinds():
        try:
            reaped += get_provisioner(kind).reap_orphans(settings, run_is_live, now)
        except (OSError, RuntimeError) as exc:  # the other kinds still reap, and are recorded
            log.exception("reaping %s failed", kind)
            errors.append(f"{kind}: {exc}")
    rows = [{"run_id": r.run_id, "run_date": now.date(), "reaped_at": now,
             "instance_id": r.instance_id, "instance_type": r.instance_type,
             "region": r.region, "dag_id": r.dag_id, "target": r.target,
             "launched_at": r.launched_at,
             "hours_up": (now - r.launched_at).total_seconds() / 3600 if r.launched_at else None,
             "reason": r.reason} for r in reaped]
    if rows:
        log.warning("reaped %d instance(s): %s", len(rows),
                    [(r["instance_id"], r["reason"]) for r in rows])
        open_store(settings).append_log("reaped", now.date(), janitor_run_id,
                                        rows_to_table("reaped", rows))
    else:
        log.info("no project instance to reap")
    if errors:
        raise RuntimeError("the janitor could not reap everything: " + "; ".join(errors))
    return rows


def recently_reaped(store, now: dt.datetime | None = None,
                    hours: float = 24.0) -> list[dict]:
    """The reaped rows of the last ``hours`` (what a nightly digest names)."""
    now = now or dt.datetime.now(dt.UTC)
    since = now - dt.timedelta(hours=hours)
    rows = store.read_log("reaped", since=since.date()).to_pylist()
    return sorted((r for r in rows if r["reaped_at"] >= since), key=lambda r: r["reaped_at"])
