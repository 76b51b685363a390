"""What each engine reports of its memory, parsed from what the servers here said
(llama-server 0.3.36's log line and /props, vLLM 0.32.0 CPU's startup log and /metrics,
2026-12-04; a GPU runner's lines in the format of vLLM 0.32's gpu_model_runner.py and
kv_cache_utils.py), and the cache transformers serve is capped at."""

from __future__ import annotations

import json

import pytest
from servebench.config import VariantSpec
from servebench.memory import GIB
from servebench.stacks import get_stack
from servebench.stacks.llama_cpp import kv_capacity
from servebench.stacks.vllm import cache_config_tokens

LLAMA_LOG = """0.00.003.155 I srv    load_model: loading model 'build/models/adder-3m-q4_k_m.gguf'
0.00.012.445 I cmn          init: llama threadpool init, n_threads = 2
0.00.187.041 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 256, kv_unified = 'false'
0.00.192.986 I srv  llama_server: model loaded
"""
LLAMA_PROPS = {"default_generation_settings": {"params": {"seed": 4294967295}, "n_ctx": 256},
               "total_slots": 4, "model_path": "build/models/adder-3m-q4_k_m.gguf",
               "build_info": "b0-unknown"}
VLLM_LOG = """(Worker pid=18671) INFO 12-04 22:22:16 [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 0.01 GiB. Available RAM: 20.65 GiB.
(Worker pid=18671) INFO 12-04 22:23:21 [cpu_worker.py:260] Explicitly set (1.0/23.54) GiB for KV cache on node 0.
(EngineCore pid=18490) INFO 12-04 22:23:21 [kv_cache_utils.py:2327] CPU KV cache size: 131,072 tokens, Maximum concurrency for 512 tokens per request: 256.00x
"""
VLLM_GPU_LOG = """(EngineCore_DP0 pid=311) INFO 12-04 01:02:03 [gpu_model_runner.py:5150] Model loading took 14.99 GiB memory and 6.512345 seconds
(EngineCore_DP0 pid=311) INFO 12-04 01:02:40 [kv_cache_utils.py:2327] GPU KV cache size: 1,126,400 tokens, Maximum concurrency for 8,192 tokens per request: 137.50x
"""
# vllm:cache_config_info as the 0.32.0 CPU server exports it (labels trimmed to those read and
# a few others), and as 0.19 did (no kv_cache_size_tokens)
INFO_032 = ('vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",'
            'gpu_memory_utilization="0.92",kv_cache_memory_bytes="1073741824",'
            'kv_cache_size_tokens="131072",num_cpu_blocks="None",num_gpu_blocks="1024"} 1.0')
INFO_019 = ('vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",'
            'num_cpu_blocks="None",num_gpu_blocks="70400"} 1.0')
METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
{info}
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} 0.0
"""


def _variant(**kw) -> VariantSpec:
    return VariantSpec(**{"name": "v", "model": "include/models/adder-3m", "quant": "none",
                          "max_num_seqs": 4, "max_model_len": 512, **kw})


def test_llama_cpp_capacity_is_its_slots_contexts_as_its_log_says():
    assert kv_capacity(LLAMA_LOG, None) == (
        1024, "llama-server's log: n_slots = 4, n_ctx_slot = 256, kv_unified = 'false'")
    unified = LLAMA_LOG.replace("n_ctx_slot = 256, kv_unified = 'false'",
                                "n_ctx_slot = 1024, kv_unified = 'true'")
    assert kv_capacity(unified, None)[0] == 1024  # one cache the slots share
    # a retried unit's server appends to the same log: its own (last) report counts
    assert kv_capacity(LLAMA_LOG + LLAMA_LOG.replace("256", "512"), None)[0] == 2048


def test_llama_cpp_capacity_from_props_without_the_log():
    tokens, source = kv_capacity(None, json.dumps(LLAMA_PROPS))
    assert tokens == 1024 and source.startswith("/props: n_ctx 256 a slot x total_slots 4")
    assert kv_capacity("", "not json") == (
        None, "llama-server stated no slot context (no n_ctx_slot in its log, no /props)")


def test_llama_cpp_reads_props_through_the_servers_get():
    asked = []

    def get(path):
        asked.append(path)
        return json.dumps(LLAMA_PROPS)

    engine = get_stack("llama_cpp").engine_memory(_variant(), get, None)
    assert asked == ["/props"] and engine.kv_cache_tokens == 1024
    assert engine.weights_bytes is None  # the GGUF on disk says (bench.memory)


@pytest.mark.parametrize("info, tokens, how", [
    (INFO_032, 131072, "kv_cache_size_tokens"),
    (INFO_019, 70400 * 16, "num_gpu_blocks 70400 x block_size 16"),
])
def test_vllm_capacity_from_its_cache_config_info(info, tokens, how):
    found, source = cache_config_tokens(METRICS.format(info=info))
    assert found == tokens and how in source


def test_vllm_capacity_and_weights_from_its_log_without_metrics():
    vllm = get_stack("vllm")
    cpu = vllm.engine_memory(_variant(), lambda path: None, VLLM_LOG)
    assert cpu.kv_cache_tokens == 131072
    assert cpu.kv_cache_source == "vLLM's log: CPU KV cache size: 131,072 tokens"
    assert cpu.weights_bytes is None  # the CPU build does not say: the files on disk do
    gpu = vllm.engine_memory(_variant(), lambda path: METRICS.format(info=INFO_019),
                             VLLM_GPU_LOG)
    assert gpu.kv_cache_tokens == 70400 * 16  # /metrics first
    assert gpu.weights_bytes == round(14.99 * GIB)
    assert "Model loading took 14.99 GiB" in gpu.weights_source
    nothing = vllm.engine_memory(_variant(), lambda path: "garbage {", None)
    assert nothing.kv_cache_tokens is None and "reported no KV cache" in nothing.kv_cache_source


def test_transformers_serve_is_capped_at_the_variants_sequences():
    tf = get_stack("transformers")
    variant = _variant(dtype="float32")
    from servebench.settings import get_settings

    argv = tf.local_launch(variant, host="127.0.0.1", port=8000, settings=get_settings()).argv
    assert argv[argv.index("--cb-num-blocks") + 1] == "8"  # 4 x 512 tokens in 256-token pages
    assert argv[argv.index("--cb-max-batch-tokens") + 1] == "2048"
    engine = tf.engine_memory(variant, lambda path: None, None)
    assert engine.kv_cache_tokens == 2048 and engine.kv_cache_source.startswith("configured")
    wider = _variant(extra_args=["--cb-num-blocks", "16", "--cb-block-size", "128"])
    assert tf.engine_memory(wider, lambda path: None, None).kv_cache_tokens == 2048


def test_an_engine_that_reports_nothing_says_so():
    engine = get_stack("tgi").engine_memory(_variant(), lambda path: None, None)
    assert engine.kv_cache_tokens is None and "reports no KV-cache capacity" in \
        engine.kv_cache_source
