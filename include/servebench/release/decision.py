"""A person's answer to an inconclusive release gate, kept with the gate's verdict.

An inconclusive verdict (``release_gate.outcome``: ``needs_person``) waits in the DAG's
``person_decides`` task: a Human-in-the-loop task (the standard provider's ``HITLOperator``)
under the Airflow UI's Required actions, its options those of ``defaults.GATE_PERSON_OPTIONS``
(Approve, Reject) and a free-text ``comment`` field. What the task returns -- the provider's
``HITLTriggerEventSuccessPayload``: ``chosen_options``, ``responded_by_user`` ({id, name}),
``responded_at``, ``params_input`` -- is what :func:`record_decision` (the ``record_decision``
task) writes back: the run's ``gate_verdicts`` rows get the ``person_*`` columns, and the
verdict's Markdown a closing section. No answer within the task's response timeout is its
default, Reject, answered by nobody (``responded_by_user`` None): recorded as
``unanswered``. Anything but an approval fails the run, so a gate's run is green only when
the candidate may ship.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from servebench.defaults import GATE_PERSON_OPTIONS
from servebench.errors import ReleaseGateFailed
from servebench.settings import Settings, get_settings

log = logging.getLogger(__name__)

UNANSWERED = "unanswered"
COMMENT = "comment"  # the person_decides form's free-text field
HEADING = "## A person's decision"


def verdict_path(day: dt.date, run_id: str) -> str:
    """Where a gate's verdict (Markdown) lives under the store root."""
    from servebench.results.store import encode_run_id

    return f"release_gates/date={day.isoformat()}/{encode_run_id(run_id)}.md"


def decision_columns(response: Mapping[str, Any], now: dt.datetime) -> dict:
    """The ``gate_verdicts`` columns of a person's answer: ``response`` is the person_decides
    task's return value (answered by nobody: ``unanswered``, the timeout's default)."""
    chosen = list(response.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in GATE_PERSON_OPTIONS:
        raise ValueError(f"a person's answer is one of {list(GATE_PERSON_OPTIONS)}, got "
                         f"{chosen}")
    at = response.get("responded_at") or now
    if isinstance(at, str):  # an XCom that came back as text
        at = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    user = response.get("responded_by_user")
    if not user:
        return {"person_decision": UNANSWERED, "person_decided_at": at}
    comment = " ".join(str((response.get("params_input") or {}).get(COMMENT) or "").split())
    return {"person_decision": GATE_PERSON_OPTIONS[chosen[0]],
            "person_name": user.get("name"), "person_id": user.get("id"),
            "person_decided_at": at, "person_comment": comment or None}


def decision_text(columns: Mapping[str, Any]) -> str:
    """The decision in words, its comment aside: ``approved by ana at 2026-12-04 10:02 UTC``,
    ``rejected by ...``, or ``unanswered: no one decided by 2026-12-07 10:02 UTC``."""
    at = columns.get("person_decided_at")
    when = (f"{at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"
            if isinstance(at, dt.datetime) and at == at else "")  # not NaT
    if columns.get("person_decision") == UNANSWERED:
        return f"{UNANSWERED}: no one decided" + (f" by {when}" if when else "")
    who = columns.get("person_name") or columns.get("person_id") or "someone"
    return f"{columns.get('person_decision')} by {who}" + (f" at {when}" if when else "")


def record_decision(run_id: str, response: Mapping[str, Any], since: dt.date,
                    settings: Settings | None = None, now: dt.datetime | None = None) -> dict:
    """The record_decision task: the person's answer (``response``, see the module doc)
    written into run ``run_id``'s ``gate_verdicts`` rows (their file replaced whole, so a
    second write replaces the first) and appended to its verdict's Markdown. ``since``: a day
    on or before the verdict's (the DAG run's date). Returns the decision in words and where
    it went; raises :class:`ReleaseGateFailed` unless the person approved."""
    from servebench.connections import open_store
    from servebench.results.schema import rows_to_table

    settings, now = settings or get_settings(), now or dt.datetime.now(dt.UTC)
    columns = decision_columns(response, now)
    store = open_store(settings)
    rows = [r for r in store.read_log("gate_verdicts", since=since).to_pylist()
            if r["run_id"] == run_id]
    if not rows:
        raise ValueError(f"run {run_id}: no gate_verdicts rows from {since} on: its verdict "
                         "must be kept before a person's decision on it")
    day = rows[0]["run_date"]  # the day the verdict was kept under
    store.append_log("gate_verdicts", day, run_id,
                     rows_to_table("gate_verdicts", [{**r, **columns} for r in rows]))
    text = decision_text(columns)
    comment = columns.get("person_comment")
    section = f"{HEADING}\n\n**{text}**" + (f": {comment}" if comment else "") + "\n"
    kept = store.get_bytes(verdict_path(day, run_id))
    verdict = kept.decode().split(f"\n{HEADING}\n")[0].rstrip("\n") if kept else ""
    where = store.put_text(verdict_path(day, run_id), f"{verdict}\n\n{section}".lstrip("\n"))
    gate = f"{rows[0]['target']}/{rows[0]['candidate']}"
    log.info("release gate %s: %s (%s)", gate, text, where)
    if columns["person_decision"] != GATE_PERSON_OPTIONS["Approve"]:
        raise ReleaseGateFailed(f"{gate}: {text}" + (f": {comment}" if comment else "")
                                + f"; see {where}")
    return {"decision": columns["person_decision"], "text": text, "comment": comment,
            "where": where}
