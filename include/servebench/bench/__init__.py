"""Benchmark one unit (target, variant): launch, warm up, every cell, the golden set, always stop.

A unit's life is :mod:`.runner` (``VariantRunner``); a cell's measurement -- its prompts, its
load, the server's telemetry and the cell's validity -- is :mod:`.cell`; the SLO search's probes
are :mod:`.slo`; the golden set's step is :mod:`.golden`; and every row a unit makes (a cell's
identity, a failed cell, cost, the quality number each perf row carries) is :mod:`.rows`.
"""

from servebench.bench.rows import VariantResult
from servebench.bench.runner import VariantRunner

__all__ = ["VariantResult", "VariantRunner"]
