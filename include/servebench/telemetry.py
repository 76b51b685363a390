"""Server telemetry: Prometheus ``/metrics`` scraped before and after each cell.

Parsed with ``prometheus_client``'s text parser. Counters are stored as deltas over the cell;
gauges as their value after it. The prefix-cache hit rate of a cell is cached prompt tokens
over all prompt tokens: from the deltas of the counters each stack adapter declares
(``StackAdapter.prefix_cache_counters``) where the server exports them, else from the cell's
measured responses' ``usage.prompt_tokens_details.cached_tokens`` (a hosted API has no
``/metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from servebench.loadgen.records import RequestRecord
    from servebench.stacks.adapter import PrefixCacheCounters

log = logging.getLogger(__name__)


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


def prefix_cache_hit_rate(delta: dict[str, float],
                          counters: Iterable[PrefixCacheCounters]) -> float | None:
    """Cached prompt tokens / all prompt tokens over the cell, from the first pair of the
    stack's declared counters that the server exports (None: none, or no prompt tokens)."""
    for pair in counters:
        hits = _sum_family(delta, pair.hits)
        prompt = _sum_family(delta, pair.prompt)
        if hits is None or prompt is None:
            continue
        total = prompt if pair.total_includes_hits else hits + prompt
        return hits / total if total > 0 else None
    return None


def prefix_cache_hit_rate_from_usage(records: Iterable[RequestRecord]) -> float | None:
    """The same rate from the responses' usage (pass every request the cell sent, warm-up
    included, as the counters count): None unless some response reported cached tokens; once
    one did, a response without the field counts 0 (vLLM omits it when 0)."""
    cached = prompt = 0
    reported = False
    for rec in records:
        if not rec.ok or rec.prompt_tokens is None:
            continue
        prompt += rec.prompt_tokens
        if rec.prompt_tokens_cached is not None:
            reported = True
            cached += rec.prompt_tokens_cached
    return cached / prompt if reported and prompt > 0 else None


def cell_prefix_cache_hit_rate(delta: dict[str, float],
                               counters: Iterable[PrefixCacheCounters],
                               records: Iterable[RequestRecord]) -> float | None:
    """A cell's prefix-cache hit rate (the module doc) over every request it sent, warm-up
    included: the server's counters where it exports them, else the responses' usage."""
    rate = prefix_cache_hit_rate(delta, counters)
    return rate if rate is not None else prefix_cache_hit_rate_from_usage(records)


def _sum_family(delta: dict[str, float], name: str) -> float | None:
    """A counter summed over its label sets (vLLM labels by model and engine)."""
    values = [v for k, v in delta.items() if k == name or k.startswith(name + "{")]
    return sum(values) if values else None
