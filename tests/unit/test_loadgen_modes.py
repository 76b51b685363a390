"""Each load mode against the fake server: arrival statistics, concurrency caps, warm-up,
trace order, duration stop, seeds, multi-process merge, and the SLO sweep helper."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from servebench.loadgen.engine import (
    LoadSpec,
    arrival_offsets,
    load_trace,
    run_load_sync,
)
from servebench.loadgen.records import RequestRecord
from servebench.loadgen.result import LagStats, LoadResult
from servebench.loadgen.sweep import find_max_load, slo_check
from servebench.metrics import Slo
from servebench.testing import FakeServerConfig, serve_in_thread

CHAT = "/v1/chat/completions"


def body(n: int = 2) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "a b"}], "max_tokens": n,
            "stream_options": {"include_usage": True}}


def test_arrival_processes_are_seeded_and_shaped() -> None:
    a = arrival_offsets(20000, 100.0, "poisson", seed=3)
    assert np.array_equal(a, arrival_offsets(20000, 100.0, "poisson", seed=3))
    assert not np.array_equal(a, arrival_offsets(20000, 100.0, "poisson", seed=4))
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(0.01, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)             # exponential
    g = np.diff(arrival_offsets(20000, 100.0, "gamma", burstiness=0.25, seed=3))
    assert g.mean() == pytest.approx(0.01, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.08)                    # CV = 1/sqrt(k)
    c = np.diff(arrival_offsets(100, 50.0, "constant"))
    assert np.allclose(c, 0.02)


def test_open_loop_poisson_follows_its_schedule() -> None:
    rate, n = 250.0, 400
    with serve_in_thread(FakeServerConfig(ttft_s=0.002, itl_s=0.001)) as srv:
        res = run_load_sync(srv.url, CHAT, [body()] * (n + 5), LoadSpec.open(rate, seed=7),
                            warmup=5, cell_id="o", processes=1)
        truth = srv.truth()["requests"]
    assert res.mode == "open" and len(res.records) == n and all(r.ok for r in res.records)
    sched = np.array([r.scheduled_at for r in res.records])
    expected = arrival_offsets(n, rate, "poisson", seed=7)
    assert np.allclose(sched - sched[0], expected, atol=1e-6)                  # exact, seeded
    gaps = np.diff(sched)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.15)
    sent = np.array([r.sent_at for r in res.records])
    lag = sent - sched
    assert lag.min() >= 0 and np.median(lag) < 0.003, np.percentile(lag, [50, 99])
    # what the server saw follows the same schedule (received times, warm-up excluded), over
    # the central 90% of arrivals: the server is a thread of this process, and one late
    # GIL hand-over at either end says nothing about the client's schedule
    recv = np.sort([q["received_at"] for q in truth if not q["request_id"].endswith((":0", ":1", ":2", ":3", ":4"))])
    lo, hi = n // 20, n - n // 20
    assert recv[hi] - recv[lo] == pytest.approx(expected[hi] - expected[lo], rel=0.15)
    assert res.send_lag.n == n and res.queue_wait is None
    assert res.window_start >= max(r.done_at for r in res.warmup_records)     # warm-up excluded


def test_open_loop_cap_holds_concurrency_and_reports_queueing() -> None:
    with serve_in_thread(FakeServerConfig(ttft_s=0.02, itl_s=0.002)) as srv:
        res = run_load_sync(srv.url, CHAT, [body(3)] * 40,
                            LoadSpec.open(1000.0, max_concurrency=4, seed=1), cell_id="cap",
                            processes=1)
        truth = srv.truth()
    assert truth["max_in_flight"] == 4 and all(r.ok for r in res.records)
    assert res.queue_wait is not None and res.queue_wait.max_ms > 50           # arrivals waited
    assert res.send_lag.p99_ms < 20                                            # ...not client lag


def test_max_throughput_sends_everything_at_once() -> None:
    with serve_in_thread(FakeServerConfig(ttft_s=0.05, itl_s=0.001)) as srv:
        res = run_load_sync(srv.url, CHAT, [body()] * 30, LoadSpec.max_throughput(), cell_id="m",
                            processes=1)
        truth = srv.truth()
    assert res.mode == "max" and truth["max_in_flight"] == 30
    assert len({r.scheduled_at for r in res.records}) == 1
    assert all(r.ok for r in res.records)


def test_trace_replay_keeps_order_offsets_and_lengths(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": 1000 + 40 * i + (i % 3) * 7, "input_length": 2, "output_length": 1 + i % 4,
             "hash_ids": [i]} for i in range(15)]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    entries = load_trace(trace)
    assert entries[0].offset_s == 1.0 and entries[3].output_tokens == 4 and entries[2].extra == {"hash_ids": [2]}
    bodies = [body(e.output_tokens) for e in entries]
    with serve_in_thread(FakeServerConfig(ttft_s=0.002)) as srv:
        res = run_load_sync(srv.url, CHAT, bodies, LoadSpec.trace([e.offset_s for e in entries]),
                            cell_id="tr", processes=1)
        truth = srv.truth()["requests"]
    assert [r.output_tokens for r in res.records] == [e.output_tokens for e in entries]
    order = [q["request_id"] for q in sorted(truth, key=lambda q: q["received_at"])]
    assert order == [f"tr:{i}" for i in range(15)]                             # replay order kept
    sched = np.array([r.scheduled_at for r in res.records])
    want = np.array([e.offset_s for e in entries]) - entries[0].offset_s
    assert np.allclose(sched - sched[0], want, atol=1e-6)
    recv = np.array([q["received_at"] for q in sorted(truth, key=lambda q: q["received_at"])])
    assert np.abs((recv - recv[0]) - want).max() < 0.02
    with pytest.raises(ValueError):
        LoadSpec.trace([0.0, 1.0, 0.5])


def test_duration_stop_and_closed_concurrency() -> None:
    with serve_in_thread(FakeServerConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        res = run_load_sync(srv.url, CHAT, [body(3)] * 6, LoadSpec.closed(3), warmup=2,
                            duration_s=0.4, cell_id="d", processes=1)
        truth = srv.truth()
    assert truth["max_in_flight"] == 3
    ids = [r.request_id for r in res.records]
    assert len(ids) == len(set(ids)) > 6                                       # bodies reused
    last_send = max(r.sent_at for r in res.records)
    assert last_send - res.window_start < 0.4 + 0.05
    assert all(r.ok for r in res.records)


def test_multiprocess_split_and_merge() -> None:
    with serve_in_thread(FakeServerConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        res = run_load_sync(srv.url, CHAT, [body(3)] * 24, LoadSpec.closed(4), warmup=4,
                            cell_id="mp", processes=2)
        truth = srv.truth()
        op = run_load_sync(srv.url, CHAT, [body(2)] * 60, LoadSpec.open(200.0, seed=5),
                           cell_id="mo", processes=2)
    assert res.processes == 2 and truth["max_in_flight"] <= 4
    assert [r.request_id for r in res.records] == [f"mp:{i}" for i in range(4, 24)]
    assert [r.request_id for r in res.warmup_records] == [f"mp:{i}" for i in range(4)]
    assert all(r.ok for r in res.records) and res.client_cpu_s > 0
    assert res.window_start >= max(r.done_at for r in res.warmup_records)
    # the union of the two processes' schedules is the single-process schedule, on one clock
    sched = np.array([r.scheduled_at for r in op.records])
    assert np.allclose(sched - sched[0], arrival_offsets(60, 200.0, seed=5), atol=1e-4)
    assert np.median([r.sent_at - r.scheduled_at for r in op.records]) < 0.005


def _fake_result(ttft_ms: float) -> LoadResult:
    recs = []
    for i in range(20):
        t = 1000.0 + i
        recs.append(RequestRecord(f"c:{i}", "c", t, sent_at=t, first_chunk_at=t + ttft_ms / 1000,
                                  done_at=t + ttft_ms / 1000 + 0.01, chunk_times=[t + ttft_ms / 1000],
                                  chunk_tokens=[1], output_tokens=1, prompt_tokens=1,
                                  http_status=200, finish_reason="length", served_model="m"))
    lag = LagStats.from_seconds([0.0])
    return LoadResult("c", 1, recs, [], recs[0].sent_at, recs[-1].done_at, lag, lag)


def test_sweep_finds_highest_passing_load() -> None:
    seen = []

    def run_point(rate: float) -> LoadResult:
        seen.append(rate)
        return _fake_result(ttft_ms=rate)            # latency grows with load

    out = find_max_load(run_point, slo_check(Slo(ttft_ms=37.5)), start=4.0, rel_tol=0.05)
    assert out.best is not None and 35.6 <= out.best <= 37.5
    assert seen[:4] == [4.0, 8.0, 16.0, 32.0] and not out.points[4].passed
    conc = find_max_load(run_point, slo_check(Slo(ttft_ms=37.5)), start=1, integer=True)
    assert conc.best == 37.0
    sat = _fake_result(1.0)
    sat.send_lag = LagStats.from_seconds([0.2])
    assert slo_check(Slo())(sat)[0] is False and math.isnan(LagStats.from_seconds([]).p50_ms)
