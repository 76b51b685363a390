"""The max-load-within-SLO search: its bracket, its probe budget, and what a probe that could
not be measured does to it; the SLO verdict of a cell row."""

import pytest
from servebench.capacity import Probe, search_max_load
from servebench.config import SloSearch
from servebench.metrics import Slo, slo_misses


def _server(limit: float, broken_above: float | None = None):
    """A stand-in whose SLOs hold up to ``limit``; above ``broken_above`` nothing measures."""
    seen = []

    def probe(load: float) -> Probe:
        seen.append(load)
        if broken_above is not None and load > broken_above:
            return Probe(load, False, "client_saturated", by_slo=False)
        return Probe(load, load <= limit, None if load <= limit else "TTFT p95 > 250")
    return probe, seen


def test_a_rate_is_bracketed_by_doubling_then_bisecting():
    search = SloSearch(low=1, high=64, max_probes=8, precision=0.1)
    probe, seen = _server(limit=11.0)
    result = search_max_load(search, probe)
    assert seen[:5] == [1, 2, 4, 8, 16]  # doubling until a miss
    assert 8 <= result.best.load <= 11.0 < result.bound.load <= 16
    assert len(seen) <= 8 and sorted(seen) == sorted(set(seen))
    # the budget reached or the bracket narrow: never wider than the precision asked
    assert result.bound.load / result.best.load - 1 <= 0.1 or len(seen) == 8


def test_a_concurrency_ends_at_adjacent_workers():
    search = SloSearch(over="concurrency", low=1, high=32, max_probes=12)
    probe, seen = _server(limit=5)
    result = search_max_load(search, probe)
    assert (result.best.load, result.bound.load) == (5, 6)
    assert all(float(x).is_integer() for x in seen)


def test_high_holding_ends_the_search_with_no_bound():
    probe, seen = _server(limit=100)
    result = search_max_load(SloSearch(low=2, high=10), probe)
    assert seen == [2, 4, 8, 10] and result.best.load == 10 and result.bound is None


def test_low_missing_leaves_nothing_within_slo():
    probe, seen = _server(limit=0.5)
    result = search_max_load(SloSearch(low=1, high=10), probe)
    assert seen == [1] and result.best is None and result.bound.load == 1


def test_a_probe_that_cannot_be_measured_ends_the_search_and_is_the_bound():
    probe, seen = _server(limit=100, broken_above=5)
    result = search_max_load(SloSearch(low=1, high=64), probe)
    assert seen == [1, 2, 4, 8]
    assert result.best.load == 4 and not result.bound.by_slo


def test_the_probe_budget_is_kept():
    probe, seen = _server(limit=37.3)
    search_max_load(SloSearch(low=1, high=1000, max_probes=4, precision=0.01), probe)
    assert len(seen) == 4


def test_the_search_spec_refuses_a_bracket_upside_down_or_fractional_workers():
    with pytest.raises(ValueError, match="must be above low"):
        SloSearch(low=8, high=4)
    with pytest.raises(ValueError, match="whole low and high"):
        SloSearch(over="concurrency", low=1.5, high=8)


def test_slo_misses_reads_p95_and_the_error_rate():
    slo = Slo(ttft_ms=250, tpot_ms=50)
    assert slo_misses({"ttft_ms_p95": 200.0, "tpot_ms_p95": 50.0, "error_rate": 0.0},
                      slo, 0.0) == []
    assert slo_misses({"ttft_ms_p95": 312.04, "tpot_ms_p95": 20.0, "error_rate": 0.1},
                      slo, 0.05) == ["TTFT p95 312.0 ms > 250", "error rate 0.100 > 0.05"]
    # nothing served in time (NaN) misses; an SLO not given is not checked
    assert slo_misses({"ttft_ms_p95": float("nan"), "e2e_ms_p95": 9e9, "error_rate": 0.0},
                      slo, 0.0) == ["TTFT p95 nan ms > 250", "TPOT p95 None ms > 50"]
