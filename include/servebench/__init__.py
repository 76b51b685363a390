"""servebench: nightly benchmarks of LLM serving stacks.

The public API a user scripts against -- the same functions the DAGs and the CLI call::

    from servebench import load_history, load_sweep, open_store, run_sweep

    spec = load_sweep("include/sweeps/local.yaml")  # SpecError names the file and the field
    summary = run_sweep("include/sweeps/local.yaml")  # end to end, without Airflow
    cells = load_history(open_store(), "cells", since="2026-11-01").to_pandas()

Exceptions: ``servebench.errors`` (``ServebenchError`` and its kinds). Names are imported on
first use, so ``import servebench`` stays light (the Airflow plugin imports the package in
every Airflow process).
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "load_sweep": "servebench.config",
    "SweepSpec": "servebench.config",
    "plan_run": "servebench.pipeline",
    "run_sweep": "servebench.pipeline",
    "open_store": "servebench.connections",
    "load_history": "servebench.results.history",
    "ResultStore": "servebench.results.store",
    "ServebenchError": "servebench.errors",
    "SpecError": "servebench.errors",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'servebench' has no attribute {name!r}")
