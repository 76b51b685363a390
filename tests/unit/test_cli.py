"""The command line over the synthetic 30-night history (tests/conftest.py): compare two runs
cell by cell, query the history, rewrite a report -- the library functions the DAGs use."""

import datetime as dt

import pytest
from servebench.cli import main


@pytest.fixture
def history(synthetic_history, monkeypatch):
    store, summaries, day0 = synthetic_history
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", store.uri)
    monkeypatch.setenv("COLUMNS", "200")  # rich: one table row per line
    return store, summaries, day0


def test_compare_names_each_cells_change_status_and_gate(history, capsys):
    _, summaries, _ = history
    before, after = summaries[19]["run_id"], summaries[26]["run_id"]
    assert main(["compare", before, after]) == 0
    out = capsys.readouterr().out
    q4 = next(line for line in out.splitlines() if "t / q4" in line)
    # q4's TTFT p95 went up 15% from night 20; its gate failed on night 26
    assert "10.0" in q4 and "+1" in q4 and "pass -> fail" in q4 and "ok -> ok" in q4
    f16 = next(line for line in out.splitlines() if "t / f16" in line)
    assert "pass -> pass" in f16


def test_compare_rejects_a_run_that_is_not_committed(history, capsys):
    _, summaries, _ = history
    assert main(["compare", summaries[0]["run_id"], "nope"]) == 2
    assert "run 'nope' is not committed" in capsys.readouterr().err


def test_history_prints_a_metric_newest_first_with_filters(history, capsys):
    _, _, day0 = history
    assert main(["history", "--metric", "ttft_ms_p95", "--variant", "q4", "--since",
                 (day0 + dt.timedelta(days=27)).isoformat()]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "│ t " in line]
    assert [line.split("│")[1].strip() for line in lines] == [
        (day0 + dt.timedelta(days=d)).isoformat() for d in (29, 28, 27)]
    assert all("q4" in line and "f16" not in line for line in lines)
    assert all(11.0 < float(line.split("│")[6]) < 12.5 for line in lines)  # +15% since night 20


def test_history_takes_only_numeric_columns(history, capsys):
    assert main(["history", "--metric", "reason; drop table cells"]) == 2
    assert "is not a numeric cells column" in capsys.readouterr().err


def test_report_rewrites_the_html_beside_the_results(history, capsys):
    _, summaries, _ = history
    assert main(["report", summaries[22]["run_id"]]) == 0
    where = capsys.readouterr().out.strip()
    assert where.endswith(".html") and "reports/date=" in where
    from pathlib import Path

    html = Path(where).read_text()
    assert "<html" in html and "q4" in html
    assert main(["report", "never-ran"]) == 2


def test_trends_redetect_judges_the_stored_nights_again(history, tmp_path, monkeypatch, capsys):
    """The nights judged again as the DAG judged them give the same alerts; with an
    annotation written late for the engine upgrade of night 20, its regression is gone and
    everything else stands."""
    import shutil

    from servebench.results.store import ResultStore

    store, _, day0 = history
    copy = tmp_path / "data"
    shutil.copytree(store.uri, copy)  # the shared history stays as the DAG left it
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(copy))
    columns = ["run_id", "series_id", "kind", "change_run_id", "cause"]

    def alerts():
        frame = ResultStore(str(copy)).read_table("changes").to_pandas()
        return frame[columns].sort_values(columns).reset_index(drop=True)

    stored = alerts()
    assert "regression" in set(stored["kind"])
    assert main(["trends", "redetect", "local"]) == 0
    assert alerts().equals(stored)
    assert "regression 1" in capsys.readouterr().out
    upgrade = day0 + dt.timedelta(days=20)
    notes = tmp_path / "annotations.yaml"
    notes.write_text(f"- date: {upgrade}\n  match: {{variant: q4}}\n  note: engine b1 -> b2\n")
    monkeypatch.setenv("SERVEBENCH_ANNOTATIONS", str(notes))
    assert main(["trends", "redetect", "local", "--since", str(upgrade)]) == 0
    after = alerts()
    assert "regression" not in set(after["kind"])
    assert after.equals(stored[stored["kind"] != "regression"].reset_index(drop=True))
    assert main(["trends", "redetect", "nightly"]) == 2  # no such sweep: said, nothing judged
    assert "no committed runs of sweep 'nightly'" in capsys.readouterr().err
