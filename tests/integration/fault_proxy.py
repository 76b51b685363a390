"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1, for the fault suite (test_faults.py).

It forwards every request to a real server (llama-server) and answers with that server's real
response -- except for the chat requests a test picks (``Faults.match``: by ``max_tokens``, so
one workload of a sweep is hit and the other is not), whose real stream it breaks in one named
way (``Faults.kind``, see FAULTS). Responses go back chunked with keep-alive, as llama-server's
own do, so both of the suite's HTTP clients meet the fault exactly as they would meet it from a
server. Each request goes upstream on a connection of its own, so what a client meets is the
server's answer or the injected fault, never a stale pooled connection of the proxy's.

Test support only: nothing in the product imports it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Self

import httpx

FAULTS = {
    "http_500": "answer 500 with an error body, the server never asked",
    "http_503": "answer 503 (overloaded)",
    "http_429": "answer 429 with Retry-After: 1",
    "bad_json": "the third event of the stream is not JSON",
    "no_done": "the stream ends (cleanly) without its [DONE] event",
    "cut": "after two events, half an event, then the connection closes",
    "error_event": "after two events, an {\"error\": ...} event, then the end",
    "stall": "after two events, nothing more (the client's read deadline must end it)",
    "slow_first_byte": "the real stream, after a delay of Faults.delay_s",
    "wrong_model": "every event names another model",
}


@dataclass
class Faults:
    kind: str | None = None
    match: int | None = None  # fault chat requests with this max_tokens (None: all of them)
    every: int = 1  # ... every n-th of those (1: each)
    delay_s: float = 1.0
    seen: int = 0  # matching chat requests so far
    faulted: int = 0  # of which faulted
    hold: list = field(default_factory=list)  # stalled connections, closed at stop

    def pick(self, body: dict) -> str | None:
        if self.kind is None or (self.match is not None and body.get("max_tokens") != self.match):
            return None
        self.seen += 1
        if (self.seen - 1) % self.every:
            return None
        self.faulted += 1
        return self.kind


class FaultProxy:
    """``with FaultProxy(upstream) as proxy:`` -- ``proxy.url`` in front of ``upstream``."""

    def __init__(self, upstream: str, faults: Faults | None = None):
        self.upstream = upstream.rstrip("/")
        self.faults = faults or Faults()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self._stopped = asyncio.Event()
        # each forwarded request on an upstream connection of its own: llama-server advertises
        # keep-alive but closes the connection after a streamed response, and a pooled one
        # reused before its close arrived fails without a response -- which the proxy would pass
        # on as a dropped connection no server ever dropped (the client's retry on a fresh
        # connection to the proxy would meet the next stale upstream one)
        self._client = httpx.AsyncClient(base_url=self.upstream, timeout=None,
                                         limits=httpx.Limits(max_keepalive_connections=0))
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._stopped.set()
        for writer in self.faults.hold:
            writer.close()
        if self._server is not None:
            self._server.close()
        # the keep-alive connections still waiting for a request end here, while the loop runs
        # (left to the garbage collector they close their writers on a closed loop)
        serving = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        await self._client.aclose()

    # -- one client connection, keep-alive ---------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                headers = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                kind = None
                if method == "POST" and path.endswith("/chat/completions"):
                    kind = self.faults.pick(json.loads(body))
                keep = await self._answer(writer, method, path, headers, body, kind)
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if writer not in self.faults.hold:
                writer.close()

    async def _answer(self, writer, method, path, headers, body, kind) -> bool:
        """Write one response; False when the connection must end after it."""
        if kind in ("http_500", "http_503", "http_429"):
            status = int(kind[-3:])
            extra = {"Retry-After": "1"} if status == 429 else {}
            payload = json.dumps({"error": {"message": f"injected {status}", "code": status}})
            await self._head(writer, status, "application/json", extra)
            await self._chunk(writer, payload.encode())
            await self._chunk(writer, b"")
            return True
        forward = {k: v for k, v in headers.items()
                   if k in ("content-type", "authorization", "accept")}
        if kind == "slow_first_byte":
            await asyncio.sleep(self.faults.delay_s)
        async with self._client.stream(method, path, content=body, headers=forward) as up:
            await self._head(writer, up.status_code,
                             up.headers.get("content-type", "application/octet-stream"))
            if kind is None or kind == "slow_first_byte":
                async for piece in up.aiter_raw():
                    await self._chunk(writer, piece)
                await self._chunk(writer, b"")
                return True
            return await self._broken_stream(writer, up, kind)

    async def _broken_stream(self, writer, up: httpx.Response, kind: str) -> bool:
        buffer, sent = b"", 0
        async for piece in up.aiter_raw():
            buffer += piece
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                sent += 1
                if kind == "bad_json" and sent == 3:
                    event = b'data: {"choices": [{"delta": {"content": "x"'
                elif kind == "no_done" and event.strip() == b"data: [DONE]":
                    continue
                elif kind == "wrong_model" and event.startswith(b"data: {"):
                    obj = json.loads(event[6:])
                    obj["model"] = "some-other-model"
                    event = b"data: " + json.dumps(obj).encode()
                elif sent == 3 and kind == "cut":
                    await self._chunk(writer, b'data: {"choices": [{"del')
                    writer.transport.abort()  # mid-event, mid-chunk: the connection is gone
                    return False
                elif sent == 3 and kind == "error_event":
                    event = b'data: {"error": {"message": "injected: CUDA error: out of memory"}}'
                    await self._chunk(writer, event + b"\n\n")
                    await self._chunk(writer, b"")
                    return True
                elif sent == 3 and kind == "stall":
                    self.faults.hold.append(writer)  # kept open, silent, until the proxy stops
                    await self._stopped.wait()
                    return False
                await self._chunk(writer, event + b"\n\n")
        await self._chunk(writer, b"")
        return True

    @staticmethod
    async def _head(writer, status: int, content_type: str, extra: dict | None = None) -> None:
        lines = [f"HTTP/1.1 {status} {'OK' if status < 300 else 'Injected'}",
                 f"Content-Type: {content_type}", "Transfer-Encoding: chunked",
                 "Connection: keep-alive", *(f"{k}: {v}" for k, v in (extra or {}).items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()

    @staticmethod
    async def _chunk(writer, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
