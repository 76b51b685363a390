"""Prometheus scrapes: deltas over a cell and the prefix-cache hit rate per engine."""

import pytest

from servebench.telemetry import deltas, parse_metrics, prefix_cache_hit_rate

LLAMA = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {uncached}
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {cached}
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {busy}
"""

VLLM = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
"""


def test_llama_cpp_cached_over_all_prompt_tokens():
    before = parse_metrics(LLAMA.format(uncached=100, cached=0, busy=0))
    after = parse_metrics(LLAMA.format(uncached=400, cached=900, busy=2))
    d = deltas(before, after)
    assert d["llamacpp:prompt_tokens_total"] == 300
    assert d["llamacpp:requests_processing"] == 2  # a gauge keeps its value
    assert prefix_cache_hit_rate(d) == pytest.approx(900 / 1200)


def test_vllm_hits_over_queries():
    before = parse_metrics(VLLM.format(queries=1000, hits=100))
    after = parse_metrics(VLLM.format(queries=3000, hits=1600))
    assert prefix_cache_hit_rate(deltas(before, after)) == pytest.approx(1500 / 2000)


def test_no_metrics_no_rate():
    assert deltas(None, {"x_total": 1.0}) == {}
    assert prefix_cache_hit_rate({}) is None
