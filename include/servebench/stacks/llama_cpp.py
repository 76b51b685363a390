"""llama.cpp's ``llama-server``: continuous batching over ``-np`` slots, Prometheus metrics.

Flags are those of llama.cpp's ``common/arg.cpp``. Its sampling defaults (top_k=40,
min_p=0.05, repeat_penalty=1.0) differ from other stacks, so every parameter is sent; exact
output length is forced with ``ignore_eos``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from servebench.config import SamplingSpec, VariantSpec
from servebench.settings import Settings
from servebench.stacks.base import (
    LaunchSpec,
    PrefixCacheCounters,
    StackAdapter,
    chat_request,
    register_stack,
)

GGUF_QUANTS = {
    "f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q5_1", "q4_k_m",
    "q4_k_s", "q4_0", "q4_1", "q3_k_m", "q3_k_s", "q3_k_l", "q2_k", "iq4_xs", "iq4_nl",
}


@register_stack
class LlamaCppStack(StackAdapter):
    name = "llama_cpp"
    engine = "llama.cpp"
    tokenize_path = "/tokenize"
    version_path = "/props"  # {"build_info": "b<build>-<commit>", ...}
    # prompt tokens reused from the cache / processed (the cached ones not included)
    prefix_cache_counters = (PrefixCacheCounters(
        "llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total",
        total_includes_hits=False),)

    def _server_bin(self, settings: Settings) -> Path:
        return settings.llama_bin / "llama-server"

    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        problems = []
        if variant.quant.lower() not in GGUF_QUANTS:
            problems.append(
                f"quant {variant.quant!r} is not a GGUF type llama.cpp serves "
                f"(known: {sorted(GGUF_QUANTS)})"
            )
        model = settings.resolve(variant.model)
        if model.suffix != ".gguf":
            problems.append(f"model {variant.model!r} is not a .gguf file")
        elif not model.is_file():
            problems.append(f"model file {model} does not exist (run `make models`)")
        if not self._server_bin(settings).is_file():
            problems.append(
                f"llama-server not found in {settings.llama_bin} (run `make llama`, or set "
                "SERVEBENCH_LLAMA_BIN)"
            )
        return problems

    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        served = Path(variant.model).stem
        argv = [
            str(self._server_bin(settings)),
            "--model", str(settings.resolve(variant.model)),
            "--alias", served,
            "--host", host,
            "--port", str(port),
            "--parallel", str(variant.max_num_seqs),
            # the context is shared by the slots: give each slot max_model_len
            "--ctx-size", str(variant.max_model_len * variant.max_num_seqs),
            "--cont-batching",
            "--metrics",
            "--jinja",  # chat template from the GGUF, as the model was trained
            "--no-webui",
            "--cache-prompt" if variant.prefix_caching else "--no-cache-prompt",
            *(["--threads", str(variant.threads)] if variant.threads else []),
            *variant.extra_args,
        ]
        return LaunchSpec(argv=argv, served_model=served)

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
            "top_k": sampling.top_k,  # 0 disables top-k
            "min_p": sampling.min_p,
            "repeat_penalty": sampling.repetition_penalty,
            "ignore_eos": force_length,
            "cache_prompt": variant.prefix_caching,
        }

    def served_version(self, payload: dict) -> str | None:
        build = payload.get("build_info")
        return str(build) if build else None

    def version(self, settings: Settings) -> str:
        try:
            out = subprocess.run(
                [str(self._server_bin(settings)), "--version"],
                capture_output=True, text=True, timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        text = (out.stdout + out.stderr).strip().splitlines()
        line = next((line for line in text if line.startswith("version")), None)
        version = line.removeprefix("version:").strip() if line else "unknown"
        source = settings.llama_bin / "SOURCE"  # written by scripts/build_llama_cpp.sh
        if source.is_file():
            version += f"; from {source.read_text().strip()}"
        return version
