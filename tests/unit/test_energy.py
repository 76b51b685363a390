"""The energy counters (servebench.energy): RAPL's package domains from a powercap tree, a
counter's wraps, the energy of a window from what was sampled around it, and the cells'
columns -- null with why where nothing counts, never zero."""

import time

import pandas as pd
import pytest
from servebench import energy
from servebench.energy import (
    EnergyCounter,
    EnergySampler,
    EnergyWindow,
    RaplCounter,
    energy_columns,
    host_counter,
)
from servebench.levers import energy_change
from servebench.notify.energy import energy_lines


def powercap(root, packages: dict[int, int], *, max_uj: int = 262143328850):
    """A powercap tree: a package domain per entry (its energy_uj), each with a core
    sub-domain that must not be counted twice."""
    for n, uj in packages.items():
        domain = root / f"intel-rapl:{n}"
        (domain / f"intel-rapl:{n}:0").mkdir(parents=True)
        (domain / "name").write_text(f"package-{n}\n")
        (domain / "energy_uj").write_text(f"{uj}\n")
        (domain / "max_energy_range_uj").write_text(f"{max_uj}\n")
        (domain / f"intel-rapl:{n}:0" / "energy_uj").write_text("999999999\n")
    return root


def test_rapl_counts_each_package_once_in_joules(tmp_path):
    counter, source = RaplCounter.find(powercap(tmp_path, {0: 5_000_000, 1: 2_500_000}))
    assert counter is not None
    assert counter.read() == (5.0, 2.5)
    assert counter.wrap_j() == (262143.32885, 262143.32885)
    assert source == counter.source
    assert "intel-rapl:0, intel-rapl:1" in source and "whole sockets" in source


def test_no_rapl_says_where_it_looked(tmp_path):
    counter, why = RaplCounter.find(tmp_path / "none")
    assert counter is None and why == f"no RAPL package domain under {tmp_path / 'none'}"
    (tmp_path / "bad" / "intel-rapl:0").mkdir(parents=True)
    (tmp_path / "bad" / "intel-rapl:0" / "energy_uj").write_text("n/a\n")
    counter, why = RaplCounter.find(tmp_path / "bad")
    assert counter is None and why.startswith(f"RAPL under {tmp_path / 'bad'} could not be read")


def test_a_host_without_counters_is_not_measured_with_both_reasons(tmp_path, monkeypatch):
    monkeypatch.setattr(energy.NvmlCounter, "find",
                        classmethod(lambda cls: (None, "no NVIDIA GPU energy counter (NVML: "
                                                       "NVML Shared Library Not Found)")))
    counter, why = host_counter(tmp_path)
    assert counter is None
    assert why == ("no NVIDIA GPU energy counter (NVML: NVML Shared Library Not Found); "
                   f"no RAPL package domain under {tmp_path}")
    # RAPL where there is no GPU
    counter, source = host_counter(powercap(tmp_path, {0: 1}))
    assert isinstance(counter, RaplCounter) and source == counter.source


class Watts(EnergyCounter):
    """A counter that draws ``watts`` from its creation, one domain."""

    source = "test"

    def __init__(self, watts: float):
        self.watts, self.t0 = watts, time.time()

    def read(self):
        return (self.watts * (time.time() - self.t0),)


def test_a_windows_energy_is_interpolated_from_the_readings_around_it():
    counter = Watts(40.0)
    with EnergySampler(counter, interval_s=0.02) as sampler:
        start = time.time()
        time.sleep(0.3)
        end = time.time()
        time.sleep(0.05)
    assert len(sampler.times) >= 5
    assert sampler.joules(start, end) == pytest.approx(40.0 * (end - start), rel=0.02)
    # outside what was read, or no window at all: unknown, not zero
    assert sampler.joules(sampler.times[0] - 1, end) is None
    assert sampler.joules(float("nan"), float("nan")) is None


class Steps(EnergyCounter):
    source = "test"

    def __init__(self, values, wrap):
        self.values, self.wrap = iter(values), wrap

    def read(self):
        return next(self.values)

    def wrap_j(self):
        return self.wrap


def test_a_counter_that_wraps_keeps_counting():
    sampler = EnergySampler(Steps([(90.0, 10.0), (98.0, 20.0), (4.0, 30.0), (10.0, 5.0)],
                                  wrap=(100.0, None)))
    for _ in range(4):
        sampler.sample()
    # domain 0 wraps at 100 J; domain 1 has no range: a reset restarts from its last value
    assert sampler.totals == [100.0, 118.0, 134.0, 145.0]


def test_a_cells_columns_are_null_with_why_where_nothing_counted():
    none = energy_columns(None, "no RAPL package domain under /x", output_tokens=768,
                          requests=24)
    assert none == {"energy_j": None, "energy_j_per_output_token": None,
                    "energy_j_per_request": None,
                    "energy_source": "not measured: no RAPL package domain under /x"}
    some = energy_columns(EnergyWindow(7.68, "CPU packages (RAPL, intel-rapl:0)"), "",
                          output_tokens=768, requests=24)
    assert some == {"energy_j": 7.68, "energy_j_per_output_token": pytest.approx(0.01),
                    "energy_j_per_request": pytest.approx(0.32),
                    "energy_source": "CPU packages (RAPL, intel-rapl:0)"}
    failed = energy_columns(EnergyWindow(1.0, "s"), "", output_tokens=0, requests=0)
    assert failed["energy_j_per_output_token"] is None and failed["energy_j"] == 1.0


def test_a_lever_compares_energy_only_under_one_counter():
    cell = {"energy_j_per_output_token": 0.069, "energy_source": "GPUs (NVML ...)"}
    base = {"energy_j_per_output_token": 0.1, "energy_source": "GPUs (NVML ...)"}
    assert energy_change(cell, base)["energy_pct"] == pytest.approx(-31.0)
    assert energy_change(cell, {**base, "energy_source": "CPU packages (RAPL ...)"}) == \
        {"energy_pct": None}
    assert energy_change({"energy_source": "not measured: x"}, base) == {"energy_pct": None}


def test_the_digest_says_what_counted_or_why_nothing_did():
    cells = pd.DataFrame([
        {"target": "gpu", "variant": "bf16", "energy_j_per_output_token": 0.1,
         "energy_source": "GPUs (NVML)"},
        {"target": "gpu", "variant": "bf16", "energy_j_per_output_token": 0.125,
         "energy_source": "GPUs (NVML)"},
        {"target": "gpu", "variant": "w4a16", "energy_j_per_output_token": 0.069,
         "energy_source": "GPUs (NVML)"},
        {"target": "cpu", "variant": "f16", "energy_j_per_output_token": None,
         "energy_source": "not measured: no RAPL package domain under /sys/class/powercap"},
        {"target": "cpu2", "variant": "f16", "energy_j_per_output_token": None,
         "energy_source": "not measured: no RAPL package domain under /sys/class/powercap"},
    ])
    assert energy_lines(cells) == [
        "gpu/bf16: 0.1-0.125 J per output token over 2 cells (GPUs (NVML))",
        "gpu/w4a16: 0.069 J per output token over 1 cell (GPUs (NVML))",
        "cpu, cpu2: energy not measured: no RAPL package domain under /sys/class/powercap",
    ]


def test_readings_logged_on_another_host_are_taken_around_the_window():
    from servebench.energy import LoggedReadings

    asked = []

    def fetch(start, end):
        asked.append((start, end))
        return "source: GPUs (...)\n10.0 100.0\n11.0 110.0\n20.0 300.0\n21.0 320.0\n"

    readings = LoggedReadings("GPUs (...)", fetch)
    with readings:
        pass
    assert readings.joules(10.5, 20.5) == pytest.approx(310.0 - 105.0)
    assert asked == [(10.5, 20.5)]
    assert readings.joules(5.0, 20.5) is None  # the log does not reach the window's start
    assert readings.joules(float("nan"), 20.0) is None


def test_the_instance_samplers_log_header_says_what_counts_or_why_nothing_does():
    from servebench.provision.ec2.script import (ENERGY_SAMPLER, energy_header,
                                                  energy_readings_command,
                                                  energy_sampler_lines)

    assert energy_header("source: GPUs (NVML total energy consumption, 1: NVIDIA L4), x\n1 2")[0] \
        == "GPUs (NVML total energy consumption, 1: NVIDIA L4), x"
    assert energy_header("none: NVML found no GPU") == (None, "NVML found no GPU")
    source, why = energy_header("")
    assert source is None and "kept no energy readings" in why
    compile(ENERGY_SAMPLER, "sample.py", "exec")  # the instance's python3 runs it as written
    lines = "\n".join(energy_sampler_lines())
    assert "nvmlDeviceGetTotalEnergyConsumption" in lines and "no python3" in lines
    # a second either side of each end, whatever the window's length
    assert "($1 >= 99.000 && $1 <= 101.000) || ($1 >= 199.000 && $1 <= 201.000)" in \
        energy_readings_command(100.0, 200.0)


def test_a_log_asked_before_its_reading_after_the_window_is_asked_again(monkeypatch):
    from servebench import energy as energy_module
    from servebench.energy import LoggedReadings

    monkeypatch.setattr(energy_module, "FETCH_WAIT_S", 0.0)
    logs = iter(["source: x\n10.0 100.0\n11.0 110.0\n", "source: x\n10.0 100.0\n11.0 110.0\n"
                 "12.0 130.0\n"])
    assert LoggedReadings("x", lambda s, e: next(logs)).joules(10.0, 11.5) == \
        pytest.approx(20.0)
