"""Load generator against the fake OpenAI server on 127.0.0.1 (and httpx.MockTransport for SSE
edge cases): record completeness, concurrency, warm-up, errors as data, timing accuracy."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, AsyncIterator

import httpx
import numpy as np
import pytest
from servebench.loadgen.client import send_streaming
from servebench.loadgen.engine import LoadSpec, run_load_sync
from servebench.records import Clock, RequestRecord
from servebench.metrics import compute_cell_metrics, e2e_s, ttft_s
from servebench.testing import FakeServerConfig, serve_in_subprocess, serve_in_thread

CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"


def chat_body(max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "one two three four"}],
            "max_tokens": max_tokens, "stream_options": {"include_usage": True}, **extra}


def test_records_complete_chat() -> None:
    with serve_in_thread(FakeServerConfig(ttft_s=0.005, itl_s=0.001)) as srv:
        res = run_load_sync(srv.url, CHAT, [chat_body(8) for _ in range(12)], LoadSpec.closed(3),
                            cell_id="cellA", prompt_tokens_requested=[4] * 12)
    assert len(res.records) == 12 and not res.warmup_records
    assert len({r.request_id for r in res.records}) == 12
    for r in res.records:
        assert r.ok, r.error
        assert r.http_status == 200 and r.cell_id == "cellA" and not r.warmup
        assert r.output_tokens == 8 == r.output_tokens_requested
        assert r.prompt_tokens == 4 == r.prompt_tokens_requested
        assert len(r.chunk_times) == 8 and r.chunk_tokens == [1] * 8   # role chunk not counted
        assert r.output_text == " t0 t1 t2 t3 t4 t5 t6 t7"
        assert r.finish_reason == "length" and r.served_model == "fake-model"
        assert r.scheduled_at <= r.sent_at < r.first_chunk_at == r.chunk_times[0] <= r.done_at
        assert list(r.chunk_times) == sorted(r.chunk_times)
        row = r.to_row()
        assert row["ok"] is True and isinstance(row["chunk_times"], list)
    m = compute_cell_metrics(res.records, (res.window_start, res.window_end))
    assert m.valid, m.invalid_reasons
    assert m.n_ok == 12 and m.ttft_ms_p50 >= 5.0


def test_completions_with_continuous_usage_and_multi_token_chunks() -> None:
    body = {"model": "x", "prompt": "a b c", "max_tokens": 10,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with serve_in_thread(FakeServerConfig(tokens_per_chunk=3, served_model="served-x")) as srv:
        res = run_load_sync(srv.url, COMPL, [body] * 4, LoadSpec.closed(2), cell_id="c")
    for r in res.records:
        assert r.ok, r.error
        assert r.chunk_tokens == [3, 3, 3, 1] and r.output_tokens == 10 and r.prompt_tokens == 3
        assert r.served_model == "served-x" and r.output_text.split() == [f"t{i}" for i in range(10)]


def _in_flight(reqs: list[dict[str, Any]], t: float) -> int:
    return sum(1 for q in reqs if q["received_at"] <= t < q["done_at"])


@pytest.mark.parametrize("concurrency", [1, 6])
def test_concurrency_is_held(concurrency: int) -> None:
    n = concurrency * 6
    with serve_in_thread(FakeServerConfig(ttft_s=0.02, itl_s=0.002)) as srv:
        res = run_load_sync(srv.url, CHAT, [chat_body(6) for _ in range(n)],
                            LoadSpec.closed(concurrency), cell_id="c")
        # the client may read [DONE] before the server thread stamps its own done_at
        deadline = time.monotonic() + 2
        while any(q["done_at"] is None for q in srv.truth()["requests"]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        truth = srv.truth()
    assert truth["max_in_flight"] == concurrency                         # never more than N
    reqs = truth["requests"]
    assert len(reqs) == n and all(r.ok for r in res.records)
    # while every worker still has work (first 70% of the run) the server sees N in flight
    start = min(q["received_at"] for q in reqs) + 0.005
    stop = start + 0.7 * (max(q["done_at"] for q in reqs) - start)
    samples = [_in_flight(reqs, t) for t in np.linspace(start, stop, 200)]
    assert max(samples) == concurrency
    assert np.median(samples) == concurrency, samples   # dips only while a worker turns around
    first_done = min(q["done_at"] for q in reqs)
    assert sorted(q["received_at"] for q in reqs)[concurrency - 1] < first_done  # N at once


def test_warmup_excluded_from_window() -> None:
    with serve_in_thread(FakeServerConfig(ttft_s=0.003, itl_s=0.001)) as srv:
        res = run_load_sync(srv.url, CHAT, [chat_body(4) for _ in range(10)], LoadSpec.closed(2),
                            warmup=3, cell_id="w")
    assert [r.request_id for r in res.warmup_records] == ["w:0", "w:1", "w:2"]
    assert [r.request_id for r in res.records] == [f"w:{i}" for i in range(3, 10)]
    assert all(r.warmup for r in res.warmup_records) and not any(r.warmup for r in res.records)
    assert res.window_start == min(r.sent_at for r in res.records)
    assert res.window_end == max(r.done_at for r in res.records)
    assert res.window_start >= max(r.done_at for r in res.warmup_records)   # barrier held
    assert len(res.all_records()) == 10
    m = compute_cell_metrics(res.all_records(), (res.window_start, res.window_end))
    assert m.n_requests == 7                                                # flags respected
    with pytest.raises(ValueError):
        run_load_sync("http://127.0.0.1:1", CHAT, [chat_body()] * 2, LoadSpec.closed(1),
                      warmup=2, cell_id="w")


def test_the_load_runs_with_the_heap_frozen() -> None:
    """A full garbage collection walks every object of the process (hundreds of ms in an
    Airflow task): while the load runs, what the process held before is left out of it, and
    given back after."""
    import gc

    seen: list[int] = []
    held = gc.get_freeze_count()
    with serve_in_thread(FakeServerConfig(ttft_s=0.001, itl_s=0.001)) as srv:
        run_load_sync(srv.url, CHAT, [chat_body(2) for _ in range(3)], LoadSpec.closed(1),
                      cell_id="g", on_ready=lambda: seen.append(gc.get_freeze_count()))
    assert seen and seen[0] > held
    assert gc.get_freeze_count() == held


def test_http_error_becomes_record() -> None:
    bodies = [chat_body(4), chat_body(4, fake_status=503), chat_body(4)]
    with serve_in_thread() as srv:
        res = run_load_sync(srv.url, CHAT, bodies, LoadSpec.closed(1), cell_id="e")
        missing = run_load_sync(srv.url, "/v1/nope", [chat_body()], LoadSpec.closed(1), cell_id="e")
    ok, bad, ok2 = res.records
    assert ok.ok and ok2.ok
    assert not bad.ok and bad.http_status == 503
    assert bad.error.startswith("HTTPStatusError: 503") and "fake error 503" in bad.error
    assert bad.first_chunk_at is None and bad.done_at >= bad.sent_at
    m = compute_cell_metrics(res.records)
    assert (m.n_errors, m.n_ok) == (1, 2) and m.error_rate == pytest.approx(1 / 3)
    assert missing.records[0].http_status == 404 and "HTTPStatusError: 404" in missing.records[0].error


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_error_and_timeouts_become_records() -> None:
    port = _closed_port()
    res = run_load_sync(f"http://127.0.0.1:{port}", CHAT, [chat_body()] * 3, LoadSpec.closed(2),
                        cell_id="x", timeout_s=2)
    assert len(res.records) == 3
    assert all(r.http_status is None and r.error.startswith("ConnectError") for r in res.records)
    assert "all 3 requests failed" in compute_cell_metrics(res.records).invalid_reasons[0]
    with serve_in_thread(FakeServerConfig(ttft_s=1.0)) as srv:
        slow = run_load_sync(srv.url, CHAT, [chat_body()], LoadSpec.closed(1), cell_id="t",
                             timeout_s=0.15)
        dl = run_load_sync(srv.url, CHAT, [chat_body()], LoadSpec.closed(1), cell_id="t",
                           request_deadline_s=0.1)
    r = slow.records[0]
    assert r.http_status == 200 and r.error.startswith("ReadTimeout") and not r.ok
    assert 0.14 < e2e_s(r) < 0.6
    assert dl.records[0].error.startswith("DeadlineExceeded") and e2e_s(dl.records[0]) < 0.5


def test_client_ttft_matches_server_truth() -> None:
    cfg = FakeServerConfig(ttft_s=0.03, itl_s=0.005)
    with serve_in_subprocess(cfg) as srv:  # own process: no GIL sharing between the two sides
        res = run_load_sync(srv.url, CHAT, [chat_body(6) for _ in range(9)], LoadSpec.closed(1),
                            warmup=1, cell_id="t")  # warm-up pays the TCP connect
        truth = {q["request_id"]: q for q in srv.truth()["requests"]}
    # On a loaded machine the client's timestamps are late by up to the measured loop lag.
    slack = 0.004 + res.loop_lag.max_ms / 1000
    ttft_err, chunk_delay = [], []
    for r in res.records:
        q = truth[r.request_id]                      # matched through the x-request-id header
        server_ttft = q["first_chunk_at"] - q["received_at"]
        assert server_ttft == pytest.approx(0.03, abs=0.005 + slack)
        assert -0.0005 < ttft_s(r) - server_ttft < slack, (ttft_s(r), server_ttft)
        ttft_err.append(ttft_s(r) - server_ttft)
        # each chunk arrives shortly after the server wrote it (same host, anchored clocks)
        delays = np.array(r.chunk_times) - np.array(q["chunk_times"])
        assert len(delays) == 6 and delays.min() > -0.001 and delays.max() < slack, delays
        chunk_delay.extend(delays)
    # a systematic bias fails; CPU contention (the typical loop lag) is allowed for
    typical = res.loop_lag.p95_ms / 1000
    assert np.median(ttft_err) < 0.003 + typical, (ttft_err, res.loop_lag)
    assert np.median(chunk_delay) < 0.002 + typical, (chunk_delay, res.loop_lag)
    assert res.loop_lag.n > 0 and res.send_lag.n == 8


# --- SSE parsing edge cases through httpx.MockTransport (no sockets) -----------------------------

def _mock_record(pieces: list[bytes], status: int = 200) -> RequestRecord:
    async def stream() -> AsyncIterator[bytes]:
        for p in pieces:
            yield p

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=stream(), headers={"content-type": "text/event-stream"})

    async def go() -> RequestRecord:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t") as c:
            return await send_streaming(c, COMPL, {"model": "m", "prompt": "p", "max_tokens": 3},
                                        request_id="r", cell_id="c", scheduled_at=0.0, clock=Clock())

    return asyncio.run(go())


def _ev(text: str | None, finish: str | None = None) -> bytes:
    import json
    obj = {"model": "m", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode()


def test_sse_split_across_reads_crlf_comments() -> None:
    usage = b'data: {"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}'
    raw = (b": keep-alive\r\n\r\n" + _ev("a") + b"\r\n\r\n" + _ev("") + b"\n\n" + _ev("b") + b"\n\n"
           + _ev("", "length") + b"\n\n" + usage + b"\n\ndata: [DONE]\n\n")
    pieces = [raw[i:i + 7] for i in range(0, len(raw), 7)]            # split mid-line everywhere
    r = _mock_record(pieces)
    assert r.ok, r.error
    assert r.output_text == "ab" and len(r.chunk_times) == 2          # empty text is not a chunk
    assert r.finish_reason == "length" and (r.prompt_tokens, r.output_tokens) == (1, 2)


def test_sse_errors_are_data() -> None:
    r = _mock_record([_ev("a") + b"\n\n", b'data: {"error": {"message": "engine died"}}\n\n'])
    assert r.error == "StreamError: engine died" and r.output_text == "a" and not r.ok
    r = _mock_record([_ev("a") + b"\n\n"])                             # no finish, no [DONE]
    assert r.error.startswith("IncompleteStream")
    r = _mock_record([b"data: {not json\n\n"])
    assert r.error.startswith("ProtocolError")
    r = _mock_record([_ev("a", "stop")])                               # EOF without blank line
    assert r.ok and r.output_text == "a"
    r = _mock_record([b'{"error":"overloaded"}'], status=429)
    assert r.http_status == 429 and r.error.startswith("HTTPStatusError: 429") and "overloaded" in r.error
