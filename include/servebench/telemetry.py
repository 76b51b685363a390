"""Server telemetry: Prometheus ``/metrics`` scraped before and after each cell.

Parsed with ``prometheus_client``'s text parser. Counters are stored as deltas over the cell;
gauges as their value after it. The prefix-cache hit rate is derived from the deltas.
"""

from __future__ import annotations

import logging

import httpx
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

# (hit counter, other counter, whether the other counter already includes the hits)
_PREFIX_CACHE_COUNTERS = [
    # llama.cpp: prompt tokens reused from the cache / processed excluding cached ones
    ("llamacpp:prompt_tokens_cached", "llamacpp:prompt_tokens", False),
    # vLLM (v1 engine): prefix-cache hits / queries, both in tokens; queries include hits
    ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", True),
]


def scrape(base_url: str, path: str | None, timeout_s: float = 10.0,
           headers: dict[str, str] | None = None) -> dict[str, float] | None:
    """Samples keyed by name (and labels); None when the stack has no metrics endpoint.
    ``headers`` carry the endpoint's key where its metrics need one (llama.cpp --api-key)."""
    if path is None:
        return None
    try:
        resp = httpx.get(base_url + path, timeout=timeout_s, headers=headers)
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
    for hits_name, other_name, other_includes_hits in _PREFIX_CACHE_COUNTERS:
        hits = _sum_family(delta, hits_name + "_total")
        other = _sum_family(delta, other_name + "_total")
        if hits is None or other is None:
            continue
        total = other if other_includes_hits else hits + other
        if total > 0:
            return hits / total
    return None


def _sum_family(delta: dict[str, float], name: str) -> float | None:
    """A counter summed over its label sets (vLLM labels by model and engine)."""
    values = [v for k, v in delta.items() if k == name or k.startswith(name + "{")]
    return sum(values) if values else None
