"""The fast path: a purpose-built HTTP/1.1 + SSE streaming client on non-blocking sockets, for
plain ``http://`` (``https`` goes through httpx, :mod:`servebench.loadgen.client`, the
reference implementation): one ``recvmsg`` and one kernel receive timestamp per read, chunked
and SSE framing by slicing, JSON decoded only where a record needs it, errors worded like the
reference's. Why and how, with its measured cost: docs/load-and-metrics.md ("The fast
client")."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from servebench.errors import TransportError
from servebench.records import Clock, RequestRecord
from servebench.loadgen.stream import (
    BODY_SNIPPET_BYTES,
    StaleConnection,
    StreamState,
    finish_record,
    frame,
    frame_end,
    new_record,
    send_retrying_stale,
    short_error,
    status_error,
)

try:
    from msgspec.json import encode as _json_encode
except ImportError:  # pragma: no cover - depends on the environment
    def _json_encode(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else -1)
_TIMESPEC = struct.Struct("@qq")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 64
_READ_SIZE = 1 << 16
_time = time.time
_FIN_NULL = b'"finish_reason":null'
_USAGE = b'"usage"'
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class MalformedResponse(TransportError):
    """The server's response breaks HTTP/1.1: a status line, header value or chunk size that
    does not parse. Raised by the parser, where it knows the bytes are at fault, so that the
    reader catches exactly this as the server's ``RemoteProtocolError`` and nothing else."""


class _Conn:
    """One keep-alive HTTP/1.1 connection on a non-blocking socket; parses the response of the
    request in flight. Reads are driven by ``loop.add_reader`` (works on uvloop and the stdlib
    selector loop)."""

    def __init__(self, client: FastClient, sock: socket.socket) -> None:
        self.client = client
        self.sock = sock
        self.fd = sock.fileno()
        self.closed = False
        self.used = False
        self.fut: asyncio.Future[None] | None = None
        self.state: StreamState | None = None
        self.last_rx = 0.0
        self.got_bytes = False
        self.mode = _DONE
        self._out = b""
        self.kernel_ts = False
        if client.kernel_timestamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.kernel_ts = True
            except OSError:  # pragma: no cover - not Linux
                pass
        client.loop.add_reader(self.fd, self._readable)

    # -- I/O ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.fd >= 0:
            loop = self.client.loop
            loop.remove_reader(self.fd)
            if self._out:
                loop.remove_writer(self.fd)
            self.fd = -1
            self.sock.close()
        self.closed = True

    def _readable(self) -> None:
        try:
            if self.kernel_ts:
                data, anc, _, _ = self.sock.recvmsg(_READ_SIZE, _ANC_SIZE)
            else:
                data, anc = self.sock.recv(_READ_SIZE), None
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = self.client.now()
        if anc:  # kernel receive time (CLOCK_REALTIME) mapped onto the run clock
            sec, ns = _TIMESPEC.unpack_from(anc[0][2])
            t = sec + ns * 1e-9 + (now - _time())
            if t > now:  # never later than our own reading of the clock
                t = now
        else:
            t = now
        if not data:
            self._lost(None)
            return
        fut = self.fut
        if fut is None or fut.done():  # bytes while idle: the connection is unusable
            self.close()
            return
        self.last_rx = now
        self.got_bytes = True
        try:
            self._feed(data, t)
        except MalformedResponse as exc:  # the server broke HTTP/1.1: the record's error
            self._fail(f"RemoteProtocolError: {exc}", t, close=True)
        except Exception as exc:
            # Anything else is a bug of this client, not the server's. Left to this reader
            # callback it would only reach the loop's log and the request would hang to its
            # read timeout; so it is raised where the request is awaited (FastClient.send),
            # traceback and all -- not recorded, not relabelled.
            self.close()
            if fut.done():
                raise
            fut.set_exception(exc)

    def _lost(self, exc: Exception | None) -> None:
        self.close()
        if self.fut is not None and not self.fut.done():
            self._eof(exc)

    def _write(self, payload: bytes) -> None:
        try:
            n = self.sock.send(payload)
        except (BlockingIOError, InterruptedError):
            n = 0
        if n < len(payload):
            self._out = payload[n:]
            self.client.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            n = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        self._out = self._out[n:]
        if not self._out:
            self.client.loop.remove_writer(self.fd)

    # -- request ------------------------------------------------------------------------------
    def start(self, state: StreamState, payload: bytes, chat: bool, text: bool) -> asyncio.Future[None]:
        self.fut = self.client.loop.create_future()
        self.state = state
        self.used = True
        self.got_bytes = False
        self.buf = b""
        self.sse = b""
        self.mode = _HEAD
        self.left = 0
        self.keep_alive = True
        self.status = 0
        self.snippet: bytearray | None = None
        self.pat = b'"content":"' if chat else b'"text":"'
        self.collect_text = text
        self.last_rx = self.client.now()
        try:
            self._write(payload)
        except OSError as exc:  # the peer is gone: treat as a connection closed before a response
            self._lost(exc)
        return self.fut

    def _finish(self, t: float) -> None:
        self.state.rec.done_at = t  # type: ignore[union-attr]
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(None)

    def _fail(self, error: str, t: float, *, close: bool) -> None:
        st = self.state
        if st is not None and st.error is None:
            st.error = error
        if close:
            self.close()
        self._finish(t)

    def _eof(self, exc: Exception | None) -> None:
        t = self.client.now()
        if not self.got_bytes:
            self.closed = True
            if self.fut is not None and not self.fut.done():
                self.fut.set_exception(StaleConnection())
            return
        if self.mode == _UNTIL_CLOSE:
            self._end_body(t)
        elif self.mode == _HEAD:
            self._fail("RemoteProtocolError: Server disconnected without sending a complete "
                       "response head", t, close=True)
        else:
            what = "incomplete chunked read" if self.mode in (_CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF,
                                                              _TRAILER) else "incomplete body"
            self._fail("RemoteProtocolError: peer closed connection without sending complete "
                       f"message body ({what})", t, close=True)

    # -- parsing ------------------------------------------------------------------------------
    def _feed(self, data: bytes, t: float) -> None:
        if self.mode == _HEAD:
            buf = self.buf + data if self.buf else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            self._head(buf[:end], t)
            data = buf[end + 4:]
            self.buf = b""
            if self.fut.done():
                return
        mode = self.mode
        if mode == _LENGTH:
            take = data[:self.left]
            self.left -= len(take)
            if take:
                self._body(take, t)
            if self.left == 0 and not self.fut.done():
                self.mode = _DONE
                self._end_body(t)
            return
        if mode == _UNTIL_CLOSE:
            if data:
                self._body(data, t)
            return
        if mode == _DONE:
            return
        # chunked transfer encoding
        buf = self.buf + data if self.buf else data
        self.buf = b""
        pos = 0
        n = len(buf)
        pieces = []
        left = self.left
        while pos < n:
            if mode == _CHUNK_DATA:
                end = pos + left
                if end <= n:
                    pieces.append(buf[pos:end])
                    pos = end
                    mode = _CHUNK_CRLF
                    left = 2
                else:
                    pieces.append(buf[pos:])
                    left = end - n
                    pos = n
            elif mode == _CHUNK_SIZE:
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    self.buf = buf[pos:]
                    break
                line = buf[pos:i]
                if b";" in line:
                    line = line.split(b";", 1)[0]
                try:
                    left = int(line, 16)
                except ValueError as exc:
                    raise MalformedResponse(f"bad chunk size {line[:40]!r}") from exc
                pos = i + 2
                mode = _CHUNK_DATA if left else _TRAILER
            elif mode == _CHUNK_CRLF:
                take = min(left, n - pos)
                pos += take
                left -= take
                if not left:
                    mode = _CHUNK_SIZE
            else:  # _TRAILER: lines until an empty one
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    self.buf = buf[pos:]
                    break
                empty = i == pos
                pos = i + 2
                if empty:
                    self.mode = _DONE
                    if pieces:
                        self._body(pieces[0] if len(pieces) == 1 else b"".join(pieces), t)
                    if not self.fut.done():
                        self._end_body(t)
                    return
        self.mode = mode
        self.left = left
        if pieces:
            self._body(pieces[0] if len(pieces) == 1 else b"".join(pieces), t)

    def _head(self, head: bytes, t: float) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise MalformedResponse(f"bad status line {lines[0][:80]!r}")
        self.status = status = int(parts[1])
        reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        self.state.rec.http_status = status  # type: ignore[union-attr]
        length = None
        chunked = False
        conn_hdr = b""
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                try:
                    length = int(v.strip())
                except ValueError as exc:
                    raise MalformedResponse(f"bad content-length {v[:40]!r}") from exc
            elif k == b"transfer-encoding":
                chunked = b"chunked" in v.lower()
            elif k == b"connection":
                conn_hdr = v.strip().lower()
        self.keep_alive = parts[0] == b"HTTP/1.1" and conn_hdr != b"close" or conn_hdr == b"keep-alive"
        if chunked:
            self.mode = _CHUNK_SIZE
        elif length is not None:
            self.mode = _LENGTH
            self.left = length
        else:
            self.mode = _UNTIL_CLOSE
            self.keep_alive = False
        if status >= 300:
            self.snippet = bytearray()
            self.reason = reason
        if self.mode == _LENGTH and length == 0:
            self.mode = _DONE
            self._end_body(t)

    def _end_body(self, t: float) -> None:
        """The response body is complete (or ended by EOF where that is its framing)."""
        st = self.state
        if self.snippet is not None:
            self._status_error(t)
            if not self.keep_alive:
                self._fail(st.error, t, close=True)  # type: ignore[arg-type,union-attr]
            return
        if not st.done and st.error is None and self.sse:  # type: ignore[union-attr]
            tail, self.sse = frame_end(self.sse), b""
            self._dispatch(tail, t)
        if not self.keep_alive:
            self.close()
        self._finish(t)

    def _status_error(self, t: float) -> None:
        snip = bytes(self.snippet[:BODY_SNIPPET_BYTES]).decode("utf-8", "replace").strip()  # type: ignore[index]
        self.state.error = status_error(self.status, self.reason, snip)  # type: ignore[union-attr]
        self._finish(t)

    def _body(self, data: bytes, t: float) -> None:
        st = self.state
        if self.fut.done():  # type: ignore[union-attr]
            return
        if self.snippet is not None:
            self.snippet += data
            if len(self.snippet) >= BODY_SNIPPET_BYTES:  # enough: drop the connection
                self._status_error(t)
                self._fail(st.error, t, close=True)  # type: ignore[union-attr,arg-type]
            return
        if st.done:  # type: ignore[union-attr]
            return  # after [DONE]: drain to the end of the body so the connection is reusable
        self._events(self.sse + data if self.sse else data, t)

    def _events(self, buf: bytes, t: float) -> None:
        payloads, self.sse = frame(buf)
        self._dispatch(payloads, t)

    def _dispatch(self, payloads: list[bytes], t: float) -> None:
        st = self.state
        rec = st.rec  # type: ignore[union-attr]
        on_event = st.on_event  # type: ignore[union-attr]
        fast = rec.first_chunk_at is not None and rec.served_model is not None
        pat = self.pat
        plen = len(pat)
        times = rec.chunk_times
        toks = rec.chunk_tokens
        text = st.text_parts if self.collect_text else None  # type: ignore[union-attr]
        for p in payloads:
            if fast and _FIN_NULL in p and _USAGE not in p:
                i = p.find(pat)
                if i >= 0:
                    j = i + plen
                    k = p.find(b'"', j)
                    if k > j:
                        if text is None:
                            times.append(t)
                            toks.append(1)
                            continue
                        seg = p[j:k]
                        if b"\\" not in seg:
                            try:
                                s = seg.decode()
                            except UnicodeDecodeError:
                                pass
                            else:
                                text.append(s)
                                times.append(t)
                                toks.append(1)
                                continue
            on_event(p, t)
            if st.error is not None:  # type: ignore[union-attr]
                self._fail(st.error, t, close=True)  # type: ignore[union-attr]
                return
            if st.done:  # type: ignore[union-attr]
                self.sse = b""
                return
            if not fast:
                fast = rec.first_chunk_at is not None and rec.served_model is not None


class FastClient:
    """Keep-alive connection pool and request sender for one base URL (one event loop).

    Use ``async with FastClient(...) as c: await c.open(n); rec = await c.send(...)``.
    """

    name = "fast"  # the :class:`~servebench.loadgen.transport.Transport` name

    def __init__(self, base_url: str, *, clock: Clock, headers: dict[str, str] | None = None,
                 timeout_s: float = 300.0, collect_text: bool = True,
                 kernel_timestamps: bool = True) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http":
            raise ValueError(f"the fast client speaks plain http only, got {base_url!r} "
                             "(use client='httpx' for https)")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.clock = clock
        self.now = clock.now
        self.timeout_s = timeout_s
        self.collect_text = collect_text
        self.kernel_timestamps = kernel_timestamps
        host_hdr = self.host if self.port == 80 else f"{self.host}:{self.port}"
        hdrs = {"host": host_hdr, "content-type": "application/json",
                "accept": "text/event-stream", "user-agent": "servebench-fast/1"}
        for k, v in (headers or {}).items():
            hdrs[k.lower()] = v
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()).encode("latin-1")
        self.idle: list[_Conn] = []
        self.busy: set[_Conn] = set()
        self.loop = asyncio.get_running_loop()
        self._sweeper: asyncio.Task[None] | None = None

    async def __aenter__(self) -> FastClient:
        self._sweeper = self.loop.create_task(self._sweep())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for c in [*self.idle, *self.busy]:
            c.close()
        self.idle.clear()
        self.busy.clear()

    async def _connect(self) -> _Conn:
        infos = await self.loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        family, type_, proto, _, addr = infos[0]
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.wait_for(self.loop.sock_connect(sock, addr), self.timeout_s)
        except BaseException:
            sock.close()
            raise
        return _Conn(self, sock)

    async def open(self, n: int) -> int:
        """Open up to ``n`` idle keep-alive connections now (outside any measured window).

        Returns how many are idle afterwards; connection failures here are not raised (the
        requests will record them).
        """
        need = n - len(self.idle)
        if need <= 0:
            return len(self.idle)
        for start in range(0, need, 256):  # bounded bursts: don't overflow the listen backlog
            res = await asyncio.gather(*(self._connect() for _ in range(min(256, need - start))),
                                       return_exceptions=True)
            self.idle.extend(c for c in res if isinstance(c, _Conn))
            if any(not isinstance(c, _Conn) for c in res):
                break
        return len(self.idle)

    async def _sweep(self) -> None:
        period = min(1.0, max(0.005, self.timeout_s / 10))
        while True:
            await asyncio.sleep(period)
            now = self.now()
            for c in list(self.busy):
                if c.fut is not None and not c.fut.done() and now - c.last_rx > self.timeout_s:
                    c._fail(f"ReadTimeout: no data for {self.timeout_s:g} s", now, close=True)

    def _payload(self, path: str, body: bytes, headers: dict[str, str] | None) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1") if headers else b""
        return (b"POST %s HTTP/1.1\r\n%s%scontent-length: %d\r\n\r\n%s"
                % ((self.prefix + path).encode(), self._fixed, extra, len(body), body))

    async def send(
        self,
        path: str,
        body: dict[str, Any],
        *,
        request_id: str,
        cell_id: str,
        scheduled_at: float,
        headers: dict[str, str] | None = None,
        deadline_s: float | None = None,
        prompt_tokens_requested: int | None = None,
    ) -> RequestRecord:
        """Send one streaming request; same contract as :func:`client.send_streaming`: the
        server's failures are the record's error; a bug of this client raises."""
        body, rec, state = new_record(body, request_id=request_id, cell_id=cell_id,
                                      scheduled_at=scheduled_at,
                                      prompt_tokens_requested=prompt_tokens_requested)
        payload = self._payload(path, _json_encode(body), headers)
        chat = path.rstrip("/").endswith("chat/completions")
        timer = None
        expired: list[bool] = []
        conn: _Conn | None = None
        try:
            if deadline_s is not None:
                task = asyncio.current_task()

                def expire() -> None:
                    expired.append(True)
                    task.cancel()  # type: ignore[union-attr]

                timer = self.loop.call_later(deadline_s, expire)
            async def attempt(fresh: bool) -> None:
                nonlocal conn
                conn = None
                while self.idle and not fresh:
                    c = self.idle.pop()
                    if not c.closed:
                        conn = c
                        break
                if conn is None:
                    rec.sent_at = self.now()
                    try:
                        conn = await self._connect()
                    except (TimeoutError, OSError) as exc:
                        cls = "ConnectTimeout" if isinstance(exc, asyncio.TimeoutError) else "ConnectError"
                        state.error = f"{cls}: {exc}"[:220]
                        rec.done_at = self.now()
                        return
                self.busy.add(conn)
                rec.sent_at = self.now()
                try:
                    await conn.start(state, payload, chat, self.collect_text)
                except StaleConnection:
                    self.busy.discard(conn)
                    raise

            await send_retrying_stale(state, self.now, attempt)
        except asyncio.CancelledError:
            if not expired:
                if conn is not None:
                    conn.close()
                raise  # the caller's own cancellation
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # our deadline fired
            if conn is not None:
                conn.close()
            state.error = state.error or f"DeadlineExceeded: request exceeded {deadline_s} s"
            rec.done_at = self.now()
        except OSError as exc:  # a socket failure no handler above took: still data
            state.error = state.error or short_error(exc)
            rec.done_at = self.now()
        finally:
            if timer is not None:
                timer.cancel()
            if conn is not None:
                self.busy.discard(conn)
                conn.fut = None
                conn.state = None
                if not conn.closed and conn.mode == _DONE:
                    self.idle.append(conn)
                elif not conn.closed:
                    conn.close()
        if rec.done_at != rec.done_at:  # NaN: should not happen, but never leave it unset
            rec.done_at = self.now()
        return finish_record(state)
