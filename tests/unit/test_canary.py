"""The host canary: its readings, and a run's judged against the earlier runs on its
hardware -- the night's move beyond its noise, and a stretch of slow units, each said once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from servebench.canary import (
    CanaryReading,
    canary_lines,
    canary_night,
    read_canary,
    unit_columns,
)

HW = "AMD EPYC x2 cores (no GPU)"
T0 = pd.Timestamp("2026-12-01 02:00", tz="UTC")


def _night(i: int, cpu: list[float], memory: float = 7.0, hardware: str = HW):
    """Run ``r{i}`` with one unit per ``cpu`` reading (ms, before and after alike), a unit
    every minute from 02:00 of its day."""
    run_id, start = f"r{i}", T0 + pd.Timedelta(days=i)
    units = pd.DataFrame([{
        "run_id": run_id, "unit_id": f"t--v{k}",
        "started_at": start + pd.Timedelta(minutes=k),
        "ended_at": start + pd.Timedelta(minutes=k, seconds=50),
        **unit_columns(CanaryReading(c, memory, "this worker"),
                       CanaryReading(c, memory, "this worker"))} for k, c in enumerate(cpu)])
    run = {"run_id": run_id, "hardware": hardware, "finished_at": start + pd.Timedelta(hours=1)}
    return units, run


def _store(nights):
    units, runs = zip(*nights, strict=True)
    return pd.concat(units, ignore_index=True), pd.DataFrame(list(runs))


def _usual(n: int = 6):
    rng = np.random.default_rng(7)
    return [_night(i, list(10.0 * np.exp(rng.normal(0, 0.01, 8)))) for i in range(n)]


def test_a_reading_times_both_parts_here():
    reading = read_canary("this worker")
    assert reading.cpu_ms > 0 and reading.memory_ms > 0 and reading.source == "this worker"
    unmeasured = CanaryReading.unmeasured("the servers run elsewhere")
    assert unmeasured.cpu_ms is None and unmeasured.source.startswith("not measured: ")


def test_a_slower_night_is_said_once_with_its_size():
    units, runs = _store([*_usual(), _night(6, [13.0] * 8)])
    night = canary_night(units, runs, "r6")
    assert night.moved["cpu"] == pytest.approx(0.30, abs=0.02)
    assert "memory" not in night.moved  # the other part stayed put
    lines = night.lines()
    assert "against the median of its last 6 runs: cpu +30%" in lines[0]
    assert sum("the host was 30% slower (cpu canary)" in line for line in lines) == 1


def test_a_night_within_its_noise_says_no_move():
    units, runs = _store([*_usual(), _night(6, [10.1] * 8)])
    night = canary_night(units, runs, "r6")
    assert night.moved == {} and night.span is None
    assert len(night.lines()) == 1


def test_a_slow_stretch_names_its_units_and_times():
    # three units of eight slow from 02:03: the night's median holds, the stretch is said
    units, runs = _store([*_usual(), _night(6, [10.0] * 3 + [14.0] * 3 + [10.0] * 2)])
    night = canary_night(units, runs, "r6")
    assert night.moved == {}
    assert night.slow_units == ["t--v3", "t--v4", "t--v5"]
    [stretch] = [line for line in night.lines() if line.startswith("from ")]
    assert "from 02:03 to 02:05 UTC" in stretch and "3 of 8 units" in stretch


def test_too_few_earlier_runs_and_other_hardware_are_not_judged():
    other = [_night(i, [10.0] * 4, hardware="Intel Xeon x2 cores (no GPU)") for i in range(5)]
    units, runs = _store([*other, *_usual(2), _night(9, [20.0] * 4)])
    night = canary_night(units, runs, "r9")
    assert night.earlier == 2 and night.moved == {}
    assert "2 earlier run(s) on this hardware, 3 needed" in night.lines()[0]


def test_a_host_that_is_not_this_worker_says_why():
    units = pd.DataFrame([{"run_id": "r0", "unit_id": "t--v", "started_at": T0,
                           "ended_at": T0, **unit_columns(
                               CanaryReading.unmeasured("the ec2 provisioner's servers run on "
                                                        "another machine than this worker"),
                               CanaryReading.unmeasured("the ec2 provisioner's servers run on "
                                                        "another machine than this worker"))}])
    runs = pd.DataFrame([{"run_id": "r0", "hardware": HW, "finished_at": T0}])
    assert canary_night(units, runs, "r0") is None
    why = ("host canary: not measured: the ec2 provisioner's servers run on another machine "
           "than this worker")
    assert canary_lines(units, runs, "r0") == [why]
