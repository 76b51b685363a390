"""Load generation: load modes, the streaming clients, raw records.

Public names (imported lazily: importing a record type or a mode pulls in no client):

* modes: the vocabulary of load kinds and what each is (:mod:`.modes`, standard library only,
  imported by the sweep spec too); :class:`LoadSpec` (``closed``/``open``/``max_throughput``/
  ``schedule``), :func:`run_load`
  (async, one process: ``single``), :func:`run_load_sync` (the runners' entry point:
  ``engine``, which picks one process or several);
* arrivals: :func:`arrival_offsets`;
* transports: :class:`Transport` (:class:`FastClient`, :class:`HttpxTransport`), chosen by
  :func:`resolve_client` and built by :func:`make_transport` -- or passed in
  (``run_load(..., transport=...)``);
* scaling out: :func:`run_load_multiprocess` (the sweep spec's ``load.client_processes``);
* results: :class:`LoadResult`, :class:`LagStats`; the raw records (:class:`RequestRecord`,
  :class:`Clock`) are :mod:`servebench.records`, below both this package and the metrics.
"""

from __future__ import annotations

from typing import Any

_WHERE = {
    "LoadSpec": "arrivals", "run_load": "single", "run_load_sync": "engine",
    "arrival_offsets": "arrivals",
    "run_load_multiprocess": "multiproc",
    "LoadResult": "result", "LagStats": "result",
    "RequestRecord": "servebench.records", "Clock": "servebench.records",
    "FastClient": "fastclient",
    "Transport": "transport", "HttpxTransport": "transport", "resolve_client": "transport",
    "make_transport": "transport",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        where = _WHERE[name]
        module = where if "." in where else f"servebench.loadgen.{where}"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(name)
