"""Outcome of one load point (:class:`LoadResult`) and lag summaries (:class:`LagStats`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servebench.loadgen.modes import CLOSED
from servebench.records import RequestRecord
from servebench.metrics import CLIENT_LAG_BOUND_MS, client_lag_reasons


@dataclass(frozen=True, slots=True)
class LagStats:
    """Summary of a lag sample, milliseconds. NaN fields when ``n == 0``.

    Each percentile is a lag some sample reached (numpy's ``lower`` method), so one value
    above the rest never sets a percentile of a small sample: the p99 of 8 requests is the
    second latest, not the latest (interpolated, it was ~the maximum, and one request a stalled
    second of the host sent late made a whole cell ``client_saturated``; the rule is for a
    client that keeps falling behind)."""

    n: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def from_seconds(cls, values: Sequence[float]) -> LagStats:
        """Build from lag values in seconds."""
        if len(values) == 0:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan)
        a = np.asarray(values, dtype=float) * 1000.0
        p50, p95, p99 = np.percentile(a, [50, 95, 99], method="lower")
        return cls(len(a), float(a.mean()), float(p50), float(p95), float(p99), float(a.max()))


@dataclass(slots=True)
class LoadResult:
    """Outcome of one load point.

    Attributes:
        cell_id: the cell all records belong to.
        concurrency: closed loop: number of workers; other modes: the in-flight cap (0 = none).
        records: measured requests, in request order (index ``warmup`` onwards).
        warmup_records: warm-up requests (``warmup=True``), excluded from the window.
        window_start, window_end: measured window, epoch seconds (NaN if nothing was measured):
            first measured ``sent_at`` to last measured ``done_at``.
        send_lag: client lateness over measured requests, ``sent_at`` minus the moment the
            request was free to go (closed loop: ``scheduled_at``; open loop: the later of its
            arrival time and a free slot under the concurrency cap).
        loop_lag: event-loop wake-up lateness sampled during the measured phase.
        clock_anchor_wall, clock_anchor_perf: the run clock's anchor (for provenance; with
            several processes, the first process's).
        mode: the load generator's mode that ran it (:data:`~.modes.LOADGEN_MODES`).
        client: the transport's name: ``"fast"`` or ``"httpx"`` (or a caller's own transport's).
        processes: client processes that produced the records.
        client_cpu_s: client CPU seconds (user+system, all its processes) in the measured phase.
        queue_wait: open-loop modes with a concurrency cap: arrival -> free slot (by design,
            not client lag).
        scale_attempts: loads that were re-run with more processes because the client lagged,
            as ``(processes, send_lag_p99_ms, loop_lag_p95_ms)``.
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
    mode: str = CLOSED
    client: str = "fast"
    processes: int = 1
    client_cpu_s: float = math.nan
    queue_wait: LagStats | None = None
    scale_attempts: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        """Measured window length in seconds."""
        return self.window_end - self.window_start

    def all_records(self) -> list[RequestRecord]:
        """Warm-up then measured records (for storing every raw row)."""
        return [*self.warmup_records, *self.records]

    def client_lag_reasons(self, bound_ms: float = CLIENT_LAG_BOUND_MS) -> list[str]:
        """Why this load measured the client rather than the server (empty: it did not); the
        rule is ``metrics.client_lag_reasons``."""
        return client_lag_reasons(self.send_lag.p99_ms, self.loop_lag.p95_ms, bound_ms)

    @property
    def client_saturated(self) -> bool:
        """True when send lag p99 or event-loop lag p95 exceeds :data:`servebench.metrics.CLIENT_LAG_BOUND_MS`."""
        return bool(self.client_lag_reasons())
