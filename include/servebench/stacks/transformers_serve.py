"""Hugging Face ``transformers serve`` with continuous batching (paged attention).

The model is preloaded (``FORCE_MODEL``) so the first measured request does not pay for
loading, and requests must name it by the same path. The server rejects ``min_tokens`` and
``ignore_eos``; in continuous-batching mode a per-request ``generation_config`` (a JSON string)
is honoured, so exact output length is forced by making the end-of-sequence id one the model
never emits at that point: the pad id. Sampling knobs that the OpenAI schema lacks (top_k,
min_p, repetition_penalty) travel in the same ``generation_config``.

Its paged cache is sized by the variant: as many 256-token pages as ``max_num_seqs`` sequences
of ``max_model_len`` tokens fill (``--cb-num-blocks``), batches of at most that many tokens
(``--cb-max-batch-tokens``). Left to itself, on a CPU it takes 90% of the machine's free memory
for the cache and zero-fills it: 14.3 GB for the 3.6M-parameter local model, 0.48 GB capped
(``servebench.memory``'s peak, 2026-12-04). A variant's ``extra_args`` may set either again.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from servebench.config import (
    SamplingSpec,
    VariantSpec,
)
from servebench.memory import EngineMemory
from servebench.settings import Settings
from servebench.stacks.adapter import (
    LaunchSpec,
    StackAdapter,
    chat_request,
    register_stack,
)

TORCH_DTYPES = {"float32", "bfloat16", "float16"}
CB_PAGE_TOKENS = 256  # ContinuousBatchingConfig.page_size's default (5.24; --cb-block-size)


def cache_args(variant: VariantSpec) -> list[str]:
    """The paged cache's bounds: ``max_num_seqs`` x ``max_model_len`` tokens, in pages, and
    no batch larger (the attention masks are sized by both)."""
    tokens = variant.max_num_seqs * variant.max_model_len
    return ["--cb-num-blocks", str(math.ceil(tokens / CB_PAGE_TOKENS)),
            "--cb-max-batch-tokens", str(tokens)]


def _last(args: list[str], flag: str) -> str | None:
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return values[-1] if values else None


@lru_cache(maxsize=32)
def special_token_ids(model_dir: str) -> dict[str, int]:
    """bos/eos/pad ids from the checkpoint (generation_config.json over config.json)."""
    ids: dict[str, int] = {}
    for name in ("config.json", "generation_config.json"):
        path = Path(model_dir) / name
        if path.is_file():
            data = json.loads(path.read_text())
            ids.update({k: int(data[k]) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                        if isinstance(data.get(k), int)})
    if "pad_token_id" not in ids or "eos_token_id" not in ids:
        raise ValueError(f"{model_dir}: no pad_token_id/eos_token_id in generation_config.json "
                         "or config.json")
    return ids


@register_stack
class TransformersServeStack(StackAdapter):
    name = "transformers"
    engine = "transformers-serve"
    metrics_path = None  # `transformers serve` exports no Prometheus metrics
    # forced past its end, the model emits eos tokens that are decoded to no text
    forced_tokens_stream_as_text = False

    def _cli(self, settings: Settings) -> Path:
        return settings.stacks_venv / "bin" / "transformers"

    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        problems = []
        if variant.quant not in ("none", *TORCH_DTYPES):
            problems.append(
                f"quant {variant.quant!r}: transformers serve runs unquantized weights here "
                f"(use quant: none with dtype one of {sorted(TORCH_DTYPES)})"
            )
        if variant.dtype is not None and variant.dtype not in TORCH_DTYPES:
            problems.append(f"dtype {variant.dtype!r} is not one of {sorted(TORCH_DTYPES)}")
        return problems

    def local_problems(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """The checkpoint folder (with the ids the length control needs) and the transformers
        CLI are on this worker."""
        problems = []
        model = settings.resolve(variant.model)
        if not (model / "config.json").is_file():
            problems.append(f"model {model} is not a checkpoint folder with config.json")
        else:
            try:
                special_token_ids(str(model))
            except ValueError as exc:
                problems.append(str(exc))
        if not self._cli(settings).is_file():
            problems.append(
                f"transformers CLI not found at {self._cli(settings)} (run `make stacks`, or set "
                "SERVEBENCH_STACKS_VENV)"
            )
        return problems

    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        model = str(settings.resolve(variant.model))
        argv = [
            str(self._cli(settings)),
            "serve",
            model,
            "--continuous-batching",
            "--device", "cpu",
            "--dtype", variant.dtype or "auto",
            "--host", host,
            "--port", str(port),
            "--log-level", "warning",
            *cache_args(variant),
            *variant.extra_args,
        ]
        env = {"TOKENIZERS_PARALLELISM": "false"}
        if variant.threads:  # torch's intra-op pool
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(variant.threads)
        return LaunchSpec(argv=argv, served_model=model, metrics_path=self.metrics_path,
                          env=env)

    def engine_memory(self, variant: VariantSpec, get: Callable[[str], str | None],
                      log: str | None) -> EngineMemory:
        """transformers serve reports no capacity (its cache's size is logged below the
        warning level it runs at, and in sectors): the capacity the launch configured."""
        args = [*cache_args(variant), *variant.extra_args]
        blocks, page = _last(args, "--cb-num-blocks"), _last(args, "--cb-block-size")
        if blocks is None or not blocks.isdigit() or not (page or "0").isdigit():
            return EngineMemory(kv_cache_source="transformers serve reports no KV-cache "
                                                "capacity, and none was configured")
        page = page or str(CB_PAGE_TOKENS)
        return EngineMemory(kv_cache_tokens=int(blocks) * int(page),
                            kv_cache_source=f"configured, not reported: --cb-num-blocks "
                                            f"{blocks} x {page}-token pages")

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
        greedy = sampling.temperature == 0.0
        # the per-request generation_config replaces the checkpoint's whole config, so the
        # special ids travel with it: without eos_token_id the model never stops
        generation = {
            **special_token_ids(served_model),  # served_model is the checkpoint path
            "do_sample": not greedy,
            "top_k": sampling.top_k or None,
            "top_p": sampling.top_p,
            "min_p": sampling.min_p or None,
            "repetition_penalty": sampling.repetition_penalty,
            "max_new_tokens": max_tokens,
        }
        if not greedy:
            generation["temperature"] = sampling.temperature
        if force_length:
            # continuous batching ignores min_new_tokens/suppress_tokens (checked on 5.24):
            # ending only on the pad id, which the model never emits, is what forces length
            generation["eos_token_id"] = generation["pad_token_id"]
        return {
            **chat_request(served_model=served_model, messages=messages, sampling=sampling,
                           max_tokens=max_tokens),
            "generation_config": json.dumps(generation),
        }

    def version(self, settings: Settings) -> str:
        python = settings.stacks_venv / "bin" / "python"
        try:
            out = subprocess.run(
                [str(python), "-c", "import transformers, torch;"
                 "print(transformers.__version__, 'torch', torch.__version__)"],
                capture_output=True, text=True, timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return out.stdout.strip() or "unknown"
