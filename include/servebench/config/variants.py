"""A target's variants: what every stack takes (the model, its quantization, the server's
limits, an endpoint that already runs), the knob groups only some stacks honour (threads,
dtype, image, the GPU engines' knobs and speculative decoding), and each stack's options
model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from servebench.config.base import _Strict
from servebench.config.formats import scheme_problem
from servebench.config.quantize import QuantizedCheckpoint, RecipeSpec


class SpeculativeSpec(_Strict):
    """Speculative decoding for one variant; each adapter maps it to its engine's own knobs.

    ``draft``: a separate small draft model; ``ngram``: prompt lookup (no model);
    ``eagle``/``eagle3``: an EAGLE head (``draft_model``); ``mtp``: the model's own
    multi-token-prediction layers; ``medusa``: Medusa heads. Engines that lack a method say so
    in their plan-time ``check``.
    """

    method: Literal["draft", "ngram", "eagle", "eagle3", "mtp", "medusa"]
    draft_model: str | None = Field(None, description="draft model / EAGLE or Medusa head")
    num_speculative_tokens: int = Field(4, ge=1, le=64)
    ngram_min: int | None = Field(None, ge=1, description="ngram: shortest prompt match")
    ngram_max: int | None = Field(None, ge=1, description="ngram: longest prompt match")

    @model_validator(mode="after")
    def _check_method(self) -> SpeculativeSpec:
        if self.method in ("draft", "eagle", "eagle3") and not self.draft_model:
            raise ValueError(f"method {self.method!r} needs draft_model")
        if self.method == "ngram" and self.draft_model:
            raise ValueError("method 'ngram' uses no draft_model")
        if self.method != "ngram" and (self.ngram_min or self.ngram_max):
            raise ValueError("ngram_min/ngram_max apply to method 'ngram' only")
        if self.ngram_min and self.ngram_max and self.ngram_min > self.ngram_max:
            raise ValueError(f"ngram_min {self.ngram_min} > ngram_max {self.ngram_max}")
        return self


class EndpointSpec(_Strict):
    """A server that already runs: a hosted OpenAI-compatible API (stack ``openai_api``), or
    any stack's server on a target with ``provision: {kind: static}``. Nothing is launched.

    The base URL and key come from an Airflow connection (``conn_id``: host = base URL,
    password = API key) or, without one, from ``base_url`` and the environment variable named
    by ``api_key_env``. Keys never appear in the spec. ``dialect`` says what the provider
    accepts beyond the OpenAI schema: ``openai`` (only OpenAI fields; output length cannot be
    forced) or ``vllm`` (vLLM-style extras: top_k, min_p, repetition_penalty, ignore_eos,
    min_tokens - e.g. a provider that fronts vLLM).
    """

    base_url: str | None = Field(None, description="e.g. https://api.openai.com/v1")
    conn_id: str | None = Field(None, description="Airflow connection with host and password")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="env var holding the key")
    dialect: Literal["openai", "vllm"] = "openai"

    @model_validator(mode="after")
    def _check_source(self) -> EndpointSpec:
        if not self.base_url and not self.conn_id:
            raise ValueError("set base_url or conn_id")
        return self


class VariantOptions(_Strict):
    """One way of serving a target's model: what every stack takes. Each stack has its own
    options model (``STACK_OPTIONS``): this plus the knob groups below that it honours, so a
    knob a stack lacks is an error naming the field when the spec is read."""

    name: str
    model: str = Field(description="model file or directory (local stacks) or hub id")
    quant: str = Field("none", description="f16, bf16, fp8, awq, gptq, q8_0, q4_k_m, ...")
    max_num_seqs: int = Field(4, gt=0, description="concurrent sequences (llama.cpp -np)")
    max_model_len: int = Field(4096, gt=0, description="context length the server allocates")
    prefix_caching: bool = Field(True, description="the engine's prefix (prompt) cache")
    tokenizer: str | None = Field(
        None, description="where prompts are cut to exact token counts for a stack whose "
        "server cannot both tokenize and detokenize (a hosted API; TGI, which serves /tokenize "
        "but no /detokenize; TensorRT-LLM): a folder with tokenizer.json or a hub id in this "
        "worker's Hugging Face cache; default: the model's")
    extra_args: list[str] = Field(default_factory=list,
                                  description="appended to the server command line")
    request_overrides: dict = Field(
        default_factory=dict, description="extra request fields, merged last into every request; "
        "the run still checks from the responses that sampling matched")
    endpoint: EndpointSpec | None = Field(
        None, description="a server that already runs (provision static) or a hosted API "
                          "(stack openai_api)")


class ThreadsOption(BaseModel):
    """CPU stacks (llama_cpp, transformers, vLLM's CPU build)."""

    threads: int | None = Field(
        None, gt=0, description="CPU threads the engine may use (None: its default); on a "
        "shared host leave cores to the load generator")


class DtypeOption(BaseModel):
    """Stacks that take a weights dtype (transformers and the GPU engines)."""

    dtype: str | None = Field(None, description="weights/activations dtype")


class ContainerOption(BaseModel):
    """Stacks launched in a container on a provisioned host (llama_cpp, the GPU engines)."""

    image: str | None = Field(None, description="container image override (provisioned hosts)")


class SpeculativeOption(BaseModel):
    """Stacks with speculative decoding (llama_cpp and the GPU engines)."""

    speculative: SpeculativeSpec | None = None


class GpuOptions(SpeculativeOption):
    """The GPU engines serving a Hugging Face checkpoint (vllm, sglang, trtllm, tgi)."""

    revision: str | None = Field(None, description="hub revision (commit) of the model")
    kv_cache_dtype: str | None = Field(None, description="auto, fp8, fp8_e4m3, fp8_e5m2, ...")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="tokens per step")
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)


class RecipeOption(BaseModel):
    """Stacks that serve llm-compressor's compressed-tensors checkpoints (vllm, sglang): a
    variant may name a recipe, and its ``model`` is then the base checkpoint the recipe is
    applied to (``config.quantize``)."""

    recipe: RecipeSpec | None = Field(
        None, description="make the checkpoint from ``model`` by this quantization recipe")


class LlamaCppVariant(VariantOptions, ThreadsOption, ContainerOption, SpeculativeOption):
    """What a llama.cpp variant may set (a GGUF file, CPU threads, the server image,
    speculative decoding with a draft GGUF or n-grams)."""


class TransformersVariant(VariantOptions, ThreadsOption, DtypeOption):
    """What a transformers serve variant may set (a local checkpoint, CPU threads, dtype)."""


class HfGpuVariant(VariantOptions, DtypeOption, ContainerOption, GpuOptions):
    """What a variant of a GPU engine may set."""


class VllmVariant(HfGpuVariant, ThreadsOption, RecipeOption):
    """What a vLLM variant may set: the GPU engines' knobs, ``threads`` for the CPU build,
    and a quantization recipe."""


class SglangVariant(HfGpuVariant, RecipeOption):
    """What an SGLang variant may set: the GPU engines' knobs and a quantization recipe."""


# Each stack's options model, by stack name: what a variant of that stack may set. Declared
# here, beside the knob groups, so the spec validates itself without importing the adapters
# (which import the spec). A hosted API takes VariantOptions alone: its serving configuration
# (dtype, KV cache, parallelism, image) is the provider's. A test keeps these names equal to
# the registered adapters'.
STACK_OPTIONS: dict[str, type[VariantOptions]] = {
    "llama_cpp": LlamaCppVariant,
    "transformers": TransformersVariant,
    "vllm": VllmVariant,
    "sglang": SglangVariant,
    "tgi": HfGpuVariant,
    "trtllm": HfGpuVariant,
    "openai_api": VariantOptions,
}


def stack_options(name: str) -> type[VariantOptions] | None:
    """The options model of stack ``name`` (None: no such stack)."""
    return STACK_OPTIONS.get(name)


class VariantSpec(RecipeOption, GpuOptions, ContainerOption, DtypeOption, ThreadsOption,
                  VariantOptions):
    """A variant as the runtime carries it: every stack's knobs (unset ones at their
    defaults); a spec file may set only those of its target's stack (``TargetSpec``).

    ``quantized`` is the plan's, never a spec's: a recipe variant's output checkpoint, which
    ``Plan.variant_of`` puts in ``model`` for everything that launches or reads it."""

    quantized: QuantizedCheckpoint | None = Field(
        None, exclude=True,  # never in the spec's JSON, its hash or its reference
        description="set by the plan: the recipe's checkpoint this variant launches")

    @field_validator("recipe")
    @classmethod
    def _recipe_makes_quant(cls, recipe: RecipeSpec | None,
                            info: ValidationInfo) -> RecipeSpec | None:
        """A recipe's preset scheme and the variant's ``quant`` name one format (the plan
        checks a recipe file's schemes: ``quantize.checks``)."""
        quant = info.data.get("quant")  # absent: quant itself was refused
        problem = recipe and recipe.scheme and quant and scheme_problem(recipe.scheme, quant)
        if problem:
            raise ValueError(problem)
        return recipe

    @property
    def base_model(self) -> str:
        """The checkpoint the spec names: a recipe's base, else ``model``."""
        return self.quantized.base if self.quantized else self.model

    def launching(self, checkpoint: QuantizedCheckpoint) -> VariantSpec:
        """This variant as it is launched: its recipe's ``checkpoint`` as its ``model``."""
        return self.model_copy(update={"model": checkpoint.path, "quantized": checkpoint})
