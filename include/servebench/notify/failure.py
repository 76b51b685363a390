"""A failed night is heard: a task of the nightly, the release gate or the janitor that fails
for good (its retries spent) posts a short message -- which DAG, run and task, the error's
first lines, the run's link in Airflow -- through the digest's notifier, and keeps it in the
result store (``failures/<dag>--<run>/<task>.md``; a mapped task's host at
``<task>[<map index>].md``, each its own). A run is posted once, for its first failed task:
the failure that creates ``failures/<dag>--<run>/posted.json`` (an exclusive create, so of
hosts failing together one posts); what fails after it is kept beside it. Silence then means
"all is well", never "the night broke before its digest".

Wired as each DAG's ``on_failure_callback`` (task level, so it knows the task and its
exception); Airflow runs it in the failed task's process after the last try.

A night with no committed run by its deadline (``defaults.NIGHTLY_DEADLINE_HOURS`` after its
scheduled time) is heard the same way, once (:func:`watch_deadline`, the hourly
``nightly_deadline`` DAG): still running, never started or failed, the team hears it before
the morning. (Airflow's own deadline alerts would only see runs that exist, and in Airflow 3.3
a DAG with one cannot run under ``dag.test()``, which ``make run`` and the tests use.)
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping

from servebench.connections import airflow_url, open_store
from servebench.defaults import NIGHTLY_DAG_ID, NIGHTLY_DEADLINE_HOURS, NIGHTLY_SCHEDULE
from servebench.errors import ReleaseGateFailed
from servebench.notify.digest import dag_url, run_url
from servebench.notify.notifier import Notifier, announce, notifier_for
from servebench.results.store import encode_run_id
from servebench.settings import Settings, get_settings

log = logging.getLogger(__name__)

ERROR_LINES = 6  # of the exception's message: enough to say why, short enough for Slack
POSTED = "posted.json"  # in a run's failures folder: the claim of the one failure posted


def failure_message(dag_id: str, run_id: str, task_id: str, try_number: int | None,
                    error: BaseException | str | None, url: str | None) -> str:
    """The Markdown of one failed task: what failed, why (the error's first lines), where."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error) if error else "no exception given (killed, or timed out?)"
    lines = text.strip().splitlines()
    why = "\n".join(lines[:ERROR_LINES]) + (
        f"\n... ({len(lines) - ERROR_LINES} more lines in the task log)"
        if len(lines) > ERROR_LINES else "")
    tries = f" after {try_number} tries" if try_number and try_number > 1 else ""
    out = [f"# servebench: {dag_id} failed",
           "",
           f"Task `{task_id}` of run `{run_id}` failed{tries}:",
           "",
           "```",
           why,
           "```"]
    if url:
        out += ["", f"[The run in Airflow]({url})"]
    return "\n".join(out) + "\n"


def late_message(dag_id: str, night: dt.datetime, deadline: dt.datetime, live_runs: int,
                 url: str | None) -> str:
    """The Markdown of a night with no committed run by its deadline."""
    state = (f"{live_runs} run(s) of it are still queued or running (a hung task, a slow "
             "queue)" if live_runs else "no run of it is queued or running: it never "
             "started (a paused DAG, a scheduler that was down) or it failed (see its failure "
             "message)")
    out = [f"# servebench: the night of {night:%Y-%m-%d %H:%M} UTC is late",
           "",
           f"`{dag_id}` has committed no run for the night scheduled at "
           f"{night:%Y-%m-%d %H:%M} UTC by its deadline, {deadline:%Y-%m-%d %H:%M} UTC: "
           f"{state}. Tonight's results and digest are not in."]
    if url:
        out += ["", f"[The DAG in Airflow]({url})"]
    return "\n".join(out) + "\n"


def watch_deadline(count_live_runs: Callable[[], int], settings: Settings | None = None,
                   notifier: Notifier | None = None, now: dt.datetime | None = None,
                   *, schedule: str = NIGHTLY_SCHEDULE, dag_id: str = NIGHTLY_DAG_ID,
                   deadline_hours: float = NIGHTLY_DEADLINE_HOURS) -> str | None:
    """The hourly deadline check (the ``nightly_deadline`` DAG): the latest scheduled night
    whose deadline (``deadline_hours`` after its time) has passed is announced once -- kept at
    ``failures/<dag>--night-<time>/deadline.md`` and posted -- when no committed night of
    ``dag_id`` falls in its schedule interval. ``count_live_runs()``: how many runs of it are
    queued or running (said in the message). Where it went, or None (nothing late, or said
    already). A notifier that fails is logged; the night stays said (kept in the store)."""
    import pandas as pd
    from croniter import croniter

    from servebench.trends.series import nightly_runs

    settings, now = settings or get_settings(), now or dt.datetime.now(dt.UTC)
    deadline_span = dt.timedelta(hours=deadline_hours)
    night = croniter(schedule, now - deadline_span).get_prev(dt.datetime)
    following = croniter(schedule, night).get_next(dt.datetime)
    store = open_store(settings)
    nights = nightly_runs(store.read_table("runs").to_pandas(), None, dag_id)
    if any(night <= pd.Timestamp(t).to_pydatetime() < following
           for t in nights["logical_date"].dropna()):
        return None
    folder = f"failures/{encode_run_id(dag_id)}--night-{encode_run_id(night.isoformat())}"
    if store.find(folder):
        return None  # said in an earlier hour
    markdown = late_message(dag_id, night, night + deadline_span, count_live_runs(),
                            dag_url(airflow_url(settings), dag_id))
    where = store.put_text(f"{folder}/deadline.md", markdown)
    where += announce(notifier or notifier_for(settings), f"the late night of {dag_id}",
                      markdown)
    log.error("the night of %s has no committed %s run by its deadline; said at %s", night,
              dag_id, where)
    return where


def task_label(task_id: str, map_index: int | None) -> str:
    """A task as its failure names it: ``bench[2]`` for a mapped task's third host, else its
    id (Airflow gives an unmapped task map index -1)."""
    return task_id if map_index is None or map_index < 0 else f"{task_id}[{map_index}]"


def announce_failure(context: Mapping, settings: Settings | None = None,
                     notifier: Notifier | None = None) -> str:
    """The ``on_failure_callback``: the failed task's message kept in the store and posted;
    where it went. Neither a store nor a notifier that fails raises (the task has failed
    already; each is logged with its traceback); a store that fails to say whether the run
    was posted already is posted (heard twice, never not at all)."""
    error = context.get("exception")
    if isinstance(error, ReleaseGateFailed):
        return "not announced: the release gate's verdict was"  # a verdict, not a breakage
    settings = settings or get_settings()
    ti = context["ti"]
    dag_id, map_index = ti.dag_id, getattr(ti, "map_index", None)
    task = task_label(ti.task_id, map_index)
    run_id = context.get("run_id") or ti.run_id
    markdown = failure_message(dag_id, run_id, task, getattr(ti, "try_number", None),
                               error, run_url(airflow_url(settings), dag_id, run_id))
    folder = f"failures/{encode_run_id(dag_id)}--{encode_run_id(run_id)}"
    name = task_label(encode_run_id(ti.task_id), map_index)  # [ ] are in no task id
    try:
        store = open_store(settings)
        where = store.put_text(f"{folder}/{name}.md", markdown)
    except OSError:
        log.exception("keeping the failure of %s.%s in the store failed", dag_id, task)
        store, where = None, "not kept (the store failed)"
    # a run is announced once, for its first failed task: what fails after it (a publish
    # with nothing planned, a mapped task's other hosts) is kept, not posted again
    first = True
    if store is not None:
        claim = json.dumps({"task": task, "at": dt.datetime.now(dt.UTC).isoformat()})
        try:
            first = store.create_text(f"{folder}/{POSTED}", claim)
        except OSError:
            log.exception("claiming the post of %s's failures in the store failed", run_id)
    if first:
        where += announce(notifier or notifier_for(settings), f"the failure of {dag_id}",
                          markdown)
    else:
        where += " (not posted: an earlier failure of this run was)"
    log.error("%s.%s of %s failed; said at %s", dag_id, task, run_id, where)
    return where
