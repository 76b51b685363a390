"""Split one load across N client processes and merge their records onto one clock.

Used when one client process cannot keep up: the sweep spec's ``load.client_processes`` (N, or
``"auto"``: :func:`run_scaled` re-runs a load whose
:attr:`~servebench.loadgen.result.LoadResult.client_saturated` is set with more processes).

Split: request ``k`` of the measured phase goes to process ``k % N`` (warm-up requests too), so
each process replays an exact subset of the single-process schedule — open-loop arrivals keep
their global offsets (the union of the N schedules is the original one), closed-loop
concurrency and any in-flight cap are divided as evenly as possible (process ``p`` gets
``c // N`` plus one if ``p < c % N``; N is lowered so every process gets at least one). Request
ids keep their global index. With ``duration_s``, process ``p``'s ``j``-th measured request
gets global index ``warmup + j * N + p``.

Each process (``spawn``: no state inherited from an Airflow worker) has its own event loop,
keep-alive connections and :class:`~servebench.loadgen.records.Clock`; it opens connections,
runs its share of the warm-up, reports ready, and all start the measured phase at one epoch
time the parent picks once every process is ready.

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
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from servebench.errors import LoadGeneratorError
from servebench.loadgen.engine import LoadSpec, assemble_result, run_load, run_sync
from servebench.loadgen.result import LoadResult

_READY_TIMEOUT_S = 600.0



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
                          warmup: int = 0, prompt_tokens_requested: Sequence[int | None] | None = None,
                          duration_s: float | None = None, cell_id: str, **kwargs: Any) -> LoadResult:
    """Like :func:`servebench.loadgen.engine.run_load_sync` over ``processes`` processes."""
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
            sub = LoadSpec("trace", concurrency=_share(spec.concurrency, processes, p),
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


def run_scaled(base_url: str, path: str, bodies: Sequence[dict[str, Any]], spec: LoadSpec, *,
               processes: int | str, max_processes: int | None = None,
               use_uvloop: bool = True,
               rerun_bodies: Callable[[int], Sequence[dict[str, Any]]] | None = None,
               **kwargs: Any) -> LoadResult:
    """The load over ``processes`` client processes: N, or ``"auto"`` -- start with one and,
    while the result is ``client_saturated``, re-run it with twice as many, up to
    ``max_processes`` (default: the CPU count; never more than the load's concurrency); the
    re-runs are listed in ``scale_attempts``. ``rerun_bodies(k)`` gives the k-th re-run bodies
    of its own (a server that cached the first run's prompts would answer the same ones
    faster); without it a re-run sends ``bodies`` again."""
    if processes != "auto":
        if int(processes) > 1:
            return run_load_multiprocess(base_url, path, bodies, spec, processes=int(processes),
                                         use_uvloop=use_uvloop, **kwargs)
        return run_sync(run_load(base_url, path, bodies, spec, **kwargs), use_uvloop=use_uvloop)
    limit = max_processes or os.cpu_count() or 1
    if spec.concurrency is not None:
        limit = min(limit, spec.concurrency)  # each process needs at least one slot
    n, attempts = 1, []
    while True:
        res = (run_sync(run_load(base_url, path, bodies, spec, **kwargs), use_uvloop=use_uvloop)
               if n == 1 else run_load_multiprocess(base_url, path, bodies, spec, processes=n,
                                                    use_uvloop=use_uvloop, **kwargs))
        res.scale_attempts = attempts
        if not res.client_saturated or n >= limit:
            return res
        attempts.append((n, res.send_lag.p99_ms, res.loop_lag.p95_ms))
        n = min(limit, n * 2)
        if rerun_bodies is not None:
            bodies = rerun_bodies(len(attempts))
