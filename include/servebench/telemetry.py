"""Server telemetry: Prometheus ``/metrics`` scraped before and after each cell, and sampled
while it runs.

Parsed with ``prometheus_client``'s text parser. Counters are stored as deltas over the cell;
gauges as their value after it. The engine's scheduler gauges (``StackAdapter.engine_gauges``:
KV-cache usage, running and waiting requests) are sampled every ``SAMPLE_INTERVAL_S`` on a
thread while the cell runs (:class:`GaugeSampler`; the thread only fetches, the text is parsed
after the cell so the load generator's event loop is not held up) and summarized over the
measured window as a peak and a mean (:func:`engine_telemetry`); preemptions and speculative
acceptance come from the counters' deltas. The prefix-cache hit rate of a cell is cached
prompt tokens over all prompt tokens: from the deltas of the counters each stack adapter declares
(``StackAdapter.prefix_cache_counters``) where the server exports them, else from the cell's
measured responses' ``usage.prompt_tokens_details.cached_tokens`` (a hosted API has no
``/metrics``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

from servebench.sampling import Periodic

if TYPE_CHECKING:
    from servebench.records import RequestRecord
    from servebench.stacks.adapter import EngineGauges, PrefixCacheCounters

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


SAMPLE_INTERVAL_S = 0.2  # between two scrapes while a cell runs
# the cells columns the sampled gauges become: <stem>_peak and <stem>_mean
GAUGE_COLUMNS = {"kv_cache_usage": "kv_cache_usage", "running": "requests_running",
                 "waiting": "requests_waiting"}


class GaugeSampler(Periodic):
    """Fetches a server's metrics every ``interval_s`` on a thread between ``start`` and
    ``stop`` (a context manager), keeping each text with the epoch time it arrived; with no
    metrics path, nothing (no thread)."""

    def __init__(self, base_url: str, path: str | None, *, headers: dict[str, str] | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S):
        super().__init__(interval_s, "gauge-sampler")
        self.url = None if path is None else base_url + path
        self.headers = headers
        self.texts: list[tuple[float, str]] = []
        self.errors = 0
        self._client: httpx.Client | None = None

    def start(self) -> GaugeSampler:
        if self.url is None:
            return self
        self._client = httpx.Client(timeout=max(1.0, 5 * self.interval_s), headers=self.headers)
        return super().start()

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        if self._client is not None:
            self._client.close()

    def sample(self) -> None:
        try:
            resp = self._client.get(self.url)
            resp.raise_for_status()
            self.texts.append((time.time(), resp.text))
        except httpx.HTTPError:  # a missed sample; counted, the cell's own scrape logs
            self.errors += 1

    def series(self, names: dict[str, str], start: float, end: float) -> dict[str, list[float]]:
        """Each gauge's samples (summed over its label sets) inside ``[start, end]``."""
        out: dict[str, list[float]] = {stem: [] for stem in names}
        for at, text in self.texts:
            if not start <= at <= end:
                continue
            samples = parse_metrics(text)
            for stem, name in names.items():
                value = _sum_family(samples, name)
                if value is not None:
                    out[stem].append(value)
        return out


def speculation(gauges: EngineGauges, delta: dict[str, float],
                speculative: bool = True) -> dict[str, float | None]:
    """A cell's speculative decoding from the engine's counters over the cell: tokens drafted
    and accepted, the acceptance rate (accepted / drafted) and the mean acceptance length
    (1 + accepted / verification steps: the tokens each target step emits, as llama.cpp and
    vLLM log it). None where the engine counts nothing (no such metric) or the variant does
    not speculate (llama-server exports its zero counters all the same); a speculative
    server that drafted nothing has 0 drafted and no rate."""
    def count(name: str | None) -> float | None:
        return _sum_family(delta, name) if name and speculative else None

    accepted, drafted = count(gauges.spec_accepted), count(gauges.spec_drafted)
    steps = count(gauges.spec_drafts)
    return {
        "spec_draft_tokens": drafted,
        "spec_accepted_tokens": accepted,
        "spec_acceptance_rate": accepted / drafted if accepted is not None and drafted else None,
        "spec_acceptance_length": 1 + accepted / steps if accepted is not None and steps
        else None,
    }


def engine_telemetry(gauges: EngineGauges, sampler: GaugeSampler, delta: dict[str, float],
                     window: tuple[float, float],
                     speculative: bool = True) -> dict[str, float | int | None]:
    """A cell's engine telemetry columns: each gauge's peak and mean over the measured window,
    the preemptions over the cell, the speculative acceptance rate (accepted / proposed draft
    tokens), and how many samples fell in the window. None where the engine has no such
    metric or nothing was sampled."""
    row: dict[str, float | int | None] = {}
    series = sampler.series(gauges.gauges(), *window)
    n = max((len(v) for v in series.values()), default=0)
    for stem, column in GAUGE_COLUMNS.items():
        values = series.get(stem) or []
        row[f"{column}_peak"] = max(values) if values else None
        row[f"{column}_mean"] = sum(values) / len(values) if values else None
    row["preemptions"] = _sum_family(delta, gauges.preemptions) if gauges.preemptions else None
    row.update(speculation(gauges, delta, speculative))
    row["telemetry_samples"] = n if gauges.gauges() and sampler.url else None
    return row
