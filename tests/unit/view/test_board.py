"""The Benchmarks board the Airflow UI plugin shows, over a real store of 30 nights: the latest
runs with their reports, what the last nights raised, the gate verdicts, a trend chart per
target; served only to a caller Airflow's auth lets read DAG runs."""

import pytest
from fastapi.testclient import TestClient
from servebench.settings import Settings
from servebench.view.board import create_app, render_board


@pytest.fixture(scope="module")
def store(synthetic_history):
    return synthetic_history[0]


def test_the_board_shows_runs_alerts_gates_and_trends(store):
    page = render_board(store)
    latest = page.split("<h2>Latest runs</h2>")[1].split("<h2>")[0]
    assert latest.count("report?run_id=") == 15
    assert "Quality gate (latest run of each sweep)" in page
    # output tok/s and TTFT p95 of target t as panels, and its latest night's latency vs
    # throughput
    trends = page.split("id='trends'")[1]
    assert trends.count("<div class='panels'") == 2 and trends.count("data:image/png") == 1
    runs = store.read_table("runs").to_pandas().sort_values("run_date")
    assert str(runs["run_date"].iloc[-1]) in latest and str(runs["run_date"].iloc[0]) \
        not in latest


def test_the_latest_nights_alerts_are_listed_by_kind(store, synthetic_history):
    summaries = synthetic_history[1]
    # the last week of the 30 nights: q4's gate failure (night 26) and f16's failure (night 25)
    page = render_board(store)
    assert "Quality gate failures (1)" in page and "t / q4" in page
    assert "Newly failing cells (1)" in page and "SIGSEGV" in page
    assert "Regressions" not in page.split("Quality gate (latest")[0]  # night 20: too old
    assert summaries


def _client(store) -> tuple[TestClient, object]:
    app = create_app(Settings(results_uri=store.uri))
    [access] = app.router.dependencies
    return TestClient(app), access.dependency


def test_the_app_serves_the_board_and_a_runs_report_to_a_reader(store):
    client, access = _client(store)
    client.app.dependency_overrides[access] = lambda: None  # Airflow's auth said yes
    page = client.get("/")
    assert page.status_code == 200 and "servebench benchmarks" in page.text
    run = store.read_table("runs").to_pylist()[0]
    store.put_text(f"reports/date={run['run_date']}/x.html", "")  # another run's: not served
    from servebench.notify.report import report_path

    store.put_text(report_path(str(run["run_date"]), run["run_id"]), "<html>the report</html>")
    assert client.get("/report", params={"run_id": run["run_id"]}).text == \
        "<html>the report</html>"
    assert client.get("/report", params={"run_id": "nope"}).status_code == 404


def test_without_an_airflow_session_it_serves_nothing(store):
    client, _ = _client(store)
    assert client.get("/").status_code == 401


def test_an_ad_hoc_run_is_marked_as_one(tmp_path):
    import datetime as dt

    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    store, day = ResultStore(str(tmp_path)), dt.date(2026, 12, 1)
    for run_id, nightly in (("scheduled__1", True), ("manual__try", False), ("old", None)):
        store.publish(run_id, day, {
            "runs": rows_to_table("runs", [dict(run_id=run_id, run_date=day, sweep_name="s",
                                                dag_id="nightly_benchmark", nightly=nightly)]),
            "cells": rows_to_table("cells", [dict(
                run_id=run_id, run_date=day, cell_id="t/v/w/c1", target="t",
                stack="llama_cpp", variant="v", workload="w", load_point="c1", status="ok")])})
    rows = [r for r in render_board(store).splitlines() if "<code>" in r and "<tr>" in r]
    marked = {r.split("<code>")[1].split("</code>")[0] for r in rows if "(ad hoc)" in r}
    assert marked == {"manual__try"}


def test_release_gate_verdicts_are_listed_with_what_did_not_pass(tmp_path):
    import datetime as dt

    from servebench.release.gate import verdict_rows
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    store, now = ResultStore(str(tmp_path)), dt.datetime.now(dt.UTC)
    perf = [{"workload": "fixed", "load_point": "c4", "metric": "ttft_ms_p95",
             "threshold": 0.25, "pairs": 3, "worse_mean": 0.4, "worse_ci_low": 0.3,
             "worse_ci_high": 0.5, "verdict": "fail"}]
    for run_id, overall, at in (("gate-old", "pass", now - dt.timedelta(days=1)),
                                ("gate-new", "fail", now)):
        decision = {"target": "t", "candidate": "q4", "baseline": "f16", "repetitions": 3,
                    "overall": overall, "on_inconclusive": "needs_person",
                    "perf": [{**perf[0], "verdict": overall}],
                    "quality": {"gate_verdict": "pass", "gate_relative": 1.0}}
        store.append_log("gate_verdicts", at.date(), run_id,
                         rows_to_table("gate_verdicts", verdict_rows(decision, run_id, at)))
    page = render_board(store)  # no nightly run yet: the gates are shown all the same
    assert "Release gates (last 30 days)" in page
    new, old = (r for r in page.splitlines() if "<code>gate-" in r)
    assert "gate-new" in new and "blocked" in new and "fixed c4 TTFT p95: fail +40.0% worse" in new
    assert "gate-old" in old and "may ship" in old and "<td>none</td>" in old


def test_a_finding_links_to_its_chart_and_the_provenance_around_it(store):
    """The 30-night history's regression (q4's TTFT p95 +15% from night 20, when the engine
    version changed), clicked through from the board: its page names the cause, draws the
    series, and puts the runs on either side of the change night side by side, the engine
    version first among what differs."""
    import re
    from html import unescape

    from servebench.view.board import render_finding

    alerts = store.read_table("changes").to_pandas()
    regression = alerts[alerts["kind"] == "regression"].iloc[0]
    client, access = _client(store)
    client.app.dependency_overrides[access] = lambda: None
    # the board lists findings of the last week only; the page serves any raised one
    page = render_finding(store, regression["run_id"], regression["series_id"])
    assert "engine_version" in page and "cause: <strong>" in page
    assert page.count("data:image/png;base64,") == 1
    rows = re.findall(r"<tr class='(differs|same)'><td>([^<]+)</td>", page)
    assert rows[0] == ("differs", "engine_version") and ("same", "sampling_hash") in rows
    assert page.count("report?run_id=") == 2  # both runs' reports
    served = client.get("/finding", params={"run_id": regression["run_id"],
                                            "series_id": regression["series_id"]})
    assert served.status_code == 200 and unescape(served.text) == unescape(page)
    assert client.get("/finding", params={"run_id": regression["run_id"],
                                          "series_id": "nope"}).status_code == 404


def test_the_boards_raised_lines_link_to_their_pages(store):
    page = render_board(store)
    raised = page.split("Raised in the last")[1].split("<h2>Quality gate")[0]
    # the last week's failing cell and gate failure lead to their pages
    assert raised.count("finding?run_id=") == raised.count("<li>") >= 2


def _page_of(store, kind):
    from servebench.view.board import render_finding

    alerts = store.read_table("changes").to_pandas()
    row = alerts[alerts["kind"] == kind].iloc[0]
    return render_finding(store, row["run_id"], row["series_id"])


def test_a_newly_failing_cells_page_says_why_with_its_nights_and_what_changed(store):
    """f16's cell failing on night 25 (SIGSEGV): its page gives the reason, the cell's
    typical request (output tok/s, the first of its series it has) over its nights until then, ok -> failed against the night before, and the two
    runs' provenance side by side with their reports."""
    page = _page_of(store, "newly_failing")
    assert "newly failing" in page and "SIGSEGV" in page
    assert page.count("data:image/png;base64,") == 1
    assert "<td>status</td><td class='num'>ok</td><td class='num'>failed</td>" in page
    assert "<td>output tok/s</td>" in page
    assert "Provenance around the change" in page and page.count("report?run_id=") == 2


def test_a_gate_failures_page_draws_its_variants_accuracy(store):
    """q4's gate failing on night 26: its page gives the gate's reason and the variant's
    accuracy over the nights, tonight's against their level."""
    page = _page_of(store, "gate_failure")
    assert "gate failure: t / q4: accuracy 0.80 vs 0.90" in page
    assert page.count("data:image/png;base64,") == 1
    assert "accuracy (its nights&#x27; level -&gt; tonight)" in page
    assert page.count("report?run_id=") == 2


def test_the_trends_narrow_to_one_variant_and_metric(store):
    from servebench.view.board import TrendView

    everything = render_board(store).split("id='trends'")[1]
    page = render_board(store, view=TrendView(variant="q4", metric="ttft_ms_p95", nights=10))
    one = page.split("id='trends'")[1]
    # both metrics, each night of each variant a point with its value and run on hover
    assert everything.count("<div class='panels'") == 2
    assert everything.count("<circle class='night'") == 2 * (30 + 29)  # f16 failed a night
    assert one.count("<div class='panels'") == 1 and one.count("<circle class='night'") == 10
    assert "q4 · 2026-10-30: " in one and "run scheduled__2026-10-30</title>" in one
    assert "<option value='q4' selected>" in page and "value='10'" in page
    client, access = _client(store)
    client.app.dependency_overrides[access] = lambda: None
    served = client.get("/", params={"variant": "q4", "metric": "ttft_ms_p95",
                                     "nights": "10", "workload": ""})
    assert served.status_code == 200 and "<option value='q4' selected>" in served.text


def test_two_runs_side_by_side(store):
    runs = store.read_table("runs").to_pandas().sort_values("run_date")
    before, after = runs["run_id"].iloc[19], runs["run_id"].iloc[20]
    client, access = _client(store)
    client.app.dependency_overrides[access] = lambda: None
    page = client.get("/compare", params={"a": before, "b": after}).text
    assert "Two runs side by side" in page
    assert f"<option value='{before}' selected>" in page
    assert page.count("<tr><td>t / ") == 2 * 1  # two variants, one workload and load point
    assert "%)" in page and "ok → ok" in page
    assert "compare two runs" in render_board(store)  # linked from the board


def test_a_trend_marks_every_change_its_range_holds_not_only_the_last_weeks(store):
    """q4's TTFT p95 regression (raised 3 nights after night 20) is older than the board's
    last week of findings: its panel still marks it, with its cause on hover; a range of
    the last 5 nights leaves it out."""
    from servebench.view.board import TrendView

    trends = render_board(store).split("id='trends'")[1]
    assert trends.count("<line class='change regression'") == 1
    assert "regression +14" in trends and "engine_version b1 -&gt; b2</title>" in trends
    narrow = render_board(store, view=TrendView(nights=5)).split("id='trends'")[1]
    assert "class='change" not in narrow


def test_the_raised_lines_are_html_with_no_markdown_left(store):
    """The last week's lines as the view shows them: bold and code are HTML tags, and the
    visible text holds no ``**`` or backtick (the digest's Markdown spelling)."""
    import re

    page = render_board(store)
    raised = page.split("Raised in the last")[1].split("<h2>Quality gate")[0]
    text = re.sub(r"<[^>]+>", " ", raised)
    assert "**" not in text and "`" not in text, text
    assert "<code>t / f16 / w / c1</code>: failed: launch failed: killed by SIGSEGV" in raised


def test_a_raised_lines_values_are_escaped_not_read_as_markup(tmp_path):
    """Values from a run (a target's name, a failing cell's reason) are text: ``<`` and
    ``&`` escaped, a reason's own backtick or asterisks kept as written, never a tag."""
    import datetime as dt

    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    store, day, run_id = ResultStore(str(tmp_path)), dt.date.today(), "scheduled__x"
    store.publish(run_id, day, {
        "runs": rows_to_table("runs", [dict(run_id=run_id, run_date=day, sweep_name="s",
                                            dag_id="nightly_benchmark")]),
        "cells": rows_to_table("cells", [dict(
            run_id=run_id, run_date=day, cell_id="t<x>&/v/w/c1", target="t<x>&",
            stack="llama_cpp", variant="v", workload="w", load_point="c1", status="failed",
            reason="exit `1` **now** <killed>")])})
    common = dict(run_id=run_id, run_date=day, target="t<x>&", variant="v", workload="w",
                  load_point="c1")
    store.attach(run_id, day, {"changes": rows_to_table("changes", [
        {**common, "series_id": "t<x>&/v/w/c1/ttft_ms_p95", "metric": "ttft_ms_p95",
         "kind": "regression", "before": 10.0, "after": 11.43, "change_pct": 14.3,
         "change_date": day, "nights_since": 1},
        {**common, "series_id": "t<x>&/v/w/c1/status", "metric": "status",
         "kind": "newly_failing", "reason": "exit `1` **now** <killed>"}])})
    raised = render_board(store).split("Raised in the last")[1].split("<h2>Quality gate")[0]
    assert ("<strong>TTFT p95 +14.3%</strong> <code>t&lt;x&gt;&amp; / v / w / c1</code>: "
            "10.0 -&gt; 11.4 since ") in raised
    assert "<code>t&lt;x&gt;&amp; / v / w / c1</code>: exit `1` **now** &lt;killed&gt;" \
        in raised
    assert raised.count("<code>") == raised.count("</code>") == 2  # where, once a line
    assert "<killed>" not in raised and "<strong>now" not in raised


def test_a_release_gate_whose_quality_was_not_judged_says_so(tmp_path):
    """A target without a golden set: its gate's quality line reads "not judged", in words."""
    import datetime as dt

    from servebench.release.gate import verdict_rows
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    store, now = ResultStore(str(tmp_path)), dt.datetime.now(dt.UTC)
    decision = {"target": "t", "candidate": "q4", "baseline": "f16", "repetitions": 3,
                "overall": "inconclusive", "on_inconclusive": "needs_person", "perf": [],
                "quality": {"gate_verdict": "not_judged",
                            "gate_reason": "target has no golden set"}}
    store.append_log("gate_verdicts", now.date(), "gate-bare",
                     rows_to_table("gate_verdicts", verdict_rows(decision, "gate-bare", now)))
    [row] = (r for r in render_board(store).splitlines() if "<code>gate-bare" in r)
    assert "<td>quality: not judged</td>" in row and "not_judged" not in row


def test_each_trend_line_says_what_it_catches_within_three_nights(store):
    """Under each panel, each variant's series says the smallest worse step it would catch
    within three nights (from the latest night's ``detectability``); q4's TTFT p95, whose
    baseline restarted at its change 10 nights before, is judged again."""
    import re

    trends = render_board(store).split("id='trends'")[1]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", trends)
    assert len(captions) == 2, captions  # one panel (w · c1) per metric
    for caption in captions:
        said = re.findall(r"</i>(\w+) catches &gt;= ([\d.]+)%</span>", caption)
        assert [v for v, _ in said] == ["f16", "q4"], caption
        assert all(1 < float(pct) < 10 for _, pct in said), caption  # 1% noise a night
        assert "blind" not in caption  # each catches the sweep's 10%


def test_a_findings_page_says_what_its_series_caught_before_the_change(store):
    import re

    from servebench.view.board import render_finding

    alerts = store.read_table("changes").to_pandas()
    regression = alerts[alerts["kind"] == "regression"].iloc[0]
    page = render_finding(store, regression["run_id"], regression["series_id"])
    row = page.split("<td>within 3 nights (the night before, the night raised)</td>")[1]
    before, raised = re.findall(r"<td class='num'>([^<]*)</td>", row)[:2]
    assert before.startswith("catches &gt;= ") and raised == "too few nights to judge yet"


def test_a_finding_raised_night_after_night_is_one_line_with_its_nights():
    import datetime as dt

    import pandas as pd
    from servebench.view.board import _findings, _nights_text

    day = dt.date(2026, 12, 2)
    rows = pd.DataFrame(
        [{"run_date": day + dt.timedelta(days=d), "series_id": "gate-q2_k", "reason": f"n{d}"}
         for d in (3, 2, 1, 0)]
        + [{"run_date": day + dt.timedelta(days=2), "series_id": "gate-q4", "reason": "once"},
           {"run_date": day, "series_id": None, "reason": "no series"},
           {"run_date": day, "series_id": None, "reason": "another"}])
    findings = _findings(rows)
    assert [(row["reason"], len(nights)) for row, nights in findings] == \
        [("n3", 4), ("once", 1), ("no series", 1), ("another", 1)]  # the newest alert's line
    assert _nights_text(findings[0][1]) == "2026-12-02 to 2026-12-05, 4 nights"
    assert _nights_text(findings[1][1]) == "2026-12-04"
