"""Load generation: load modes, the streaming clients, raw records, sweeps.

Public names (imported lazily, so ``servebench.metrics`` can import ``records`` without
pulling in the engine):

* modes: :class:`LoadSpec` (``closed``/``open``/``max_throughput``/``trace``), :func:`run_load`
  (async), :func:`run_load_sync` (the runners' entry point);
* arrivals and traces: :func:`arrival_offsets`, :func:`load_trace`, :class:`TraceEntry`;
* scaling out: :func:`run_load_multiprocess`;
* SLO search: :func:`find_max_load`, :func:`slo_check`;
* results: :class:`LoadResult`, :class:`LagStats`, :class:`RequestRecord`, :class:`Clock`.
"""

from __future__ import annotations

from typing import Any

_WHERE = {
    "LoadSpec": "engine", "run_load": "engine", "run_load_sync": "engine",
    "arrival_offsets": "engine", "load_trace": "engine", "TraceEntry": "engine",
    "run_load_multiprocess": "multiproc", "find_max_load": "sweep", "slo_check": "sweep",
    "LoadResult": "result", "LagStats": "result", "LAG_BOUND_MS": "result",
    "RequestRecord": "records", "Clock": "records", "FastClient": "fastclient",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"servebench.loadgen.{_WHERE[name]}"), name)
    raise AttributeError(name)
