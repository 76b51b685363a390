"""The message a failed task posts, and what is never posted."""

import json
from types import SimpleNamespace

from servebench.errors import ReleaseGateFailed
from servebench.notify.failure import (
    ERROR_LINES,
    POSTED,
    announce_failure,
    failure_message,
)
from servebench.notify.notifier import Notifier
from servebench.settings import Settings


class Recorder(Notifier):
    name = "Slack #bench"

    def __init__(self):
        self.posted = []

    def post(self, markdown, files=()):
        self.posted.append(markdown)
        return "Slack #bench (ts=1.2)"


def test_the_message_names_the_task_the_error_and_the_run():
    error = RuntimeError("\n".join(f"line {i}" for i in range(10)))
    text = failure_message("nightly_benchmark", "scheduled__x", "publish", 2, error,
                           "http://af/dags/nightly_benchmark/runs/scheduled__x")
    assert "Task `publish` of run `scheduled__x` failed after 2 tries" in text
    assert "RuntimeError: line 0" in text and f"line {ERROR_LINES - 1}" in text
    assert f"line {ERROR_LINES}" not in text and "more lines in the task log" in text
    assert "(http://af/dags/nightly_benchmark/runs/scheduled__x)" in text
    assert "killed, or timed out" in failure_message("d", "r", "t", 1, None, None)


def _context(task, error, map_index=-1):
    ti = SimpleNamespace(dag_id="nightly_benchmark", task_id=task, run_id="r1", try_number=1,
                         map_index=map_index)
    return {"ti": ti, "run_id": "r1", "exception": error}


def test_a_run_is_posted_once_and_a_failing_verdict_not_at_all(tmp_path):
    settings, slack = Settings(results_uri=str(tmp_path)), Recorder()
    announce_failure(_context("plan", ValueError("bad")), settings, slack)
    where = announce_failure(_context("publish", ValueError("nothing")), settings, slack)
    assert len(slack.posted) == 1 and "an earlier failure of this run was" in where
    assert len(list(tmp_path.rglob("*.md"))) == 2
    gate = ReleaseGateFailed("q4 fails the gate")
    assert "verdict" in announce_failure(_context("conclude", gate), settings, slack)
    assert len(slack.posted) == 1


def test_each_host_of_a_mapped_task_keeps_its_own_failure_and_the_run_is_posted_once(
        tmp_path):
    settings, slack = Settings(results_uri=str(tmp_path)), Recorder()
    for host in (0, 1):
        announce_failure(_context("bench", RuntimeError(f"host {host} lost"), host),
                         settings, slack)
    kept = {p.name: p.read_text() for p in tmp_path.rglob("*.md")}
    assert set(kept) == {"bench[0].md", "bench[1].md"}  # neither overwrote the other
    assert "host 0 lost" in kept["bench[0].md"] and "host 1 lost" in kept["bench[1].md"]
    assert "Task `bench[1]` of run `r1`" in kept["bench[1].md"]
    [posted] = slack.posted
    assert posted == kept["bench[0].md"]
    [claim] = tmp_path.rglob(POSTED)
    assert json.loads(claim.read_text())["task"] == "bench[0]"


def _runs_store(tmp_path, nights):
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    store = ResultStore(str(tmp_path))
    for run_id, at, dag_id, nightly in nights:
        store.publish(run_id, at.date(), {"runs": rows_to_table("runs", [dict(
            run_id=run_id, run_date=at.date(), logical_date=at, sweep_name="s",
            dag_id=dag_id, nightly=nightly)]), "cells": rows_to_table("cells", [dict(
                run_id=run_id, run_date=at.date(), cell_id="t/v/w/c1", target="t",
                stack="llama_cpp", variant="v", workload="w", load_point="c1", status="ok")])})


def test_a_night_with_no_committed_run_by_its_deadline_is_posted_once(tmp_path):
    from servebench.notify.failure import watch_deadline

    _runs_store(tmp_path, [
        ("scheduled__12-02", _at(2, 2, 5), "nightly_benchmark", True),
        ("manual__12-03", _at(3, 3), "nightly_benchmark", False),  # ad hoc: not a night
        ("gate__12-03", _at(3, 4), "release_gate", True)])  # another DAG's
    settings = Settings(results_uri=str(tmp_path), airflow_url="http://af")
    slack = Recorder()

    def watch(now, live=1):
        return watch_deadline(lambda: live, settings, slack, now=now)

    assert watch(_at(3, 7, 59)) is None  # 12-03 02:00 not due until 08:00; 12-02 was had
    where = watch(_at(3, 8, 5))
    [text] = slack.posted
    assert "the night of 2026-12-03 02:00 UTC is late" in text
    assert "deadline, 2026-12-03 08:00 UTC" in text and "1 run(s) of it are still" in text
    assert "(http://af/dags/nightly_benchmark)" in text and "Slack #bench" in where
    assert watch(_at(3, 9, 5)) is None and len(slack.posted) == 1  # said once
    assert len(list(tmp_path.rglob("deadline.md"))) == 1
    # no run at all for the next night: said as never started (or failed)
    assert watch(_at(4, 8, 30), live=0) is not None
    assert "never started" in slack.posted[-1] and "night of 2026-12-04 02:00" in \
        slack.posted[-1]
    # a run marked nightly, late but within the night's interval, is the night
    _runs_store(tmp_path, [("manual__redo", _at(5, 7), "nightly_benchmark", True)])
    assert watch(_at(5, 8, 30)) is None and len(slack.posted) == 2


def _at(day, hour, minute=0):
    import datetime as dt

    return dt.datetime(2026, 12, day, hour, minute, tzinfo=dt.UTC)
