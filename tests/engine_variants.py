"""A spread of GPU-engine variants that sets every knob each stack takes (each must pass its
adapter's own check): what the engine-facts test renders against each engine's option lists,
and what the vLLM test parses with the installed vLLM's own parser."""

from servebench.config import SpeculativeSpec, VariantSpec

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def v(**kw) -> VariantSpec:
    return VariantSpec(**{"name": "v", "model": MODEL, "revision": "abc123", **kw})


# every knob each stack takes, spread over variants (each must pass the adapter's own check)
SPEC = {
    "ngram": SpeculativeSpec(method="ngram", num_speculative_tokens=4, ngram_min=2, ngram_max=5),
    "ngram_plain": SpeculativeSpec(method="ngram", num_speculative_tokens=4),
    "draft": SpeculativeSpec(method="draft", draft_model="Qwen/Qwen2.5-0.5B-Instruct",
                             num_speculative_tokens=3),
    "eagle": SpeculativeSpec(method="eagle", draft_model="yuhuili/EAGLE-Qwen2-7B",
                             num_speculative_tokens=3),
    "eagle3": SpeculativeSpec(method="eagle3", draft_model="eagle3/head",
                              num_speculative_tokens=3),
    "mtp": SpeculativeSpec(method="mtp", num_speculative_tokens=1),
    "medusa": SpeculativeSpec(method="medusa", num_speculative_tokens=3),
}
BUSY = {"max_num_seqs": 64, "max_model_len": 8192, "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.85, "tensor_parallel_size": 2}
VARIANTS = {
    "vllm": [v(quant="bf16", **BUSY), v(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False),
             v(quant="awq", speculative=SPEC["draft"]), v(quant="gptq", speculative=SPEC["ngram"]),
             v(quant="none", dtype="float16", speculative=SPEC["eagle3"]),
             v(quant="compressed-tensors", speculative=SPEC["mtp"]),
             v(quant="w8a8_int8", kv_cache_dtype="fp8_e4m3"),
             v(quant="bf16", kv_cache_dtype="fp8_e5m2")],
    "sglang": [v(quant="bf16", **BUSY), v(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False),
               v(quant="awq", speculative=SPEC["draft"]),
               v(quant="w8a8_int8", speculative=SPEC["ngram_plain"]),
               v(quant="none", speculative=SPEC["eagle3"]), v(speculative=SPEC["eagle"]),
               v(quant="fp8", speculative=SPEC["mtp"], kv_cache_dtype="fp8_e5m2"),
               v(quant="gptq"), v(quant="w8a8_fp8"), v(quant="bf16", kv_cache_dtype="fp8")],
    "trtllm": [v(quant="bf16", **BUSY), v(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False),
               v(quant="nvfp4", speculative=SPEC["draft"]),
               v(quant="none", speculative=SPEC["eagle3"]), v(speculative=SPEC["mtp"]),
               v(speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=4,
                                             ngram_max=3)),
               v(quant="w8a8_fp8"), v(quant="bf16", kv_cache_dtype="fp8")],
    "tgi": [v(quant="bf16", **BUSY), v(quant="fp8", kv_cache_dtype="fp8", prefix_caching=False),
            v(quant="awq", speculative=SPEC["ngram_plain"]), v(quant="gptq"),
            v(quant="none", kv_cache_dtype="fp8_e5m2", speculative=SPEC["medusa"]),
            v(quant="w4a16"), v(quant="w8a8_int8"), v(quant="w8a8_fp8", kv_cache_dtype="fp8")],
}
