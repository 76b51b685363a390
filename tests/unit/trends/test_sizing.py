"""trends.sizing: the request count that brings a cell's series to the sweep's
detect_at_least, from its night noise split into sampling (bootstrap of one night's requests)
and launch noise (what is left over)."""

import math

import numpy as np
import pandas as pd
import pytest
from servebench.trends.sizing import requests_needed, sampling_noise, size_cells


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
