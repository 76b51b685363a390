"""Closed-loop load: ``concurrency`` workers, each sending its next request when the last ends.

Warm-up: ``bodies[:warmup]`` are sent first (at the same concurrency, over the same connection
pool, so the measured phase reuses warm keep-alive connections), and the runner waits for all of
them to finish before the measured phase starts with ``bodies[warmup:]``. Warm-up records are
returned separately in :attr:`LoadResult.warmup_records` and carry ``warmup=True``; they never
enter :attr:`LoadResult.records` or the measured window.

Measured window: from the first measured ``sent_at`` to the last measured ``done_at`` (errors
included), epoch seconds.

Client lag, so a saturated client is visible rather than silently inflating latencies:

* send lag: ``sent_at - scheduled_at`` per measured request (closed loop: the worker took the body
  at ``scheduled_at``; the lag is the client's own overhead before handing it to httpx);
* event-loop lag: a ticker task sleeps ``tick_s`` repeatedly during the measured phase and records
  how late each wake-up was. A loop lag of several ms means timestamps are late by that much.

Sync callers (Airflow tasks) use :func:`run_closed_loop_sync`.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Sequence

import httpx
import numpy as np

from servebench.loadgen.client import send_streaming
from servebench.loadgen.records import Clock, RequestRecord


@dataclass(frozen=True, slots=True)
class LagStats:
    """Summary of a lag sample, milliseconds. NaN fields when ``n == 0``."""

    n: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def from_seconds(cls, values: Sequence[float]) -> "LagStats":
        """Build from lag values in seconds."""
        if not values:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan)
        a = np.asarray(values, dtype=float) * 1000.0
        return cls(len(a), float(a.mean()), float(np.percentile(a, 50)),
                   float(np.percentile(a, 95)), float(np.percentile(a, 99)), float(a.max()))


@dataclass(slots=True)
class LoadResult:
    """Outcome of one load point.

    Attributes:
        cell_id: the cell all records belong to.
        concurrency: number of closed-loop workers.
        records: measured requests, in request order (index ``warmup`` onwards).
        warmup_records: warm-up requests (``warmup=True``), excluded from the window.
        window_start, window_end: measured window, epoch seconds (NaN if nothing was measured).
        send_lag: ``sent_at - scheduled_at`` over measured requests.
        loop_lag: event-loop wake-up lateness sampled during the measured phase.
        clock_anchor_wall, clock_anchor_perf: the run clock's anchor (for provenance).
    """

    cell_id: str
    concurrency: int
    records: list[RequestRecord]
    warmup_records: list[RequestRecord]
    window_start: float
    window_end: float
    send_lag: LagStats
    loop_lag: LagStats
    clock_anchor_wall: float = math.nan
    clock_anchor_perf: float = math.nan

    @property
    def duration_s(self) -> float:
        """Measured window length in seconds."""
        return self.window_end - self.window_start

    def all_records(self) -> list[RequestRecord]:
        """Warm-up then measured records (for storing every raw row)."""
        return [*self.warmup_records, *self.records]


async def _ticker(tick_s: float, lags: list[float]) -> None:
    """Append how late (seconds) each ``tick_s`` sleep woke up, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + tick_s
        await asyncio.sleep(tick_s)
        lags.append(max(0.0, loop.time() - due))


async def _phase(
    client: httpx.AsyncClient,
    path: str,
    bodies: Sequence[dict[str, Any]],
    first_index: int,
    *,
    concurrency: int,
    warmup: bool,
    cell_id: str,
    clock: Clock,
    tag_requests: bool,
    prompt_tokens: Sequence[int | None] | None,
    deadline_s: float | None,
) -> list[RequestRecord]:
    """Send ``bodies`` with ``concurrency`` workers sharing one iterator; records in order."""
    out: list[RequestRecord | None] = [None] * len(bodies)
    work = iter(enumerate(bodies))

    async def worker() -> None:
        for k, body in work:  # shared iterator: each worker takes the next body when free
            i = first_index + k
            rid = f"{cell_id}:{i}"
            scheduled = clock.now()
            rec = await send_streaming(
                client, path, body, request_id=rid, cell_id=cell_id, scheduled_at=scheduled,
                clock=clock, headers={"x-request-id": rid} if tag_requests else None,
                deadline_s=deadline_s,
                prompt_tokens_requested=prompt_tokens[i] if prompt_tokens is not None else None,
            )
            rec.warmup = warmup
            out[k] = rec

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
    return [r for r in out if r is not None]


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
        timeout_s: httpx timeout per operation (connect, each read, write, pool), seconds.
        request_deadline_s: optional total wall-time limit per request, seconds.
        prompt_tokens_requested: optional prompt lengths parallel to ``bodies`` (for validity).
        tag_requests: send ``x-request-id: <request_id>`` (vLLM and others log/echo it).
        trust_env: let httpx use proxy settings from the environment (off: benchmark traffic
            must not silently go through a proxy).
        tick_s: event-loop lag ticker period, seconds.

    Returns:
        :class:`LoadResult`. Request failures are records with ``error`` set, never exceptions.

    Raises:
        ValueError: on a bad configuration (``concurrency < 1``, ``warmup`` out of range).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if not 0 <= warmup < len(bodies):
        raise ValueError(f"warmup={warmup} must be in [0, len(bodies)={len(bodies)})")
    if prompt_tokens_requested is not None and len(prompt_tokens_requested) != len(bodies):
        raise ValueError("prompt_tokens_requested must be parallel to bodies")
    clock = Clock()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency,
                          keepalive_expiry=60.0)
    common = dict(concurrency=concurrency, cell_id=cell_id, clock=clock, tag_requests=tag_requests,
                  prompt_tokens=prompt_tokens_requested, deadline_s=request_deadline_s)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(timeout_s), trust_env=trust_env) as client:
        warm = await _phase(client, path, bodies[:warmup], 0, warmup=True, **common) if warmup else []
        loop_lags: list[float] = []
        ticker = asyncio.create_task(_ticker(tick_s, loop_lags))
        try:
            measured = await _phase(client, path, bodies[warmup:], warmup, warmup=False, **common)
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
    start = min((r.sent_at for r in measured), default=math.nan)
    end = max((r.done_at for r in measured), default=math.nan)
    return LoadResult(
        cell_id=cell_id, concurrency=concurrency, records=measured, warmup_records=warm,
        window_start=start, window_end=end,
        send_lag=LagStats.from_seconds([r.sent_at - r.scheduled_at for r in measured]),
        loop_lag=LagStats.from_seconds(loop_lags),
        clock_anchor_wall=clock.anchor_wall, clock_anchor_perf=clock.anchor_perf,
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
) -> LoadResult:
    """Blocking :func:`run_closed_loop` (same arguments) for sync callers such as Airflow tasks.

    An ``asyncio.run`` wrapper: must not be called from a thread already running an event loop.
    """
    return asyncio.run(run_closed_loop(
        base_url, path, bodies, concurrency=concurrency, warmup=warmup, cell_id=cell_id,
        headers=headers, timeout_s=timeout_s, request_deadline_s=request_deadline_s,
        prompt_tokens_requested=prompt_tokens_requested, tag_requests=tag_requests,
        trust_env=trust_env, tick_s=tick_s,
    ))
