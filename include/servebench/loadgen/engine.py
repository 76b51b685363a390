"""The load generator's entry point: :func:`run_load_sync` runs a load point in the calling
process (:mod:`.single`, the engine itself: load modes, phases, client lag) or over several
client processes (:mod:`.multiproc`), and :func:`run_scaled` re-runs a lagging load with more.

This module sits above both -- it picks one of them, and neither imports it -- so the
dependency points one way: ``engine`` -> ``multiproc`` -> ``single`` -> ``transport``.
:class:`~.arrivals.LoadSpec` and :func:`~.single.run_load` (the async engine) are importable
from here too, as callers always have.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from servebench.loadgen.arrivals import LoadSpec
from servebench.loadgen.multiproc import refuse_transport, run_load_multiprocess
from servebench.loadgen.result import LoadResult
from servebench.loadgen.single import run_load, run_sync

__all__ = ["LoadSpec", "run_load", "run_load_sync", "run_scaled"]


def run_load_sync(base_url: str, path: str, bodies: Sequence[dict[str, Any]], spec: LoadSpec,
                  *, processes: int | str = 1, max_processes: int | None = None,
                  use_uvloop: bool = True, **kwargs: Any) -> LoadResult:
    """Blocking :func:`~.single.run_load` for sync callers (Airflow tasks), in this process or,
    with ``processes`` N or ``"auto"``, over client processes (:func:`run_scaled`, which takes
    ``rerun_bodies``: the bodies of an ``auto`` re-run).

    ``transport=`` (a transport object, see :func:`~.single.run_load`) needs ``processes=1``:
    it lives on this process's event loop, so it cannot be sent to client processes, which
    each build their own from ``client=`` instead (:class:`ValueError` otherwise). It must not
    be bound to an event loop yet: this call runs the load on a fresh one."""
    if processes == 1:
        kwargs.pop("rerun_bodies", None)  # one process never re-runs
        return run_sync(run_load(base_url, path, bodies, spec, **kwargs), use_uvloop=use_uvloop)
    return run_scaled(base_url, path, bodies, spec, processes=processes,
                      max_processes=max_processes, use_uvloop=use_uvloop, **kwargs)


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
    faster); without it a re-run sends ``bodies`` again. Each client process builds its own
    transport from ``client=``; a ``transport=`` object is refused (:class:`ValueError`), with
    ``"auto"`` too, before anything is sent: a re-run would need it in other processes."""
    if processes != "auto":
        if int(processes) > 1:
            return run_load_multiprocess(base_url, path, bodies, spec, processes=int(processes),
                                         use_uvloop=use_uvloop, **kwargs)
        return run_sync(run_load(base_url, path, bodies, spec, **kwargs), use_uvloop=use_uvloop)
    refuse_transport(kwargs.get("transport"), "auto")
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
