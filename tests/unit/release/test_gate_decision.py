"""A person's answer to an inconclusive release gate is kept with its verdict: the run's
``gate_verdicts`` rows and its Markdown say who decided what, when, and why; the Benchmarks
view says it instead of "needs a person"."""

import datetime as dt

import pytest
from servebench.errors import ReleaseGateFailed
from servebench.release.decision import record_decision, verdict_path
from servebench.release.gate import outcome, render_verdict, verdict_rows
from servebench.results.schema import rows_to_table
from servebench.results.store import ResultStore
from servebench.settings import Settings
from servebench.view.board import render_board

AT = dt.datetime(2026, 12, 4, 10, 2, 31, tzinfo=dt.UTC)


def _inconclusive(tmp_path, run_id: str) -> Settings:
    """A gate whose TTFT p95 could not be decided, kept where the verdict task keeps it
    (``release_gate.conclude``, less its announcement)."""
    settings, now = Settings(results_uri=str(tmp_path)), dt.datetime.now(dt.UTC)
    decision = {"target": "adder", "candidate": "q8_0", "baseline": "f16", "repetitions": 3,
                "overall": "inconclusive", "on_inconclusive": "needs_person",
                "perf": [{"workload": "fixed", "load_point": "c4", "metric": "ttft_ms_p95",
                          "threshold": 0.25, "pairs": 3, "worse_mean": 0.2,
                          "worse_ci_low": -0.1, "worse_ci_high": 0.5,
                          "verdict": "inconclusive"}],
                "quality": {"gate_verdict": "pass", "gate_relative": 1.0}}
    assert outcome(decision) == "needs_person"
    store = ResultStore(str(tmp_path))
    store.put_text(verdict_path(now.date(), run_id), render_verdict(decision, run_id))
    store.append_log("gate_verdicts", now.date(), run_id,
                     rows_to_table("gate_verdicts", verdict_rows(decision, run_id, now)))
    return settings


def _answer(option: str, comment: str | None = None) -> dict:
    """What the person_decides task returns (the HITL provider's success payload)."""
    return {"chosen_options": [option], "params_input": {"comment": comment},
            "responded_at": AT, "responded_by_user": {"id": "7", "name": "ana"}}


def _rows(tmp_path, run_id: str) -> list[dict]:
    return [r for r in ResultStore(str(tmp_path)).read_log("gate_verdicts").to_pylist()
            if r["run_id"] == run_id]


def _verdict(tmp_path) -> str:
    [path] = tmp_path.glob("release_gates/date=*/*.md")
    return path.read_text()


def test_an_approval_is_kept_in_the_verdicts_rows_and_markdown(tmp_path):
    settings = _inconclusive(tmp_path, "gate-1")
    since = dt.datetime.now(dt.UTC).date()
    got = record_decision("gate-1", _answer("Approve", "noise on a shared host\n  retried"),
                          since, settings)
    assert got["decision"] == "approved" and got["text"] == "approved by ana at 2026-12-04 " \
        "10:02 UTC"
    rows = _rows(tmp_path, "gate-1")
    assert len(rows) == 2  # ttft_ms_p95 and quality, each with the decision beside it
    assert {(r["outcome"], r["person_decision"], r["person_name"], r["person_id"],
             r["person_decided_at"], r["person_comment"]) for r in rows} == {
        ("needs_person", "approved", "ana", "7", AT,
         "noise on a shared host retried")}
    text = _verdict(tmp_path)
    assert text.startswith("# Release gate: adder/q8_0 vs f16: **NEEDS A PERSON**")
    assert text.endswith("## A person's decision\n\n**approved by ana at 2026-12-04 10:02 UTC**"
                         ": noise on a shared host retried\n")
    # written again (a cleared task): replaced, not doubled
    record_decision("gate-1", _answer("Approve"), since, settings)
    assert len(_rows(tmp_path, "gate-1")) == 2 and _verdict(tmp_path).count("## A person") == 1
    assert _rows(tmp_path, "gate-1")[0]["person_comment"] is None


@pytest.mark.parametrize(("answer", "said"), [
    (_answer("Reject", "p95 too close to the limit"), "rejected by ana at 2026-12-04 10:02 UTC"),
    # no answer in time: the task's default, Reject, answered by nobody (the scheduler's
    # timeout sweep)
    ({**_answer("Reject"), "responded_by_user": None},
     "unanswered: no one decided by 2026-12-04 10:02 UTC"),
])
def test_a_rejection_or_no_answer_is_kept_and_fails_the_gate(tmp_path, answer, said):
    settings = _inconclusive(tmp_path, "gate-2")
    with pytest.raises(ReleaseGateFailed, match=f"adder/q8_0: {said}"):
        record_decision("gate-2", answer, dt.datetime.now(dt.UTC).date(), settings, now=AT)
    [decision] = {r["person_decision"] for r in _rows(tmp_path, "gate-2")}
    assert said.startswith(decision)
    assert f"**{said}" in _verdict(tmp_path)


def test_a_decision_without_its_verdict_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no gate_verdicts rows"):
        record_decision("gate-3", _answer("Approve"), dt.date(2026, 12, 1),
                        Settings(results_uri=str(tmp_path)))


def test_the_board_says_who_decided_instead_of_needs_a_person(tmp_path):
    settings = _inconclusive(tmp_path, "gate-ok")
    _inconclusive(tmp_path, "gate-no")
    _inconclusive(tmp_path, "gate-open")  # nobody has answered yet
    today = dt.datetime.now(dt.UTC).date()
    record_decision("gate-ok", _answer("Approve", "fine <really> & ok"), today, settings)
    with pytest.raises(ReleaseGateFailed):
        record_decision("gate-no", _answer("Reject"), today, settings)
    page = render_board(ResultStore(str(tmp_path)))
    line = {run: next(r for r in page.splitlines() if f"<code>{run}</code>" in r)
            for run in ("gate-ok", "gate-no", "gate-open")}
    assert ("<td class='improvement'><strong>approved by ana at 2026-12-04 10:02 UTC</strong>"
            "<br><span class='muted'>fine &lt;really&gt; &amp; ok</span></td>") in line["gate-ok"]
    assert ("<td class='regression'><strong>rejected by ana at 2026-12-04 10:02 UTC</strong>"
            "</td>") in line["gate-no"]
    assert "needs a person" in line["gate-open"]
    assert "needs a person" not in line["gate-ok"] + line["gate-no"]
