"""An HTTP proxy on 127.0.0.1 in front of a moto S3 server that answers chosen requests with
S3's own errors (503 SlowDown, 500 InternalError) instead of forwarding them, for the storage
fault tests. Test support only: nothing in the product imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

import httpx

ERRORS = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
}


class S3FaultProxy:
    """``with S3FaultProxy(moto_url, fault) as proxy:`` -- ``proxy.url`` in front of moto.
    ``fault(method, path)`` returns the status to answer (503, 500) or None to forward."""

    def __init__(self, upstream: str, fault: Callable[[str, str], int | None]):
        self.upstream, self.fault = upstream.rstrip("/"), fault
        self.injected: list[tuple[str, str, int]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts = []  # HTTP chunked framing (the SDK streams uploads this way)
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _any(self):
                body = self._body()
                status = proxy.fault(self.command, self.path)
                if status is not None:
                    proxy.injected.append((self.command, self.path, status))
                    code, message = ERRORS[status]
                    payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                               f"<Message>{message}</Message></Error>").encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "expect",
                                                "connection", "transfer-encoding")}
                with httpx.Client(timeout=30) as client:
                    up = client.request(self.command, proxy.upstream + self.path,
                                        content=body, headers=headers)
                self.send_response(up.status_code)
                for k, v in up.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                         "content-encoding"):
                        self.send_header(k, v)
                # HEAD: the object's size, as the server gave it
                size = up.headers.get("content-length", "0") if self.command == "HEAD" \
                    else str(len(up.content))
                self.send_header("Content-Length", size)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(up.content)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
