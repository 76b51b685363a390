"""The fault proxy itself (fault_proxy.py): what reaches the client is the upstream's answer or
the injected fault, never a failure of the proxy's own connections to the upstream."""

import socket
import threading

import httpx
import pytest
from fault_proxy import FaultProxy

pytestmark = pytest.mark.integration


def _closing_upstream(listener: socket.socket) -> None:
    """Answers the first request of each connection (chunked, ``Keep-Alive`` advertised) and
    closes the connection, unanswered, when a second request comes on it: what llama-server
    does after a streamed response, with its close arriving only once the next request went."""
    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            body = b'data: {"ok": true}\n\n'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
                         + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
            conn.recv(65536)  # the next request on this connection: closed, never answered

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # the listener closed: the test is over
            return
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def test_an_upstream_closing_its_connections_after_each_answer_is_no_fault():
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_closing_upstream, args=(listener,), daemon=True).start()
    try:
        upstream = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with FaultProxy(upstream) as proxy, httpx.Client(base_url=proxy.url,
                                                         timeout=5) as client:
            for _ in range(4):  # back to back, on one keep-alive connection to the proxy
                resp = client.post("/v1/chat/completions", json={"max_tokens": 4})
                assert resp.status_code == 200
                assert resp.text == 'data: {"ok": true}\n\n'
    finally:
        listener.close()
