"""Closed-loop load: ``concurrency`` workers, each sending its next request when the last ends.

This is the entry point the runners use (:func:`run_closed_loop_sync`); the other load modes
(open loop, max throughput, trace replay) live in :mod:`servebench.loadgen.engine` and share
everything described here.

Warm-up: ``bodies[:warmup]`` are sent first (at the same concurrency, over the same keep-alive
connections, which are opened before the warm-up), and the runner waits for all of them to
finish before the measured phase starts with ``bodies[warmup:]``. Warm-up records are returned
separately in :attr:`LoadResult.warmup_records` and carry ``warmup=True``; they never enter
:attr:`LoadResult.records` or the measured window.

Measured window: from the first measured ``sent_at`` to the last measured ``done_at`` (errors
included), epoch seconds.

Client lag, so a saturated client is visible rather than silently inflating latencies:

* send lag: ``sent_at - scheduled_at`` per measured request (closed loop: the worker took the body
  at ``scheduled_at``; the lag is the client's own overhead before writing the request);
* event-loop lag: a ticker task sleeps ``tick_s`` repeatedly during the measured phase and records
  how late each wake-up was. A loop lag of several ms means timestamps are late by that much.

:attr:`LoadResult.client_saturated` is true when either passes ``LAG_BOUND_MS``; with
``processes="auto"`` the load is then re-run over more client processes
(:mod:`servebench.loadgen.multiproc`).

Client: ``client="fast"`` (default; :mod:`servebench.loadgen.fastclient`, plain http only — an
``https`` URL falls back to httpx) or ``client="httpx"`` (the reference,
:mod:`servebench.loadgen.client`). Both produce the same records from the same streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servebench.loadgen.engine import LoadSpec, run_load, run_load_sync
from servebench.loadgen.result import LAG_BOUND_MS, LagStats, LoadResult

__all__ = ["LAG_BOUND_MS", "LagStats", "LoadResult", "run_closed_loop", "run_closed_loop_sync"]


async def run_closed_loop(
    base_url: str,
    path: str,
    bodies: Sequence[dict[str, Any]],
    *,
    concurrency: int,
    warmup: int = 0,
    cell_id: str,
    headers: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    request_deadline_s: float | None = None,
    prompt_tokens_requested: Sequence[int | None] | None = None,
    tag_requests: bool = True,
    trust_env: bool = False,
    tick_s: float = 0.01,
    client: str = "auto",
    collect_text: bool = True,
    duration_s: float | None = None,
) -> LoadResult:
    """Drive ``base_url + path`` closed-loop with prepared streaming request ``bodies``.

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000"``.
        path: ``"/v1/chat/completions"`` or ``"/v1/completions"``.
        bodies: full request bodies (the stack adapter decides model and sampling fields;
            ``stream`` is forced on). ``bodies[:warmup]`` are warm-up; at least one must remain.
        concurrency: number of workers (= requests in flight in steady state) and pool size.
        warmup: number of leading bodies sent as warm-up and excluded from measurement.
        cell_id: copied into every record; request ids are ``f"{cell_id}:{index}"``.
        headers: headers for every request (e.g. ``{"Authorization": "Bearer ..."}``).
        timeout_s: timeout per operation (connect, each read), seconds.
        request_deadline_s: optional total wall-time limit per request, seconds.
        prompt_tokens_requested: optional prompt lengths parallel to ``bodies`` (for validity).
        tag_requests: send ``x-request-id: <request_id>`` (vLLM and others log/echo it).
        trust_env: let httpx use proxy settings from the environment (off: benchmark traffic
            must not silently go through a proxy; the fast client never uses a proxy).
        tick_s: event-loop lag ticker period, seconds.
        client: ``"auto"`` (fast client for ``http://``, httpx for ``https://``), ``"fast"``,
            ``"httpx"``.
        collect_text: keep ``output_text`` (the golden-set evals need it; cheap).
        duration_s: stop sending new requests after this long (bodies are then reused).

    Returns:
        :class:`LoadResult`. Request failures are records with ``error`` set, never exceptions.

    Raises:
        ValueError: on a bad configuration (``concurrency < 1``, checked by
            :meth:`LoadSpec.closed`; ``warmup`` out of range).
    """
    return await run_load(
        base_url, path, bodies, LoadSpec.closed(concurrency), warmup=warmup, cell_id=cell_id,
        headers=headers, timeout_s=timeout_s, request_deadline_s=request_deadline_s,
        prompt_tokens_requested=prompt_tokens_requested, tag_requests=tag_requests,
        trust_env=trust_env, tick_s=tick_s, client=client, collect_text=collect_text,
        duration_s=duration_s,
    )


def run_closed_loop_sync(
    base_url: str,
    path: str,
    bodies: Sequence[dict[str, Any]],
    *,
    concurrency: int,
    warmup: int = 0,
    cell_id: str,
    headers: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    request_deadline_s: float | None = None,
    prompt_tokens_requested: Sequence[int | None] | None = None,
    tag_requests: bool = True,
    trust_env: bool = False,
    tick_s: float = 0.01,
    client: str = "auto",
    collect_text: bool = True,
    duration_s: float | None = None,
    processes: int | str = 1,
    max_processes: int | None = None,
) -> LoadResult:
    """Blocking :func:`run_closed_loop` (same arguments) for sync callers such as Airflow tasks.

    Runs on uvloop when installed. ``processes``: see :func:`engine.run_load_sync` (``"auto"``:
    one process, and the whole load re-run over more when the client was saturated — so the
    server sees the load again; off by default because callers that scrape server counters
    around the call must know). Must not be called from a thread already running an event
    loop.
    """
    return run_load_sync(
        base_url, path, bodies, LoadSpec.closed(concurrency), processes=processes,
        max_processes=max_processes, warmup=warmup, cell_id=cell_id, headers=headers,
        timeout_s=timeout_s, request_deadline_s=request_deadline_s,
        prompt_tokens_requested=prompt_tokens_requested, tag_requests=tag_requests,
        trust_env=trust_env, tick_s=tick_s, client=client, collect_text=collect_text,
        duration_s=duration_s,
    )
