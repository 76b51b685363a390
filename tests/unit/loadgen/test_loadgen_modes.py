"""Each load mode against the fake server: arrival statistics, concurrency caps, warm-up,
duration stop, seeds, multi-process merge; and each load point kind of the sweep spec mapped
to its mode."""

from __future__ import annotations

import numpy as np
import pytest
from servebench.loadgen.arrivals import arrival_offsets
from servebench.loadgen.engine import LoadSpec, run_load_sync
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


def test_each_load_point_of_the_sweep_spec_drives_its_mode() -> None:
    from servebench.bench.cell import load_spec_for
    from servebench.config import LoadPoints

    load = LoadPoints(concurrency=[4], rates=[20], max_throughput=True, max_concurrency=8,
                      arrival="gamma", burstiness=0.5, seed=3, client_processes="auto")
    points = load.points()
    assert [p.label for p in points] == ["c4", "r20", "max"]
    specs = [load_spec_for(p, load) for p in points]
    assert specs[0] == LoadSpec.closed(4)
    assert specs[1] == LoadSpec.open(20, arrival="gamma", burstiness=0.5, seed=3,
                                     max_concurrency=8)
    assert specs[2] == LoadSpec.max_throughput(8)
    with pytest.raises(ValueError, match="client_processes"):
        LoadPoints(concurrency=[1], client_processes=0)
    # a trace's one point: its measured prompts' own arrival times, under the cap
    from servebench.config import TraceWorkload
    from servebench.workloads import PromptItem

    [trace] = load.points_for(TraceWorkload(kind="trace", name="t", path="t.jsonl"))
    items = [PromptItem([], 8, 4, arrival_s=t) for t in (0.0, 0.25, 1.5)]
    assert load_spec_for(trace, load, items) == LoadSpec.schedule([0.0, 0.25, 1.5],
                                                                  max_concurrency=8)
