"""How one load point sends its requests: :class:`LoadSpec` (closed loop, open loop with
seeded Poisson/gamma/constant arrivals, max throughput, a precomputed schedule of offsets) and
the arrival offsets it implies; its modes are the vocabulary's (:mod:`.modes`). The engine
(:mod:`.engine`) runs the phases; this says when."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servebench.loadgen.modes import (
    CLOSED,
    LOAD_MODES,
    LOADGEN_MODES,
    MAX,
    OPEN,
    SCHEDULE,
)

ARRIVALS = ("poisson", "gamma", "constant")


@dataclass(frozen=True)
class LoadSpec:
    """How to drive one load point. Build with the classmethods."""

    mode: str = CLOSED  # one of LOADGEN_MODES
    concurrency: int | None = None      # closed: workers; other modes: in-flight cap (None: none)
    rate: float | None = None           # open: requests per second
    arrival: str = "poisson"
    burstiness: float = 1.0
    seed: int = 0
    offsets: tuple[float, ...] | None = None  # schedule: arrival offsets, seconds
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in LOADGEN_MODES:
            known = LOAD_MODES.get(self.mode)  # a sweep's kind: slo is a search, trace a schedule
            why = ("" if known is None else ": a search over loads, not a load to run"
                   if known.runs_as is None else f": it runs as {known.runs_as!r}")
            raise ValueError(f"mode must be one of {LOADGEN_MODES}, got {self.mode!r}{why}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if LOAD_MODES[self.mode].closed_loop and self.concurrency is None:
            raise ValueError("closed loop needs a concurrency")
        if self.mode == OPEN:
            if not self.rate or self.rate <= 0:
                raise ValueError(f"open loop needs a rate > 0, got {self.rate}")
            if self.arrival not in ARRIVALS:
                raise ValueError(f"arrival must be one of {ARRIVALS}, got {self.arrival!r}")
            if self.burstiness <= 0:
                raise ValueError("burstiness must be > 0")
        if self.mode == SCHEDULE:
            if self.offsets is None:
                raise ValueError("a schedule needs offsets")
            if any(b < a for a, b in zip(self.offsets, self.offsets[1:])):
                raise ValueError("schedule offsets must be non-decreasing (replay keeps order)")
            if self.time_scale <= 0:
                raise ValueError("time_scale must be > 0")

    @classmethod
    def closed(cls, concurrency: int) -> LoadSpec:
        return cls(CLOSED, concurrency=concurrency)

    @classmethod
    def open(cls, rate: float, *, arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0,
             max_concurrency: int | None = None) -> LoadSpec:
        return cls(OPEN, concurrency=max_concurrency, rate=rate, arrival=arrival,
                   burstiness=burstiness, seed=seed)

    @classmethod
    def max_throughput(cls, max_concurrency: int | None = None) -> LoadSpec:
        return cls(MAX, concurrency=max_concurrency)

    @classmethod
    def schedule(cls, offsets: Sequence[float], *, max_concurrency: int | None = None,
                 time_scale: float = 1.0) -> LoadSpec:
        """Send at these arrival times (seconds; the first becomes 0), in order: a trace's."""
        first = float(offsets[0]) if len(offsets) else 0.0
        return cls(SCHEDULE, concurrency=max_concurrency,
                   offsets=tuple(float(o) - first for o in offsets), time_scale=time_scale)

    def offsets_for(self, n: int, duration_s: float | None = None) -> np.ndarray | None:
        """Arrival offsets (seconds from the measured start) of the first ``n`` requests, or of
        every arrival within ``duration_s`` when it is given; ``None`` for closed loop."""
        if LOAD_MODES[self.mode].closed_loop:
            return None
        if self.mode == MAX:
            return np.zeros(n)
        if self.mode == SCHEDULE:
            off = np.asarray(self.offsets, dtype=float) * self.time_scale
            return off[:n] if duration_s is None else off[off < duration_s]
        if duration_s is not None:
            n = int(self.rate * duration_s * 1.2 + 20 * math.sqrt(self.rate * duration_s) + 10)
        off = arrival_offsets(n, self.rate, self.arrival, self.burstiness, self.seed)
        return off if duration_s is None else off[off < duration_s]


def arrival_offsets(n: int, rate: float, arrival: str = "poisson", burstiness: float = 1.0,
                    seed: int = 0) -> np.ndarray:
    """Offsets (seconds, first arrival at 0) of ``n`` arrivals at ``rate``/s. Deterministic."""
    rng = np.random.default_rng(seed)
    if arrival == "constant":
        gaps = np.full(n, 1.0 / rate)
    elif arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    elif arrival == "gamma":  # mean 1/rate, coefficient of variation 1/sqrt(burstiness)
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), n)
    else:
        raise ValueError(f"unknown arrival {arrival!r}")
    off = np.cumsum(gaps)
    return off - off[0] if n else off
