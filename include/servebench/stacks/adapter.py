"""One adapter per serving stack, behind one interface, found through a registry.

An adapter turns a :class:`~servebench.config.VariantSpec` into a launch (a local command; a
container launch for provisioned hosts comes with the GPU engines) and speaks the stack's
request dialect: every sampling parameter sent explicitly, and the stack's own way of forcing
an exact output length. Adding a stack is one new module that registers itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from servebench.config import SamplingSpec, VariantSpec
from servebench.endpoint import Endpoint
from servebench.hub import hub_cache_dir
from servebench.memory import EngineMemory
from servebench.settings import Settings
from servebench.tokenizer import TokenizeApi


@dataclass(frozen=True)
class PrefixCacheCounters:
    """Two Prometheus counters (sample names as scraped, ``_total`` included) whose deltas over
    a cell give its prefix-cache hit rate: prompt tokens served from the cache, and prompt
    tokens (with or without the cached ones, per ``total_includes_hits``)."""

    hits: str
    prompt: str
    total_includes_hits: bool


@dataclass(frozen=True)
class EngineGauges:
    """The Prometheus samples that show a stack's scheduler at work while a cell runs
    (``servebench.telemetry.GaugeSampler``); None where the engine exports no such thing.
    Gauges are sampled during the measured window; counters are deltas over the cell."""

    kv_cache_usage: str | None = None  # share of the KV cache in use, 0..1 (gauge)
    running: str | None = None  # requests being decoded (gauge)
    waiting: str | None = None  # requests queued for a slot (gauge)
    preemptions: str | None = None  # requests preempted or retracted (counter)
    spec_accepted: str | None = None  # speculative tokens accepted (counter)
    spec_drafted: str | None = None  # speculative tokens proposed (counter)
    spec_drafts: str | None = None  # speculative verification steps (counter)

    def gauges(self) -> dict[str, str]:
        """Column stem -> sample name, for the gauges the engine has."""
        named = {"kv_cache_usage": self.kv_cache_usage, "running": self.running,
                 "waiting": self.waiting}
        return {k: v for k, v in named.items() if v}


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one variant of a stack, and how to talk to it once started."""

    argv: list[str]
    served_model: str  # the `model` requests must name and responses must return
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerLaunch:
    """How to start one variant in a container on a provisioned GPU host.

    ``command`` is appended to ``entrypoint`` (``None`` keeps the image's own). ``ports`` maps
    container port -> host port; ``volumes`` host path -> container path; ``files`` are
    container path -> text that the provisioner writes on the host and mounts read-only
    (e.g. TensorRT-LLM's extra options YAML). Secrets (HF_TOKEN, API keys) are never put in
    ``env`` here: the provisioner injects them from its own secret store.
    """

    image: str
    command: list[str]
    served_model: str
    port: int  # the port the server listens on inside the container
    entrypoint: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)
    gpus: int = 1
    shm_size: str | None = "16g"
    volumes: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"

    @property
    def argv(self) -> list[str]:
        """The full command line inside the container, for provenance."""
        return [*(self.entrypoint or []), *self.command]


class StackAdapter(ABC):
    """A serving stack: launch rendering, request dialect and plan-time checks."""

    name: ClassVar[str]
    engine: ClassVar[str]  # what provenance calls it
    chat_path: ClassVar[str] = "/v1/chat/completions"
    # the server's tokenizer endpoints in its dialect, used to cut prompts to exact token
    # counts; None: the checkpoint's tokenizer.json on the worker (``servebench.tokenizer``)
    tokenize_api: ClassVar[TokenizeApi | None] = None
    # whether ``chat_body(force_length=True)`` really yields exactly max_tokens tokens
    can_force_length: ClassVar[bool] = True
    natural_length_reason: ClassVar[str | None] = None  # why not, where it cannot
    # False where forced tokens may be special ones the server does not stream as text
    # (transformers serve): usage still proves the length, but chunks undercount it.
    forced_tokens_stream_as_text: ClassVar[bool] = True
    # where the server's Prometheus metrics are (None: it has none)
    metrics_path: ClassVar[str | None] = "/metrics"
    # the counters telemetry derives the prefix-cache hit rate from; where names changed
    # between the releases in ``checked_versions``, one entry per release, the first present wins
    prefix_cache_counters: ClassVar[tuple[PrefixCacheCounters, ...]] = ()
    # the scheduler's gauges and counters sampled while a cell runs (telemetry)
    engine_gauges: ClassVar[EngineGauges] = EngineGauges()
    # the engine releases (PEP 440) whose own sources the launch flags, request fields and
    # metric names were checked against (tests/fixtures/engines/; several ranges: any of
    # them); None: not versioned
    checked_versions: ClassVar[str | tuple[str, ...] | None] = None
    # GET path where a running server reports its version (read by ``served_version``)
    version_path: ClassVar[str | None] = None

    def forces_length(self, variant: VariantSpec) -> bool:
        """Whether ``variant``'s perf cells get exact output lengths (``length_control``
        ``exact``); else they run at natural length, capped at the workload's, and are compared
        only with their own history (``natural``)."""
        return self.can_force_length

    @abstractmethod
    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """Settings of ``variant`` the engine refuses or would serve under a misleading label,
        wherever it runs (every provisioner asks, before anything launches); what must be on
        this machine is :meth:`local_problems`'."""

    def cold_start_s(self, variant: VariantSpec, settings: Settings) -> float:
        """How long a first start of ``variant`` on a fresh worker may take before it answers
        its health check (weights fetched, kernels compiled): the local provisioner waits at
        least this long unless the spec says otherwise. 0: the setting alone."""
        return 0.0

    def local_problems(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """Problems that stop ``variant`` being served on this machine (the local provisioner:
        the engine is not installed here, or this build cannot run it)."""
        return []

    def hardware_refusals(self, variant: VariantSpec, settings: Settings) -> list[str]:
        """Why this machine's hardware cannot run ``variant`` though the spec is right (an
        instruction its kernels need that this CPU lacks): not the spec's fault, so the plan
        refuses the unit alone -- its cells stored failed with the reason -- and the rest of
        the sweep runs, where a problem of :meth:`local_problems` stops the sweep."""
        return []

    @abstractmethod
    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        """The command that serves ``variant`` on ``host:port`` on this machine."""

    @abstractmethod
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
        """A streaming chat request; with ``force_length`` exactly ``max_tokens`` come back."""

    def version(self, settings: Settings) -> str:
        """The engine's version string, for provenance."""
        return "unknown"

    def known_limits(self, variant: VariantSpec, sampling: SamplingSpec) -> list[str]:
        """What this stack cannot guarantee for ``variant`` under ``sampling`` that bears on
        comparing its cells; recorded with each cell (``engine_notes``)."""
        return []

    def engine_memory(self, variant: VariantSpec, get: Callable[[str], str | None],
                      log: str | None) -> EngineMemory:
        """What the engine reports of its weights and its KV cache's capacity in tokens:
        from ``get(path)`` (the running server's answer to a GET, None where it gave none)
        and its ``log`` (None: not readable). Where it reports nothing, the reason."""
        return EngineMemory(kv_cache_source=f"{self.engine} reports no KV-cache capacity")

    def served_version(self, payload: dict) -> str | None:
        """The version in the answer to ``GET version_path`` (None: it names none)."""
        version = payload.get("version")
        return str(version) if version else None

    def version_problem(self, version: str) -> str | None:
        """Why ``version`` is outside the releases this adapter was checked against (None:
        inside, or not comparable)."""
        if self.checked_versions is None:
            return None
        ranges = ((self.checked_versions,) if isinstance(self.checked_versions, str)
                  else self.checked_versions)
        parsed = parse_engine_version(version)
        if parsed is None or any(parsed in SpecifierSet(r) for r in ranges):
            return None
        return (f"{self.engine} {version} is outside the releases this adapter's flags, "
                f"request fields and metric names were checked against "
                f"({' or '.join(ranges)})")

    def image_problem(self, image: str) -> str | None:
        """Why a variant's ``image`` is outside ``checked_versions``, from its tag (None:
        inside, or no version in the tag -- a digest alone is checked when the server runs)."""
        tag = image_tag(image)
        return self.version_problem(tag) if tag else None

    def sampling_problems(self, sampling: SamplingSpec) -> list[str]:
        """Sampling parameters this stack's request dialect cannot carry (checked at plan)."""
        return []

    def container_launch(
        self, variant: VariantSpec, *, port: int, settings: Settings
    ) -> ContainerLaunch:
        """The container that serves ``variant`` on ``port`` of a provisioned host."""
        raise NotImplementedError(
            f"stack {self.name!r} has no container launch; run it with the local provisioner"
        )

    def static_endpoint(self, variant: VariantSpec, settings: Settings) -> Endpoint | None:
        """For stacks that are never launched (hosted APIs): where to send requests."""
        return None


REGISTRY: dict[str, type[StackAdapter]] = {}  # filled by @register_stack


def register_stack(cls: type[StackAdapter]) -> type[StackAdapter]:
    REGISTRY[cls.name] = cls
    return cls


def image_tag(image: str) -> str | None:
    """The tag of ``repo[:tag][@sha256:digest]`` (None without one)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def parse_engine_version(text: str) -> Version | None:
    """``v0.19.1``, ``0.19.1-cu128``, ``1.2.0rc1`` -> a comparable release (None: not one)."""
    head = text.strip().removeprefix("v").split("-", 1)[0].split("+", 1)[0]
    try:
        return Version(head)
    except InvalidVersion:
        return None


def stream_fields(continuous_usage: bool | None = None) -> dict:
    """Streaming with a final usage chunk, as every OpenAI-compatible stack understands it.

    ``continuous_usage`` (vLLM, TensorRT-LLM): cumulative usage on every chunk too, so a chunk
    that carries several tokens (speculative decoding) counts them all; sent explicitly where
    the engine has the field (TensorRT-LLM defaults it on, vLLM off). None: not sent.
    """
    options: dict = {"include_usage": True}
    if continuous_usage is not None:
        options["continuous_usage_stats"] = continuous_usage
    return {"stream": True, "stream_options": options}


def installed_version(distribution: str) -> str:
    """The version of an engine installed in this environment, read from its package
    metadata (importing vllm or sglang just to ask takes seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def chat_request(*, served_model: str, messages: list[dict], sampling: SamplingSpec,
                 max_tokens: int, continuous_usage: bool | None = None,
                 length_field: str = "max_tokens") -> dict:
    """What every OpenAI-compatible chat request carries: the model, the messages, the length
    cap, the sampling knobs the OpenAI schema has, and streaming with a final usage chunk.
    ``length_field``: ``max_completion_tokens`` where ``max_tokens`` is deprecated (OpenAI,
    vLLM)."""
    return {
        "model": served_model,
        "messages": messages,
        length_field: max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "seed": sampling.seed,
        **stream_fields(continuous_usage),
    }


def vllm_style_sampling(sampling: SamplingSpec, *, max_tokens: int, force_length: bool,
                        top_k_disabled: int) -> dict:
    """The knobs outside the OpenAI schema as vLLM's protocol spells them (SGLang, TensorRT-LLM
    and vLLM-backed hosted APIs copy it): exact length is ignore_eos plus min_tokens.
    ``top_k_disabled`` is the value that engine reads as "no top-k"."""
    return {
        "top_k": sampling.top_k or top_k_disabled,
        "min_p": sampling.min_p,
        "repetition_penalty": sampling.repetition_penalty,
        "ignore_eos": force_length,
        "min_tokens": max_tokens if force_length else 0,
    }


def hf_model_in_container(
    variant: VariantSpec, settings: Settings
) -> tuple[str, dict[str, str]]:
    """The model reference inside a container, and the volumes that make it resolve there.

    A local checkpoint folder (absolute, or relative to the project root, that exists) is
    mounted read-only at ``/models/<name>``; anything else is a hub id, resolved through the
    host's Hugging Face cache mounted at ``/root/.cache/huggingface``.
    """
    local = settings.resolve(variant.model)
    volumes = {str(hub_cache_dir()): "/root/.cache/huggingface"}
    if local.exists():
        inside = f"/models/{local.name}"
        volumes[str(local)] = inside
        return inside, volumes
    return variant.model, volumes
