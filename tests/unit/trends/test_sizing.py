"""trends.sizing: the request count that brings a cell's series to the sweep's
detect_at_least, from its night noise split into sampling (bootstrap of one night's requests)
and launch noise (what is left over)."""

import math

import numpy as np
import pandas as pd
import pytest
from servebench.config.load import AutoRequests
from servebench.trends.sizing import (
    CellSize,
    requests_needed,
    sampling_noise,
    size_cells,
    size_night,
)


def test_without_launch_noise_the_count_grows_with_the_square_of_the_ratio():
    # all of the night's noise is sampling: a step half the size needs four times the requests
    assert requests_needed(24, detectable=0.20, goal=0.10, night=0.08, sampling=0.08) == 96
    assert requests_needed(24, detectable=0.08, goal=0.10, night=0.08, sampling=0.08) == 24


def test_launch_noise_above_the_goal_leaves_no_count_that_reaches_it():
    # 0.075 of the 0.08 is launch to launch: the goal asks for night noise 0.04
    assert requests_needed(24, detectable=0.20, goal=0.10, night=0.08, sampling=0.028) is None
    # with launch noise of 0.02 the goal is within reach
    n = requests_needed(24, detectable=0.20, goal=0.10, night=0.08, sampling=math.sqrt(
        0.08 ** 2 - 0.02 ** 2))
    assert n == math.ceil(24 * (0.08 ** 2 - 0.02 ** 2) / (0.04 ** 2 - 0.02 ** 2))


def _night(rng, n, launch_sd, q):
    """One night's percentile of a cell: a launch factor, then n lognormal requests."""
    factor = math.exp(rng.normal(0, launch_sd))
    return float(np.percentile(factor * rng.lognormal(3.0, 0.5, n), q))


@pytest.mark.parametrize("q", [50, 95])
def test_the_predicted_count_gives_the_predicted_night_noise(q):
    """Where the truth is known: nights of a cell with a launch effect of 3% and lognormal
    requests. From the night-to-night noise of 24-request nights and one night's bootstrap,
    the count predicted for half that noise brings the nights there (within 20%)."""
    rng = np.random.default_rng(7)
    nights = np.array([_night(rng, 24, 0.03, q) for _ in range(400)])
    night = float(np.std(nights, ddof=1) / np.median(nights))
    one = math.exp(rng.normal(0, 0.03)) * rng.lognormal(3.0, 0.5, 24)
    sampling = float(np.mean([sampling_noise(rng.permutation(one), q, seed=s)
                              for s in range(3)]))
    n = requests_needed(24, detectable=0.20, goal=0.10, night=night, sampling=min(sampling,
                                                                                    night))
    assert n is not None and n > 48
    at_n = np.array([_night(rng, n, 0.03, q) for _ in range(400)])
    achieved = float(np.std(at_n, ddof=1) / np.median(at_n))
    assert achieved == pytest.approx(night / 2, rel=0.2), (n, night, sampling, achieved)


def test_size_cells_reads_a_nights_rows():
    rng = np.random.default_rng(1)
    starts = np.cumsum(rng.uniform(0.05, 0.1, 24))
    ttft = rng.lognormal(np.log(0.02), 0.3, 24)
    requests = pd.DataFrame({
        "cell_id": "c", "warmup": False, "ok": True, "request_id": [f"c:{i}" for i in range(24)],
        "scheduled_at": starts, "sent_at": starts, "first_chunk_at": starts + ttft,
        "done_at": starts + ttft + 0.1, "output_tokens": 32})
    cells = pd.DataFrame([{"cell_id": "c", "target": "t", "variant": "v", "workload": "w",
                           "load_point": "c1", "status": "ok", "duration_s": 3.0}])
    detectability = pd.DataFrame([
        {"target": "t", "variant": "v", "workload": "w", "load_point": "c1",
         "metric": "ttft_ms_p50", "level": 20.0, "noise": 2.0, "detectable": 0.25,
         "goal": 0.10},
        {"target": "t", "variant": "v", "workload": "w", "load_point": "c1",  # too short yet
         "metric": "ttft_ms_p95", "level": 30.0, "noise": 3.0, "detectable": None,
         "goal": 0.10},
        {"target": "t", "variant": "v", "workload": None, "load_point": None,  # not a cell's
         "metric": "accuracy", "level": 0.97, "noise": 0.01, "detectable": 0.04,
         "goal": 0.05}])
    [size] = size_cells(detectability, cells, requests)
    assert (size.metric, size.requests, size.detectable) == ("ttft_ms_p50", 24, 0.25)
    assert 0 < size.sampling_noise <= size.night_noise == pytest.approx(0.1)
    if size.needed is None:
        assert "launch-to-launch noise" in size.reason
    else:
        assert size.needed > 24 and size.needed_s == pytest.approx(3.0 * size.needed / 24)
        assert size.reason.startswith(f"{size.needed} requests")


def test_the_cli_says_what_each_cell_needs(tmp_path, monkeypatch, capsys):
    """`servebench trends sizing`: the newest night's series that miss their goal, each with
    its noise split and the requests (and seconds) that would reach it."""
    import datetime as dt

    from servebench import cli
    from servebench.cli import main
    from servebench.results.schema import rows_to_table
    from servebench.results.store import ResultStore

    monkeypatch.setenv("SERVEBENCH_RESULTS_URI", str(tmp_path / "data"))
    monkeypatch.setattr(cli.console, "width", 250)  # the whole table, as on a wide terminal
    assert main(["trends", "sizing"]) == 1  # no night has been judged
    assert "no committed run has detectability rows" in capsys.readouterr().err
    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.uniform(0.05, 0.1, 24))
    ttft = rng.lognormal(np.log(0.02), 0.3, 24)
    run, day = "scheduled__2026-12-05", dt.date(2026, 12, 5)
    ids = {"run_id": run, "run_date": day}
    store = ResultStore(str(tmp_path / "data"))
    store.publish(run, day, {
        "runs": rows_to_table("runs", [{**ids, "sweep_name": "local"}]),
        "cells": rows_to_table("cells", [{**ids, "cell_id": "t/v/w/c1", "target": "t",
                                          "stack": "vllm", "concurrency": 1,
                                          "variant": "v", "workload": "w", "load_point": "c1",
                                          "status": "ok", "duration_s": 3.0}]),
        "requests": rows_to_table("requests", [
            {**ids, "cell_id": "t/v/w/c1", "request_id": f"r{i}", "scheduled_at": s,
             "sent_at": s, "first_chunk_at": s + t, "done_at": s + t + 0.1,
             "output_tokens": 32, "warmup": False, "ok": True, "http_status": 200}
            for i, (s, t) in enumerate(zip(starts, ttft, strict=True))])})
    store.attach(run, day, {"detectability": rows_to_table("detectability", [
        {**ids, "series_id": "s", "target": "t", "stack": "vllm", "variant": "v",
         "workload": "w", "load_point": "c1", "metric": "ttft_ms_p50", "nights": 14,
         "level": 20.0, "noise": 2.0, "autocorr": 0.0, "detectable": 0.25, "goal": 0.10}])})
    assert main(["trends", "sizing"]) == 0
    out = capsys.readouterr().out
    assert "t/v/w/c1" in out and "ttft_ms_p50" in out and "25.0%" in out and "10%" in out
    assert "requests (~" in out or "launch-to-launch noise" in out


def _size(cid, metric, detectable, needed, n=24, goal=0.10):
    target, variant, workload, point = cid.split("/")
    return CellSize(target, variant, workload, point, metric, n, detectable, goal, 0.08, 0.06,
                    0.05, needed, None)


def _last(rows):
    return pd.DataFrame([{"cell_id": cid, "status": status, "n_requests": n, "duration_s": s}
                         for cid, status, n, s in rows])


def test_size_night_grants_what_each_series_needs_cheapest_first_within_the_budget():
    cells = [("t/a/w/c1", 24), ("t/b/w/c1", 24), ("t/c/w/c1", 24), ("t/d/w/c1", 24)]
    last = _last([("t/a/w/c1", "ok", 24, 12.0), ("t/b/w/c1", "ok", 24, 2.4),
                  ("t/c/w/c1", "ok", 24, 2.4), ("t/d/w/c1", "ok", 24, 2.4)])
    sizes = [_size("t/a/w/c1", "ttft_ms_p95", 0.2, 96),  # 72 more at 0.5 s: 36 s
             _size("t/b/w/c1", "ttft_ms_p95", 0.2, 96),  # 72 more at 0.1 s: 7.2 s
             _size("t/b/w/c1", "tpot_ms_p50", 0.15, 48),  # the most of its metrics wins
             _size("t/c/w/c1", "ttft_ms_p95", 0.3, None),  # launch noise: no count helps
             _size("t/d/w/c1", "ttft_ms_p95", 0.05, 24)]  # catches its goal already
    got = {c.cell_id: c for c in size_night(cells, sizes, last, AutoRequests(budget_s=20))}
    assert got["t/b/w/c1"].count == 96 and got["t/b/w/c1"].added_s == pytest.approx(7.2)
    assert got["t/a/w/c1"].count == 24 and got["t/a/w/c1"].wanted == 96
    assert got["t/a/w/c1"].why.startswith("over the budget: 96 would add 36 s, 13 s left")
    assert got["t/c/w/c1"].count == 24 and "launch-to-launch" in got["t/c/w/c1"].why
    assert got["t/d/w/c1"].count == 24 and got["t/d/w/c1"].why == "every metric catches its goal"
    # a budget for both grants both; the factor caps a count
    both = size_night(cells, sizes, last, AutoRequests(budget_s=60, max_factor=3))
    assert [c.count for c in both] == [72, 72, 24, 24]


def test_a_sized_count_holds_and_goes_first_and_a_cell_without_history_keeps_its_own():
    cells = [("t/a/w/c1", 24), ("t/b/w/c1", 24), ("t/new/w/c1", 24), ("t/bad/w/c1", 24)]
    # last night: a ran 96 (sized before), its series now catches the goal from nights mostly at
    # 24; b wants 48 and is cheaper, but a's count holds first
    last = _last([("t/a/w/c1", "ok", 96, 9.6), ("t/b/w/c1", "ok", 24, 1.2),
                  ("t/bad/w/c1", "failed", 24, None)])
    sizes = [_size("t/a/w/c1", "ttft_ms_p95", 0.08, 96, n=96),
             _size("t/b/w/c1", "ttft_ms_p95", 0.14, 48)]
    got = size_night(cells, sizes, last, AutoRequests(budget_s=8))
    assert [c.count for c in got] == [96, 24, 24, 24]
    assert got[0].added_s == pytest.approx(7.2) and "holds last night's 96" in got[0].why
    assert got[1].why.startswith("over the budget: 48 would add 1 s, 1 s left")
    assert got[2].why == got[3].why == "no judged night of its series yet"


def test_a_cell_whose_series_is_too_short_says_so_and_keeps_a_sized_count():
    cells = [("t/a/w/c1", 24), ("t/b/w/c1", 24)]
    last = _last([("t/a/w/c1", "ok", 24, 2.4), ("t/b/w/c1", "ok", 96, 9.6)])
    got = size_night(cells, [], last, AutoRequests(budget_s=60))
    assert (got[0].count, got[0].why) == (24, "its series has too few nights to judge yet")
    assert (got[1].count, got[1].why) == (96, "sized: holds last night's 96")
