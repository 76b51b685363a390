"""The transport contract: the fast client and httpx make the same records from the same
streams -- a complete chat stream, multi-token chunks with cumulative usage, an HTTP error, a
refused connection, a deadline -- and the one rule picks httpx for TLS, which it speaks (a
self-signed https fake server on loopback)."""

from __future__ import annotations

import socket
import subprocess

import pytest
from servebench.loadgen.engine import LoadSpec, run_load_sync
from servebench.loadgen.transport import resolve_client
from servebench.testing import FakeServerConfig, serve_in_thread

CHAT = "/v1/chat/completions"
TRANSPORTS = ("fast", "httpx")
SAME = ("request_id", "http_status", "ok", "output_tokens", "prompt_tokens", "finish_reason",
        "served_model", "output_text", "chunk_tokens", "error")


def body(n: int = 6, **extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "one two three"}],
            "max_tokens": n, "stream_options": {"include_usage": True}, **extra}


def _records(client: str, url: str, bodies: list[dict], **kw) -> list[dict]:
    res = run_load_sync(url, kw.pop("path", CHAT), bodies, LoadSpec.closed(1), cell_id="c",
                        client=client, **kw)
    return [{k: getattr(r, k) for k in SAME} for r in res.records]


@pytest.mark.parametrize("config", [
    FakeServerConfig(itl_s=0.001),
    FakeServerConfig(tokens_per_chunk=3, itl_s=0.001),
], ids=["token-per-chunk", "multi-token-chunks"])
def test_both_transports_make_the_same_records_from_one_stream(config):
    bodies = [body(6), body(9, stream_options={"include_usage": True,
                                               "continuous_usage_stats": True}),
              body(4, fake_status=503)]
    with serve_in_thread(config) as srv:
        fast, reference = (_records(c, srv.url, bodies) for c in TRANSPORTS)
    assert fast == reference
    assert fast[0]["ok"] and fast[0]["output_tokens"] == 6
    # with cumulative usage on every chunk the chunks' token counts add up to the total
    assert fast[1]["ok"] and sum(fast[1]["chunk_tokens"]) == fast[1]["output_tokens"] == 9
    assert fast[2]["http_status"] == 503 and fast[2]["error"].startswith("HTTPStatusError: 503")


@pytest.mark.parametrize("client", TRANSPORTS)
def test_failures_are_records_worded_alike(client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    [refused] = _records(client, f"http://127.0.0.1:{port}", [body()], timeout_s=2)
    assert refused["error"].startswith("ConnectError") and refused["http_status"] is None
    with serve_in_thread(FakeServerConfig(ttft_s=1.0)) as srv:
        [late] = _records(client, srv.url, [body()], request_deadline_s=0.1)
        [missing] = _records(client, srv.url, [body()], path="/v1/nope")
    assert late["error"].startswith("DeadlineExceeded")
    assert missing["http_status"] == 404 and missing["error"].startswith("HTTPStatusError: 404")


def test_tls_goes_through_httpx(tmp_path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # httpx trusts it through the environment
    with serve_in_thread(FakeServerConfig(tls=(str(cert), str(key)))) as srv:
        assert srv.url.startswith("https://") and resolve_client("auto", srv.url) == "httpx"
        res = run_load_sync(srv.url, CHAT, [body(5)] * 3, LoadSpec.closed(2), cell_id="tls",
                            trust_env=True)
        with pytest.raises(ValueError, match="plain http only"):
            run_load_sync(srv.url, CHAT, [body()], LoadSpec.closed(1), cell_id="x",
                          client="fast")
    assert res.client == "httpx" and all(r.ok and r.output_tokens == 5 for r in res.records)
