"""The detect step over a real result store: 30 published nights of a two-variant sweep, q4's
TTFT p95 up 15% from night 20 when the engine version changed. The step finds it once, names
the cause, says nothing about f16, does not duplicate on a re-run, and reports newly failing
cells and gate failures; the digest leads with it."""

import datetime as dt
import re

import numpy as np
import pytest
from servebench import pipeline
from servebench.notify.digest import render_digest


@pytest.fixture(scope="module")
def history(synthetic_history):
    return synthetic_history


@pytest.fixture(scope="module")
def day0(synthetic_history):
    return synthetic_history[2]


def test_the_regression_is_raised_once_with_its_cause(history, day0):
    store, _, _ = history
    alerts = store.read_table("changes").to_pandas()
    found = alerts[alerts["kind"] == "regression"]
    assert len(found) == 1, found[["series_id", "run_id", "change_date"]]
    row = found.iloc[0]
    assert row["variant"] == "q4" and row["metric"] == "ttft_ms_p95"
    assert row["change_date"] == day0 + dt.timedelta(days=20)
    assert row["run_date"] <= day0 + dt.timedelta(days=23)  # within three nights
    assert 12 < row["change_pct"] < 18
    assert row["cause"] == "engine_version b1 -> b2"
    assert not (alerts["variant"] == "f16").any() or set(
        alerts[alerts["variant"] == "f16"]["kind"]) == {"newly_failing"}


def test_newly_failing_and_gate_failure(history, day0):
    store, _, _ = history
    alerts = store.read_table("changes").to_pandas()
    failing = alerts[alerts["kind"] == "newly_failing"]
    assert failing["run_date"].tolist() == [day0 + dt.timedelta(days=25)]
    assert "SIGSEGV" in failing.iloc[0]["reason"]
    gates = alerts[alerts["kind"] == "gate_failure"]
    assert gates[["variant", "run_date"]].values.tolist() == [["q4",
                                                               day0 + dt.timedelta(days=26)]]


def test_rerunning_a_night_replaces_its_alerts(history):
    store, summaries, _ = history
    night = summaries[22]
    before = store.read_table("changes", run_ids=[night["run_id"]]).num_rows
    pipeline.detect(night)
    pipeline.detect(night)
    assert store.read_table("changes", run_ids=[night["run_id"]]).num_rows == before
    assert store.read_table("cells", run_ids=[night["run_id"]]).num_rows == 2


def test_the_digest_leads_with_the_regression(history):
    store, _, _ = history
    alerts = store.read_table("changes").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"].iloc[0]["run_id"]
    cells = store.read_table("cells", run_ids=[run_id]).to_pandas()
    run = store.read_table("runs", run_ids=[run_id]).to_pylist()[0]
    text = render_digest(cells, run, "data", alerts[alerts["run_id"] == run_id])
    assert "## Regressions (1)" in text
    assert "**TTFT p95 +" in text and "`t / q4 / w / c1`" in text
    assert "cause: engine_version b1 -> b2" in text
    assert text.index("## Regressions") < text.index("## t")
    assert "](http" not in text  # no Airflow URL known: runs are named, not linked


def test_the_digest_links_the_run_and_the_change_night_in_airflow(history, day0):
    from urllib.parse import quote

    store, _, _ = history
    alerts = store.read_table("changes").to_pandas()
    found = alerts[alerts["kind"] == "regression"].iloc[0]
    cells = store.read_table("cells", run_ids=[found["run_id"]]).to_pandas()
    run = store.read_table("runs", run_ids=[found["run_id"]]).to_pylist()[0]
    text = render_digest(cells, run, "data", alerts[alerts["run_id"] == found["run_id"]],
                         airflow_url="https://airflow.example.com/")
    base = f"https://airflow.example.com/dags/{run['dag_id']}/runs/"
    assert f"([in Airflow]({base}{quote(run['run_id'], safe='')}))" in text
    change_day = day0 + dt.timedelta(days=20)
    assert f"since [{change_day}]({base}{quote(found['change_run_id'], safe='')})" in text


def test_the_digest_file_links_a_chart_of_each_change(history, monkeypatch):
    import re
    from pathlib import Path

    from servebench.pipeline import send_digest

    store, summaries, _ = history
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    alerts = store.read_table("changes").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"].iloc[0]["run_id"]
    summary = next(s for s in summaries if s["run_id"] == run_id)
    where = send_digest(summary)
    digest = Path(where.split(" and ")[0])
    text = digest.read_text()
    [chart] = re.findall(r"\(\[chart\]\(([^)]+)\)\)", text)
    [target_chart] = re.findall(r"!\[t: latency vs throughput\]\(([^)]+)\)", text)
    for rel in (chart, target_chart):
        png = (digest.parent / rel).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000


def test_launch_args_are_compared_flag_by_flag_without_the_listen_address():
    import json

    from servebench.trends.attribution import flag_diff

    a = json.dumps(["/x/llama-server", "--model", "m.gguf", "--host", "127.0.0.1", "--port",
                    "40001", "--parallel", "2", "--cont-batching"])
    b = json.dumps(["/y/llama-server", "--model", "m.gguf", "--host", "127.0.0.1", "--port",
                    "40517", "--parallel", "1", "--no-mmap"])
    assert flag_diff(a, a.replace("40001", "40999")) == ""
    assert flag_diff(a, b) == "---cont-batching; +--no-mmap; --parallel 2 -> 1"


def test_a_change_located_a_night_off_takes_the_recorded_change_night():
    import pandas as pd
    from servebench.trends.attribution import NOTHING_CHANGED, attribute

    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(6)],
                         "run_date": [dt.date(2026, 11, 1 + i) for i in range(6)],
                         "suite_git_sha": "abc", "sweep_hash": "h"})
    where = {"target": "t", "stack": "llama_cpp", "variant": "q4", "workload": "w",
             "load_point": "c1"}
    cells = pd.DataFrame([{**where, "run_id": f"r{i}", "engine_version": "b1" if i < 3 else "b2",
                           "launch_args": '["llama-server", "--parallel", "4"]'}
                          for i in range(6)])
    for located in (2, 3, 4, 5):
        assert attribute(cells, runs, where, located, lo=0, hi=5, tolerance=2) == (
            3, "engine_version b1 -> b2"), located
    assert attribute(cells, runs, where, 4, lo=0, hi=5, tolerance=0) == (4, NOTHING_CHANGED)
    # the baseline starts after the last alerted change: nothing before it is a cause
    assert attribute(cells, runs, where, 4, lo=3, hi=5, tolerance=2) == (4, NOTHING_CHANGED)


def test_a_drastic_night_needs_the_cells_typical_request():
    """One night with first tokens sooner and decoding interleaved (TTFT p50 -38%) with E2E
    p50 and tok/s as ever: no drastic alert; nor with only the tail worse (a host's stalled
    second: E2E p95 +37%). The same jump with E2E p50 or throughput worse is one."""
    import pandas as pd
    from servebench.trends.detect import DetectorSettings
    from servebench.trends.nightly import _corroborated

    rng = np.random.default_rng(3)
    nights = 16
    runs = {f"r{i}": i for i in range(nights)}  # run id -> night
    where = {"target": "t", "stack": "llama_cpp", "variant": "v", "workload": "w",
             "load_point": "c4"}
    cells = pd.DataFrame([{**where, "run_id": f"r{i}", "status": "ok",
                           "e2e_ms_p50": 43 + rng.normal(0, 1.5),
                           "e2e_ms_p95": 51 + rng.normal(0, 4),
                           "output_throughput": 1400 + rng.normal(0, 50)}
                          for i in range(nights)])
    s, last = DetectorSettings(), nights - 1
    ttft = {**where, "metric": "ttft_ms_p50"}
    tput = {**where, "metric": "output_throughput"}
    assert not _corroborated(cells, runs, ttft, 0, last, s)
    cells.loc[last, "e2e_ms_p95"] = 100.0  # the tail alone is no witness
    assert not _corroborated(cells, runs, ttft, 0, last, s)
    cells.loc[last, "e2e_ms_p50"] = 60.0  # the typical request took 40% longer
    assert _corroborated(cells, runs, ttft, 0, last, s)
    assert _corroborated(cells, runs, tput, 0, last, s)
    cells.loc[last, "e2e_ms_p50"] = 43.0
    cells.loc[last, "output_throughput"] = 900.0  # a third of the throughput gone ...
    assert _corroborated(cells, runs, ttft, 0, last, s)
    assert not _corroborated(cells, runs, tput, 0, last, s)  # ... cannot vouch for itself
    assert _corroborated(cells.iloc[:3], runs, ttft, 0, 2, s)  # too few nights: it stands
    # a busy host's night (seen in the local proof): E2E p50 +17%, tok/s -17% -- beyond their
    # noise, but no disaster: not raised the same morning
    cells.loc[last, "output_throughput"] = 1400 * 0.83
    cells.loc[last, "e2e_ms_p50"] = 43 * 1.17
    assert not _corroborated(cells, runs, ttft, 0, last, s)


def _two_variant_nights(root, shift: dict[str, float], nights=22, from_night=14,
                        upgraded=(), itl: dict[str, float] | None = None,
                        tpot: dict[str, float] | None = None, tpot_from: int = 14):
    """``nights`` published and detected nights of the variants of ``shift`` (f16 and q4),
    each variant's TTFT p95 times ``shift[variant]`` from ``from_night`` on (and, with
    ``itl``, its ITL p95 times ``itl[variant]``; with ``tpot``, its TPOT p50 times
    ``tpot[variant]`` from ``tpot_from`` on), nothing recorded changing but the engine of
    the ``upgraded`` variants that night."""
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    rng = np.random.default_rng(5)
    store = ResultStore(str(root))
    day0 = dt.date(2026, 9, 1)
    for night in range(nights):
        day = day0 + dt.timedelta(days=night)
        run_id = f"scheduled__{day.isoformat()}"
        cells = [dict(run_id=run_id, run_date=day, cell_id=f"t/{v}/w/c4", target="t",
                      stack="llama_cpp", variant=v, workload="w", load_point="c4",
                      concurrency=4, model_file_sha256=v * 8,
                      engine_version="b2" if v in upgraded and night >= from_night else "b1",
                      hardware="cpu", sampling_hash="s", status="ok",
                      ttft_ms_p95=10.0 * (shift[v] if night >= from_night else 1.0)
                      * (1 + 0.01 * rng.normal()),
                      **({"itl_ms_p95": 6.0 * (itl[v] if night >= from_night else 1.0)
                          * (1 + 0.02 * rng.normal())} if itl else {}),
                      **({"tpot_ms_p50": 2.0 * (tpot[v] if night >= tpot_from else 1.0)
                          * (1 + 0.01 * rng.normal())} if tpot else {}))
                 for v in shift]
        runs = [dict(run_id=run_id, run_date=day, dag_id="nightly_benchmark",
                     sweep_name="local", logical_date=dt.datetime.combine(day, dt.time(2), dt.UTC),
                     suite_git_sha="abc", sweep_hash="h", n_cells=2)]
        store.publish(run_id, day, {"runs": rows_to_table("runs", runs),
                                    "cells": rows_to_table("cells", cells)})
        pipeline.detect({"run_id": run_id, "run_date": day.isoformat()})
    return store.read_table("changes").to_pandas()


def test_a_change_every_variant_shows_with_nothing_recorded_is_the_hosts(tmp_path, monkeypatch):
    from servebench.trends.nightly import HOST_CHANGED, NOTHING_CHANGED

    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "host"))
    monkeypatch.setenv("SERVEBENCH_ANNOTATIONS", str(tmp_path / "none.yaml"))
    host = _two_variant_nights(tmp_path / "host", {"f16": 1.2, "q4": 1.25})
    assert set(host["kind"]) == {"host_change"}, host[["variant", "kind", "run_date"]]
    assert set(host["variant"]) == {"f16", "q4"} and set(host["cause"]) == {HOST_CHANGED}
    assert host["series_id"].is_unique  # raised once per series, like a regression
    # one variant alone, the other steady: a regression, the host not blamed
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "one"))
    one = _two_variant_nights(tmp_path / "one", {"f16": 1.0, "q4": 1.2})
    assert one[["variant", "kind", "cause"]].values.tolist() == [
        ["q4", "regression", NOTHING_CHANGED]]
    # the other variant moved the other way, or by far less: not the host either
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "apart"))
    apart = _two_variant_nights(tmp_path / "apart", {"f16": 0.8, "q4": 1.2})
    assert set(apart["kind"]) == {"regression", "improvement"}
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "less"))
    less = _two_variant_nights(tmp_path / "less", {"f16": 1.05, "q4": 1.3})
    assert "host_change" not in set(less["kind"])
    # ... but with a third untouched variant moving alike, half the witnesses agree: the host
    # (a drift reaches variants measured minutes apart at different nights, seen in the proof)
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "half"))
    half = _two_variant_nights(tmp_path / "half", {"f16": 1.05, "twin": 1.25, "q4": 1.3})
    kinds = dict(zip(half["variant"], half["kind"], strict=False))
    assert kinds["q4"] == kinds["twin"] == "host_change", half[["variant", "kind"]]
    assert kinds.get("f16") != "host_change"  # its +5% is like neither
    # a third variant with a change of its own that night (the slowdown under test, an
    # upgrade) witnesses neither way: the two untouched ones moving alike are the host
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "third"))
    third = _two_variant_nights(tmp_path / "third", {"f16": 1.2, "twin": 1.25, "q4": 1.6},
                                upgraded=("q4",))
    assert third[["variant", "kind"]].sort_values("variant").values.tolist() == [
        ["f16", "host_change"], ["q4", "regression"], ["twin", "host_change"]]
    assert set(third[third["variant"] == "q4"]["cause"]) == {"engine_version b1 -> b2"}
    # the host moved both, the q4 by more: the f16's is the host's, the q4's its own too,
    # said with its size beyond the f16 (1.75 / 1.4: +25%)
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "beyond"))
    beyond = _two_variant_nights(tmp_path / "beyond", {"f16": 1.4, "q4": 1.75})
    kinds = dict(zip(beyond["variant"], beyond["kind"], strict=True))
    assert kinds == {"f16": "host_change", "q4": "regression"}, beyond[["variant", "kind"]]
    [own] = beyond[beyond["variant"] == "q4"]["cause"]
    said = re.fullmatch(r"its own, beyond the host's: \+(\d+)% against the target's other "
                        r"variants, which moved \+(\d+)% the same way from that night \(it "
                        r"moved \+(\d+)%\), and nothing recorded changed", own)
    assert said and [abs(int(n) - want) <= 2 for n, want in zip(said.groups(), (25, 40, 75),
                                                                strict=True)] == [True] * 3, own
    # with only that variant beside it, an untouched variant's change has no witness: its own
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "alone"))
    alone = _two_variant_nights(tmp_path / "alone", {"f16": 1.2, "q4": 1.6}, upgraded=("q4",))
    assert alone[["variant", "kind"]].sort_values("variant").values.tolist() == [
        ["f16", "regression"], ["q4", "regression"]]


def test_a_cell_the_host_moved_moves_with_it_in_its_other_statistics(tmp_path, monkeypatch):
    """Seen in the local proof: a faster host, the untouched q8_0's and the f16's TPOT p50
    down alike (the host), the q8_0's ITL p95 down 35% and the f16's tail staying. The cell
    is on the moved host: its tail's move is the host's too, never a variant's improvement."""
    from servebench.trends.nightly import HOST_CELL, HOST_CHANGED

    monkeypatch.setenv("SERVEBENCH_ANNOTATIONS", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "host"))
    host = _two_variant_nights(tmp_path / "host", {"f16": 0.75, "q4": 0.8},
                               itl={"f16": 1.0, "q4": 0.6})
    kinds = host[["variant", "metric", "kind"]].sort_values(["variant", "metric"])
    assert kinds.values.tolist() == [["f16", "ttft_ms_p95", "host_change"],
                                     ["q4", "itl_ms_p95", "host_change"],
                                     ["q4", "ttft_ms_p95", "host_change"]], host
    causes = dict(zip(host["metric"] + host["variant"], host["cause"], strict=True))
    assert causes["ttft_ms_p95q4"] == HOST_CHANGED
    assert causes["itl_ms_p95q4"] == HOST_CELL.format(metrics="TTFT p95")
    # the tail moving the other way from the cell's host move is the variant's own
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "apart"))
    apart = _two_variant_nights(tmp_path / "apart", {"f16": 0.75, "q4": 0.8},
                                itl={"f16": 1.0, "q4": 1.5})
    assert apart[apart["metric"] == "itl_ms_p95"][["variant", "kind"]].values.tolist() == [
        ["q4", "regression"]]
    # and without a host move of the cell, the tail's move stands alone
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "alone"))
    alone = _two_variant_nights(tmp_path / "alone", {"f16": 1.0, "q4": 1.0},
                                itl={"f16": 1.0, "q4": 0.6})
    assert alone[["variant", "metric", "kind"]].values.tolist() == [
        ["q4", "itl_ms_p95", "improvement"]]


def test_a_tail_moving_with_its_cells_typical_request_waits_for_that_verdict(tmp_path,
                                                                             monkeypatch):
    """Seen in the local proof: the host ~50% slower for two variants, the untouched q8_0's
    TPOT p95 +53% raised as a regression the night before its TPOT p50 +70% was said as a
    host change with the f16's. A tail with nothing recorded behind it whose cell's typical
    request moves the same way, not yet judged, waits (at most two nights) for that verdict."""
    from servebench.trends.nightly import HOST_CELL, HOST_CHANGED, NOTHING_CHANGED

    monkeypatch.setenv("SERVEBENCH_ANNOTATIONS", str(tmp_path / "none.yaml"))
    # the q4's ITL p95 +60% from night 14, its TPOT p50 and the f16's +30% from night 15:
    # the host, judged a night after the tail could have been raised
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "host"))
    host = _two_variant_nights(tmp_path / "host", {"f16": 1.0, "q4": 1.0},
                               itl={"f16": 1.0, "q4": 1.6}, tpot={"f16": 1.3, "q4": 1.3},
                               tpot_from=15)
    kinds = host[["variant", "metric", "kind"]].sort_values(["variant", "metric"])
    assert kinds.values.tolist() == [["f16", "tpot_ms_p50", "host_change"],
                                     ["q4", "itl_ms_p95", "host_change"],
                                     ["q4", "tpot_ms_p50", "host_change"]], host
    itl_row = host[host["metric"] == "itl_ms_p95"].iloc[0]
    assert itl_row["cause"] == HOST_CELL.format(metrics="TPOT p50")
    tpot_row = host[(host["metric"] == "tpot_ms_p50") & (host["variant"] == "q4")].iloc[0]
    assert tpot_row["cause"] == HOST_CHANGED
    assert itl_row["run_date"] == tpot_row["run_date"]  # raised the morning of the verdict
    # the cell's typical request judged the variant's own (the f16 steady): the tail is the
    # variant's too, raised with it
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "own"))
    own = _two_variant_nights(tmp_path / "own", {"f16": 1.0, "q4": 1.0},
                              itl={"f16": 1.0, "q4": 1.6}, tpot={"f16": 1.0, "q4": 1.3},
                              tpot_from=15)
    assert own[["variant", "metric", "kind", "cause"]].sort_values("metric").values.tolist() \
        == [["q4", "itl_ms_p95", "regression", NOTHING_CHANGED],
            ["q4", "tpot_ms_p50", "regression", NOTHING_CHANGED]], own
    # the typical request steady: the tail's change is raised the morning it can be (its
    # third night), nothing to wait for
    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "alone"))
    alone = _two_variant_nights(tmp_path / "alone", {"f16": 1.0, "q4": 1.0},
                                itl={"f16": 1.0, "q4": 1.6}, tpot={"f16": 1.0, "q4": 1.0})
    assert alone[["variant", "metric", "kind", "nights_since"]].values.tolist() == [
        ["q4", "itl_ms_p95", "regression", 3]], alone


def test_a_held_tail_is_raised_once_its_wait_is_over():
    """A tail whose cell's typical request keeps moving without a verdict (too little for
    the detector, say) waits two nights past its first, then is raised as it stands."""
    import pandas as pd
    from servebench.trends.detect import DetectorSettings
    from servebench.trends.nightly import NOTHING_CHANGED, _held_for_their_cell

    where = dict(target="t", stack="llama_cpp", variant="q4", workload="w", load_point="c4")
    series = pd.DataFrame([{**where, "metric": "tpot_ms_p50", "night": n,
                            "value": 2.0 * (1.1 if n >= 14 else 1.0) * (1 + 0.01 * (n % 3))}
                           for n in range(20)])
    night_of = {f"r{n}": n for n in range(20)}
    s = DetectorSettings()

    def tail(tonight: int) -> dict:
        return {**where, "series_id": "t/q4/w/c4/itl_ms_p95", "metric": "itl_ms_p95",
                "kind": "regression", "cause": NOTHING_CHANGED, "change_pct": 60.0,
                "change_date": "d14", "change_run_id": "r14", "nights_since": tonight - 13}

    none = pd.DataFrame(columns=["kind"])
    for tonight, kept in ((16, 0), (17, 0), (18, 1), (19, 1)):
        assert len(_held_for_their_cell([tail(tonight)], none, series, night_of, tonight,
                                        s)) == kept, tonight
    # the typical request moving the other way is no reason to wait
    better = series.assign(value=lambda f: 4.0 - f["value"])
    assert _held_for_their_cell([tail(16)], none, better, night_of, 16, s)


def test_a_cell_is_blamed_only_on_its_own_part_of_the_sweep_spec():
    """The sweep spec is one file for all variants: a knob of another variant, or the alert
    floor, is no cause of this variant's change; its own knob is, by name."""
    import json

    import pandas as pd
    from servebench.trends.attribution import NOTHING_CHANGED, recorded_change

    def spec(victim_seqs: int, floor: float) -> str:
        variant = {"model": "m.gguf", "max_num_seqs": 4, "threads": 1}
        return json.dumps({
            "name": "nightly", "price_per_hour": 1.0, "trends": {"min_change": floor},
            "workloads": [{"name": "w", "input_tokens": 64}, {"name": "x", "input_tokens": 9}],
            "load": {"concurrency": [4]},
            "targets": [{"name": "t", "stack": "llama_cpp", "variants": [
                {"name": "steady", **variant},
                {"name": "victim", **variant, "max_num_seqs": victim_seqs}]}]})

    runs = pd.DataFrame({"run_id": ["r0", "r1"], "suite_git_sha": "abc",
                         "sweep_hash": ["h0", "h1"], "spec_json": [spec(4, 0.05), spec(1, 0.2)]})
    cells = pd.DataFrame([{"run_id": r, "target": "t", "stack": "llama_cpp", "variant": v,
                           "workload": "w", "load_point": "c4"}
                          for r in ("r0", "r1") for v in ("steady", "victim")])
    steady = {"target": "t", "stack": "llama_cpp", "variant": "steady", "workload": "w",
              "load_point": "c4"}
    assert recorded_change(cells, runs, steady, 1) == NOTHING_CHANGED
    assert recorded_change(cells, runs, {**steady, "variant": "victim"}, 1) == (
        "sweep variant.max_num_seqs 4 -> 1")
    # another workload's definition is no cause; the cell's own workload's is
    other = runs.assign(spec_json=[spec(4, 0.05), spec(4, 0.05).replace('"input_tokens": 9',
                                                                        '"input_tokens": 10')])
    assert recorded_change(cells, other, steady, 1) == NOTHING_CHANGED
    assert recorded_change(cells, other, {**steady, "workload": "x"}, 1) == (
        "sweep workloads[x].input_tokens 9 -> 10")
    # runs stored without their spec are compared by the whole sweep's hash
    bare = runs.assign(spec_json=None)
    assert recorded_change(cells, bare, steady, 1) == "sweep hash h0 -> h1"


def _slots_cut(n: int, cut: int = 14):
    """(runs, where, cells) of ``n`` nights of a victim cell whose llama-server slots are cut
    from 4 to 1 on night ``cut`` (its launch args recorded each night)."""
    import pandas as pd

    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(n)],
                         "run_date": [dt.date(2026, 11, 1 + i) for i in range(n)],
                         "suite_git_sha": "abc", "sweep_hash": "h"})
    where = {"target": "t", "stack": "llama_cpp", "variant": "victim", "workload": "w",
             "load_point": "c4"}
    cells = pd.DataFrame([{**where, "run_id": f"r{i}", "engine_version": "b1",
                           "launch_args": '["llama-server", "--parallel", "%d"]'
                           % (4 if i < cut else 1)} for i in range(n)])
    return runs, where, cells


def test_a_change_placed_early_on_soft_nights_takes_the_later_recorded_change():
    """From a local proof run: the victim's throughput, slots cut on night 14; the detector
    placed the change on night 10, where a few nights ran 2-9% low. The recorded change of
    night 14 steps the level further the same way: it is the change night."""
    from servebench.trends.attribution import NOTHING_CHANGED, attribute

    tput = np.array([2761, 2760, 2756, 2542, 2746, 2662, 2635, 2735, 2766, 2724, 2493, 2654,
                     2556, 2736, 2279], dtype=float)
    runs, where, cells = _slots_cut(len(tput))
    assert attribute(cells, runs, where, 10, lo=0, hi=14, tolerance=2, values=tput) == (
        14, "launch args --parallel 4 -> 1")
    assert attribute(cells, runs, where, 10, lo=0, hi=14, tolerance=2) == (10, NOTHING_CHANGED)
    # another run: three soft nights (one 15% low) before the cut, the step there a little
    # smaller than the located one -- the recorded change still explains it
    soft = np.array([2487, 2377, 2468, 2406, 2375, 2444, 2396, 2323, 2439, 2446, 2490, 2083,
                     2327, 2390, 2150, 2138, 2359, 2133], dtype=float)
    runs18, _, cells18 = _slots_cut(18)
    assert attribute(cells18, runs18, where, 11, lo=0, hi=17, tolerance=2, values=soft) == (
        14, "launch args --parallel 4 -> 1")
    # a later recorded change the level did not step at (or stepped the other way) is not it
    flat = tput.copy()
    flat[14] = 2710
    assert attribute(cells, runs, where, 10, lo=0, hi=14, tolerance=2, values=flat) == (
        10, NOTHING_CHANGED)


def test_a_drastic_night_finishing_a_move_a_recorded_change_began_takes_that_change():
    """From a local proof run: the victim's cost per 1M tokens, slots cut on night 14: +14%
    and +20% the two nights after (too few, too little for the evidence test), then +58% on a
    slow night of the host, which the drastic guard raised on its own night with nothing
    recorded. The cut began the move: it is the change night and the cause."""
    import pandas as pd
    from servebench.trends.attribution import NOTHING_CHANGED, attribute
    from servebench.trends.detect import DetectorSettings, detect

    cost = np.array([20.3, 18.6, 20.3, 20.5, 19.2, 19.5, 19.7, 20.2, 19.0, 20.2, 21.0, 16.4,
                     19.9, 25.7, 22.7, 23.9, 31.9])
    n = len(cost)
    change = detect(cost, "higher_is_worse", settings=DetectorSettings(min_rel_change=0.2))
    assert change is not None and change.drastic and change.night == 16
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(n)],
                         "run_date": [dt.date(2026, 11, 1 + i) for i in range(n)],
                         "suite_git_sha": "abc", "sweep_hash": "h"})
    where = {"target": "t", "stack": "llama_cpp", "variant": "victim", "workload": "w",
             "load_point": "c4"}

    def cells(cut: int) -> pd.DataFrame:
        return pd.DataFrame([{**where, "run_id": f"r{i}", "engine_version": "b1",
                              "launch_args": '["llama-server", "--parallel", "%d"]'
                              % (4 if i < cut else 1)} for i in range(n)])

    assert attribute(cells(14), runs, where, 16, lo=0, hi=16, tolerance=0, values=cost,
                      lead=2) == (14, "launch args --parallel 4 -> 1")
    # without the lead (a change found over nights), or a change further back: tonight's own
    assert attribute(cells(14), runs, where, 16, lo=0, hi=16, tolerance=0,
                      values=cost) == (16, NOTHING_CHANGED)
    assert attribute(cells(13), runs, where, 16, lo=0, hi=16, tolerance=0, values=cost,
                      lead=2) == (16, NOTHING_CHANGED)
    # the nights since the change did not move (a change that did nothing): not it
    still = cost.copy()
    still[14] = 20.1
    assert attribute(cells(14), runs, where, 16, lo=0, hi=16, tolerance=0, values=still,
                      lead=2) == (16, NOTHING_CHANGED)


def test_the_sweeps_alert_floor_silences_changes_below_it(history):
    """``trends.min_change`` of the run's sweep is the smallest change raised: q4's +15% TTFT
    p95 is news at the default floor and not at 20% (a team on a host whose speed wanders)."""
    from servebench.trends.nightly import detector_settings, night_changes

    store, _, _ = history
    alerts = store.read_table("changes").to_pandas()
    run_id = alerts[alerts["kind"] == "regression"]["run_id"].iloc[0]  # the morning it came
    assert any(r["kind"] == "regression" for r in night_changes(store, run_id).alerts)
    floor = detector_settings('{"trends": {"min_change": 0.2}}')
    assert floor.min_rel_change == 0.2
    assert not [r for r in night_changes(store, run_id, settings=floor).alerts
                if r["kind"] == "regression"]
    # older runs (no trends section) and a floor under the measured default keep the default
    assert detector_settings(None).min_rel_change == detector_settings(
        '{"trends": {"min_change": 0.0}}').min_rel_change == 0.005


def test_a_suite_deploy_is_a_cause_only_where_it_changed_what_the_cell_ran():
    """A new suite commit is named as a cause only when the files that built, drove and timed
    the cell (``measuring_code``) moved, and then with those files; one that touched only the
    digest ran the same cell. Rows without their code fall back to the commit alone."""
    import json

    import pandas as pd
    from servebench.trends.attribution import NOTHING_CHANGED, recorded_change

    def code(client: str, vllm: str = "v1") -> str:
        return json.dumps({"bench.py": "b1", "loadgen/client.py": client, "stacks/vllm.py": vllm})

    runs = pd.DataFrame({"run_id": ["r0", "r1"], "suite_git_sha": ["a" * 40, "b" * 40],
                         "sweep_hash": "h"})
    row = {"target": "t", "stack": "vllm", "variant": "v", "workload": "w", "load_point": "c4"}

    def cells(before: str | None, after: str | None) -> pd.DataFrame:
        return pd.DataFrame([{**row, "run_id": r, "measuring_code": c}
                             for r, c in (("r0", before), ("r1", after))])

    assert recorded_change(cells(code("c1"), code("c1")), runs, row, 1) == NOTHING_CHANGED
    assert recorded_change(cells(code("c1"), code("c2", "v2")), runs, row, 1) == (
        "suite_git_sha aaaaaaaaaaaa -> bbbbbbbbbbbb (loadgen/client.py, stacks/vllm.py)")
    # the same commit (a checkout's uncommitted edit) with other code is named by its files
    same = runs.assign(suite_git_sha="unknown")
    assert recorded_change(cells(code("c1"), code("c2")), same, row, 1) == (
        "suite code (loadgen/client.py)")
    # cells stored before the code was recorded: the commit alone
    assert recorded_change(cells(None, code("c1")), runs, row, 1) == (
        "suite_git_sha aaaaaaaaaaaa -> bbbbbbbbbbbb")


def test_measuring_code_covers_the_adapter_and_provisioner_and_moves_with_their_source(
        tmp_path, monkeypatch):
    import json

    from servebench import provenance
    from servebench.provision.local import LocalProvisioner
    from servebench.stacks.vllm import VllmStack

    files = json.loads(provenance.measuring_code(VllmStack, LocalProvisioner))
    for path in ("loadgen/client.py", "workloads.py", "evals/scorers.py", "stacks/adapter.py",
                 "stacks/gpu.py", "stacks/vllm.py", "provision/local.py"):
        assert path in files, path
    assert "notify/digest.py" not in files and "view/board.py" not in files
    # a copy of the package with one loadgen file edited hashes that file differently
    package = tmp_path / "servebench"
    for rel in files:
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_bytes((provenance._PACKAGE / rel).read_bytes())
    monkeypatch.setattr(provenance, "_PACKAGE", package)
    provenance.measuring_code.cache_clear()
    (package / "loadgen" / "client.py").write_text("# edited\n")
    moved = json.loads(provenance.measuring_code())
    assert moved["loadgen/client.py"] != files["loadgen/client.py"]
    assert moved["workloads.py"] == files["workloads.py"]
    provenance.measuring_code.cache_clear()


def test_each_night_stores_what_each_series_can_catch(history, day0):
    """The detect task attaches a ``detectability`` row per series judged: at 1% noise a
    series catches a step of a few percent within three nights; none before it has the nights
    to be judged, nor just after its change was raised (its baseline restarts there)."""
    store, summaries, _ = history
    rows = store.read_table("detectability").to_pandas()
    last = rows[rows["run_id"] == summaries[-1]["run_id"]].set_index(["variant", "metric"])
    tput = last.loc[("q4", "output_throughput")]
    assert 0.02 < tput["detectable"] < 0.07, tput
    assert tput["goal"] == 0.10 and tput["nights"] == 30
    assert 0.005 < tput["noise"] / tput["level"] < 0.02
    # accuracy is asked its drop in points (trends.detect_accuracy_drop: 5) at its level
    assert last.loc[("q4", "accuracy"), "goal"] == pytest.approx(0.05 / 0.9)
    assert rows[rows["run_date"] < day0 + dt.timedelta(days=9)]["detectable"].isna().all()
    raised = store.read_table("changes").to_pandas()
    raised = raised[raised["kind"] == "regression"].iloc[0]
    that_night = rows[(rows["run_id"] == raised["run_id"])
                      & (rows["series_id"] == raised["series_id"])]
    assert that_night["detectable"].isna().all(), that_night


def test_the_digest_and_report_say_which_series_cannot_see_the_sweeps_step(history,
                                                                          monkeypatch):
    """Every series of the synthetic sweep (1% noise) catches the default 10% within three
    nights, and the digest says so in a line; a sweep asking for 1% hears which cannot."""
    from pathlib import Path

    from servebench.notify.detectable import blind_lines
    from servebench.pipeline import send_digest

    store, summaries, _ = history
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    where = Path(send_digest(summaries[-1]).split(" and ")[0])
    text = where.read_text()
    assert "## What the series cannot see" in text
    assert ("_All 6 series judged catch a worse step of 10% (accuracy: a 5-point drop) "
            "within 3 nights._") in text
    report = next(where.parent.parent.parent.glob("reports/date=*/*.html")).read_text()
    assert "<h2>What the series cannot see</h2>" in report
    rows = store.read_table("detectability", run_ids=[summaries[-1]["run_id"]]).to_pandas()
    strict = blind_lines(rows.assign(goal=0.01))
    assert strict[3].startswith("_4 of 6 series cannot catch a worse step of 1%"), strict
    assert strict[5].startswith("- `t / ") and "catches >= " in strict[5]


def test_a_cells_new_request_count_is_named_as_what_changed():
    """load.auto_requests sizes a cell's count from night to night: the night it changes,
    a step is attributed to it."""
    import pandas as pd
    from servebench.trends.attribution import recorded_change

    runs = pd.DataFrame({"run_id": ["r0", "r1"], "suite_git_sha": "abc",
                         "sweep_hash": "h", "spec_json": None})
    where = {"target": "t", "stack": "vllm", "variant": "v", "workload": "w", "load_point": "c1"}
    cells = pd.DataFrame([{"run_id": r, **where, "n_requests": n}
                          for r, n in (("r0", 24), ("r1", 96))])
    assert recorded_change(cells, runs, where, 1) == "n_requests 24 -> 96"


def test_a_change_whose_first_nights_have_no_value_is_dated_to_its_recorded_cause():
    """The local proof under load: the victim's slots cut on night 14, its cells invalid on
    nights 14-16 (no value), the change located on night 17. The nights without a value are
    searched for the recorded change: night 14, with its cause. Values on those nights, or a
    recorded change outside the gap, leave the detector's night."""
    from servebench.trends.attribution import NOTHING_CHANGED, attribute

    runs, where, cells = _slots_cut(20)
    ttft = np.array([20.0] * 14 + [np.nan] * 3 + [30.0] * 3)
    assert attribute(cells, runs, where, 17, lo=0, hi=19, tolerance=1, values=ttft) == (
        14, "launch args --parallel 4 -> 1")
    valued = np.array([20.0] * 14 + [21.0] * 3 + [30.0] * 3)
    assert attribute(cells, runs, where, 17, lo=0, hi=19, tolerance=1, values=valued) == (
        17, NOTHING_CHANGED)
    one_gap = np.array([20.0] * 16 + [np.nan] + [30.0] * 3)  # night 14 held a value
    assert attribute(cells, runs, where, 17, lo=0, hi=19, tolerance=0, values=one_gap) == (
        17, NOTHING_CHANGED)
