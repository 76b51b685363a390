"""Prometheus scrapes: deltas over a cell and the prefix-cache hit rate per engine."""

import pytest
from servebench.stacks import get_stack
from servebench.telemetry import deltas, parse_metrics, prefix_cache_hit_rate

LLAMA_COUNTERS = get_stack("llama_cpp").prefix_cache_counters
VLLM_COUNTERS = get_stack("vllm").prefix_cache_counters

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
    assert prefix_cache_hit_rate(d, LLAMA_COUNTERS) == pytest.approx(900 / 1200)
    assert prefix_cache_hit_rate(d, VLLM_COUNTERS) is None  # another engine's names


def test_vllm_hits_over_queries():
    before = parse_metrics(VLLM.format(queries=1000, hits=100))
    after = parse_metrics(VLLM.format(queries=3000, hits=1600))
    assert prefix_cache_hit_rate(deltas(before, after), VLLM_COUNTERS) == pytest.approx(
        1500 / 2000)


def test_no_metrics_no_rate():
    assert deltas(None, {"x_total": 1.0}) == {}
    assert prefix_cache_hit_rate({}, LLAMA_COUNTERS) is None


def _rec(prompt, cached, ok=True):
    from servebench.records import RequestRecord

    return RequestRecord(request_id="r", cell_id="c", scheduled_at=0.0, prompt_tokens=prompt,
                         prompt_tokens_cached=cached, http_status=200 if ok else 500)


def test_hit_rate_from_usage_where_the_server_has_no_counters():
    from servebench.telemetry import prefix_cache_hit_rate_from_usage as from_usage

    # vLLM omits cached_tokens when 0: once one response reported it, absent counts 0
    assert from_usage([_rec(100, 80), _rec(100, None), _rec(50, 0)]) == pytest.approx(80 / 250)
    assert from_usage([_rec(100, None), _rec(100, None)]) is None  # never reported: unknown
    assert from_usage([_rec(100, 50), _rec(900, 900, ok=False)]) == 0.5  # failed ones not
    assert from_usage([]) is None


def test_sglang_counters_sum_over_cache_source_and_include_hits():
    text = """# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {device}
sglang:cached_tokens_total{{model_name="m",cache_source="host"}} {host}
"""
    before = parse_metrics(text.format(prompt=0, device=0, host=0))
    after = parse_metrics(text.format(prompt=1000, device=300, host=100))
    rate = prefix_cache_hit_rate(deltas(before, after), get_stack("sglang").prefix_cache_counters)
    assert rate == pytest.approx(400 / 1000)


def test_a_cells_rate_takes_the_counters_first_then_the_usage():
    from servebench.telemetry import cell_prefix_cache_hit_rate

    before = parse_metrics(VLLM.format(queries=0, hits=0))
    after = parse_metrics(VLLM.format(queries=1000, hits=250))
    usage = [_rec(100, 90)]
    assert cell_prefix_cache_hit_rate(deltas(before, after), VLLM_COUNTERS, usage) == 0.25
    assert cell_prefix_cache_hit_rate({}, VLLM_COUNTERS, usage) == 0.9  # no /metrics
    assert cell_prefix_cache_hit_rate({}, (), []) is None


def _vllm_gauges(kv: float, running: int, waiting: int) -> str:
    return (f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n')


def test_engine_telemetry_peak_and_mean_inside_the_measured_window():
    from servebench.telemetry import GaugeSampler, engine_telemetry

    sampler = GaugeSampler("http://127.0.0.1:9", "/metrics")
    # a sample from the warm-up (t=1), three in the window [2, 4], one after it
    sampler.texts = [(1.0, _vllm_gauges(0.9, 9, 9)), (2.0, _vllm_gauges(0.1, 2, 0)),
                     (3.0, _vllm_gauges(0.3, 4, 3)), (4.0, _vllm_gauges(0.2, 4, 0)),
                     (5.0, _vllm_gauges(0.9, 9, 9))]
    delta = {'vllm:num_preemptions_total{engine="0",model_name="m"}': 2.0,
             'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"}': 30.0,
             'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"}': 40.0}
    row = engine_telemetry(get_stack("vllm").engine_gauges, sampler, delta, (2.0, 4.0))
    assert row["kv_cache_usage_peak"] == 0.3 and row["kv_cache_usage_mean"] == pytest.approx(0.2)
    assert row["requests_running_peak"] == 4 and row["requests_running_mean"] == pytest.approx(10 / 3)
    assert row["requests_waiting_peak"] == 3 and row["requests_waiting_mean"] == 1
    assert row["preemptions"] == 2 and row["spec_acceptance_rate"] == 0.75
    assert row["telemetry_samples"] == 3


def test_engine_telemetry_where_the_engine_has_none():
    from servebench.telemetry import GaugeSampler, engine_telemetry

    none = engine_telemetry(get_stack("transformers").engine_gauges,
                            GaugeSampler("http://127.0.0.1:9", None), {}, (0.0, 1.0))
    assert set(none.values()) == {None}
    # llama.cpp: slots and the queue, no KV gauge; no speculation configured
    llama = engine_telemetry(get_stack("llama_cpp").engine_gauges,
                             GaugeSampler("http://127.0.0.1:9", "/metrics"),
                             {"llamacpp:spec_decode_num_draft_tokens_total": 0.0}, (0.0, 1.0))
    assert llama["kv_cache_usage_peak"] is None and llama["spec_acceptance_rate"] is None
    assert llama["telemetry_samples"] == 0


def test_speculation_from_llama_servers_counters():
    from servebench.telemetry import speculation

    gauges = get_stack("llama_cpp").engine_gauges
    delta = {"llamacpp:spec_decode_num_draft_tokens_total": 400.0,
             "llamacpp:spec_decode_num_accepted_tokens_total": 300.0,
             "llamacpp:spec_decode_num_drafts_total": 100.0}
    assert speculation(gauges, delta) == {
        "spec_draft_tokens": 400.0, "spec_accepted_tokens": 300.0,
        "spec_acceptance_rate": 0.75, "spec_acceptance_length": 4.0}
    # a variant that does not speculate: llama-server's zero counters are no measurement
    assert set(speculation(gauges, delta, speculative=False).values()) == {None}
    # speculation on, nothing drafted: counted as such, with no rate
    idle = speculation(gauges, dict.fromkeys(delta, 0.0))
    assert idle["spec_draft_tokens"] == 0.0 and idle["spec_acceptance_rate"] is None
