"""A small, fast, real OpenAI-compatible streaming server for tests and client benchmarks.

Serves on 127.0.0.1 only:

* ``POST /v1/chat/completions`` and ``POST /v1/completions`` — SSE streams (``stream: true``)
  or plain JSON. Chat streams start with a role chunk (``delta: {"role": "assistant",
  "content": ""}``, sent on receipt, carrying no text), then one chunk per ``tokens_per_chunk``
  tokens, then a finish chunk (empty delta, ``finish_reason`` ``"length"`` when it stopped at
  ``max_tokens``, else ``"stop"``), then a usage chunk when ``stream_options.include_usage`` is
  set (cumulative usage in every chunk with ``stream_options.continuous_usage_stats``), then
  ``data: [DONE]``.
* ``GET /health``, ``GET /v1/models``.
* ``GET /_truth`` — JSON ground truth: per request the server-side epoch time (seconds) it was
  received, the write time of every content chunk, and when it finished; plus
  ``max_in_flight``. ``POST /_reset`` clears it. In-process: :meth:`FakeOpenAIServer.truth`.

Timing: the first content chunk is written ``ttft_s`` after the request was read, content chunk
``i`` at ``ttft_s + i * itl_s`` (scheduled on absolute times, so no drift). Output length is
``output_tokens`` if configured (capped by ``max_tokens``), else the request's ``max_tokens`` /
``max_completion_tokens`` (as with ``ignore_eos``), else ``default_max_tokens``. Prompt tokens are
counted as whitespace-separated words (or list length for token-id prompts). Per-request
overrides via body fields ``fake_status`` (respond with that HTTP status and an error body),
``fake_ttft_s`` and ``fake_itl_s``.

Implementation choice: plain asyncio streams (stdlib) with a minimal HTTP/1.1 keep-alive parser
and chunked transfer encoding, not uvicorn+starlette. Measured on this 2-core box against a minimal
uvicorn(httptools)+starlette ``StreamingResponse`` emitting the same SSE: server CPU per chunk is
about the same (~4 us/chunk flat out, ~12-15 us/chunk paced at 2 ms over 64 streams, both), so
speed does not decide it. What does: the ground-truth write time is stamped right at the
``transport.write`` of each pre-framed chunk (no ASGI queue in between), framing is under our
control, there is no dependency beyond the stdlib, and it runs in a background thread without
uvicorn's signal handling and lifespan machinery.

Run standalone: ``python -m servebench.testing.fake_openai_server --port 8000 --ttft-ms 50
--itl-ms 10``. In tests: ``with serve_in_thread(FakeServerConfig(...)) as srv: srv.url`` (fast,
shares the GIL) or ``with serve_in_subprocess(...) as srv:`` (own process; use when timing
accuracy matters).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

HOST = "127.0.0.1"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class FakeServerConfig:
    """Behaviour of the fake server. Times in seconds.

    Attributes:
        ttft_s: delay from request read to first content chunk.
        itl_s: interval between consecutive content chunks.
        output_tokens: fixed output length (capped by ``max_tokens``); ``None`` honours
            ``max_tokens``/``max_completion_tokens``.
        default_max_tokens: output length when neither is given.
        tokens_per_chunk: tokens per content chunk (>1 mimics speculative decoding/batching).
        served_model: ``model`` field to return; ``None`` echoes the request's model.
        batch_events: most content events per socket write when events are already due
            (flat out, ``itl_s == 0``): they go out in one write, each still its own HTTP chunk,
            and share one ground-truth time. Paced events are written one by one when due.
        uvloop: run the standalone/subprocess server on uvloop (when installed).
        kernel_timestamps: ``received_at`` is the kernel's receive time of the request's first
            byte (Linux ``SO_TIMESTAMPNS``, stdlib event loop only — not with ``uvloop``);
            ``received_loop_at`` is always when the server's event loop read it. Off (or
            uvloop): both are the latter.
    """

    ttft_s: float = 0.0
    itl_s: float = 0.0
    output_tokens: int | None = None
    default_max_tokens: int = 16
    tokens_per_chunk: int = 1
    served_model: str | None = None
    batch_events: int = 32
    uvloop: bool = False
    kernel_timestamps: bool = True
    tls: tuple[str, str] | None = None  # (certificate, key) PEM files: serve https


def _count_prompt_tokens(body: dict[str, Any]) -> int:
    """Whitespace word count of the prompt/messages (token-id list prompts: their length)."""
    if "messages" in body:
        n = 0
        for m in body.get("messages") or []:
            c = m.get("content", "")
            if isinstance(c, list):  # content parts
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            n += len(str(c).split())
        return n
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], str):
            return sum(len(p.split()) for p in prompt)
        return len(prompt)
    return len(str(prompt).split())


def _chunk(payload: bytes) -> bytes:
    """Frame ``payload`` as one HTTP/1.1 chunked-transfer chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else -1)


def _parse_head(head: bytes) -> tuple[bytes, bytes, bytes, dict[bytes, bytes]] | None:
    """An HTTP/1.x request head (through its blank line) as method, target, version and
    headers (names lowercased); None where its request line is malformed."""
    lines = head[:-4].split(b"\r\n")
    try:
        method, target, version = lines[0].split(b" ", 2)
    except ValueError:
        return None
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    return method, target, version, headers


def _json_response(status: int, obj: Any) -> bytes:
    data = json.dumps(obj).encode()
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, _REASONS.get(status, "Status").encode(), len(data), data))


class _TimedReader(asyncio.StreamReader):
    """A StreamReader that stamps when data arrives into an empty buffer (a request's first
    byte, with one request at a time per keep-alive connection): ``first_byte_at`` is the
    kernel's receive time when available, ``first_byte_loop_at`` when this process read it."""

    def __init__(self, now: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self._now = now
        self.first_byte_at: float | None = None
        self.first_byte_loop_at: float | None = None

    def feed_data(self, data: bytes, kernel_at: float | None = None) -> None:
        if not self._buffer:
            self.first_byte_loop_at = self._now()
            self.first_byte_at = kernel_at if kernel_at is not None else self.first_byte_loop_at
        super().feed_data(data)


class _TimedProtocol(asyncio.StreamReaderProtocol):
    """Reads the socket itself with ``recvmsg`` to get kernel receive timestamps
    (``SO_TIMESTAMPNS``, Linux), so ``received_at`` in the truth is when the request reached the
    server, not when this (possibly busy) event loop got round to it. The transport still does
    all writes; its own reading is paused and a duplicate descriptor is watched instead (the
    event loop allows one reader per descriptor number). Without kernel timestamps the
    transport reads as usual and the time is stamped in ``feed_data``."""

    def __init__(self, reader: _TimedReader, cb: Any, *, loop: asyncio.AbstractEventLoop,
                 kernel_timestamps: bool) -> None:
        super().__init__(reader, cb, loop=loop)
        self._timed_reader = reader
        self._ev_loop = loop
        # only the stdlib loop stops reading a paused transport at once; uvloop's (libuv) still
        # drains the socket, so there the loop's own stamp is used
        self._kernel = kernel_timestamps and isinstance(loop, asyncio.BaseEventLoop)
        self._dup: socket.socket | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._kernel:
            return
        sock = transport.get_extra_info("socket")
        try:
            dup = socket.socket(fileno=os.dup(sock.fileno()))
            dup.setblocking(False)
            dup.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except (OSError, AttributeError):
            return
        transport.pause_reading()  # type: ignore[attr-defined]
        self._dup = dup
        self._ev_loop.add_reader(dup.fileno(), self._readable)

    def _readable(self) -> None:
        dup = self._dup
        if dup is None:
            return
        try:
            data, anc, _, _ = dup.recvmsg(1 << 16, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, anc = b"", []
        if not data:
            self._close_dup()
            self._timed_reader.feed_eof()
            return
        kernel_at = None
        if anc:
            sec, ns = struct.unpack_from("@qq", anc[0][2])
            now = self._timed_reader._now()
            kernel_at = min(now, sec + ns * 1e-9 + (now - time.time()))
        self._timed_reader.feed_data(data, kernel_at)

    def _close_dup(self) -> None:
        if self._dup is not None:
            self._ev_loop.remove_reader(self._dup.fileno())
            self._dup.close()
            self._dup = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._close_dup()
        super().connection_lost(exc)


class FakeOpenAIServer:
    """The server; run it with :meth:`start` inside a running event loop."""

    def __init__(self, config: FakeServerConfig | None = None) -> None:
        self.config = config or FakeServerConfig()
        self.port: int = 0
        self._server: asyncio.base_events.Server | None = None
        self._truth: list[dict[str, Any]] = []
        self._ids = itertools.count()
        self.in_flight = 0
        self.max_in_flight = 0
        self._received_loop = 0.0  # set per request by _handle, read synchronously by _generate
        self._anchor_perf = time.perf_counter()
        self._anchor_wall = time.time()

    # -- public -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:43121``."""
        return f"{'https' if self.config.tls else 'http'}://{HOST}:{self.port}"

    def now(self) -> float:
        """Server clock: epoch seconds with perf_counter resolution."""
        return self._anchor_wall + (time.perf_counter() - self._anchor_perf)

    async def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1:``port`` (0 picks a free port; read it from :attr:`port`)."""
        loop = asyncio.get_running_loop()

        def factory() -> asyncio.StreamReaderProtocol:
            reader = _TimedReader(self.now, limit=2**16, loop=loop)
            # TLS reads through the SSL layer, not the socket: loop receive times then
            return _TimedProtocol(reader, self._handle, loop=loop,
                                  kernel_timestamps=self.config.kernel_timestamps
                                  and not self.config.tls)

        context = None
        if self.config.tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.config.tls)
        self._server = await loop.create_server(factory, HOST, port, backlog=4096, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and close open connections."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                self._server.close_clients()  # py3.13+; on 3.11 handlers end on their own
            with contextlib.suppress(asyncio.TimeoutError):  # 3.12 waits for open keep-alives
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def truth(self) -> dict[str, Any]:
        """Snapshot of ground truth: ``{"requests": [...], "max_in_flight": int}``. Each request:
        ``id``, ``request_id`` (``x-request-id`` header), ``path``, ``status``, ``received_at``
        (kernel receive time of its first byte where supported), ``received_loop_at`` (when the
        event loop read it), ``first_chunk_at``, ``chunk_times``, ``done_at`` (epoch seconds),
        ``output_tokens``, ``prompt_tokens``, ``aborted``."""
        reqs = [{**r, "chunk_times": list(r["chunk_times"])} for r in list(self._truth)]
        return {"requests": reqs, "max_in_flight": self.max_in_flight}

    def reset(self) -> None:
        """Forget recorded truth and the in-flight high-water mark."""
        self._truth = []
        self.max_in_flight = self.in_flight

    # -- HTTP plumbing ----------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                # when the request's first byte reached this process (not when this task got to
                # run: with many requests arriving together that can be milliseconds later)
                received = getattr(reader, "first_byte_at", None) or self.now()
                received_loop = getattr(reader, "first_byte_loop_at", None) or received
                parsed = _parse_head(head)
                if parsed is None:
                    return
                method, target, version, headers = parsed
                if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                    await self._send_json(writer, 411, {"error": {"message": "no chunked bodies"}})
                    return
                n = int(headers.get(b"content-length", b"0") or 0)
                raw = await reader.readexactly(n) if n else b""
                keep_alive = version == b"HTTP/1.1" and headers.get(b"connection", b"").lower() != b"close"
                self._received_loop = received_loop
                await self._dispatch(method, target.split(b"?", 1)[0], headers, raw, writer, received)
                if not keep_alive or writer.is_closing():
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        writer.write(_json_response(status, obj))
        await writer.drain()

    async def _dispatch(self, method: bytes, path: bytes, headers: dict[bytes, bytes], raw: bytes,
                        writer: asyncio.StreamWriter, received: float) -> None:
        if method == b"GET" and path == b"/health":
            return await self._send_json(writer, 200, {"status": "ok"})
        if method == b"GET" and path == b"/_truth":
            return await self._send_json(writer, 200, self.truth())
        if method == b"POST" and path == b"/_reset":
            self.reset()
            return await self._send_json(writer, 200, {"ok": True})
        if method == b"GET" and path == b"/v1/models":
            name = self.config.served_model or "fake-model"
            return await self._send_json(writer, 200, {"object": "list", "data": [{"id": name, "object": "model"}]})
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            try:
                body = json.loads(raw)
            except ValueError:  # JSONDecodeError, UnicodeDecodeError
                body = None
            if not isinstance(body, dict):
                return await self._send_json(writer, 400, {"error": {"message": "body is not a JSON object"}})
            return await self._generate(path == b"/v1/chat/completions", body, headers, writer, received)
        return await self._send_json(writer, 404, {"error": {"message": f"no route {path.decode()}"}})

    # -- generation -------------------------------------------------------------------------
    async def _generate(self, chat: bool, body: dict[str, Any], headers: dict[bytes, bytes],
                        writer: asyncio.StreamWriter, received: float) -> None:
        rid = f"cmpl-{next(self._ids)}"
        truth: dict[str, Any] = {
            "id": rid, "request_id": headers.get(b"x-request-id", b"").decode() or None,
            "path": "/v1/chat/completions" if chat else "/v1/completions", "status": 200,
            "received_at": received, "received_loop_at": self._received_loop, "first_chunk_at": None, "chunk_times": [], "done_at": None,
            "output_tokens": 0, "prompt_tokens": _count_prompt_tokens(body), "aborted": False,
        }
        self._truth.append(truth)
        status = int(body.get("fake_status", 200))
        if status != 200:
            truth["status"] = status
            truth["done_at"] = self.now()
            return await self._send_json(writer, status, {"error": {"message": f"fake error {status}", "code": status}})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._generate_inner(chat, body, writer, truth, rid)
        except (ConnectionError, RuntimeError):
            truth["aborted"] = True
            writer.close()
        finally:
            self.in_flight -= 1
            if truth["done_at"] is None:
                truth["done_at"] = self.now()

    async def _generate_inner(self, chat: bool, body: dict[str, Any], writer: asyncio.StreamWriter,
                              truth: dict[str, Any], rid: str) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if cfg.output_tokens is not None:
            n_out = cfg.output_tokens if max_tokens is None else min(cfg.output_tokens, int(max_tokens))
        else:
            n_out = int(max_tokens) if max_tokens is not None else cfg.default_max_tokens
        finish = "length" if max_tokens is not None and n_out >= int(max_tokens) else "stop"
        ttft = float(body.get("fake_ttft_s", cfg.ttft_s))
        itl = float(body.get("fake_itl_s", cfg.itl_s))
        model = json.dumps(cfg.served_model or body.get("model") or "fake-model")
        created = int(time.time())
        n_prompt = truth["prompt_tokens"]
        sopts = body.get("stream_options") or {}
        include_usage = bool(sopts.get("include_usage"))
        continuous = include_usage and bool(sopts.get("continuous_usage_stats"))
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = b'{"id":"%s","object":"%s","created":%d,"model":%s,"choices":[' % (
            rid.encode(), obj.encode(), created, model.encode())

        def usage(ct: int) -> bytes:
            return b'"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
                n_prompt, ct, n_prompt + ct)

        if not body.get("stream"):
            await asyncio.sleep(max(0.0, ttft + max(n_out - 1, 0) * itl))
            text = "".join(f" t{i}" for i in range(n_out))
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                      if chat else {"index": 0, "text": text, "finish_reason": finish})
            truth["output_tokens"] = n_out
            return await self._send_json(writer, 200, {
                "id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": json.loads(model), "choices": [choice],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}})

        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        if chat:  # role chunk: carries no generated text, must not count as TTFT
            writer.write(_chunk(b"data: " + head + b'{"index":0,"delta":{"role":"assistant","content":""},'
                                b'"finish_reason":null}]}\n\n'))
        tpc = max(1, cfg.tokens_per_chunk)
        batch = max(1, cfg.batch_events)
        times = truth["chunk_times"]
        transport = writer.transport
        pending: list[bytes] = []
        done = 0
        i = 0
        while done < n_out:
            k = min(tpc, n_out - done)
            text = b'"%s"' % b"".join(b" t%d" % j for j in range(done, done + k))
            done += k
            if chat:
                ev = head + b'{"index":0,"delta":{"content":%s},"finish_reason":null}]' % text
            else:
                ev = head + b'{"index":0,"text":%s,"finish_reason":null}]' % text
            if continuous:
                ev += b"," + usage(done)
            payload = b"data: " + ev + b"}\n\n"
            frame = b"%x\r\n%s\r\n" % (len(payload), payload)
            delay = t0 + ttft + i * itl - loop.time()
            if pending and (delay > 0 or len(pending) >= batch):
                # every event already due goes out in one write (one syscall), one timestamp
                if transport.is_closing():
                    raise ConnectionResetError("client went away")
                t = self.now()
                writer.write(b"".join(pending))
                times.extend([t] * len(pending))
                pending.clear()
                if truth["first_chunk_at"] is None:
                    truth["first_chunk_at"] = t
                if transport.get_write_buffer_size() > 65536:
                    await writer.drain()
                delay = t0 + ttft + i * itl - loop.time()
                if delay <= 0:
                    await asyncio.sleep(0)  # stay fair to other streams when running flat out
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(frame)
            i += 1
        truth["output_tokens"] = n_out
        fin_delta = b'"delta":{}' if chat else b'"text":""'
        tail = _chunk(b"data: " + head + b'{"index":0,%s,"finish_reason":"%s"}]%s}\n\n' % (
            fin_delta, finish.encode(), (b"," + usage(done)) if continuous else b""))
        if include_usage:
            tail += _chunk(b"data: " + head + b"]," + usage(done) + b"}\n\n")
        tail += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        if transport.is_closing():
            raise ConnectionResetError("client went away")
        t = self.now()
        writer.write(b"".join(pending) + tail)
        times.extend([t] * len(pending))
        truth["done_at"] = t  # before the drain: a fast client may ask for the truth right away
        if pending and truth["first_chunk_at"] is None:
            truth["first_chunk_at"] = t
        await writer.drain()


@contextlib.contextmanager
def serve_in_thread(config: FakeServerConfig | None = None) -> Iterator[FakeOpenAIServer]:
    """Run a :class:`FakeOpenAIServer` on a free 127.0.0.1 port in a background thread.

    Yields the server (use ``.url``, ``.truth()``, ``.reset()``); stops it on exit.
    """
    server = FakeOpenAIServer(config)
    ready = threading.Event()
    stop: dict[str, Any] = {}
    failure: list[BaseException] = []

    async def main() -> None:
        try:
            await server.start(0)
        except BaseException as exc:  # noqa: BLE001 - surfaced to the caller below
            failure.append(exc)
            ready.set()
            return
        stop["event"] = asyncio.Event()
        stop["loop"] = asyncio.get_running_loop()
        ready.set()
        await stop["event"].wait()
        await server.close()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="fake-openai-server", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("fake server did not start within 10 s")
    if failure:
        raise failure[0]
    try:
        yield server
    finally:
        stop["loop"].call_soon_threadsafe(stop["event"].set)
        thread.join(10)


class SubprocessServer:
    """Handle of a fake server running in a child process (see :func:`serve_in_subprocess`)."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def truth(self) -> dict[str, Any]:
        """Ground truth fetched from ``GET /_truth`` (same shape as the in-process one)."""
        with urllib.request.urlopen(self.url + "/_truth", timeout=10) as resp:
            return json.loads(resp.read())

    def reset(self) -> None:
        """``POST /_reset``."""
        urllib.request.urlopen(urllib.request.Request(self.url + "/_reset", method="POST"), timeout=10).close()


@contextlib.contextmanager
def serve_in_subprocess(config: FakeServerConfig | None = None) -> Iterator[SubprocessServer]:
    """Run the fake server in a child Python process on a free 127.0.0.1 port.

    Use this when timing matters: an in-thread server shares the GIL with the client under test,
    which can delay either side by up to ``sys.getswitchinterval()`` (5 ms).
    """
    cfg = config or FakeServerConfig()
    cmd = [sys.executable, "-m", "servebench.testing.fake_openai_server", "--port", "0",
           "--ttft-ms", str(cfg.ttft_s * 1000), "--itl-ms", str(cfg.itl_s * 1000),
           "--default-max-tokens", str(cfg.default_max_tokens),
           "--tokens-per-chunk", str(cfg.tokens_per_chunk)]
    if cfg.output_tokens is not None:
        cmd += ["--output-tokens", str(cfg.output_tokens)]
    if cfg.served_model is not None:
        cmd += ["--served-model", cfg.served_model]
    cmd += ["--batch-events", str(cfg.batch_events)] + (["--uvloop"] if cfg.uvloop else [])
    cmd += [] if cfg.kernel_timestamps else ["--no-kernel-timestamps"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # "fake OpenAI server on <url>"
        if not line.startswith("fake OpenAI server on "):
            raise RuntimeError(f"fake server failed to start (exit {proc.poll()}): {line!r}")
        yield SubprocessServer(proc, line.split(" on ", 1)[1].strip())
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m servebench.testing.fake_openai_server --port 8000 [...]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed)")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0)
    p.add_argument("--output-tokens", type=int, default=None)
    p.add_argument("--default-max-tokens", type=int, default=16)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--served-model", default=None)
    p.add_argument("--batch-events", type=int, default=32)
    p.add_argument("--uvloop", action="store_true", help="run on uvloop when installed")
    p.add_argument("--no-kernel-timestamps", action="store_true")
    a = p.parse_args(argv)
    cfg = FakeServerConfig(ttft_s=a.ttft_ms / 1000, itl_s=a.itl_ms / 1000, output_tokens=a.output_tokens,
                           default_max_tokens=a.default_max_tokens, tokens_per_chunk=a.tokens_per_chunk,
                           served_model=a.served_model, batch_events=a.batch_events,
                           kernel_timestamps=not a.no_kernel_timestamps)

    async def run() -> None:
        server = FakeOpenAIServer(cfg)
        await server.start(a.port)
        print(f"fake OpenAI server on {server.url}", flush=True)
        await asyncio.Event().wait()

    factory = None
    if a.uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            factory = uvloop.new_event_loop
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run())


if __name__ == "__main__":
    main()
