"""The load engine of one client process: runs a load point's phases (warm-up, measured
window) over a transport (:mod:`.transport`) on one event loop, as its
:class:`~.arrivals.LoadSpec` says -- closed loop, or requests at arrival offsets (open loop,
max throughput, a schedule). Callers use :func:`servebench.loadgen.engine.run_load_sync`, which
runs this here or, through :mod:`.multiproc`, over several processes. What each mode does,
the warm-up, stopping and client lag: docs/load-and-metrics.md ("How a load is driven", "The
heap freeze")."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servebench.loadgen.arrivals import LoadSpec
from servebench.loadgen.modes import LOAD_MODES, SCHEDULE
from servebench.records import Clock, RequestRecord
from servebench.loadgen.result import LagStats, LoadResult
from servebench.loadgen.transport import Transport, make_transport


async def _ticker(tick_s: float, lags: list[float]) -> None:
    """Append how late (seconds) each ``tick_s`` sleep woke up, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + tick_s
        await asyncio.sleep(tick_s)
        lags.append(max(0.0, loop.time() - due))


@dataclass
class _Ctx:
    sender: Any
    path: str
    cell_id: str
    clock: Clock
    tag_requests: bool
    deadline_s: float | None

    async def send(self, i: int, body: dict[str, Any], pt: int | None, scheduled: float,
                   warmup: bool) -> RequestRecord:
        rid = f"{self.cell_id}:{i}"
        rec = await self.sender.send(
            self.path, body, request_id=rid, cell_id=self.cell_id, scheduled_at=scheduled,
            headers={"x-request-id": rid} if self.tag_requests else None,
            deadline_s=self.deadline_s, prompt_tokens_requested=pt)
        rec.warmup = warmup
        return rec


Item = tuple[int, dict[str, Any], "int | None"]


async def _closed_phase(ctx: _Ctx, items: Iterator[Item], concurrency: int, warmup: bool,
                        stop_at: float | None, ready: list[float]) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    now = ctx.clock.now

    start = now()

    async def worker() -> None:
        # scheduled = when this worker became free: the phase start, then the done_at of its
        # previous request (the arrival of that response's last byte), so the send lag
        # includes the client's own turnaround, event-loop delays included
        free_at = start
        for i, body, pt in items:  # shared iterator: each worker takes the next when free
            if stop_at is not None and now() >= stop_at:
                return
            rec = await ctx.send(i, body, pt, free_at, warmup)
            ready.append(free_at)
            out.append(rec)
            free_at = min(rec.done_at, now())

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


async def _open_phase(ctx: _Ctx, items: Iterator[Item], offsets: np.ndarray, cap: int | None,
                      t0: float, ready: list[float]) -> list[RequestRecord]:
    clock = ctx.clock
    sem = asyncio.Semaphore(cap) if cap else None
    tasks: list[asyncio.Task[RequestRecord]] = []
    readies: list[float] = []

    async def one(i: int, body: dict[str, Any], pt: int | None, due: float) -> RequestRecord:
        try:
            return await ctx.send(i, body, pt, due, False)
        finally:
            if sem is not None:
                sem.release()

    for (i, body, pt), off in zip(items, offsets):
        due = t0 + float(off)
        delay = due - clock.now()
        while delay > 0:  # uvloop timers have 1 ms granularity and may fire early: re-check
            await asyncio.sleep(delay if delay > 0.001 else 0)
            delay = due - clock.now()
        if sem is not None:
            await sem.acquire()
        readies.append(max(due, clock.now()) if sem is not None else due)
        tasks.append(asyncio.create_task(one(i, body, pt, due)))
    recs = list(await asyncio.gather(*tasks))
    ready.extend(readies)
    return recs


def _items(bodies: Sequence[dict[str, Any]], pts: Sequence[int | None] | None, first: int,
           cyclic: bool, ids: Callable[[int], int] | None = None) -> Iterator[Item]:
    n = len(bodies)
    idx = itertools.count(first) if cyclic else iter(range(first, n))
    for i in idx:
        j = first + (i - first) % (n - first) if cyclic else i
        yield (ids(i) if ids else i), bodies[j], (pts[j] if pts is not None else None)


async def run_load(
    base_url: str,
    path: str,
    bodies: Sequence[dict[str, Any]],
    spec: LoadSpec,
    *,
    warmup: int = 0,
    cell_id: str,
    headers: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    request_deadline_s: float | None = None,
    prompt_tokens_requested: Sequence[int | None] | None = None,
    tag_requests: bool = True,
    trust_env: bool = False,
    tick_s: float = 0.01,
    duration_s: float | None = None,
    client: str = "auto",
    collect_text: bool = True,
    connections: int | None = None,
    start_at: float | None = None,
    on_ready: Callable[[], Any] | None = None,
    ids: Callable[[int], int] | None = None,
    raw_out: dict[str, Any] | None = None,
    transport: Transport | None = None,
) -> LoadResult:
    """Drive ``base_url + path`` with ``bodies`` as ``spec`` says; see the module docstring.

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000"``.
        path: ``"/v1/chat/completions"`` or ``"/v1/completions"``.
        bodies: full request bodies (the stack adapter decides model and sampling fields;
            ``stream`` is forced on). ``bodies[:warmup]`` are warm-up; at least one must remain.
        spec: the load mode (``LoadSpec.closed(concurrency)``: that many workers, and pool).
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
        duration_s: stop sending new measured requests after this many seconds.
        client: ``"auto"`` (default: fast for http, httpx for https), ``"fast"``, ``"httpx"``:
            the transport to build (:func:`~.transport.make_transport`).
        collect_text: keep ``output_text`` (fast client; the httpx client always does).
        connections: keep-alive connections to open before the warm-up (default: the
            concurrency or cap; uncapped open loop: min(requests, 512)).
        start_at: epoch time at which the measured phase starts (multi-process runs share one);
            ``on_ready``: awaited (if async) after warm-up, before waiting for ``start_at``.
        transport: a transport built by the caller, used instead of building one from
            ``client`` (then ``client``, ``headers``, ``timeout_s``, ``trust_env`` and
            ``collect_text`` are its own business; ``client`` must stay ``"auto"``). The run
            enters it (``async with``), opens its pool and closes it at the end, takes its
            ``clock`` as the run's and its ``name`` as :attr:`LoadResult.client`. One
            transport per run, on this event loop.
    """
    if transport is not None and client != "auto":
        raise ValueError(f"client={client!r} and transport=: pass one (a choice to build a "
                         "transport from, or a transport built)")
    if not 0 <= warmup < len(bodies):
        raise ValueError(f"warmup={warmup} must be in [0, len(bodies)={len(bodies)})")
    if prompt_tokens_requested is not None and len(prompt_tokens_requested) != len(bodies):
        raise ValueError("prompt_tokens_requested must be parallel to bodies")
    if (spec.mode == SCHEDULE and duration_s is None
            and len(spec.offsets or ()) < len(bodies) - warmup):
        raise ValueError("schedule: fewer offsets than measured bodies")
    n_meas = len(bodies) - warmup
    offsets = spec.offsets_for(n_meas, duration_s)
    cap = spec.concurrency
    pool = connections or cap or min(n_meas if offsets is None else len(offsets), 512)
    if transport is None:
        clock = Clock()
        sender = make_transport(client, base_url, clock=clock, headers=headers,
                                timeout_s=timeout_s, trust_env=trust_env, pool=max(pool, 1),
                                collect_text=collect_text)
    else:  # its records' times are on its clock: the phases must schedule on the same one
        sender, clock = transport, transport.clock
    async with sender:
        await sender.open(pool)
        ctx = _Ctx(sender, path, cell_id, clock, tag_requests, request_deadline_s)
        warm: list[RequestRecord] = []
        if warmup:
            wpts = prompt_tokens_requested[:warmup] if prompt_tokens_requested is not None else None
            warm = await _closed_phase(ctx, _items(bodies[:warmup], wpts, 0, False, ids),
                                       min(cap or 32, warmup), True, None, [])
            warm.sort(key=lambda r: int(r.request_id.rsplit(":", 1)[1]))
        await sender.open(pool)  # replace connections the warm-up lost
        if on_ready is not None:
            res = on_ready()
            if asyncio.iscoroutine(res):
                res = await res
            if isinstance(res, float):
                start_at = res
        if start_at is not None:
            delay = start_at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
        loop_lags: list[float] = []
        ready: list[float] = []
        ticker = asyncio.create_task(_ticker(tick_s, loop_lags))
        cpu0 = time.process_time()
        t0 = clock.now() if start_at is None else start_at
        items = _items(bodies, prompt_tokens_requested, warmup, duration_s is not None, ids)
        try:
            if offsets is None:
                stop_at = t0 + duration_s if duration_s is not None else None
                conc = min(cap, n_meas) if duration_s is None else cap  # type: ignore[type-var]
                measured = await _closed_phase(ctx, items, conc,  # type: ignore[arg-type]
                                               False, stop_at, ready)
            else:
                measured = await _open_phase(ctx, items, offsets, cap, t0, ready)
        finally:
            cpu = time.process_time() - cpu0
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
    order = sorted(range(len(measured)),
                   key=lambda k: int(measured[k].request_id.rsplit(":", 1)[1]))
    measured = [measured[k] for k in order]
    ready = [ready[k] for k in order] if len(ready) == len(order) else ready
    if raw_out is not None:
        raw_out.update(ready=ready, loop_lags=loop_lags)
    return assemble_result(cell_id, spec, sender.name, measured, warm, ready, loop_lags, clock,
                           cpu)


def assemble_result(cell_id: str, spec: LoadSpec, client: str, measured: list[RequestRecord],
            warm: list[RequestRecord], ready: Sequence[float], loop_lags: Sequence[float],
            clock: Clock | None, cpu: float, processes: int = 1) -> LoadResult:
    start = min((r.sent_at for r in measured), default=math.nan)
    end = max((r.done_at for r in measured), default=math.nan)
    send_lag = [r.sent_at - t for r, t in zip(measured, ready) if r.sent_at == r.sent_at]
    queue = ([t - r.scheduled_at for r, t in zip(measured, ready)]
             if LOAD_MODES[spec.mode].arrival_driven and spec.concurrency else None)
    return LoadResult(
        cell_id=cell_id, concurrency=spec.concurrency or 0, records=measured, warmup_records=warm,
        window_start=start, window_end=end,
        send_lag=LagStats.from_seconds(send_lag), loop_lag=LagStats.from_seconds(loop_lags),
        clock_anchor_wall=clock.anchor_wall if clock else math.nan,
        clock_anchor_perf=clock.anchor_perf if clock else math.nan,
        mode=spec.mode, client=client, processes=processes, client_cpu_s=cpu,
        queue_wait=LagStats.from_seconds(queue) if queue is not None else None,
    )


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (about half the per-read cost of the stdlib selector loop
    for this client), else the stdlib one."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - depends on the environment
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_sync(coro: Any, *, use_uvloop: bool = True) -> Any:
    """Run ``coro`` to completion on a fresh loop (uvloop when available and asked for), the
    heap frozen (:func:`frozen_heap`)."""
    with frozen_heap(), asyncio.Runner(
            loop_factory=new_event_loop if use_uvloop else None) as runner:
        return runner.run(coro)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects the process holds now are left out of garbage collection until the block
    ends (``gc.freeze``): collections inside it walk only what it allocates. A process that
    came frozen (Airflow's executors freeze before they fork a worker) stays frozen: the freeze
    cannot be undone in part."""
    came_frozen = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not came_frozen:
            gc.unfreeze()
