"""The metric catalogue: every metric a result table stores, defined once -- its column, label,
unit, direction, whether it is a tail statistic, where its value lives, whether it is trended,
the release gate's default threshold, and which views show it. Trend series, compare, the
lever table, the digest, the board, the data contract, the cells schema's latency columns and
the release gate's defaults all read it; ``servebench.metrics`` computes the values. Standard
library only. Adding a metric: docs/load-and-metrics.md#the-metric-catalogue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher_is_worse", "lower_is_worse"]
# where a value comes from; every one is a column of ``cells`` (a unit's memory and a variant's
# accuracy are copied into each of its cells)
Level = Literal["cell", "unit", "variant"]

# the views that show metrics, each in the order it lists them
VIEWS: dict[str, tuple[str, ...]] = {
    # the digest's (and `servebench summary`'s) cell table
    "digest": ("ttft_ms_p50", "ttft_ms_p95", "tpot_ms_p50", "tpot_ms_p95", "output_throughput",
               "accuracy"),
    # two runs side by side (`servebench compare`, the Benchmarks view's compare page); an slo
    # cell's answer is its load within SLO: its latencies were measured at whatever load it kept
    "compare": ("ttft_ms_p95", "tpot_ms_p50", "e2e_ms_p95", "output_throughput",
                "max_load_within_slo"),
    # what each variant buys against its baseline (levers.py bootstraps exactly these)
    "levers": ("ttft_ms_p95", "tpot_ms_p50", "output_throughput", "cost_per_1m_output_tokens"),
    # the Benchmarks view's trend panels, unless a metric is picked
    "board": ("output_throughput", "ttft_ms_p95"),
    # a newly failing cell's page: the first of these series it has (its typical request)
    "finding": ("ttft_ms_p50", "tpot_ms_p50", "output_throughput", "max_load_within_slo"),
    # what a quiet night can make a suspect of, re-measured the same morning (trends.confirm)
    "suspect": ("ttft_ms_p50", "tpot_ms_p50", "output_throughput"),
}


@dataclass(frozen=True)
class Metric:
    column: str
    direction: Direction
    label: str
    # a tail statistic (a p95: the 4th slowest of 64 requests) moves with one stalled second
    # of the host; its one night is never raised alone (the detector's same-night guard is for
    # the typical request), only a change that stands for nights
    tail: bool = False
    # measured at the cell's own fixed load; an slo cell's latencies are at whatever load its
    # search found that night, so only its search result is a series
    fixed_load: bool = True
    unit: str = ""
    level: Level = "cell"
    trended: bool = True  # a nightly series of its own (trends.series)
    # the release gate's default: the largest relative worsening allowed (None: not gated)
    release_threshold: float | None = None
    # the range the data contract holds every cell's value to (None: not checked there)
    bounds: tuple[float, float | None] | None = None

    @property
    def worse_sign(self) -> float:
        """+1 where up is worse (latency, cost), -1 where down is (throughput, accuracy)."""
        return 1.0 if self.direction == "higher_is_worse" else -1.0

    @property
    def table(self) -> str:
        """The result table whose column it is."""
        return "cells"

    @property
    def gated(self) -> bool:
        return self.release_threshold is not None

    @property
    def shown(self) -> tuple[str, ...]:
        """The views (``VIEWS``) that show it."""
        return tuple(view for view, columns in VIEWS.items() if self.column in columns)


# a request's latencies (metrics.py), each a column per statistic: ``ttft_ms_p95``
LATENCIES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99")
# which of them are trended, with the release gate's default threshold where gated
_TRENDED_LATENCIES = {"ttft_ms_p50": None, "ttft_ms_p95": 0.25, "tpot_ms_p50": 0.15,
                      "tpot_ms_p95": None, "itl_ms_p95": None, "e2e_ms_p95": None}


def _latency(family: str, stat: str) -> Metric:
    column = f"{family}_{stat}"
    return Metric(column, "higher_is_worse", f"{LATENCIES[family]} {stat}",
                  tail=stat in ("p90", "p95", "p99"), unit="ms",
                  trended=column in _TRENDED_LATENCIES,
                  release_threshold=_TRENDED_LATENCIES.get(column))


RATE = (0.0, None)
SHARE = (0.0, 1.0)
CATALOGUE: tuple[Metric, ...] = (
    *(_latency(family, stat) for family in LATENCIES for stat in LATENCY_STATS),
    Metric("request_throughput", "lower_is_worse", "req/s", unit="req/s", trended=False,
           bounds=RATE),
    Metric("output_throughput", "lower_is_worse", "output tok/s", unit="tok/s",
           release_threshold=0.10, bounds=RATE),
    Metric("total_throughput", "lower_is_worse", "total tok/s", unit="tok/s", trended=False,
           bounds=RATE),
    Metric("goodput", "lower_is_worse", "goodput", unit="req/s", release_threshold=0.10,
           bounds=RATE),
    Metric("cost_per_1m_output_tokens", "higher_is_worse", "cost per 1M tokens", unit="USD"),
    Metric("prefix_cache_hit_rate", "lower_is_worse", "prefix-cache hit rate", unit="share"),
    # the engine's scheduler (telemetry): a variant that needs more KV cache or preempts for
    # the same load has changed how it serves; peaks are sampled, so tails
    Metric("kv_cache_usage_peak", "higher_is_worse", "KV-cache peak", tail=True, unit="share"),
    Metric("requests_waiting_peak", "higher_is_worse", "queued peak", tail=True,
           unit="requests", trended=False),
    Metric("preemptions", "higher_is_worse", "preemptions", tail=True, unit="count"),
    # speculative decoding (telemetry.speculation): an acceptance collapse is a regression
    # even when the answers hold -- the drafts now cost and buy nothing
    Metric("spec_acceptance_rate", "lower_is_worse", "acceptance", unit="share",
           bounds=SHARE),
    Metric("spec_acceptance_length", "lower_is_worse", "acceptance length", unit="tokens",
           trended=False, bounds=(1.0, None)),
    # capacity (an slo cell): "the stack now takes 12% less load within SLO"; req/s open
    # loop, workers closed loop
    Metric("max_load_within_slo", "lower_is_worse", "load within SLO", fixed_load=False,
           unit="load", bounds=RATE),
    Metric("max_load_failed_at", "lower_is_worse", "load beyond SLO", fixed_load=False,
           unit="load", trended=False, bounds=RATE),
    Metric("error_rate", "higher_is_worse", "error rate", unit="share", trended=False,
           bounds=SHARE),
    # the host's energy over the measured window, where its hardware counts it (energy.py)
    Metric("energy_j_per_output_token", "higher_is_worse", "J/token", unit="J",
           bounds=RATE),
    Metric("energy_j_per_request", "higher_is_worse", "J/request", unit="J", trended=False,
           bounds=RATE),
    # the variant's, on its golden set (evals), whatever its perf cells' status
    Metric("accuracy", "lower_is_worse", "accuracy", unit="share", level="variant",
           bounds=SHARE),
    # a unit's memory (bench.memory), the same in each of its cells
    Metric("peak_rss_bytes", "higher_is_worse", "peak memory", unit="bytes", level="unit"),
    Metric("peak_device_memory_bytes", "higher_is_worse", "peak GPU memory", unit="bytes",
           level="unit"),
    Metric("weights_bytes", "higher_is_worse", "weights", unit="bytes", level="unit"),
    Metric("kv_cache_tokens", "lower_is_worse", "KV-cache capacity", unit="tokens",
           level="unit"),
)
BY_COLUMN: dict[str, Metric] = {m.column: m for m in CATALOGUE}
# what a nightly series, and so a release-gate threshold, can be of
TRENDED: dict[str, Metric] = {m.column: m for m in CATALOGUE if m.trended}


# the one variant-level metric: a golden set's share right, with binomial noise
ACCURACY = BY_COLUMN["accuracy"]


def metric_label(column: str) -> str:
    """``TTFT p95`` for ``ttft_ms_p95``; the column name for anything the catalogue lacks."""
    found = BY_COLUMN.get(column)
    return found.label if found else column


def trended(level: Level) -> tuple[Metric, ...]:
    """The trended metrics measured at ``level``, in catalogue order."""
    return tuple(m for m in CATALOGUE if m.trended and m.level == level)


def shown_in(view: str) -> tuple[Metric, ...]:
    """The metrics ``view`` shows, in its order."""
    return tuple(BY_COLUMN[c] for c in VIEWS[view])


def release_thresholds() -> dict[str, float]:
    """The release gate's default thresholds: metric -> the largest relative worsening."""
    return {m.column: m.release_threshold for m in CATALOGUE if m.release_threshold is not None}
