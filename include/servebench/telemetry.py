"""Server telemetry: Prometheus ``/metrics`` scraped before and after each cell.

Parsed with ``prometheus_client``'s text parser. Counters are stored as deltas over the cell;
gauges as their value after it. The prefix-cache hit rate is derived from the deltas.
"""

from __future__ import annotations

import logging

import httpx
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

# (cached tokens counter, uncached prompt tokens counter) per engine's metric names
_PREFIX_CACHE_COUNTERS = [
    ("llamacpp:prompt_tokens_cached", "llamacpp:prompt_tokens"),
]


def scrape(base_url: str, path: str | None, timeout_s: float = 10.0) -> dict[str, float] | None:
    """Samples keyed by name (and labels); None when the stack has no metrics endpoint."""
    if path is None:
        return None
    try:
        resp = httpx.get(base_url + path, timeout=timeout_s)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        log.warning("metrics scrape of %s%s failed: %s", base_url, path, exc)
        return None
    return parse_metrics(resp.text)


def parse_metrics(text: str) -> dict[str, float]:
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if sample.labels:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                key = f"{key}{{{labels}}}"
            samples[key] = float(sample.value)
    return samples


def deltas(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """after - before for every sample present in both (gauges: the after value)."""
    if not before or not after:
        return {}
    out = {}
    for key, value in after.items():
        is_counter = key.split("{")[0].endswith(("_total", "_count", "_sum"))
        out[key] = value - before.get(key, 0.0) if is_counter else value
    return out


def prefix_cache_hit_rate(delta: dict[str, float]) -> float | None:
    """Cached prompt tokens / all prompt tokens over the cell, where the engine exposes them."""
    for cached_name, uncached_name in _PREFIX_CACHE_COUNTERS:
        cached = delta.get(cached_name + "_total")
        uncached = delta.get(uncached_name + "_total")
        if cached is not None and uncached is not None and cached + uncached > 0:
            return cached / (cached + uncached)
    return None
