"""Reference streaming client (httpx) for OpenAI-compatible servers: one request, one record.

The load runners use :mod:`servebench.loadgen.fastclient` by default (``client="auto"`` picks
this one only for ``https``; ``client="httpx"`` forces it). This module stays the reference:
both build and parse their records with :mod:`servebench.loadgen.stream`, and the contract
suite checks that both produce the same records from the same streams.

Speaks Server-Sent Events from ``/v1/chat/completions`` (generated text in
``choices[0].delta.content``; ``delta.reasoning_content``/``delta.reasoning`` also count as
generated text for timing but are not appended to ``output_text``) and ``/v1/completions``
(``choices[0].text``). Only choice index 0 is read: benchmark bodies use ``n=1``.

Handled: the final usage chunk (``stream_options.include_usage``: ``choices == []`` and
``usage`` set; ``usage.prompt_tokens_details.cached_tokens`` where the server reports it),
per-chunk cumulative usage (vLLM/TensorRT-LLM ``continuous_usage_stats``, recognised by usage
on the first content chunk; usage first seen on a later content chunk is a total), ``[DONE]``,
``finish_reason``, an ``{"error": ...}`` event inside the stream, HTTP error statuses (status plus
a body snippet), timeouts, connection errors, and streams that end without ``[DONE]`` or a
``finish_reason``. Every failure of the server or the network becomes data in the record
(``error = "<Class>: <reason>"``); nothing is raised except cancellation and a bug of this
client, which keeps its traceback instead of passing for the server's error.

Times are stamped once per body piece httpx yields (``clock.now()``; one per HTTP chunk), not per
event: events that arrive in
the same read really did arrive together. SSE is split by hand on the bytes from
``aiter_bytes`` (no ``str`` decode of the stream, events dispatched on the blank line as the SSE
spec says). Measured on loopback against the fake server (32 streams, one event per read):
~55-65 us client CPU per chunk for both this splitter and ``aiter_lines`` — equal within noise,
because ~85% of the cost is httpx/httpcore/h11 per body chunk; this module's own parsing is
~10 us/chunk. So one client process tops out around 15k chunks/s per core: watch
``LoadResult.loop_lag`` at high concurrency. JSON is parsed with ``msgspec`` when importable (it
ships with Airflow; ~10% cheaper end to end), else the stdlib ``json``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

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


async def send_streaming(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    request_id: str,
    cell_id: str,
    scheduled_at: float,
    clock: Clock,
    headers: dict[str, str] | None = None,
    timeout: float | httpx.Timeout | None = None,
    deadline_s: float | None = None,
    prompt_tokens_requested: int | None = None,
    on_sent: Callable[[RequestRecord], None] | None = None,
) -> RequestRecord:
    """POST ``body`` to ``url`` and consume its SSE stream into a :class:`RequestRecord`.

    Args:
        client: shared ``httpx.AsyncClient`` (keep-alive pool sized by the caller).
        url: absolute URL, or a path relative to the client's ``base_url``.
        body: the full request body; ``"stream": True`` is forced. Set
            ``stream_options={"include_usage": True}`` in it to get server token counts.
        request_id, cell_id: copied into the record.
        scheduled_at: epoch seconds when the request was due (for client lag accounting).
        clock: the run's clock; every time in the record comes from it.
        headers: extra request headers (e.g. ``Authorization``).
        timeout: httpx timeout (per connect/read/write operation, seconds); ``None`` keeps the
            client's default.
        deadline_s: optional total wall-time limit for the whole request in seconds;
            exceeding it cancels the stream and records ``"DeadlineExceeded: ..."``.
        prompt_tokens_requested: prompt length the workload asked for, if known (copied).
        on_sent: optional hook called with the record right after ``sent_at`` is stamped.

    Returns:
        The record; ``record.error`` says what went wrong, if anything. Never raises except
        ``asyncio.CancelledError`` from the caller's own cancellation, and a bug of this code.
    """
    body, rec, state = new_record(body, request_id=request_id, cell_id=cell_id,
                                  scheduled_at=scheduled_at,
                                  prompt_tokens_requested=prompt_tokens_requested)
    kwargs: dict[str, Any] = {"json": body}
    if headers:
        kwargs["headers"] = headers
    if timeout is not None:
        kwargs["timeout"] = timeout
    rec.sent_at = clock.now()
    if on_sent is not None:
        on_sent(rec)

    async def attempt(fresh: bool) -> None:
        if fresh:  # the retry, on a connection of its own
            async with httpx.AsyncClient(base_url=client.base_url, headers=client.headers,
                                         timeout=client.timeout, trust_env=False) as own:
                await _consume_within(own, url, kwargs, state, clock, deadline_s)
            return
        try:
            await _consume_within(client, url, kwargs, state, clock, deadline_s)
        except httpx.RemoteProtocolError as exc:
            if rec.http_status is None and "without sending a response" in str(exc):
                raise StaleConnection from exc
            raise

    try:
        await send_retrying_stale(state, clock.now, attempt)
    except TimeoutError:
        # asyncio.timeout raises the builtin TimeoutError; httpx timeouts are HTTPError.
        state.error = state.error or f"DeadlineExceeded: request exceeded {deadline_s} s"
    except (httpx.HTTPError, OSError) as exc:  # timeouts, connect/read/protocol errors
        state.error = state.error or short_error(exc)
    rec.done_at = clock.now()
    return finish_record(state)


async def _consume_within(client: httpx.AsyncClient, url: str, kwargs: dict[str, Any],
                         state: StreamState, clock: Clock, deadline_s: float | None) -> None:
    if deadline_s is None:
        await _consume(client, url, kwargs, state, clock)
    else:
        async with asyncio.timeout(deadline_s):
            await _consume(client, url, kwargs, state, clock)


async def _consume(
    client: httpx.AsyncClient,
    url: str,
    kwargs: dict[str, Any],
    state: StreamState,
    clock: Clock,
) -> None:
    """Open the stream and feed SSE ``data`` payloads to ``state`` until end or error."""
    rec = state.rec
    async with client.stream("POST", url, **kwargs) as resp:
        rec.http_status = resp.status_code
        if resp.status_code >= 300:
            raw = b""
            async for piece in resp.aiter_bytes():
                raw += piece
                if len(raw) >= BODY_SNIPPET_BYTES:
                    break
            snippet = raw[:BODY_SNIPPET_BYTES].decode("utf-8", "replace").strip()
            state.error = status_error(resp.status_code, resp.reason_phrase, snippet)
            return
        buf = b""
        on_event = state.on_event
        now = clock.now
        async for piece in resp.aiter_bytes():
            if state.done:  # drain the rest so the keep-alive connection can be reused
                continue
            t = now()
            payloads, buf = frame(buf + piece if buf else piece)
            for data in payloads:
                on_event(data, t)
                if state.error is not None:
                    return
                if state.done:
                    break
        if not state.done:
            for data in frame_end(buf):
                on_event(data, now())
