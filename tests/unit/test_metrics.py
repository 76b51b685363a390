"""Hand-computed checks of the canonical metric definitions in servebench.metrics."""

from __future__ import annotations

import math

import pytest
from servebench.records import RequestRecord
from servebench.metrics import CellMetrics, Slo, ValidityChecks, compute_cell_metrics

T0 = 1_700_000_000.0  # realistic epoch base: precision must survive large absolute times


def rec(i: int, sent: float, chunks: list[float], done: float, *, out: int | None = None,
        prompt: int | None = 10, prompt_req: int | None = None, out_req: int | None = None,
        error: str | None = None, status: int = 200, model: str = "m", warmup: bool = False,
        chunk_tokens: list[int] | None = None) -> RequestRecord:
    """Record with times relative to T0 (seconds); usage ``out`` defaults to len(chunks)."""
    return RequestRecord(
        request_id=f"c:{i}", cell_id="c", scheduled_at=T0 + sent, sent_at=T0 + sent,
        first_chunk_at=T0 + chunks[0] if chunks else None, done_at=T0 + done,
        chunk_times=[T0 + c for c in chunks],
        chunk_tokens=chunk_tokens if chunk_tokens is not None else [1] * len(chunks),
        prompt_tokens_requested=prompt_req, prompt_tokens=prompt,
        output_tokens_requested=out_req, output_tokens=len(chunks) if out is None else out,
        http_status=status, error=error, served_model=model, warmup=warmup,
        finish_reason="length",
    )


def test_tpot_excludes_first_token() -> None:
    # TTFT 0.3 s, E2E 1.3 s, 11 tokens: TPOT = (1.3 - 0.3) / 10 = 100 ms
    # (naive E2E/tokens = 118.2 ms, (E2E-TTFT)/tokens = 90.9 ms: both wrong).
    chunks = [0.3 + 0.1 * k for k in range(11)]
    m = compute_cell_metrics([rec(0, 0.0, chunks, 1.3)])
    assert m.tpot_ms_mean == pytest.approx(100.0, abs=1e-3)
    assert m.ttft_ms_p50 == pytest.approx(300.0, abs=1e-3)
    assert m.e2e_ms_p99 == pytest.approx(1300.0, abs=1e-3)


def test_tpot_undefined_for_single_token_and_uses_server_usage() -> None:
    one = rec(0, 0.0, [0.2], 0.2)                       # 1 token: no TPOT sample
    # server says 5 tokens in 2 chunks: TPOT = (1.0 - 0.2) / 4 = 200 ms
    five = rec(1, 0.0, [0.2, 1.0], 1.0, out=5, chunk_tokens=[1, 4])
    m = compute_cell_metrics([one, five])
    assert m.tpot_ms_mean == pytest.approx(200.0, abs=1e-3)
    assert m.tpot_ms_p99 == pytest.approx(200.0, abs=1e-3)


def test_itl_pools_gaps_over_requests() -> None:
    a = rec(0, 0.0, [0.1, 0.2, 0.4], 0.4)   # gaps 100, 200 ms
    b = rec(1, 0.0, [1.0, 1.05], 1.05)      # gap 50 ms
    m = compute_cell_metrics([a, b])
    # pooled [50, 100, 200]: mean 116.67 (a mean of per-request means would say 100)
    assert m.itl_ms_mean == pytest.approx(350.0 / 3, abs=1e-3)
    assert m.itl_ms_p50 == pytest.approx(100.0, abs=1e-3)
    assert m.itl_ms_p90 == pytest.approx(180.0, abs=1e-3)  # 100 + 0.8 * 100
    assert m.itl_ms_p99 == pytest.approx(198.0, abs=1e-3)


def test_percentiles_linear() -> None:
    ttfts = [0.010, 0.020, 0.030, 0.040, 0.100]
    recs = [rec(i, 0.0, [t, t + 0.01], t + 0.01) for i, t in enumerate(ttfts)]
    m = compute_cell_metrics(recs)
    assert m.ttft_ms_mean == pytest.approx(40.0, abs=1e-3)
    assert m.ttft_ms_p50 == pytest.approx(30.0, abs=1e-3)
    assert m.ttft_ms_p90 == pytest.approx(76.0, abs=1e-3)   # 40 + 0.6 * 60
    assert m.ttft_ms_p95 == pytest.approx(88.0, abs=1e-3)   # 40 + 0.8 * 60
    assert m.ttft_ms_p99 == pytest.approx(97.6, abs=1e-3)   # 40 + 0.96 * 60


def test_throughput_counts_successes_over_window() -> None:
    ok = [rec(i, 0.0, [0.5, 1.0, 1.5], 1.5, prompt=20) for i in range(4)]   # 3 output tokens each
    bad = rec(9, 0.0, [], 0.1, out=0, error="HTTPStatusError: 503", status=503, prompt=None)
    m = compute_cell_metrics([*ok, bad], window=(T0, T0 + 2.0))
    assert (m.n_requests, m.n_ok, m.n_errors) == (5, 4, 1)
    assert m.error_rate == pytest.approx(0.2)
    assert m.duration_s == pytest.approx(2.0)
    assert m.request_throughput == pytest.approx(2.0)        # 4 / 2 s
    assert m.output_throughput == pytest.approx(6.0)         # 12 tokens / 2 s
    assert m.total_throughput == pytest.approx(46.0)         # (12 + 80) / 2 s
    assert m.output_tokens_mean == pytest.approx(3.0)
    # errors are data, and by default a cell with any is not comparable: it says how many
    assert m.invalid_reasons == ["1/5 requests failed (error rate 0.200 > 0 allowed); most "
                                 "common error (1x): HTTPStatusError: 503"]
    allowed = compute_cell_metrics([*ok, bad], window=(T0, T0 + 2.0),
                                   checks=ValidityChecks(max_error_rate=0.2))
    assert allowed.valid, allowed.invalid_reasons


def test_default_window_from_records_and_warmup_ignored() -> None:
    warm = rec(0, -5.0, [-4.0], 100.0, warmup=True)          # would stretch the window
    a = rec(1, 1.0, [1.5], 2.0)
    b = rec(2, 1.5, [2.0], 3.0)
    m = compute_cell_metrics([warm, a, b])
    assert m.n_requests == 2
    assert m.duration_s == pytest.approx(2.0)                 # 1.0 -> 3.0
    assert m.request_throughput == pytest.approx(1.0)


def test_goodput_with_slos() -> None:
    # TTFT 10/20/30/40 ms; 11 tokens, decode 1 s (TPOT 100 ms) except r3: decode 2 s (200 ms)
    recs = []
    for i, ttft in enumerate([0.010, 0.020, 0.030, 0.040]):
        decode = 2.0 if i == 3 else 1.0
        chunks = [ttft + decode * k / 10 for k in range(11)]
        recs.append(rec(i, 0.0, chunks, ttft + decode))
    recs.append(rec(4, 0.0, [], 0.5, out=0, error="ReadTimeout: x", status=200))  # error: never good
    w = (T0, T0 + 4.0)
    assert compute_cell_metrics(recs, w).goodput == pytest.approx(1.0)          # no SLO: all ok
    assert compute_cell_metrics(recs, w, slo=Slo(ttft_ms=25)).n_good == 2
    assert compute_cell_metrics(recs, w, slo=Slo(ttft_ms=45)).n_good == 4
    m = compute_cell_metrics(recs, w, slo=Slo(ttft_ms=45, tpot_ms=150))      # r3 fails TPOT only
    assert m.n_good == 3 and m.goodput == pytest.approx(0.75)
    assert compute_cell_metrics(recs, w, slo=Slo(e2e_ms=1025)).n_good == 2      # 1010, 1020 ms
    assert compute_cell_metrics(recs, w, slo=Slo(tpot_ms=100.0001)).n_good == 3


def test_empty_input_does_not_crash() -> None:
    m = compute_cell_metrics([])
    assert isinstance(m, CellMetrics)
    assert m.n_requests == 0 and math.isnan(m.ttft_ms_p50) and math.isnan(m.request_throughput)
    assert m.invalid_reasons == ["no measured requests"]
    assert m.as_row()["valid"] is False


def test_all_failed() -> None:
    recs = [rec(i, 0.0, [], 1.0, out=None, prompt=None, error="ConnectError: refused", status=None)
            for i in range(3)]
    for r in recs:
        r.http_status = None
    m = compute_cell_metrics(recs)
    assert m.n_ok == 0 and m.error_rate == 1.0
    assert math.isnan(m.e2e_ms_mean) and math.isnan(m.itl_ms_p99)
    assert m.request_throughput == 0.0 and m.goodput == 0.0
    assert any("all 3 requests failed" in s and "ConnectError" in s for s in m.invalid_reasons)


def test_invalid_reasons() -> None:
    good = rec(0, 0.0, [0.1 * k for k in range(1, 9)], 0.8, out_req=8, prompt_req=12, prompt=14)
    assert compute_cell_metrics([good], checks=ValidityChecks(exact_output_length=True,
                                                              expected_model="m")).valid

    short = rec(1, 0.0, [0.1, 0.2], 0.2, out_req=8)            # stopped early: 2 != 8
    m = compute_cell_metrics([good, short], checks=ValidityChecks(exact_output_length=True))
    assert any("1/2" in s and "requested exact length" in s for s in m.invalid_reasons)
    assert compute_cell_metrics([good, short]).valid             # check off by default

    lying = rec(2, 0.0, [0.1, 0.2, 0.3], 0.3, out=10)           # usage 10, 3 chunks
    m = compute_cell_metrics([lying])
    assert any("chunk count" in s for s in m.invalid_reasons)
    assert compute_cell_metrics([lying], checks=ValidityChecks(chunk_rel_tolerance=None)).valid

    prompt_off = rec(3, 0.0, [0.1], 0.1, prompt=500, prompt_req=100)
    m = compute_cell_metrics([prompt_off])
    assert any("prompt_tokens" in s for s in m.invalid_reasons)

    other = rec(4, 0.0, [0.1], 0.1, model="other-model")
    m = compute_cell_metrics([other], checks=ValidityChecks(expected_model="m"))
    assert any("'other-model'" in s for s in m.invalid_reasons)

    no_usage = rec(5, 0.0, [0.1, 0.2], 0.2)
    no_usage.output_tokens = None
    m = compute_cell_metrics([no_usage])
    assert any("usage missing" in s for s in m.invalid_reasons)
    assert m.output_tokens_mean == 2.0                           # fell back to chunk tokens


def test_as_row_is_flat() -> None:
    row = compute_cell_metrics([rec(0, 0.0, [0.1, 0.2], 0.2)]).as_row()
    for key in ("ttft_ms_p50", "tpot_ms_p95", "itl_ms_p99", "e2e_ms_mean", "request_throughput",
                "output_throughput", "total_throughput", "goodput", "n_requests", "n_ok",
                "n_errors", "error_rate", "duration_s", "output_tokens_mean", "invalid_reasons"):
        assert key in row
    assert isinstance(row["invalid_reasons"], list)
    assert all(not isinstance(v, dict) for v in row.values())


def test_failed_requests_beyond_the_bound_make_the_cell_invalid_with_the_count():
    from servebench.records import RequestRecord
    from servebench.metrics import ValidityChecks, compute_cell_metrics

    def rec(i, ok):
        r = RequestRecord(request_id=str(i), cell_id="c", scheduled_at=100.0 + i,
                          sent_at=100.0 + i)
        if ok:
            r.first_chunk_at, r.done_at, r.http_status = 100.1 + i, 100.5 + i, 200
            r.output_tokens, r.chunk_times, r.chunk_tokens = 2, [100.1 + i, 100.5 + i], [1, 1]
        else:
            r.done_at, r.error = 100.2 + i, "ConnectError: connection refused"
        return r

    records = [rec(i, i < 62) for i in range(100)]
    strict = compute_cell_metrics(records, checks=ValidityChecks())
    assert [r for r in strict.invalid_reasons if "requests failed" in r] == [
        "38/100 requests failed (error rate 0.380 > 0 allowed); most common error (38x): "
        "ConnectError: connection refused"]
    lenient = compute_cell_metrics(records, checks=ValidityChecks(max_error_rate=0.4))
    assert not [r for r in lenient.invalid_reasons if "requests failed" in r]


# -- the measurement's own validity rules, one by one ----------------------------------------
def test_client_saturated_names_the_lag_that_passed_the_one_bound():
    from servebench.metrics import (
        CLIENT_LAG_BOUND_MS,
        client_lag_reasons,
        client_saturated_reason,
    )

    assert CLIENT_LAG_BOUND_MS == 50.0  # one bound, defined with its rule
    assert client_saturated_reason(12.0, 49.9) is None
    assert client_saturated_reason(64.9, 3.0) == "client_saturated: send lag p99 64.9 ms > 50 ms"
    assert client_lag_reasons(3.0, 80.0) == ["event-loop lag p95 80.0 ms"]
    assert client_lag_reasons(60.0, 70.0, bound_ms=65.0) == ["event-loop lag p95 70.0 ms"]
    assert client_saturated_reason(float("nan"), float("nan")) is None  # no sample: not late


def test_one_request_sent_late_is_a_stall_not_a_saturated_client():
    """Seen in CI: a cell of 8 requests, one sent 107 ms late (the host stalled a second),
    the interpolated p99 100 ms, the cell refused. The p99 is a lag two requests reached."""
    from servebench.loadgen.result import LagStats
    from servebench.metrics import client_lag_reasons

    one = LagStats.from_seconds([0.001] * 7 + [0.107])
    assert one.p99_ms == 1.0 and one.max_ms == 107.0
    assert client_lag_reasons(one.p99_ms, 0.0) == []
    two = LagStats.from_seconds([0.001] * 6 + [0.090, 0.107])  # falling behind: refused
    assert client_lag_reasons(two.p99_ms, 0.0) == ["send lag p99 90.0 ms"]
    many = LagStats.from_seconds([i / 1000 for i in range(1000)])  # a large sample: its p99
    assert (many.p50_ms, many.p95_ms, many.p99_ms) == (499.0, 949.0, 989.0)


def test_timing_unresolved_when_most_responses_came_in_one_read():
    from servebench.metrics import timing_unresolved_reason

    def rec(times, ok=True, warmup=False):
        return RequestRecord(request_id="r", cell_id="c", scheduled_at=0.0, sent_at=0.0,
                             chunk_times=times, http_status=200 if ok else 500, warmup=warmup)

    observed = [rec([1.0, 1.1, 1.2]) for _ in range(3)]
    together = [rec([1.0, 1.0, 1.0]) for _ in range(4)]
    assert timing_unresolved_reason(observed + together[:3]) is None  # half: still observed
    reason = timing_unresolved_reason(observed + together)
    assert reason == ("timing_unresolved: 4/7 responses arrived in a single read, so per-token "
                      "timing was not observed")
    # failed, warm-up and one-chunk responses say nothing about per-token timing
    assert timing_unresolved_reason([rec([1.0, 1.0], ok=False), rec([1.0, 1.0], warmup=True),
                                     rec([1.0]), *observed]) is None


def test_expected_prefix_cache_share_counts_declared_sharing_and_the_template():
    from servebench.metrics import expected_prefix_cache_share

    # independent prompts: only the template's token (65 = 64 content + BOS)
    assert expected_prefix_cache_share([(65, 64, 0)] * 4) == pytest.approx(1 / 65)
    # a shared-prefix group: the first request puts the prefix in, the others may reuse it
    rows = [(145, 144, 0), (145, 144, 128), (145, 144, 128)]
    assert expected_prefix_cache_share(rows) == pytest.approx((1 + 129 + 129) / 435)
    assert expected_prefix_cache_share([(None, 32, 0)]) == 0.0  # no usage: the content alone
    assert expected_prefix_cache_share([]) is None


def test_prefix_cache_reuse_rule():
    from servebench.metrics import PREFIX_CACHE_TOLERANCE, prefix_cache_reuse_reason

    assert prefix_cache_reuse_reason(0.02, 0.015) is None
    assert prefix_cache_reuse_reason(0.015 + PREFIX_CACHE_TOLERANCE, 0.015) is None
    reason = prefix_cache_reuse_reason(0.98, 0.016)
    assert reason.startswith("prefix_cache_reuse: hit rate 0.98 > 0.02 the workload implies")
    # a stack that reports no hit rate is not judged
    assert prefix_cache_reuse_reason(None, 0.015) is None


def test_the_prefix_cache_tolerance_allows_a_few_chance_tokens_a_request():
    from servebench.metrics import (
        PREFIX_CACHE_CHANCE_TOKENS,
        PREFIX_CACHE_TOLERANCE,
        prefix_cache_reuse_reason,
        prefix_cache_tolerance,
    )

    short, long = prefix_cache_tolerance([33] * 10), prefix_cache_tolerance([2048] * 10)
    assert short == pytest.approx(PREFIX_CACHE_TOLERANCE + PREFIX_CACHE_CHANCE_TOKENS / 33)
    assert PREFIX_CACHE_TOLERANCE < long < PREFIX_CACHE_TOLERANCE + 0.002
    # three tokens of 33 a request matched by chance on a long-lived server (BOS expected)
    assert prefix_cache_reuse_reason(3 / 33, 1 / 33, short) is None
    # a prompt sent again is served whole: still found on the shortest prompts
    assert prefix_cache_reuse_reason(0.98, 1 / 33, short).startswith("prefix_cache_reuse")
    assert prefix_cache_tolerance([]) == PREFIX_CACHE_TOLERANCE
