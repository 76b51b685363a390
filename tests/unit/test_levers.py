"""Each variant against its baseline on the same night: % changes from the cells' canonical
metrics, 95% intervals from their requests and each cell's launch-to-launch noise (its series'
nights), the accuracy delta beside them."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from servebench.levers import LEVERS, REQUESTS_ONLY, lever_rows
from servebench.notify.digest import render_digest
from servebench.notify.lever_table import lever_caption, lever_table
from servebench.trends.series import series_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lever_coverage import coverage  # noqa: E402


def _requests(cell_id, ttft_ms, itl_ms, n=40, tokens=9, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        sent = 1000.0 + i
        first = sent + ttft_ms * (1 + 0.05 * rng.normal()) / 1000
        done = first + (tokens - 1) * itl_ms / 1000
        rows.append(dict(request_id=f"{cell_id}:{i}", cell_id=cell_id, scheduled_at=sent,
                         sent_at=sent, first_chunk_at=first, done_at=done, output_tokens=tokens,
                         http_status=200, warmup=False, ok=True))
    return rows


def _cell(variant, ttft, tpot, throughput, accuracy, verdict):
    return dict(cell_id=f"t/{variant}/w/c1", target="t", variant=variant, workload="w",
                load_point="c1", status="ok", gate_baseline="f16", gate_verdict=verdict,
                accuracy=accuracy, duration_s=40.0, price_per_hour=1.0,
                ttft_ms_p95=ttft, tpot_ms_p50=tpot, output_throughput=throughput,
                cost_per_1m_output_tokens=1.0 / 3600 * 40 / 360 * 1e6)


def test_a_faster_variant_shows_its_gain_with_an_interval_and_its_accuracy_cost():
    base_reqs = _requests("t/f16/w/c1", ttft_ms=20, itl_ms=4, seed=1)
    fast_reqs = _requests("t/q4/w/c1", ttft_ms=10, itl_ms=2, seed=2)
    requests = pd.DataFrame(base_reqs + fast_reqs)
    b_ttft = np.percentile([(r["first_chunk_at"] - r["sent_at"]) * 1000 for r in base_reqs], 95)
    f_ttft = np.percentile([(r["first_chunk_at"] - r["sent_at"]) * 1000 for r in fast_reqs], 95)
    cells = pd.DataFrame([_cell("f16", b_ttft, 4.0, 9.0, 0.97, "baseline"),
                          _cell("q4", f_ttft, 2.0, 9.0, 0.90, "fail")])
    [row] = lever_rows(cells, requests)
    assert row["variant"] == "q4" and row["baseline"] == "f16" and row["gate_verdict"] == "fail"
    assert row["ttft_ms_p95_pct"] == pytest.approx(100 * (f_ttft / b_ttft - 1))
    assert row["ttft_ms_p95_lo"] < row["ttft_ms_p95_pct"] < row["ttft_ms_p95_hi"] < -40
    assert row["tpot_ms_p50_pct"] == pytest.approx(-50.0)
    assert row["tpot_ms_p50_lo"] == pytest.approx(-50.0, abs=0.5)  # no spread, no interval
    assert row["accuracy_delta_points"] == pytest.approx(-7.0)
    # closed loop: throughput moves with the requests' times (Little's law), not a fixed window
    assert row["output_throughput_pct"] == pytest.approx(0.0)
    assert row["output_throughput_lo"] < 0 < row["output_throughput_hi"]
    table = lever_table([row])
    assert "q4 vs f16" in table and "-7.0 pts" in table and "fail" in table
    assert f"{row['ttft_ms_p95_pct']:+.1f}% [" in table


def test_no_row_without_an_ok_baseline_cell():
    requests = pd.DataFrame(_requests("t/q4/w/c1", 10, 2))
    cells = pd.DataFrame([_cell("q4", 10, 2, 9, 0.9, "pass")])
    assert lever_rows(cells, requests) == []


def test_the_engine_telemetry_that_differs_from_the_baseline_is_said_beside_the_levers():
    from servebench.levers import engine_note

    base = {"prefix_cache_hit_rate": 0.75, "kv_cache_usage_peak": 0.21,
            "requests_waiting_peak": 0.0, "preemptions": 0.0}
    nocache = {**base, "prefix_cache_hit_rate": 0.0, "kv_cache_usage_peak": 0.64,
               "requests_waiting_peak": 3.0}
    assert engine_note(nocache, base) == \
        "prefix-cache hit rate 0.00 vs 0.75; KV-cache peak 64% vs 21%; queued peak 3 vs 0"
    assert engine_note({**base, "kv_cache_usage_peak": 0.22}, base) is None  # within noise
    assert engine_note({"kv_cache_usage_peak": None}, {"kv_cache_usage_peak": 0.2}) is None
    requests = pd.DataFrame(_requests("t/f16/w/c1", 20, 4) + _requests("t/q4/w/c1", 30, 4))
    cells = pd.DataFrame([{**_cell("f16", 20, 4.0, 9.0, 0.97, "baseline"), **base},
                          {**_cell("q4", 30, 4.0, 9.0, 0.97, "pass"), **nocache}])
    [row] = lever_rows(cells, requests)
    table = lever_table([row])
    assert "engine vs baseline" in table and "queued peak 3 vs 0" in table


def test_a_quantized_variants_case_reads_memory_kv_capacity_tpot_and_accuracy():
    """"x% less memory, y% more KV capacity, this TPOT, this accuracy": the unit's figures
    (the same in each of its cells) against its baseline's, beside the speed levers."""
    from servebench.notify.digest import memory_lines

    base_mem = {"weights_bytes": 14_300_000, "kv_cache_tokens": 131072,
                "peak_rss_bytes": 2_000_000_000}
    q4_mem = {"weights_bytes": 2_100_000, "kv_cache_tokens": 262144,
              "peak_rss_bytes": 1_240_000_000}
    requests = pd.DataFrame(_requests("t/f16/w/c1", 20, 4) + _requests("t/q4/w/c1", 20, 3))
    cells = pd.DataFrame([{**_cell("f16", 20, 4.0, 9.0, 0.97, "baseline"), **base_mem},
                          {**_cell("q4", 20, 3.0, 9.0, 0.95, "pass"), **q4_mem}])
    [row] = lever_rows(cells, requests)
    assert row["memory_pct"] == pytest.approx(-38.0) and row["memory_basis"] == "rss"
    assert row["kv_cache_pct"] == pytest.approx(100.0)
    table = lever_table([row])
    assert "peak memory" in table and "-38.0% RSS" in table and "+100.0%" in table
    assert "-25.0%" in table and "-2.0 pts" in table  # its TPOT p50 and its accuracy
    lines = memory_lines(cells)
    assert lines[0] == "t/f16: weights 14.3 MB, KV cache 131,072 tokens, peak memory 2.00 GB"
    assert lines[1] == ("t/q4: weights 2.10 MB, KV cache 262,144 tokens, peak memory 1.24 GB; "
                        "vs f16: 38% less memory, 100% more KV capacity")
    # GPU memory where both units have it; nothing at all where neither was measured
    gpu = {**q4_mem, "peak_device_memory_bytes": 30e9}
    from servebench.levers import memory_change

    assert memory_change(gpu, {**base_mem, "peak_device_memory_bytes": 40e9}) == {
        "memory_pct": pytest.approx(-25.0), "memory_basis": "gpu",
        "kv_cache_pct": pytest.approx(100.0)}
    assert memory_change({}, {"peak_rss_bytes": float("nan")})["memory_basis"] is None
    older = cells.drop(columns=list(base_mem))  # a run from before memory was measured
    assert memory_lines(older) == [] and "peak memory" not in lever_table(
        lever_rows(older, requests))


def _noise(cells: pd.DataFrame, relative: float, nights: int) -> pd.DataFrame:
    """The night's ``detectability`` rows of each cell's lever series: ``relative`` noise."""
    return pd.DataFrame([{"series_id": series_id(c, key), "metric": key, "nights": nights,
                          "level": 10.0, "noise": 10.0 * relative}
                         for c in cells.to_dict("records") for key, _ in LEVERS])


def test_the_launch_noise_of_both_cells_series_widens_the_interval():
    """Tonight's bootstrap says +-few %; each cell's series moves 8% a night, little of it
    from its requests: the interval holds sqrt(2) launches of ~8% (wider still on a short
    series, whose noise is known less well), and the table says which intervals are over one
    night's requests only."""
    requests = pd.DataFrame(_requests("t/f16/w/c1", 20, 4, seed=1)
                            + _requests("t/q4/w/c1", 20, 4, seed=2))
    cells = pd.DataFrame([_cell("f16", 20.0, 4.0, 9.0, 0.97, "baseline"),
                          _cell("q4", 20.0, 4.0, 9.0, 0.97, "pass")])
    [alone] = lever_rows(cells, requests)
    [held] = lever_rows(cells, requests, _noise(cells, 0.08, nights=40))
    [short] = lever_rows(cells, requests, _noise(cells, 0.08, nights=10))
    assert alone["ttft_ms_p95_launch"] is None
    assert held["ttft_ms_p95_pct"] == alone["ttft_ms_p95_pct"]
    launch = held["ttft_ms_p95_launch"]
    assert 0.10 < launch < 0.08 * 2 ** 0.5  # less the small part the requests explain
    assert alone["ttft_ms_p95_hi"] - alone["ttft_ms_p95_lo"] < 15
    # in log space: at least +-1.96 launch sds about the point
    assert held["ttft_ms_p95_hi"] > 100 * (np.exp(1.96 * launch) - 1)
    assert held["ttft_ms_p95_lo"] < 100 * (np.exp(-1.96 * launch) - 1)
    assert short["ttft_ms_p95_hi"] > held["ttft_ms_p95_hi"] + 3
    # TPOT p50 has no spread over tonight's requests: its interval is the launches' alone
    assert held["tpot_ms_p50_launch"] == pytest.approx(0.08 * 2 ** 0.5, rel=1e-3)
    # a series too short to judge (no noise in its row) leaves the requests' interval, marked
    too_short = _noise(cells, 0.08, nights=40)
    too_short.loc[too_short["series_id"].str.startswith("t/q4/"), "noise"] = None
    [marked] = lever_rows(cells, requests, too_short)
    assert marked["ttft_ms_p95_lo"] == alone["ttft_ms_p95_lo"]
    assert marked["ttft_ms_p95_launch"] is None
    assert f"[{held['ttft_ms_p95_lo']:+.1f}, {held['ttft_ms_p95_hi']:+.1f}] |" in \
        lever_table([held])
    assert f"[{alone['ttft_ms_p95_lo']:+.1f}, {alone['ttft_ms_p95_hi']:+.1f}]\u2020" in \
        lever_table([marked])
    assert REQUESTS_ONLY in lever_caption([marked])
    assert REQUESTS_ONLY not in lever_caption([held])
    digest = render_digest(cells, {"run_id": "r", "run_date": "2026-12-05"}, "data",
                           levers=[marked])
    assert f"\u2020: {REQUESTS_ONLY}" in digest


def test_on_a_null_pair_the_intervals_cover_the_truth_about_95_percent_of_the_time():
    """f16-nocache against f16 where the cache cannot matter: the same cell launched anew
    each night (lognormal launch factor, sd 8%, as the local default's nights move) serving
    24 lognormal requests. With the launch noise from each series' nights (10, tonight's
    among them: the fewest the detector judges; 41) the 95% intervals hold 0% 90-99% of the
    time; over one night's requests alone far less (``benchmarks/lever_coverage.py`` prints
    it for more pairs). With three nights no series is judged: every interval is marked."""
    for history in (9, 40):
        found = coverage(250, history, seed=20261205 + history)
        assert (found["with_launch"] == 1).all()
        assert found["covered"].between(0.90, 0.99).all(), (history, found)
        assert (found["requests_only"] < 0.80).all(), (history, found)
    assert (coverage(5, 2)["with_launch"] == 0).all()
