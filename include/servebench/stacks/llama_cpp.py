"""llama.cpp's ``llama-server``: continuous batching over ``-np`` slots, Prometheus metrics.

Flags are those of llama.cpp's ``common/arg.cpp``. Its sampling defaults (top_k=40,
min_p=0.05, repeat_penalty=1.0) differ from other stacks, so every parameter is sent; exact
output length is forced with ``ignore_eos``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from servebench.config import (
    SamplingSpec,
    VariantSpec,
)
from servebench.config.formats import GGUF_QUANTS
from servebench.memory import EngineMemory
from servebench.settings import Settings
from servebench.stacks.adapter import (
    ContainerLaunch,
    EngineGauges,
    LaunchSpec,
    PrefixCacheCounters,
    StackAdapter,
    chat_request,
    register_stack,
)
from servebench.tokenizer import LLAMA_CPP_TOKENIZE

# tools/server/server-context.cpp, as the model loads: the slots and each one's context
SLOTS_LINE = re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")
# llama.cpp's CUDA server image; the tag floats with each build, so pin it per variant
# (``image: ghcr.io/ggml-org/llama.cpp:server-cuda-b<build>@sha256:...``)
DEFAULT_IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"
# the spec's speculative methods as llama-server's --spec-type (common/speculative.cpp); EAGLE
# v1 and Medusa heads have no llama.cpp implementation
SPEC_TYPES = {"draft": "draft-simple", "eagle3": "draft-eagle3", "mtp": "draft-mtp",
              "ngram": "ngram-simple"}
# where a container finds a draft GGUF that is not beside the served one
DRAFT_MOUNT = "/draft"


@register_stack
class LlamaCppStack(StackAdapter):
    name = "llama_cpp"
    engine = "llama.cpp"
    tokenize_api = LLAMA_CPP_TOKENIZE
    # tools/server (--metrics): slots busy and requests deferred for want of one; no KV gauge
    engine_gauges = EngineGauges(
        running="llamacpp:requests_processing", waiting="llamacpp:requests_deferred",
        spec_accepted="llamacpp:spec_decode_num_accepted_tokens_total",
        spec_drafted="llamacpp:spec_decode_num_draft_tokens_total",
        spec_drafts="llamacpp:spec_decode_num_drafts_total")
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
        if settings.resolve(variant.model).suffix != ".gguf":
            problems.append(f"model {variant.model!r} is not a .gguf file")
        return [*problems, *speculative_problems(variant, settings)]

    def local_problems(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """The GGUF and llama-server are on this worker."""
        problems = []
        model = settings.resolve(variant.model)
        if model.suffix == ".gguf" and not model.is_file():
            problems.append(f"model file {model} does not exist (run `make models`)")
        spec = variant.speculative
        draft = settings.resolve(spec.draft_model) if spec and spec.draft_model else None
        if draft is not None and not draft.is_file():
            problems.append(f"field speculative.draft_model: {draft} does not exist (run "
                            "`make models`)")
        if not self._server_bin(settings).is_file():
            problems.append(
                f"llama-server not found in {settings.llama_bin} (run `make llama`, or set "
                "SERVEBENCH_LLAMA_BIN)"
            )
        return problems

    def _args(self, variant: VariantSpec, model: str, *, served: str, host: str,
              port: int, draft: str | None = None) -> list[str]:
        return [
            "--model", model,
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
            *speculative_args(variant, draft),
            *variant.extra_args,
        ]

    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        served = Path(variant.model).stem
        spec = variant.speculative
        draft = str(settings.resolve(spec.draft_model)) if spec and spec.draft_model else None
        argv = [str(self._server_bin(settings)),
                *self._args(variant, str(settings.resolve(variant.model)), served=served,
                            host=host, port=port, draft=draft)]
        return LaunchSpec(argv=argv, served_model=served)

    def container_launch(
        self, variant: VariantSpec, *, port: int, settings: Settings
    ) -> ContainerLaunch:
        """The project's server image (entrypoint ``/app/llama-server``), every layer on the
        GPU; the GGUF's folder is mounted read-only at ``/models`` (a draft GGUF's, when it
        lies elsewhere, at ``/draft``)."""
        model = settings.resolve(variant.model)
        served = model.stem
        volumes = {str(model.parent): "/models"}
        spec = variant.speculative
        draft = None
        if spec and spec.draft_model:
            path = settings.resolve(spec.draft_model)
            if path.parent == model.parent:
                draft = f"/models/{path.name}"
            else:
                volumes[str(path.parent)] = DRAFT_MOUNT
                draft = f"{DRAFT_MOUNT}/{path.name}"
        return ContainerLaunch(
            image=variant.image or DEFAULT_IMAGE,
            entrypoint=None,  # the image's own: llama-server
            command=[*self._args(variant, f"/models/{model.name}", served=served,
                                 host="0.0.0.0", port=port, draft=draft),
                     "--n-gpu-layers", "999",
                     *(["--spec-draft-ngl", "999"] if draft else [])],
            served_model=served,
            port=port,
            ports={port: port},
            gpus=1,
            shm_size=None,
            volumes=volumes,
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
            "top_k": sampling.top_k,  # 0 disables top-k
            "min_p": sampling.min_p,
            "repeat_penalty": sampling.repetition_penalty,
            "ignore_eos": force_length,
            "cache_prompt": variant.prefix_caching,
        }

    def engine_memory(self, variant: VariantSpec, get: Callable[[str], str | None],
                      log: str | None) -> EngineMemory:
        """The KV cache's capacity: its slots' contexts as the log states them (a cache per
        slot, or one shared by all with ``--kv-unified``), else ``/props``. Its weights: the
        GGUF on disk (the log's buffer sizes are not printed at the default verbosity)."""
        tokens, source = kv_capacity(log, get("/props"))
        return EngineMemory(kv_cache_tokens=tokens, kv_cache_source=source)

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


def speculative_problems(variant: VariantSpec, settings: Settings) -> list[str]:
    """What of the spec's speculative block llama-server cannot do."""
    spec = variant.speculative
    if spec is None:
        return []
    if spec.method not in SPEC_TYPES:
        return [f"field speculative.method {spec.method!r}: llama.cpp's --spec-type offers "
                f"{sorted(SPEC_TYPES)} (draft-simple, draft-eagle3, draft-mtp, ngram-simple)"]
    problems = []
    if spec.method == "ngram" and spec.ngram_min is not None:
        problems.append("field speculative.ngram_min: llama.cpp's ngram-simple matches one "
                        "n-gram length (ngram_max, --spec-ngram-simple-size-n)")
    if spec.draft_model and settings.resolve(spec.draft_model).suffix != ".gguf":
        problems.append(f"field speculative.draft_model {spec.draft_model!r}: llama.cpp "
                        "drafts with a .gguf file")
    return problems


def speculative_args(variant: VariantSpec, draft: str | None) -> list[str]:
    """llama-server's flags for the variant's speculative block (common/arg.cpp): the type,
    the draft GGUF with as many threads as the target, and the tokens drafted per step
    (ngram-simple's m-gram length)."""
    spec = variant.speculative
    if spec is None:
        return []
    n = str(spec.num_speculative_tokens)
    args = ["--spec-type", SPEC_TYPES[spec.method]]
    if spec.method == "ngram":
        args += ["--spec-ngram-simple-size-m", n]
        if spec.ngram_max is not None:
            args += ["--spec-ngram-simple-size-n", str(spec.ngram_max)]
        return args
    if draft:
        args += ["--spec-draft-model", draft]
        if variant.threads:
            args += ["--spec-draft-threads", str(variant.threads)]
    return [*args, "--spec-draft-n-max", n]


def kv_capacity(log: str | None, props: str | None) -> tuple[int | None, str]:
    """(tokens, where from) of llama-server's KV cache: the last ``n_slots = N, n_ctx_slot =
    C, kv_unified = 'U'`` line of its ``log`` (N x C tokens, or C when unified), else ``/props``'
    ``default_generation_settings.n_ctx`` (a slot's) x ``total_slots``, which cannot tell a
    unified cache; (None, why) without either."""
    found = SLOTS_LINE.findall(log or "")
    if found:
        slots, ctx, unified = found[-1]
        tokens = int(ctx) if unified == "true" else int(slots) * int(ctx)
        return tokens, (f"llama-server's log: n_slots = {slots}, n_ctx_slot = {ctx}, "
                        f"kv_unified = '{unified}'")
    try:
        answer = json.loads(props) if props else {}
    except ValueError:  # not JSON
        answer = {}
    ctx = (answer.get("default_generation_settings") or {}).get("n_ctx") \
        if isinstance(answer, dict) else None
    slots = answer.get("total_slots") if isinstance(answer, dict) else None
    if isinstance(ctx, int) and isinstance(slots, int):
        return ctx * slots, (f"/props: n_ctx {ctx} a slot x total_slots {slots} (a cache per "
                             "slot assumed: /props does not say kv_unified)")
    return None, "llama-server stated no slot context (no n_ctx_slot in its log, no /props)"
