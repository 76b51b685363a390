"""TensorRT-LLM's ``trtllm-serve`` (PyTorch backend), locally or in the NGC release image.
Checked against 1.3.0rc3 (``tests/fixtures/engines/trtllm.yaml``). What has no flag (KV-cache
dtype, prefix caching, dtype, metrics, speculative decoding) goes in the
``--extra_llm_api_options`` YAML; quantization is the checkpoint's. Its flags, request dialect
and metrics path: docs/stacks.md ("TensorRT-LLM").
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import PurePosixPath

import yaml

from servebench.config import VariantSpec
from servebench.config.formats import (
    CHECKPOINT_METHODS,
    TRTLLM,
    quant_flags,
    refused_quants,
)
from servebench.settings import Settings
from servebench.stacks.adapter import register_stack
from servebench.stacks.gpu import HfGpuStack, weights_dtype

CONFIG_IN_CONTAINER = "/etc/servebench/trtllm-extra-options.yaml"

# Quantization comes from the checkpoint, never a flag (TorchLlmArgs.quant_config is private):
# ModelOpt's hf_quant_config.json, else config.json's quantization_config, of which the PyTorch
# backend reads block-scaled fp8, mxfp4 and 8-bit compressed-tensors with per-channel or block
# weight scales (_torch/model_config.py load_hf_quant_config at 1.3.0rc3), and serves what
# _torch/modules/linear.py get_quant_method has a method for. The names a variant may declare,
# and those of checkpoints the PyTorch backend cannot serve, with why (config.formats):
QUANTS = frozenset(quant_flags(TRTLLM))
REFUSED_QUANTS = refused_quants(TRTLLM)
# its fp8 is ModelOpt's, whose config.json may state quant_method modelopt: not checked
MODELOPT_FP8_METHODS = {k: v for k, v in CHECKPOINT_METHODS.items() if k != "fp8"}
# kv_cache_config.dtype: auto (the checkpoint's) or fp8, which sets the KV quant algo FP8
# (TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype)
KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"}
NGRAM_MAX_DEFAULT = 2  # NGramDecodingConfig.max_matching_ngram_size where it has a default
SPEC_TYPES = {"ngram": "NGram", "draft": "DraftTarget", "eagle3": "Eagle3", "mtp": "MTP"}


def served_name(model: str, is_folder: bool) -> str:
    """The model name the server answers with: a local checkpoint folder's own name."""
    return PurePosixPath(model).name if is_folder else model


def extra_llm_api_options(variant: VariantSpec) -> dict:
    """The ``--extra_llm_api_options`` YAML document for ``variant``."""
    kv: dict = {"enable_block_reuse": variant.prefix_caching}
    if variant.kv_cache_dtype:
        kv["dtype"] = KV_CACHE_DTYPES.get(variant.kv_cache_dtype, variant.kv_cache_dtype)
    options: dict = {"kv_cache_config": kv, "return_perf_metrics": True}
    dtype = weights_dtype(variant)
    if dtype:
        options["dtype"] = dtype
    spec = variant.speculative
    if spec is not None and spec.method in SPEC_TYPES:
        cfg: dict = {"decoding_type": SPEC_TYPES[spec.method],
                     "max_draft_len": spec.num_speculative_tokens}
        if spec.draft_model:
            cfg["speculative_model"] = spec.draft_model
        if spec.method == "mtp":  # its validator overwrites max_draft_len with this one
            cfg["num_nextn_predict_layers"] = spec.num_speculative_tokens
        if spec.method == "ngram":  # 0 in some releases' defaults, which the server refuses
            cfg["max_matching_ngram_size"] = spec.ngram_max or NGRAM_MAX_DEFAULT
        options["speculative_config"] = cfg
    return options


@register_stack
class TrtllmStack(HfGpuStack):
    name = "trtllm"
    engine = "tensorrt-llm"
    checked_versions = ">=1.3.0rc3,<1.4"
    version_path = "/version"
    metrics_path = "/prometheus/metrics/"
    default_image = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc3"
    entrypoint = ("trtllm-serve",)
    quants, refused_quants = QUANTS, REFUSED_QUANTS  # the checkpoint's, never a flag
    checkpoint_methods = MODELOPT_FP8_METHODS
    quant_flag = "checkpoint quantization"
    dtypes = frozenset({"auto", "float16", "bfloat16", "float32"})  # the LLM API's dtype
    top_k_disabled = 0  # TensorRT-LLM: top_k 0 disables top-k
    kv_cache_dtypes = KV_CACHE_DTYPES

    @property
    def local_command(self) -> tuple[str, ...]:
        return (shutil.which("trtllm-serve") or "trtllm-serve",)

    def speculative_problems(self, variant: VariantSpec) -> list[str]:
        problems = []
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

    def served_model(self, variant: VariantSpec, model: str, folder: bool) -> str:
        return served_name(model, folder)

    def local_files(self, variant: VariantSpec, settings: Settings) -> dict:
        text = self._options_text(variant)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = settings.work_dir / "trtllm" / f"{variant.name}-{digest}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return {"config_path": str(path)}

    def container_files(self, variant: VariantSpec) -> tuple[dict[str, str], dict]:
        return ({CONFIG_IN_CONTAINER: self._options_text(variant)},
                {"config_path": CONFIG_IN_CONTAINER})
