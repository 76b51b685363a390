"""SGLang (``python -m sglang.launch_server``), locally or in the ``lmsysorg/sglang`` image.

Flags are ``ServerArgs`` fields of ``python/sglang/srt/server_args.py`` (a field ``tp_size``
is the flag ``--tp-size``): ``--model-path``, ``--served-model-name``, ``--context-length``,
``--max-running-requests``, ``--chunked-prefill-size`` (the per-step token budget, the
counterpart of vLLM's max_num_batched_tokens), ``--mem-fraction-static``,
``--disable-radix-cache``, ``--enable-metrics`` and ``--enable-cache-report`` (cached tokens in
``usage.prompt_tokens_details``). ``--kv-cache-dtype`` has no bare ``fp8``: it takes
``fp8_e4m3``/``fp8_e5m2``. Speculative decoding: ``--speculative-algorithm`` EAGLE, EAGLE3,
NEXTN (MTP), STANDALONE (a separate draft model) or NGRAM, with ``--speculative-num-steps``,
``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens``. SGLang has no Medusa, and
its NGRAM drafter is a trie with no min/max match-window flags in current releases.

Request dialect (``python/sglang/srt/entrypoints/openai/protocol.py``): top_k (``-1``
disables), min_p, min_tokens, repetition_penalty and ignore_eos are extras on the OpenAI
request. Exact output length: ``ignore_eos`` plus ``min_tokens = max_tokens``.
``stream_options.continuous_usage_stats`` (since v0.5.5) puts cumulative usage on every chunk.

Checked against v0.5.18 (facts in ``tests/fixtures/engines/sglang.yaml``); every rendered flag
and value exists from v0.5.5 (bf16 KV cache, modelopt_fp8 and compressed-tensors from v0.5.4,
continuous_usage_stats from v0.5.5) through v0.5.23.

Known limit: ``seed``. The chat route passes it on as ``sampling_seed`` only from v0.5.7
(older releases accept and ignore it), and even then it takes effect only with
``--enable-deterministic-inference``, which this adapter does not set (it changes the kernels,
so the speed measured would not be the serving speed). With ``temperature > 0`` the cells
say so in their provenance (``engine_notes``).

Prefix-cache hit rate: ``sglang:cached_tokens_total`` (labelled by ``cache_source``; summed) over
``sglang:prompt_tokens_total`` (whole prompts, the cached tokens included), both counted when a
request finishes (``observability/metrics_collector.py``). ``sglang:cache_hit_rate`` is a
last-value gauge that each decode log resets to 0, so it is not used.
"""

from __future__ import annotations

import sys

from servebench.config import SamplingSpec, VariantSpec
from servebench.config.formats import SGLANG, quant_flags
from servebench.settings import Settings
from servebench.stacks.adapter import (
    EngineGauges,
    PrefixCacheCounters,
    installed_version,
    register_stack,
)
from servebench.stacks.gpu import (
    HfGpuStack,
    checkpoint_args,
    listen_args,
    weights_dtype,
)
from servebench.tokenizer import SGLANG_TOKENIZE

DETERMINISTIC_FLAG = "--enable-deterministic-inference"

# servebench quant -> --quantization (QUANTIZATION_CHOICES; None: no flag), from the table of
# formats (config.formats). A pre-quantized checkpoint gets none, as SGLang's docs ask ("do not add
# --quantization"): configs/model_config.py reads its quantization_config and, on CUDA, sends AWQ
# and GPTQ to awq_marlin/gptq_marlin by itself (awq/awq.py, gptq/gptq.py
# override_quantization_method). Its own W8A8 kernels for a compressed-tensors checkpoint
# (--quantization w8a8_int8 or w8a8_fp8: per-channel weights, per-token activations only) are a
# lever: put the flag in extra_args. fp8 quantizes a 16-bit checkpoint as it loads ("MOE + linear
# online").
QUANT_FLAGS = quant_flags(SGLANG)
DTYPES = {"auto", "half", "float16", "bfloat16", "float", "float32"}
# servebench kv_cache_dtype -> --kv-cache-dtype (ServerArgs.kv_cache_dtype choices, v0.5.18)
KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3",
                   "fp8_e5m2": "fp8_e5m2", "bf16": "bf16", "bfloat16": "bfloat16"}
SPEC_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN",
                   "draft": "STANDALONE", "ngram": "NGRAM"}


@register_stack
class SglangStack(HfGpuStack):
    name = "sglang"
    engine = "sglang"
    default_image = "lmsysorg/sglang:v0.5.18"
    entrypoint = ("python3", "-m", "sglang.launch_server")
    local_command = (sys.executable, "-m", "sglang.launch_server")
    shm_size = "32g"  # SGLang's docker instructions use a large /dev/shm
    quants, dtypes, kv_cache_dtypes = QUANT_FLAGS, DTYPES, KV_CACHE_DTYPES
    checked_versions = ">=0.5.5,<0.6"
    # /server_info from v0.5.6; this older name answers across the whole range (logging a
    # deprecation warning from v0.5.6)
    version_path = "/get_server_info"
    tokenize_api = SGLANG_TOKENIZE
    # token_usage: the KV pool's used share; retractions are SGLang's preemptions
    engine_gauges = EngineGauges(
        kv_cache_usage="sglang:token_usage", running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs", preemptions="sglang:num_retracted_requests_total")
    prefix_cache_counters = (PrefixCacheCounters(
        "sglang:cached_tokens_total", "sglang:prompt_tokens_total", total_includes_hits=True),)

    def speculative_problems(self, variant: VariantSpec) -> list[str]:
        problems = []
        spec = variant.speculative
        if spec is not None:
            if spec.method not in SPEC_ALGORITHMS:
                problems.append(
                    f"field speculative.method {spec.method!r}: sglang supports "
                    f"{sorted(SPEC_ALGORITHMS)} (no Medusa)"
                )
            if spec.ngram_min is not None or spec.ngram_max is not None:
                problems.append(
                    "field speculative.ngram_min/ngram_max: sglang's NGRAM drafter has no "
                    "match-window flags; tune it with extra_args (--speculative-ngram-*)"
                )
        return problems

    def _args(self, variant: VariantSpec, model: str, *, host: str, port: int) -> list[str]:
        args = [
            "--model-path", model,
            *listen_args(host, port, variant.model),
            "--dtype", weights_dtype(variant) or "auto",
            "--context-length", str(variant.max_model_len),
            "--max-running-requests", str(variant.max_num_seqs),
            "--tp-size", str(variant.tensor_parallel_size),
            "--enable-metrics",
            "--enable-cache-report",  # usage.prompt_tokens_details.cached_tokens
        ]
        if not variant.prefix_caching:
            args.append("--disable-radix-cache")
        args += checkpoint_args(variant, QUANT_FLAGS)
        if variant.kv_cache_dtype:
            args += ["--kv-cache-dtype", KV_CACHE_DTYPES.get(variant.kv_cache_dtype,
                                                             variant.kv_cache_dtype)]
        if variant.max_num_batched_tokens:
            args += ["--chunked-prefill-size", str(variant.max_num_batched_tokens)]
        if variant.gpu_memory_utilization:
            args += ["--mem-fraction-static", str(variant.gpu_memory_utilization)]
        spec = variant.speculative
        if spec is not None and spec.method in SPEC_ALGORITHMS:
            n = spec.num_speculative_tokens
            args += ["--speculative-algorithm", SPEC_ALGORITHMS[spec.method]]
            if spec.draft_model:
                args += ["--speculative-draft-model-path", spec.draft_model]
            if spec.method == "ngram":
                args += ["--speculative-num-draft-tokens", str(n)]
            else:  # a chain of n draft steps, top-1 each: n + 1 tokens verified per step
                args += ["--speculative-num-steps", str(n), "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", str(n + 1)]
        return [*args, *variant.extra_args]

    def version(self, settings: Settings) -> str:
        return installed_version("sglang")

    def known_limits(self, variant: VariantSpec, sampling: SamplingSpec) -> list[str]:
        if sampling.temperature == 0.0 or DETERMINISTIC_FLAG in variant.extra_args:
            return []
        return [(f"seed: sglang's chat route honours seed only from v0.5.7 and only with "
                 f"{DETERMINISTIC_FLAG} (not set), so sampled outputs are not reproducible")]
