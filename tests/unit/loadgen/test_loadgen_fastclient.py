"""The fast client against the httpx reference: the same streams must give the same records
(token counts, text, finish, usage, status, error class), including the error cases."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import pytest
from servebench.loadgen import client as httpx_client
from servebench.loadgen import fastclient
from servebench.loadgen.engine import LoadSpec, run_load_sync
from servebench.records import RequestRecord
from servebench.loadgen.stream import StreamState
from servebench.metrics import ttft_s

CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"


def ev(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def chat(content: Any = None, finish: Any = None, **delta: Any) -> dict:
    d = dict(delta)
    if content is not None:
        d["content"] = content
    return {"id": "x", "model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def usage(p: int, c: int, choices: list | None = None) -> dict:
    return {"id": "x", "model": "m", "choices": choices or [],
            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}}


def chunked(body: bytes, sizes: int = 0) -> bytes:
    """Chunked transfer encoding; ``sizes`` > 0 cuts the body into HTTP chunks of that size."""
    parts = [body[i:i + sizes] for i in range(0, len(body), sizes)] if sizes else [body]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
NORMAL = (ev(chat("", role="assistant")) + ev(chat("Hel")) + ev(chat("lo")) + ev(chat(" w")) +
          ev(chat(None, "length")) + ev(usage(3, 3)) + b"data: [DONE]\n\n")
SCENARIOS: dict[str, list[bytes]] = {
    # one write, one HTTP chunk per event
    "normal": [HEAD + chunked(NORMAL, 40)],
    # CRLF line ends, comments, events split over reads and HTTP chunks
    "crlf_split": [HEAD + chunked(b": ping\r\n\r\n" + NORMAL.replace(b"\n", b"\r\n"), 7)],
    # escapes, unicode, reasoning-only deltas, empty content, spaces in JSON
    "escapes": [HEAD + chunked(ev(chat("", role="assistant")) + ev(chat("a\"b\\n")) +
                               ev(chat(None, reasoning_content="think")) + ev(chat("é✓")) +
                               b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "sp"}, "finish_reason": null}]}\n\n'
                               + ev(chat("", reasoning_content="more")) + ev(chat("z")) +
                               ev(chat(None, "stop")) + ev(usage(1, 6)) + b"data: [DONE]\n\n", 64)],
    "completions_continuous": [HEAD + chunked(b"".join(
        ev({"model": "m", "choices": [{"index": 0, "text": t, "finish_reason": f}],
            "usage": {"prompt_tokens": 2, "completion_tokens": c}})
        for t, f, c in [("ab", None, 2), ("c", None, 3), ("", "length", 3)]) + ev(usage(2, 3))
        + b"data: [DONE]\n\n", 50)],
    "no_done": [HEAD + chunked(ev(chat("", role="assistant")) + ev(chat("a")) + ev(chat("b")))],
    "eof_mid_body": [HEAD + b"%x\r\n%s\r\n" % (len(ev(chat("a"))), ev(chat("a")))],
    "status_500": [b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 33\r\n\r\n" + b'{"error":{"message":"exploded!"}}'],
    "stream_error": [HEAD + chunked(ev(chat("a")) + b'data: {"error":{"message":"engine died"}}\n\n')],
    "content_length": [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
                       % len(NORMAL) + NORMAL],
    "until_close": [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                    + NORMAL],
    # pieces written with pauses: several reads per event and events per read
    "trickle": [HEAD, chunked(NORMAL[:30])[:-5], chunked(NORMAL[30:31])[:-5],
                *(lambda c: [c[:2], c[2:4], c[4:-1], c[-1:]])(chunked(NORMAL[31:])[:-5]),
                b"0\r\n", b"\r\n"],
    # keep-alive implied, but the server closes right after each response (llama.cpp)
    "close_after": [HEAD + chunked(NORMAL)],
    # responses that break the protocol: the server's error in the record, never a crash
    "bad_chunk_size": [HEAD + b"zz\r\n" + ev(chat("a")) + b"\r\n0\r\n\r\n"],
    "bad_status_line": [b"HTTP/1.1 OK fine\r\nContent-Length: 0\r\n\r\n"],
    "bad_event_shape": [HEAD + chunked(ev(chat("a")) + ev({"model": "m", "choices": "oops"}) +
                                       b"data: [DONE]\n\n")],
}
CLOSE_AFTER = {"eof_mid_body", "until_close", "close_after"}


class ScriptedServer:
    """Serves the scenario named in the ``x-scenario`` header; pieces written 2 ms apart."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    hdr = {k.strip().lower(): v.strip() for k, _, v in
                           (ln.partition(b":") for ln in head.split(b"\r\n")[1:] if ln)}
                    await reader.readexactly(int(hdr[b"content-length"]))
                    name = hdr[b"x-scenario"].decode()
                    for i, piece in enumerate(SCENARIOS[name]):
                        if i:
                            await asyncio.sleep(0.002)
                        writer.write(piece)
                    await writer.drain()
                    if name in CLOSE_AFTER:
                        await asyncio.sleep(0.01)
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        async def main() -> None:
            self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(main(), self.loop)
        ready.wait(5)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def server():
    s = ScriptedServer()
    yield s
    s.close()


def summary(r) -> dict:
    err = r.error
    if err and not err.startswith(("HTTPStatusError", "StreamError", "IncompleteStream")):
        err = err.split(":", 1)[0]  # transport errors: the class is the contract, not the wording
    return dict(status=r.http_status, error=err, text=r.output_text, tokens=r.chunk_tokens,
                n_chunks=len(r.chunk_times), finish=r.finish_reason, prompt=r.prompt_tokens,
                output=r.output_tokens, model=r.served_model, ok=r.ok,
                first_is_chunk=(r.first_chunk_at == r.chunk_times[0]) if r.chunk_times else None)


def run(server, name: str, client: str, path: str = CHAT, n: int = 3):
    res = run_load_sync(f"http://127.0.0.1:{server.port}", path,
                        [{"model": "m", "max_tokens": 3}] * n, LoadSpec.closed(1), cell_id=name,
                        headers={"x-scenario": name}, client=client, timeout_s=5,
                        processes=1)
    return [summary(r) for r in res.records], res


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fast_client_matches_httpx_reference(server, name: str) -> None:
    path = COMPL if name.startswith("completions") else CHAT
    fast, fres = run(server, name, "fast", path)
    ref, _ = run(server, name, "httpx", path)
    assert fast == ref
    assert fres.client == "fast"
    r = fres.records[0]
    assert r.scheduled_at <= r.sent_at <= r.done_at
    assert list(r.chunk_times) == sorted(r.chunk_times)


def test_expected_records(server) -> None:
    (s, *_), _ = run(server, "normal", "fast")
    assert s["ok"] and s["text"] == "Hello w" and s["tokens"] == [1, 1, 1]
    assert (s["finish"], s["prompt"], s["output"]) == ("length", 3, 3)
    (s, *_), _ = run(server, "escapes", "fast")
    assert s["text"] == 'a"b\\né✓spz' and s["n_chunks"] == 6 and s["ok"]
    (s, *_), _ = run(server, "completions_continuous", "fast", COMPL)
    assert s["tokens"] == [2, 1] and s["text"] == "abc"
    assert run(server, "no_done", "fast")[0][0]["error"] == "IncompleteStream: stream ended without finish_reason or [DONE]"
    assert run(server, "eof_mid_body", "fast")[0][0]["error"] == "RemoteProtocolError"
    assert run(server, "status_500", "fast")[0][0]["error"] == \
        'HTTPStatusError: 500 Internal Server Error: {"error":{"message":"exploded!"}}'
    assert run(server, "stream_error", "fast")[0][0]["error"] == "StreamError: engine died"
    assert all(s["ok"] for s in run(server, "close_after", "fast", n=6)[0])  # retried once


@pytest.mark.parametrize("client", ["fast", "httpx"])
def test_a_malformed_response_is_the_servers_protocol_error(server, client) -> None:
    for name in ("bad_chunk_size", "bad_status_line"):
        (s, *_), _ = run(server, name, client)
        assert s["error"] == "RemoteProtocolError" and not s["ok"], name
    (s, *_), res = run(server, "bad_event_shape", client)
    assert s["error"] == "ProtocolError" and s["text"] == "a"
    assert "unexpected SSE event shape" in res.records[0].error


@pytest.mark.parametrize("event", [
    b'{"choices":"oops"}', b'{"choices":[1]}', b'{"choices":{"0":{}}}',
    b'{"choices":[{"delta":"x"}]}', b'{"choices":[{"delta":{"content":5}}]}',
    b'{"choices":[{"text":["a"]}]}', b'{"usage":[1]}',
    b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":"5"}}',
])
def test_an_event_of_the_wrong_shape_is_the_servers_protocol_error(event: bytes) -> None:
    st = StreamState(RequestRecord("r", "c", 0.0))
    st.on_event(event, 1.0)
    assert st.error is not None and st.error.startswith("ProtocolError: unexpected SSE event")


def test_a_parser_failure_on_a_well_formed_event_is_raised() -> None:
    st = StreamState(RequestRecord("r", "c", 0.0))
    st.rec.chunk_times = None  # type: ignore[assignment]  # stands for a bug of ours
    with pytest.raises(AttributeError):
        st.on_event(json.dumps(chat("a")).encode(), 1.0)
    assert st.error is None


@pytest.mark.parametrize("client", ["fast", "httpx"])
def test_a_bug_of_the_client_is_raised_not_relabelled(server, monkeypatch, client) -> None:
    """A failure of the client's own code while it reads a good response is not the server's:
    the load raises it, with the traceback of where it happened, instead of recording it as a
    RemoteProtocolError (or anything else) and carrying on."""

    def broken_frame(buf: bytes) -> tuple[list[bytes], bytes]:
        raise TypeError("a bug of ours")

    monkeypatch.setattr(fastclient if client == "fast" else httpx_client, "frame", broken_frame)
    with pytest.raises(TypeError, match="a bug of ours") as err:
        run(server, "normal", client)
    assert any(entry.name == "broken_frame" for entry in err.traceback)


def test_collect_text_off_keeps_counts(server) -> None:
    res = run_load_sync(f"http://127.0.0.1:{server.port}", CHAT, [{"model": "m"}] * 2,
                        LoadSpec.closed(1), cell_id="t", headers={"x-scenario": "normal"},
                        client="fast", collect_text=False, processes=1)
    for r in res.records:
        assert r.ok and r.chunk_tokens == [1, 1, 1]
        assert r.output_text in ("", "Hel")  # only events that took the full decode add text


def test_connection_refused_both_clients() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for client in ("fast", "httpx"):
        res = run_load_sync(f"http://127.0.0.1:{port}", CHAT, [{"model": "m"}] * 2,
                            LoadSpec.closed(2), cell_id="x", client=client, timeout_s=2,
                            processes=1)
        assert all(r.http_status is None and r.error.startswith("ConnectError") for r in res.records)


def test_timestamps_against_server_truth() -> None:
    """Kernel receive timestamps (client and server) put the client's TTFT and chunk times on
    the server's truth to well under a millisecond, even with 32 streams in flight."""
    import numpy as np
    from servebench.testing import FakeServerConfig, serve_in_subprocess

    cfg = FakeServerConfig(ttft_s=0.02, itl_s=0.005, output_tokens=8)
    with serve_in_subprocess(cfg) as srv:
        res = run_load_sync(srv.url, CHAT, [{"model": "m", "max_tokens": 8}] * 96,
                            LoadSpec.closed(32), warmup=32, cell_id="k", processes=1)
        truth = {q["request_id"]: q for q in srv.truth()["requests"]}
    ttft, chunk = [], []
    for r in res.records:
        q = truth[r.request_id]
        assert r.ok and q["received_at"] <= q["received_loop_at"]
        ttft.append(ttft_s(r) - (q["first_chunk_at"] - q["received_at"]))
        chunk.extend(np.array(r.chunk_times) - np.array(q["chunk_times"]))
    slack = 0.002 + res.loop_lag.p95_ms / 1000  # where kernel timestamps are unavailable
    assert -0.0005 < np.median(ttft) < slack, np.percentile(ttft, [50, 99])
    assert -0.0005 < np.median(chunk) < slack and min(chunk) > -0.001


def test_one_rule_picks_the_transport_by_scheme() -> None:
    """Every entry point defaults to 'auto': plain http gets the fast client, anything else
    (a hosted API's https) httpx -- the fast client speaks no TLS."""
    import inspect

    from servebench.loadgen.engine import run_load
    from servebench.loadgen.transport import resolve_client

    assert inspect.signature(run_load).parameters["client"].default == "auto"
    assert resolve_client("auto", "http://127.0.0.1:8080") == "fast"
    assert resolve_client("auto", "https://api.example.com/v1") == "httpx"
    assert resolve_client("httpx", "http://127.0.0.1:8080") == "httpx"
    with pytest.raises(ValueError, match="client must be 'fast', 'httpx' or 'auto'"):
        resolve_client("h2", "http://127.0.0.1:8080")
