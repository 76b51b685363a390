"""Split one load across N client processes and merge their records onto one clock.

Used when one client process cannot keep up: the sweep spec's ``load.client_processes`` (N, or
``"auto"``: :func:`servebench.loadgen.engine.run_scaled` re-runs a load whose
:attr:`~servebench.loadgen.result.LoadResult.client_saturated` is set with more processes).
Each process runs :func:`servebench.loadgen.single.run_load`; this module does not know
``engine``, which picks between one process and this.

Split: request ``k`` of the measured phase goes to process ``k % N`` (warm-up requests too), so
each process replays an exact subset of the single-process schedule — arrival-driven loads
become each process's ``schedule`` of its share, at their global offsets (the union of the N
schedules is the original one), closed-loop
concurrency and any in-flight cap are divided as evenly as possible (process ``p`` gets
``c // N`` plus one if ``p < c % N``; N is lowered so every process gets at least one). Request
ids keep their global index. With ``duration_s``, process ``p``'s ``j``-th measured request
gets global index ``warmup + j * N + p``.

Each process (``spawn``: no state inherited from an Airflow worker) has its own event loop,
keep-alive connections and :class:`~servebench.records.Clock`; it opens connections,
runs its share of the warm-up, reports ready, and all start the measured phase at one epoch
time the parent picks once every process is ready.

Transports: each process builds its own, from the ``client=`` choice
(:func:`~servebench.loadgen.transport.make_transport`). A transport object (``transport=``)
cannot be shared: it holds sockets and is bound to the event loop of the process that made it,
and need not be picklable -- it is refused with a :class:`ValueError`
(:func:`refuse_transport`).

Cross-process clock assumption: every process's Clock is ``time.time()`` at its anchor plus
``perf_counter`` deltas, so records of different processes are comparable to within the
anchors' disagreement — on one host the system clock is shared, so that is the few
microseconds between the two calls of each anchor — provided the wall clock is not stepped
(NTP) during the run; ``perf_counter`` (CLOCK_MONOTONIC) itself is not slewed differently per
process. Records from different hosts would need synchronised clocks; this module only starts
local processes.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from servebench.errors import LoadGeneratorError
from servebench.loadgen.arrivals import LoadSpec
from servebench.loadgen.modes import SCHEDULE
from servebench.loadgen.result import LoadResult
from servebench.loadgen.single import assemble_result, run_load, run_sync
from servebench.loadgen.transport import Transport

_READY_TIMEOUT_S = 600.0


def refuse_transport(transport: Transport | None, processes: int | str) -> None:
    """Raise :class:`ValueError` for a transport object given to a load over client processes:
    it cannot go to them (see the module docstring); they build their own from ``client=``."""
    if transport is not None:
        raise ValueError(
            f"transport= with processes={processes!r}: a transport object stays in the process "
            "(and event loop) that made it; over client processes pass client='fast'|'httpx'|"
            "'auto' and each process builds its own, or use processes=1")


def _share(total: int | None, n: int, p: int) -> int | None:
    if total is None:
        return None
    return total // n + (1 if p < total % n else 0)


class _Ids:
    """Local body index -> global request index for process ``p`` of ``n`` (picklable)."""

    def __init__(self, warm: list[int], meas: list[int], warmup: int, n: int, p: int) -> None:
        self.warm, self.meas, self.warmup, self.n, self.p = warm, meas, warmup, n, p

    def __call__(self, i: int) -> int:
        if i < len(self.warm):
            return self.warm[i]
        j = i - len(self.warm)
        if j < len(self.meas):
            return self.meas[j]
        return self.warmup + j * self.n + self.p  # cyclic (duration) runs


def _worker(conn: Any, args: dict[str, Any]) -> None:
    try:
        def on_ready() -> Any:
            async def wait() -> float:
                import asyncio

                conn.send(("ready", None))
                return await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            return wait()

        raw: dict[str, Any] = {}
        res = run_sync(run_load(**args["run"], on_ready=on_ready, raw_out=raw),
                       use_uvloop=args["use_uvloop"])
        conn.send(("done", (res, raw)))
    except Exception:  # the parent raises it, with this process's traceback in the message
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_load_multiprocess(base_url: str, path: str, bodies: Sequence[dict[str, Any]],
                          spec: LoadSpec, *, processes: int, use_uvloop: bool = True,
                          warmup: int = 0,
                          prompt_tokens_requested: Sequence[int | None] | None = None,
                          duration_s: float | None = None, cell_id: str,
                          transport: Transport | None = None, **kwargs: Any) -> LoadResult:
    """Like :func:`servebench.loadgen.engine.run_load_sync` over ``processes`` processes; each
    builds its transport from ``client=`` (``transport=`` is refused: :func:`refuse_transport`)."""
    refuse_transport(transport, processes)
    if spec.concurrency is not None:
        processes = min(processes, spec.concurrency)
    n_meas = len(bodies) - warmup
    if duration_s is None:
        processes = min(processes, n_meas)
    processes = max(1, processes)
    offsets = spec.offsets_for(n_meas, duration_s)
    pts = prompt_tokens_requested
    ctx = mp.get_context("spawn")
    procs, pipes = [], []
    for p in range(processes):
        warm = list(range(p, warmup, processes))
        meas = list(range(warmup + p, len(bodies), processes))
        if offsets is not None:  # open-loop modes: replay this process's share of the schedule
            mine = list(range(p, len(offsets), processes))
            meas = [warmup + (k % n_meas) for k in mine]
            sub = LoadSpec(SCHEDULE, concurrency=_share(spec.concurrency, processes, p),
                           offsets=tuple(float(offsets[k]) for k in mine))
            ids = _Ids(warm, [warmup + k for k in mine], warmup, processes, p)
            dur = None
        else:
            sub = replace(spec, concurrency=_share(spec.concurrency, processes, p))
            ids = _Ids(warm, meas, warmup, processes, p)
            dur = duration_s
        if not meas:
            continue
        sel = warm + meas
        run = dict(base_url=base_url, path=path, bodies=[bodies[i] for i in sel], spec=sub,
                   warmup=len(warm), cell_id=cell_id, duration_s=dur, ids=ids,
                   prompt_tokens_requested=[pts[i] for i in sel] if pts is not None else None,
                   **kwargs)
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, {"run": run, "use_uvloop": use_uvloop}),
                           name=f"servebench-loadgen-{p}", daemon=True)
        proc.start()
        child.close()
        procs.append(proc)
        pipes.append(parent)
    try:
        errors = []
        for c in pipes:
            if not c.poll(_READY_TIMEOUT_S):
                raise RuntimeError("a load generator process did not get ready in time")
            kind, payload = c.recv()
            if kind == "error":
                errors.append(payload)
        if errors:
            raise LoadGeneratorError(f"load generator process failed:\n{errors[0]}")
        start_at = time.time() + 0.1  # everyone sleeps until the same epoch instant
        for c in pipes:
            c.send(start_at)
        results, raws = [], []
        for c in pipes:
            kind, payload = c.recv()
            if kind == "error":
                raise LoadGeneratorError(f"load generator process failed:\n{payload}")
            results.append(payload[0])
            raws.append(payload[1])
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
    pairs = sorted(((r, t) for res, raw in zip(results, raws) for r, t in zip(res.records, raw["ready"])),
                   key=lambda rt: int(rt[0].request_id.rsplit(":", 1)[1]))
    warm_recs = sorted((r for res in results for r in res.warmup_records),
                       key=lambda r: int(r.request_id.rsplit(":", 1)[1]))
    merged = assemble_result(cell_id, spec, results[0].client, [r for r, _ in pairs], warm_recs,
                     [t for _, t in pairs], [x for raw in raws for x in raw["loop_lags"]],
                     None, sum(r.client_cpu_s for r in results), processes=len(results))
    merged.clock_anchor_wall = results[0].clock_anchor_wall
    merged.clock_anchor_perf = results[0].clock_anchor_perf
    if math.isnan(merged.window_start):
        merged.window_start = merged.window_end = math.nan
    return merged
