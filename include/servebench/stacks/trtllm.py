"""TensorRT-LLM's ``trtllm-serve`` (PyTorch backend), locally or in the NGC release image.

Flags are the click options of ``tensorrt_llm/commands/serve.py``: ``MODEL`` (positional),
``--host``, ``--port``, ``--backend pytorch``, ``--max_batch_size``, ``--max_num_tokens``,
``--max_seq_len``, ``--tp_size``, ``--kv_cache_free_gpu_memory_fraction`` (a fraction of the
memory *free after weights*, not of the whole GPU), ``--revision`` and
``--extra_llm_api_options`` (alias ``--config``): a YAML of LLM-API arguments. That YAML
carries what has no flag (``tensorrt_llm/llmapi/llm_args.py``): ``kv_cache_config.dtype``
(auto/fp8), ``kv_cache_config.enable_block_reuse`` (prefix caching),
``speculative_config`` (``decoding_type`` NGram/Draft_Target/Eagle3/MTP with
``max_draft_len``, ``speculative_model``, ``max_matching_ngram_size``,
``num_nextn_predict_layers``) and ``dtype``. There is no served-model-name flag: responses
name the model argument. Quantization is read from the checkpoint (ModelOpt
``hf_quant_config.json``); the PyTorch backend has no Medusa
(``MedusaDecodingConfig.supports_backend``) and runs EAGLE heads as ``Eagle3``.

Request dialect (``tensorrt_llm/serve/openai_protocol.py``, ``extra="forbid"``: unknown
fields are rejected, so only its own fields are sent): top_k (0 disables), min_p,
repetition_penalty, seed, ignore_eos, min_tokens. Exact output length: ``ignore_eos`` plus
``min_tokens``. Prometheus metrics live at ``/prometheus/metrics`` (``/metrics`` is JSON
iteration stats).
"""

from __future__ import annotations

import hashlib
import shutil

import yaml

from servebench.config import SamplingSpec, VariantSpec
from servebench.settings import Settings
from servebench.stacks.base import (
    ContainerLaunch,
    LaunchSpec,
    StackAdapter,
    chat_request,
    hf_model_in_container,
    register_stack,
    vllm_style_sampling,
)
from servebench.stacks.llama_cpp import GGUF_QUANTS

DEFAULT_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"  # pin per variant with `image:`
CONFIG_IN_CONTAINER = "/etc/servebench/trtllm-extra-options.yaml"

# quantization comes from the checkpoint; these are the names a variant may declare
QUANTS = {"none", "bf16", "bfloat16", "f16", "fp16", "float16", "fp8", "nvfp4", "awq",
          "w4a16_awq", "w4a8_awq", "int8_sq"}
QUANT_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "f16": "float16",
                "fp16": "float16", "float16": "float16"}
KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"}
SPEC_TYPES = {"ngram": "NGram", "draft": "Draft_Target", "eagle3": "Eagle3", "mtp": "MTP"}


def extra_llm_api_options(variant: VariantSpec) -> dict:
    """The ``--extra_llm_api_options`` YAML document for ``variant``."""
    kv: dict = {"enable_block_reuse": variant.prefix_caching}
    if variant.kv_cache_dtype:
        kv["dtype"] = KV_CACHE_DTYPES.get(variant.kv_cache_dtype, variant.kv_cache_dtype)
    options: dict = {"kv_cache_config": kv}
    dtype = variant.dtype or QUANT_DTYPES.get(variant.quant.lower())
    if dtype:
        options["dtype"] = dtype
    spec = variant.speculative
    if spec is not None and spec.method in SPEC_TYPES:
        n = spec.num_speculative_tokens
        cfg: dict = {"decoding_type": SPEC_TYPES[spec.method]}
        if spec.method == "mtp":
            cfg["num_nextn_predict_layers"] = n
        else:
            cfg["max_draft_len"] = n
        if spec.draft_model:
            cfg["speculative_model"] = spec.draft_model
        if spec.method == "ngram" and spec.ngram_max is not None:
            cfg["max_matching_ngram_size"] = spec.ngram_max
        options["speculative_config"] = cfg
    return options


@register_stack
class TrtllmStack(StackAdapter):
    name = "trtllm"
    engine = "tensorrt-llm"
    server_metrics = {}  # names under /prometheus/metrics vary by release; scraped as-is

    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        problems = []
        quant = variant.quant.lower()
        if quant in GGUF_QUANTS - {"bf16", "f16", "f32"}:
            problems.append(
                f"field quant {variant.quant!r}: trtllm does not serve GGUF quants (llama_cpp does)"
            )
        elif quant not in QUANTS:
            problems.append(f"field quant {variant.quant!r}: trtllm reads quantization from a "
                            f"ModelOpt checkpoint; known: {sorted(QUANTS)}")
        kv = variant.kv_cache_dtype
        if kv is not None and kv not in KV_CACHE_DTYPES:
            problems.append(f"field kv_cache_dtype {kv!r}: trtllm kv_cache_config.dtype takes "
                            f"{sorted(KV_CACHE_DTYPES)} (fp8 is e4m3)")
        spec = variant.speculative
        if spec is not None:
            if spec.method == "eagle":
                problems.append("field speculative.method 'eagle': trtllm's PyTorch backend runs "
                                "EAGLE heads as Eagle3; use method eagle3")
            elif spec.method not in SPEC_TYPES:
                problems.append(f"field speculative.method {spec.method!r}: trtllm's PyTorch "
                                f"backend supports {sorted(SPEC_TYPES)} (no Medusa)")
            if spec.ngram_min is not None:
                problems.append("field speculative.ngram_min: trtllm's NGram drafter has only "
                                "max_matching_ngram_size (ngram_max)")
        return problems

    def _args(self, variant: VariantSpec, model: str, *, host: str, port: int,
              config_path: str) -> list[str]:
        args = [
            model,
            "--host", host,
            "--port", str(port),
            "--backend", "pytorch",
            "--max_batch_size", str(variant.max_num_seqs),
            "--max_seq_len", str(variant.max_model_len),
            "--tp_size", str(variant.tensor_parallel_size),
            "--extra_llm_api_options", config_path,
        ]
        if variant.max_num_batched_tokens:
            args += ["--max_num_tokens", str(variant.max_num_batched_tokens)]
        if variant.gpu_memory_utilization:
            args += ["--kv_cache_free_gpu_memory_fraction", str(variant.gpu_memory_utilization)]
        if variant.revision:
            args += ["--revision", variant.revision]
        return [*args, *variant.extra_args]

    @staticmethod
    def _options_text(variant: VariantSpec) -> str:
        return yaml.safe_dump(extra_llm_api_options(variant), sort_keys=True)

    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        text = self._options_text(variant)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = settings.work_dir / "trtllm" / f"{variant.name}-{digest}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        local = settings.resolve(variant.model)
        model = str(local) if local.exists() else variant.model
        exe = shutil.which("trtllm-serve") or "trtllm-serve"
        argv = [exe, *self._args(variant, model, host=host, port=port, config_path=str(path))]
        return LaunchSpec(argv=argv, served_model=model, metrics_path="/prometheus/metrics")

    def container_launch(
        self, variant: VariantSpec, *, port: int, settings: Settings
    ) -> ContainerLaunch:
        model, volumes = hf_model_in_container(variant, settings)
        return ContainerLaunch(
            image=variant.image or DEFAULT_IMAGE,
            entrypoint=["trtllm-serve"],
            command=self._args(variant, model, host="0.0.0.0", port=port,
                               config_path=CONFIG_IN_CONTAINER),
            served_model=model,
            port=port,
            ports={port: port},
            gpus=variant.tensor_parallel_size,
            shm_size="16g",
            volumes=volumes,
            files={CONFIG_IN_CONTAINER: self._options_text(variant)},
            metrics_path="/prometheus/metrics",
        )

    def chat_body(
        self,
        *,
        served_model: str,
        messages: list[dict],
        sampling: SamplingSpec,
        max_tokens: int,
        force_length: bool,
        variant: VariantSpec,
    ) -> dict:
        return {
            **chat_request(served_model=served_model, messages=messages, sampling=sampling,
                           max_tokens=max_tokens),
            # TensorRT-LLM: top_k 0 disables top-k
            **vllm_style_sampling(sampling, max_tokens=max_tokens, force_length=force_length,
                                  top_k_disabled=0),
        }
