import numpy as np
import pandas as pd
from servebench.notify.digest import fmt_num, render_digest, summary_table

RUN = dict(run_id="scheduled__2025-03-01T00:00:00+00:00", sweep_name="nightly",
           suite_git_sha="0123456789abcdef", hardware="2 vCPU", run_date="2025-03-01")


def cells():
    return pd.DataFrame([
        dict(target="cpu", stack="llama.cpp", model="tiny", variant="q8_0", workload="chat",
             concurrency=4, status="ok", reason=None, ttft_ms_p50=12.345, ttft_ms_p95=40.0,
             tpot_ms_p50=5.5, tpot_ms_p95=7.25, output_throughput=1234.5, n_errors=1,
             n_requests=50, accuracy=0.875),
        dict(target="cpu", stack="llama.cpp", model="tiny", variant="q8_0", workload="chat",
             concurrency=1, status="ok", reason=None, ttft_ms_p50=8.0, ttft_ms_p95=9.0,
             tpot_ms_p50=4.0, tpot_ms_p95=4.5, output_throughput=300.0, n_errors=0,
             n_requests=50, accuracy=0.875),
        dict(target="cpu", stack="llama.cpp", model="tiny", variant="q4_0", workload="chat",
             concurrency=1, status="invalid", reason="finish_reason=stop on 12/50 requests",
             ttft_ms_p50=np.nan, tpot_ms_p50=None, n_errors=np.nan, n_requests=50,
             accuracy=np.nan),
        dict(target="gpu", stack="vllm", model="tiny", variant="fp8", workload="chat",
             concurrency=8, status="failed", reason="CUDA out of memory\nwhile loading"),
    ])


def table_rows(md, target):
    section = md.split(f"## {target}")[1].split("\n## ")[0]
    return [l for l in section.splitlines() if l.startswith("| ")]


def test_header_and_tables_per_target():
    md = render_digest(cells(), RUN, "s3://bench/servebench")
    assert md.startswith("# servebench digest: nightly")
    for s in (RUN["run_id"], "0123456789ab", "2 vCPU", "s3://bench/servebench",
              "ok 2, invalid 1, failed 1"):
        assert s in md
    cpu = table_rows(md, "cpu")
    assert "TTFT p50" in cpu[0] and "accuracy" in cpu[0] and "status" in cpu[0]
    assert len(cpu) == 4  # header + 3 cells
    # sorted by variant then concurrency: q4_0, q8_0 c=1, q8_0 c=4
    assert "q4_0" in cpu[1] and "|    1 |" in cpu[2] and "|    4 |" in cpu[3]
    c4 = [v.strip() for v in cpu[3].strip("|").split("|")]
    assert c4 == ["q8_0", "chat", "4", "-", "12.3", "40.0", "5.50", "7.25", "1,234", "1/50",
                  "87.5%", "-", "ok"]
    assert len(table_rows(md, "gpu")) == 2


def test_nan_shown_as_dash():
    md = render_digest(cells(), RUN, "./data")
    q4 = [v.strip() for v in table_rows(md, "cpu")[1].strip("|").split("|")]
    assert q4[4:9] == ["-"] * 5 and q4[9] == "-" and q4[10] == "-"
    assert "nan" not in md.lower() and "None" not in md
    assert fmt_num(float("nan")) == "-" and fmt_num(None) == "-" and fmt_num(pd.NA) == "-"


def test_invalid_section_lists_reasons():
    md = render_digest(cells(), RUN, "./data")
    bad = md.split("## Invalid and failed cells")[1]
    assert "`cpu / q4_0 / chat / c=1`: finish_reason=stop on 12/50 requests" in bad
    assert "**failed** `gpu / fp8 / chat / c=8`: CUDA out of memory while loading" in bad
    assert "q8_0" not in bad


def test_all_ok_and_empty():
    ok = cells().iloc[:2]
    assert "None." in render_digest(ok, RUN, "./data").split("## Invalid and failed cells")[1]
    assert "No cells" in render_digest(pd.DataFrame(), {}, "./data")


def test_summary_table_fixed_width():
    text = summary_table(cells())
    lines = text.splitlines()
    assert lines[0].split() == ["stack", "variant", "workload", "load", "conc", "rate/s",
                                "TTFT", "p50", "TTFT", "p95", "TPOT", "p50", "TPOT", "p95",
                                "output", "tok/s", "errors", "accuracy", "gate", "status"]
    assert len(lines) == 2 + 4
    # columns line up: every "conc" value ends where the header does
    end = lines[0].index("conc") + len("conc")
    assert all(l[end - 1].isdigit() for l in lines[2:])
    assert "INVALID" in text and "FAILED" in text and "nan" not in text.lower()
    assert summary_table(pd.DataFrame()) == "(no cells)"


def test_gate_section_lists_verdicts_and_flipped_items():
    frame = cells()
    frame["gate_verdict"] = ["fail", "fail", "baseline", None]
    frame["gate_baseline"] = "q8_0"
    frame["gate_reason"] = "accuracy 0.830 vs baseline 0.960; McNemar p=1e-06"
    frame["gate_flipped_ids"] = [[f"add-{i:04d}" for i in range(12)]] * 4
    frame["accuracy_ci_low"], frame["accuracy_ci_high"] = 0.8, 0.9
    md = render_digest(frame, RUN, "./data")
    section = md.split("## Quality gate")[1].split("##")[0]
    fail = next(line for line in section.splitlines() if line.startswith("- FAIL"))
    assert "vs q8_0: accuracy 0.830 vs baseline 0.960" in fail
    assert "flipped: add-0000" in fail and "add-0009" in fail and "(+2 more)" in fail
    assert "add-0010" not in fail
    assert "BASELINE" in section


def test_engine_notes_are_said_once_per_target():
    frame = cells()
    note = "seed: sglang's chat route honours seed only from v0.5.7"
    frame.loc[frame.target == "gpu", "engine_notes"] = note
    md = render_digest(frame, RUN, "s3://bench/servebench")
    gpu = md.split("## gpu")[1].split("\n## ")[0]
    assert gpu.count(note) == 1 and note not in md.split("## gpu")[0]


def test_an_slo_cell_is_said_as_load_within_slo_with_its_bound():
    import json

    from servebench.notify.report import render_report

    probes = [{"load": 1.0, "held": True, "why": None}, {"load": 2.0, "held": True, "why": None},
              {"load": 4.0, "held": False, "why": "TTFT p95 27.2 ms > 15"},
              {"load": 3.0, "held": False, "why": "TTFT p95 19.0 ms > 15"}]
    slo = dict(target="cpu", stack="llama.cpp", model="tiny", variant="q8_0", workload="chat",
               load_mode="slo", load_point="slo", concurrency=2, status="ok", reason=None,
               slo_search_over="concurrency", max_load_within_slo=2.0, max_load_failed_at=3.0,
               slo_probes_json=json.dumps(probes), ttft_ms_p95=11.0)
    held = {**slo, "variant": "q4_0", "slo_search_over": "rate", "max_load_within_slo": 8.0,
            "max_load_failed_at": None, "slo_probes_json": json.dumps(probes[:2])}
    table = pd.concat([cells(), pd.DataFrame([slo, held])], ignore_index=True)
    table["cell_id"] = [f"cell{i}" for i in range(len(table))]
    md = render_digest(table, RUN, "s3://bench/servebench")
    section = md.split("## Load within SLO")[1].split("\n## ")[0]
    assert ("`cpu / q8_0 / chat`: **2 workers** within SLO (missed at 3: TTFT p95 "
            "19.0 ms > 15; 4 probes)") in section
    assert "`cpu / q4_0 / chat`: **8.00 req/s** within SLO (its high held; 2 probes)" in section
    html = render_report(table, RUN, "s3://bench/servebench", None, {})
    assert "<h2>Load within SLO</h2>" in html and "<strong>2 workers</strong>" in html
    # a digest without slo cells has no such section
    assert "Load within SLO" not in render_digest(cells(), RUN, "s3://bench/servebench")


def test_the_reports_lever_table_is_a_real_table():
    from servebench.levers import LEVERS
    from servebench.notify.report import render_report

    row = {"target": "cpu", "variant": "q8_0", "baseline": "f16", "workload": "chat",
           "load_point": "c4", "gate_verdict": "pass", "engine_note": None,
           "accuracy_delta_points": -0.5}
    for key, _ in LEVERS:
        row.update({f"{key}_pct": -12.5, f"{key}_lo": -15.0, f"{key}_hi": -10.0})
    table = cells().assign(cell_id=lambda f: [f"c{i}" for i in range(len(f))])
    html = render_report(table, RUN, "s3://bench/servebench", None, {}, levers=[row])
    section = html.split("What each variant buys")[1].split("<h2>")[0]
    assert "<pre>" not in section and "<th>variant vs baseline</th>" in section
    assert '<td class="">q8_0 vs f16</td>' in section and "-12.5% [-15.0, -10.0]" in section


def test_with_the_airflow_url_each_raised_line_links_its_page_in_the_benchmarks_view():
    """The digest and the report link a raised line to its page (board.render_finding) when
    the Airflow base URL is known: absolute, since both are read outside the view."""
    from servebench.notify.digest import change_lines
    from servebench.notify.report import render_report

    alert = pd.DataFrame([dict(
        run_id=RUN["run_id"], series_id="cpu/q8_0/chat/c4/ttft_ms_p50#ab", kind="regression",
        target="cpu", variant="q8_0", workload="chat", load_point="c4", metric="ttft_ms_p50",
        before=10.0, after=12.0, change_pct=20.0, nights_since=3, change_date="2025-02-27",
        change_run_id="r", cause="engine_version b1 -> b2", finding="f")])
    page = ("http://af/servebench/finding?run_id=scheduled__2025-03-01T00%3A00%3A00%2B00%3A00"
            "&series_id=cpu%2Fq8_0%2Fchat%2Fc4%2Fttft_ms_p50%23ab")
    assert f"([what changed]({page}))" in "\n".join(change_lines(alert, {}, "http://af"))
    assert "what changed" not in "\n".join(change_lines(alert, {}))
    table = cells().assign(cell_id=lambda f: [f"c{i}" for i in range(len(f))])
    html = render_report(table, RUN, "s3://bench/servebench", alert, {},
                         airflow_url="http://af/")
    assert f"href='{page.replace('&', '&amp;')}'" in html
    assert "class='finding'" not in render_report(table, RUN, "s3://b", alert, {})


def test_a_variant_without_a_golden_set_reads_not_judged():
    from servebench.notify.digest import gate_lines

    frame = cells().iloc[:3].copy()
    frame["gate_verdict"] = ["not_judged", "not_judged", "inconclusive"]
    frame["gate_reason"] = ["target has no golden set"] * 2 + [
        "no golden-set results for the variant"]
    frame["gate_baseline"] = "q8_0"
    lines = gate_lines(frame)
    assert lines[0] == "NOT JUDGED cpu/q8_0: target has no golden set"
    assert lines[1].startswith("INCONCLUSIVE cpu/q4_0: accuracy - [-, -] vs q8_0: no golden-set")
    section = render_digest(frame, RUN, "./data").split("## Quality gate")[1].split("\n## ")[0]
    assert "- NOT JUDGED cpu/q8_0: target has no golden set" in section
    assert "INCONCLUSIVE cpu/q8_0" not in section
    rows = summary_table(frame).splitlines()[2:]
    assert all("not judged" in row for row in rows if " q8_0 " in row)


def test_the_morning_confirmation_is_said_with_each_alert_and_counted():
    """A confirmed regression carries its interval; one the relaunches did not reproduce is
    listed apart, never as a regression; the morning's re-measurement is counted, and a quiet
    suspect it dismissed is named with its words (digest and report alike)."""
    from servebench.notify.report import render_report

    common = dict(run_id=RUN["run_id"], target="cpu", variant="q8_0", workload="chat",
                  load_point="c4", before=10.0, after=13.0, change_pct=30.0, nights_since=1,
                  change_date="2025-03-01", change_run_id="r", cause="nothing recorded")
    changes = pd.DataFrame([
        dict(common, series_id="a", kind="regression", metric="ttft_ms_p50", finding="f1",
             confirmation="confirmed: TTFT p50 +31% [+22, +40] against f16, 3 relaunches "
                          "each side"),
        dict(common, series_id="b", kind="unconfirmed", metric="tpot_ms_p95", finding="f2",
             confirmation="not confirmed: TPOT p95 +2% [-8, +12] against f16")])
    rows = [dict(series_id=s, target="cpu", variant="q8_0", workload="chat", load_point="c4",
                 metric=m, source=src, verdict=v, words=w, launches=3, seconds=42.0,
                 night_change_pct=30.0)
            for s, m, src, v, w in (
                ("a", "ttft_ms_p50", "alert", "confirmed", "confirmed: ..."),
                ("b", "tpot_ms_p95", "alert", "dismissed", "not confirmed: ..."),
                ("c", "output_throughput", "suspect", "host", "the host: both slower"))]
    md = render_digest(cells(), RUN, "s3://b", changes, confirmations=pd.DataFrame(rows))
    regressions = md.split("## Regressions (1)", 1)[1].split("\n## ", 1)[0]
    assert "confirmed: TTFT p50 +31% [+22, +40] against f16" in regressions
    assert "TPOT p95" not in regressions
    assert "## Not confirmed the same morning" in md and "not confirmed: TPOT p95 +2%" in md
    section = md.split("## Re-measured the same morning", 1)[1].split("\n## ", 1)[0]
    assert ("3 suspect series of 1 variant, each relaunched 3 times beside a reference on "
            "its host, in 42.0 s: confirmed 1, the host 1, not confirmed 1") in section
    assert "`cpu / q8_0 / chat / c4` output tok/s +30.0% tonight: the host: both slower" \
        in section
    table = cells().assign(cell_id=lambda f: [f"c{i}" for i in range(len(f))])
    html = render_report(table, RUN, "s3://b", changes, {},
                         confirmations=pd.DataFrame(rows))
    assert "Re-measured the same morning" in html and "the host: both slower" in html


def test_a_regression_held_to_its_baseline_variants_night_says_so_beside_its_levels():
    """A quiet suspect confirmed against its baseline variant's same night (its own nights
    too noisy to tell): its before is what that variant's night implied, said beside it."""
    from servebench.notify.digest import alert_line

    row = dict(target="cpu", variant="q8_0", workload="chat", load_point="c4", before=10.0,
               after=13.0, change_pct=30.0, nights_since=1, change_date="2025-03-01",
               kind="regression", metric="ttft_ms_p50", against="f16",
               confirmation="confirmed: TTFT p50 +31% [+22, +40] against f16")
    assert "10.0 (as f16's night implied) -> 13.0 since 2025-03-01" in alert_line(row)
    assert "10.0 -> 13.0 since" in alert_line({**row, "against": None})


def test_the_host_canary_is_said_once_after_the_alerts():
    host = ["host canary (this worker): cpu 13.0 ms, memory 7.0 ms, median of 8 units; "
            "against the median of its last 6 runs: cpu +30% (noise ±1%), memory +0% "
            "(noise ±1%)", "the host was 30% slower (cpu canary) than over its last 6 runs"]
    md = render_digest(cells(), RUN, "./data", host=host)
    assert md.count("**Host:** host canary (this worker)") == 1
    assert "- the host was 30% slower (cpu canary) than over its last 6 runs." in md
    assert md.index("**Host:**") < md.index("\n## ")  # after the alerts, before the tables
    from servebench.notify.report import render_report

    table = cells()
    table["cell_id"] = [f"cell{i}" for i in range(len(table))]
    html = render_report(table, RUN, "./data", None, {}, host=host)
    assert "<h2>The host</h2>" in html and "<li>the host was 30% slower" in html
    assert "**Host:**" not in render_digest(cells(), RUN, "./data")
