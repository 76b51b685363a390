"""Hugging Face Text Generation Inference (``text-generation-launcher``), in its GHCR image
(the image's entrypoint kept). Checked against v3.3.6 (``tests/fixtures/engines/tgi.yaml``).
TGI cannot force an exact output length (its cells run at natural length), carry top_k or
min_p, or queue above ``--max-concurrent-requests``; repetition_penalty rides on
``presence_penalty``. Its flags, streaming and each limit's source: docs/stacks.md ("TGI").
"""

from __future__ import annotations

from servebench.config import SamplingSpec, VariantSpec
from servebench.config.formats import TGI, quant_flags
from servebench.hub import hub_cache_dir
from servebench.settings import Settings
from servebench.stacks.adapter import (
    EngineGauges,
    chat_request,
    register_stack,
)
from servebench.stacks.gpu import (
    HfGpuStack,
    checkpoint_args,
    weights_dtype,
)

# servebench quant -> --quantize (launcher/src/main.rs enum Quantization), from the table of
# formats (config.formats). A pre-quantized checkpoint's is its config.json's quant_method: the
# launcher would read the same from it (Config.quantize, then args.quantize.or(...)) and pass it to
# the shards, so --dtype is never sent with it (server/text_generation_server/cli.py: "Only 1 can
# be set between `dtype` and `quantize`"); AWQ and GPTQ run on Marlin where it can,
# compressed-tensors W4A16, W8A8 INT8 and FP8 on their loaders
# (layers/compressed_tensors/loader.py). fp8 and eetq quantize a 16-bit checkpoint as it loads.
QUANT_FLAGS = quant_flags(TGI)
DTYPES = {"float16", "bfloat16"}
# servebench kv_cache_dtype -> --kv-cache-dtype (enum KVCacheDtype); unset, the model's dtype,
# or FP8 where a compressed-tensors checkpoint's kv_cache_scheme says so (models/__init__.py)
KV_CACHE_DTYPES = {"fp8": "fp8_e4m3fn", "fp8_e4m3": "fp8_e4m3fn", "fp8_e4m3fn": "fp8_e4m3fn",
                   "fp8_e5m2": "fp8_e5m2"}
HUB_CACHE_IN_CONTAINER = "/data/hub"  # the image's HF_HOME=/data, plus huggingface_hub's hub/


@register_stack
class TgiStack(HfGpuStack):
    name = "tgi"
    engine = "text-generation-inference"
    default_image = "ghcr.io/huggingface/text-generation-inference:3.3.6"
    entrypoint = None  # /tgi-entrypoint.sh: ldconfig, the venv, then the launcher
    local_command = ("text-generation-launcher",)
    shm_size = "1g"  # TGI's docker instructions: --shm-size 1g (NCCL for sharding)
    quants, quant_flag, dtypes = QUANT_FLAGS, "--quantize", DTYPES
    kv_cache_dtypes = frozenset({"auto", *KV_CACHE_DTYPES})
    can_force_length = False
    natural_length_reason = ("router/src/validation.rs hard-codes ignore_eos_token false and no "
                             "HTTP route has ignore_eos or min_new_tokens: "
                             "huggingface/text-generation-inference#1944")
    checked_versions = ">=3.2,<4"
    # router metrics: the running batch and the queue (no KV-cache gauge)
    engine_gauges = EngineGauges(running="tgi_batch_current_size", waiting="tgi_queue_size")
    version_path = "/info"  # {"version": "3.3.6-dev0", "sha": ..., ...}

    def precision_problems(self, variant: VariantSpec) -> list[str]:
        problems = super().precision_problems(variant)
        quant = QUANT_FLAGS.get(variant.quant.lower())
        if variant.dtype in self.dtypes and quant:
            problems.append(f"field dtype {variant.dtype!r}: tgi --dtype cannot be combined "
                            f"with --quantize {quant}")
        return problems

    def speculative_problems(self, variant: VariantSpec) -> list[str]:
        problems = []
        spec = variant.speculative
        if spec is not None:
            if spec.method not in ("ngram", "medusa"):
                problems.append(f"field speculative.method {spec.method!r}: tgi --speculate "
                                "does n-gram or the model's own Medusa heads only")
            if spec.ngram_min is not None or spec.ngram_max is not None:
                problems.append("field speculative.ngram_min/ngram_max: tgi's n-gram "
                                "speculation has no window size")
            if spec.method == "medusa" and spec.draft_model:
                problems.append("field speculative.draft_model: tgi reads Medusa heads from the "
                                "model itself; point model at the Medusa checkpoint")
        return problems

    def served_version(self, payload: dict) -> str | None:
        version, sha = payload.get("version"), payload.get("sha")
        if not version:
            return None
        return f"{version} ({sha[:12]})" if sha else str(version)

    def sampling_problems(self, sampling: SamplingSpec) -> list[str]:
        problems = []
        for field_name, neutral in (("top_k", 0), ("min_p", 0.0)):
            if getattr(sampling, field_name) != neutral:
                problems.append(f"field sampling.{field_name}: tgi's /v1/chat/completions "
                                f"cannot carry it (only {neutral!r} is comparable)")
        if not 0.0 <= sampling.repetition_penalty <= 4.0:
            problems.append("field sampling.repetition_penalty: tgi carries it as "
                            "presence_penalty - 2.0, which must lie in [-2, 2]")
        if sampling.temperature == 0.0 and sampling.top_p < 1.0:
            problems.append("field sampling.top_p: with temperature 0 tgi is greedy only "
                            "without top_p; top_p < 1 makes it sample at temperature 1")
        return problems

    def _args(self, variant: VariantSpec, model: str, *, host: str, port: int) -> list[str]:
        args = [
            "--model-id", model,
            "--hostname", host,
            "--port", str(port),
            "--max-input-tokens", str(variant.max_model_len - 1),
            "--max-total-tokens", str(variant.max_model_len),
            "--max-concurrent-requests", str(variant.max_num_seqs),
            "--num-shard", str(variant.tensor_parallel_size),
        ]
        args += checkpoint_args(variant, QUANT_FLAGS, "--quantize")
        if not QUANT_FLAGS.get(variant.quant.lower()):
            dtype = weights_dtype(variant)
            if dtype:
                args += ["--dtype", dtype]
        kv = variant.kv_cache_dtype
        if kv and kv != "auto":
            args += ["--kv-cache-dtype", KV_CACHE_DTYPES.get(kv, kv)]
        if variant.max_num_batched_tokens:
            args += ["--max-batch-prefill-tokens", str(variant.max_num_batched_tokens)]
        if variant.gpu_memory_utilization:
            args += ["--cuda-memory-fraction", str(variant.gpu_memory_utilization)]
        if variant.speculative is not None:
            args += ["--speculate", str(variant.speculative.num_speculative_tokens)]
        return [*args, *variant.extra_args]

    def env(self, variant: VariantSpec) -> dict[str, str]:
        return {"PREFIX_CACHING": "1" if variant.prefix_caching else "0"}

    def served_model(self, variant: VariantSpec, model: str, folder: bool) -> str:
        return model  # the launcher's --model-id, path or hub id, is the name it answers with

    def model_in_container(self, variant: VariantSpec,
                           settings: Settings) -> tuple[str, dict[str, str]]:
        volumes = {str(hub_cache_dir() / "hub"): HUB_CACHE_IN_CONTAINER}
        local = settings.resolve(variant.model)
        if not local.exists():
            return variant.model, volumes
        model = f"/models/{local.name}"
        volumes[str(local)] = model
        return model, volumes

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
        problems = self.sampling_problems(sampling)
        if problems:
            raise ValueError("; ".join(problems))
        # temperature 0 -> greedy in TGI's chat route
        body = chat_request(served_model=served_model, messages=messages, sampling=sampling,
                            max_tokens=max_tokens)
        if sampling.top_p >= 1.0:  # TGI rejects top_p >= 1; absent means no filtering
            del body["top_p"]
        body["presence_penalty"] = sampling.repetition_penalty - 2.0  # docs/stacks.md ("TGI")
        # force_length cannot be honoured (docs/stacks.md, "TGI"): its cells run at natural length
        return body
