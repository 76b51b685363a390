"""What both transports share, in one place: a request's record from its body
(:func:`new_record`), the parse of each SSE ``data`` payload into it (:class:`StreamState`),
how a failure is worded (:func:`short_error`, :func:`status_error`, :data:`STALE_ERROR`) and
how a record is finished (:func:`finish_record`). The httpx transport (:mod:`.client`) and the
fast one (:mod:`.fastclient`) differ only in how bytes arrive; the contract suite
(``tests/unit/loadgen/test_transports.py``) checks they make the same records from the same streams.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from servebench.errors import TransportError
from servebench.records import RequestRecord

try:  # msgspec is ~2-3x faster than json.loads on small chunks and comes with Airflow.
    from msgspec import DecodeError as _DecodeError
    from msgspec.json import decode as _json_decode
except ImportError:  # pragma: no cover - depends on the environment
    _json_decode = json.loads
    _DecodeError = ValueError  # type: ignore[misc,assignment]

BODY_SNIPPET_BYTES = 300  # of an error response's body, kept in its record
_DONE = b"[DONE]"
_COUNT = (int, float, type(None))  # a token count, or none sent


def short_error(exc: BaseException, limit: int = 200) -> str:
    """``"<Class>: <message>"`` truncated to ``limit`` characters of message."""
    msg = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {msg[:limit]}"


class StreamState:
    """Mutable parse state for one response; keeps the per-event path free of lookups."""

    __slots__ = ("cumulative_usage", "done", "error", "last_completion_tokens", "rec",
                 "text_parts")

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.text_parts: list[str] = []
        self.last_completion_tokens: int | None = None
        # whether content chunks carry cumulative usage (vLLM/TensorRT-LLM
        # continuous_usage_stats), decided by the first content chunk: usage that first
        # appears on a later content chunk is a total, not that chunk's count
        self.cumulative_usage: bool | None = None
        self.done = False
        self.error: str | None = None

    def on_event(self, data: bytes, t: float) -> None:
        """Apply one SSE ``data`` payload received at time ``t`` (epoch seconds)."""
        if data == _DONE:
            self.done = True
            return
        try:
            obj = _json_decode(data)
        except (_DecodeError, ValueError) as exc:
            self.error = f"ProtocolError: bad JSON in SSE event ({exc}): {data[:80]!r}"
            return
        if not isinstance(obj, dict):
            self.error = f"ProtocolError: SSE event is not an object: {data[:80]!r}"
            return
        rec = self.rec
        try:
            err = obj.get("error")
            if err:
                msg = err.get("message", err) if isinstance(err, dict) else err
                self.error = f"StreamError: {str(msg)[:200]}"
                return
            if rec.served_model is None:
                rec.served_model = obj.get("model")
            usage = obj.get("usage")
            choices = obj.get("choices")
            text = None
            if choices:
                choice = choices[0]
                delta = choice.get("delta")
                if delta is not None:
                    text = delta.get("content")
                    timing_text = text or delta.get("reasoning_content") or delta.get("reasoning")
                else:
                    text = choice.get("text")
                    timing_text = text
                fr = choice.get("finish_reason")
                if fr is not None:
                    rec.finish_reason = fr
                if timing_text:
                    if text:
                        if text.__class__ is not str:  # it would fail the join, later
                            self.error = _bad_shape(data)
                            return
                        self.text_parts.append(text)
                    if rec.first_chunk_at is None:
                        rec.first_chunk_at = t
                    rec.chunk_times.append(t)
                    n = 1
                    ct = usage.get("completion_tokens") if usage else None
                    if self.cumulative_usage is None:
                        self.cumulative_usage = ct is not None
                    if self.cumulative_usage and ct is not None:
                        n = ct - (self.last_completion_tokens or 0)
                        self.last_completion_tokens = ct
                    rec.chunk_tokens.append(n)
            if usage:
                pt = usage.get("prompt_tokens")
                ct = usage.get("completion_tokens")
                if pt is not None:
                    rec.prompt_tokens = pt
                if ct is not None:
                    rec.output_tokens = ct
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict):
                    cached = details.get("cached_tokens")
                    if isinstance(cached, (int, float)):
                        rec.prompt_tokens_cached = int(cached)
        except (AttributeError, TypeError, KeyError, IndexError):
            # A field of the wrong type in the server's JSON fails above as one of these -- and
            # so would a bug of this parser. The event decides which: only one shown malformed
            # is the server's (a ProtocolError in the record); for a well-formed one the
            # failure is ours and is raised, traceback and all. Checked here, after a failure,
            # so the per-event path pays for no checks.
            if _well_formed(obj):
                raise
            self.error = _bad_shape(data)


def _bad_shape(data: bytes) -> str:
    return f"ProtocolError: unexpected SSE event shape: {data[:80]!r}"


def _well_formed(obj: dict[str, Any]) -> bool:
    """Whether an event's fields have the types :meth:`StreamState.on_event` reads them as."""
    usage = obj.get("usage")
    if usage and not (isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), _COUNT)
                      and isinstance(usage.get("completion_tokens"), _COUNT)):
        return False
    choices = obj.get("choices")
    if not choices:
        return True
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    text = choices[0].get("text") if delta is None else (
        delta.get("content") if isinstance(delta, dict) else None)
    return (delta is None or isinstance(delta, dict)) and (text is None or isinstance(text, str))


def frame(buf: bytes) -> tuple[list[bytes], bytes]:
    """Server-Sent Events framing, the one copy: split ``buf`` (the bytes received, after the
    rest the previous call returned) into the ``data`` payloads of its complete events --
    several ``data:`` lines joined by newlines; comments and other fields dropped; CRLF or CR
    line ends taken as LF -- and the rest, an event not ended yet."""
    if b"\r" in buf:  # CRLF or CR line ends: normalise, keeping a trailing CR for next read
        keep = buf.endswith(b"\r")
        if keep:
            buf = buf[:-1]
        buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if keep:
            buf += b"\r"
    parts = buf.split(b"\n\n")
    rest = parts.pop()
    payloads = []
    for ev in parts:
        if ev[:6] == b"data: " and b"\n" not in ev:  # the common shape, without a line loop
            payloads.append(ev[6:])
        elif ev:
            lines = [line[5:] for line in ev.split(b"\n") if line.startswith(b"data:")]
            if lines:
                payloads.append(b"\n".join(v[1:] if v.startswith(b" ") else v for v in lines))
    return payloads, rest


def frame_end(rest: bytes) -> list[bytes]:
    """At the end of the body: a last event without its blank line still counts (lenient,
    as browsers are not)."""
    rest = rest.rstrip(b"\r\n")
    return frame(rest + b"\n\n")[0] if rest else []


STALE_ERROR = "RemoteProtocolError: Server disconnected without sending a response."


class StaleConnection(TransportError):
    """A reused keep-alive connection the server had closed: no response byte came back, so
    the server never started the request."""


async def send_retrying_stale(state: StreamState, now: Callable[[], float],
                              attempt: Callable[[bool], Awaitable[None]]) -> None:
    """The stale keep-alive retry, the one copy: ``attempt(fresh)`` sends the request -- on a
    pooled connection, or with ``fresh`` on a new one of its own (the pool's other idle ones
    may be just as stale: llama-server closes each after a streamed response) -- and raises
    :class:`StaleConnection` when the server closed it before any response byte. That is
    retried once, timed from the retry, as every HTTP client does; a second is the record's
    error."""
    for fresh in (False, True):
        try:
            await attempt(fresh)
            return
        except StaleConnection:
            state.rec.http_status = None
            if fresh:
                state.error = STALE_ERROR
                state.rec.done_at = now()
            else:
                state.rec.sent_at = now()


def new_record(body: dict[str, Any], *, request_id: str, cell_id: str, scheduled_at: float,
               prompt_tokens_requested: int | None) -> tuple[dict[str, Any], RequestRecord,
                                                         StreamState]:
    """(the body as sent -- ``stream`` forced on --, its record, the record's parse state)."""
    if not body.get("stream"):
        body = {**body, "stream": True}
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    rec = RequestRecord(
        request_id=request_id, cell_id=cell_id, scheduled_at=scheduled_at,
        prompt_tokens_requested=prompt_tokens_requested,
        output_tokens_requested=max_tokens if isinstance(max_tokens, int) else None,
    )
    return body, rec, StreamState(rec)


def status_error(status: int, reason: str, snippet: str) -> str:
    return f"HTTPStatusError: {status} {reason}: {snippet}"


def finish_record(state: StreamState) -> RequestRecord:
    """The record once its response ended (or failed): the text joined, a 2xx stream that
    ended without ``finish_reason`` or ``[DONE]`` marked incomplete, the error set."""
    rec = state.rec
    if state.text_parts:
        rec.output_text = "".join(state.text_parts)
    if state.error is None and rec.http_status is not None and rec.http_status < 300:
        if not state.done and rec.finish_reason is None:
            state.error = "IncompleteStream: stream ended without finish_reason or [DONE]"
    rec.error = state.error
    return rec
