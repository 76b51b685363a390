"""The sweep spec: what the user writes in ``include/sweeps/*.yaml``, as pydantic models.

One sampling spec per sweep (applied to every stack and to the golden-set eval), workloads,
load points, SLOs and price, and the targets with their variants. ``load_sweep`` validates a
file and raises :class:`SpecError` naming the file and the field, before anything launches.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servebench.errors import SpecError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingSpec(_Strict):
    """Sent explicitly to every stack: no engine default is ever relied on."""

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0: greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="0 disables top-k")
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    seed: int = Field(1234, description="sent to every stack that takes one")

    def spec_hash(self) -> str:
        """Stable hash of the sampling spec, stored on every row for comparability."""
        payload = json.dumps(self.model_dump(), sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]


class SLOSpec(_Strict):
    """Service-level objectives for goodput (DistServe): a request counts if it meets all."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)


class _PromptText(_Strict):
    text: Literal["natural", "arithmetic", "random"] = Field(
        "natural", description="what prompts are cut from: natural, English prose (how users "
        "write; n-gram speculation and caches meet real repetition); random, words drawn "
        "uniformly from the prose's vocabulary (no phrase ever repeats: the floor for "
        "speculative decoding); arithmetic, the local model's own domain (its repetitive "
        "equations flatter n-gram speculative decoding)")


class FixedWorkload(_PromptText):
    """Prompts of exactly ``input_tokens`` tokens; exactly ``output_tokens`` generated."""

    kind: Literal["fixed"]
    name: str
    input_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    num_requests: int = Field(gt=0)


class SharedPrefixWorkload(_PromptText):
    """``num_prefixes`` shared prefixes x distinct suffixes: exercises prefix caching."""

    kind: Literal["shared_prefix"]
    name: str
    prefix_tokens: int = Field(gt=0)
    suffix_tokens: int = Field(gt=0)
    num_prefixes: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    num_requests: int = Field(gt=0)


class LongContextWorkload(_PromptText):
    """Prompts as long as each variant serves: ``context_share`` of its ``max_model_len``, less
    the output and the chat template's tokens, so each variant is measured near its own limit
    (prefill and KV-cache capacity, as long-document and RAG requests load them); exactly
    ``output_tokens`` generated."""

    kind: Literal["long_context"]
    name: str
    context_share: float = Field(0.9, gt=0, le=1, description="of the variant's max_model_len")
    output_tokens: int = Field(gt=0)
    num_requests: int = Field(gt=0)


class ChatLengthsWorkload(_PromptText):
    """Input/output lengths sampled (seeded) from a shipped length table, as chat traffic
    varies; each request still gets exactly the lengths it drew."""

    kind: Literal["chat_lengths"]
    name: str
    dataset: str = Field(description="JSONL of {input_tokens, output_tokens}, project-relative")
    num_requests: int = Field(gt=0)
    max_input_tokens: int | None = Field(None, gt=0, description="clip longer draws")
    max_output_tokens: int | None = Field(None, gt=0, description="clip longer draws")


class MultiTurnWorkload(_PromptText):
    """Conversations whose history grows: turn k sends every earlier user and assistant
    message again plus a new user message (what a chat UI does; prefix caches profit)."""

    kind: Literal["multi_turn"]
    name: str
    num_conversations: int = Field(gt=0)
    turns: int = Field(gt=1)
    turn_input_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)


class TraceWorkload(_PromptText):
    """Requests replayed from a trace file at its own arrival times (open loop, capped by
    ``load.max_concurrency``): each row's input and output lengths, and the prefixes rows share
    (Mooncake's block ``hash_ids``, a ``prefix_group``). Its cells have one load point,
    ``trace``, instead of the sweep's load points. Reads servebench's own rows (JSONL, CSV or
    Parquet: ``arrival_s``, ``input_tokens``, ``output_tokens``, optional ``hash_ids`` or
    ``prefix_group`` with ``prefix_tokens``), Azure's LLM inference traces (CSV: ``TIMESTAMP``,
    ``ContextTokens``, ``GeneratedTokens``) and Mooncake's (JSONL: ``timestamp`` in ms,
    ``input_length``, ``output_length``, ``hash_ids``)."""

    kind: Literal["trace"]
    name: str
    path: str = Field(description="the trace file, project-relative (.jsonl, .csv, .parquet)")
    format: Literal["auto", "servebench", "azure", "mooncake"] = Field(
        "auto", description="auto: told by the first row's columns")
    time_scale: float = Field(
        1.0, gt=0, description="arrival offsets are multiplied by it: 0.5 replays twice as fast")
    max_requests: int | None = Field(None, gt=0, description="replay the first this many")
    max_duration_s: float | None = Field(
        None, gt=0, description="replay the arrivals within this many seconds (after time_scale)")
    max_input_tokens: int | None = Field(None, gt=0, description="clip longer inputs")
    max_output_tokens: int | None = Field(None, gt=0, description="clip longer outputs")
    block_tokens: int = Field(512, gt=0,
                              description="tokens per hash id (Mooncake's traces: 512)")


Workload = Annotated[
    FixedWorkload | SharedPrefixWorkload | LongContextWorkload | ChatLengthsWorkload
    | MultiTurnWorkload | TraceWorkload,
    Field(discriminator="kind"),
]


class SloSearch(_Strict):
    """The highest load at which the sweep's ``slos`` hold at p95 (TTFT, TPOT, E2E where
    given) with no more errors than ``load.max_error_rate``: one ``slo`` cell per workload,
    found by probes (each a short cell of the workload's requests with prompts of its own):
    ``low`` first, then doubling until a probe misses or ``high`` holds, then bisecting the
    bracket, at most ``max_probes`` in all. Its row is the highest probe that held, with the
    bracket (``max_load_within_slo`` .. ``max_load_failed_at``) and every probe."""

    over: Literal["rate", "concurrency"] = Field(
        "rate", description="open-loop request rate (req/s) or closed-loop concurrency")
    low: float = Field(gt=0, description="the first probe: a load the SLOs should hold at")
    high: float = Field(gt=0, description="the most the search probes")
    max_probes: int = Field(6, ge=2, le=20)
    precision: float = Field(
        0.1, gt=0, lt=1, description="a rate bracket this narrow (relative) ends the search; "
                                     "a concurrency one ends at adjacent integers")

    @model_validator(mode="after")
    def _bracket(self) -> SloSearch:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high:g}) must be above low ({self.low:g})")
        if self.over == "concurrency" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("a concurrency search needs whole low and high")
        return self


class LoadPoint(BaseModel):
    """One load point of a workload, i.e. one cell: closed loop at a concurrency, open loop at
    a request rate, max throughput (every request at once), a trace's own arrivals, or the
    SLO search's (``slo``). ``label`` names it in cell ids (``c4``, ``r20``, ``max``,
    ``trace``, ``slo``)."""

    model_config = ConfigDict(frozen=True)

    label: str
    mode: Literal["closed", "open", "max", "trace", "slo"]
    concurrency: int | None = None  # closed: workers; open, max: cap on requests in flight
    request_rate: float | None = None  # open: requests/s


class LoadPoints(_Strict):
    """Load points, each one cell per workload: closed-loop concurrencies, open-loop rates
    (arrivals from a seeded Poisson, gamma or constant process) and max throughput; warm-up
    excluded."""

    concurrency: list[Annotated[int, Field(gt=0)]] = Field(default_factory=list)
    rates: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=list, description="open-loop request rates, requests/s")
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness: float = Field(1.0, gt=0, description="gamma shape; 1 = Poisson")
    max_throughput: bool = Field(
        False, description="a `max` point: every request sent at once (capped by "
                           "max_concurrency), for the server's ceiling in tok/s")
    max_concurrency: int | None = Field(None, gt=0,
                                        description="in-flight cap of open-loop and max points")
    seed: int = 0
    prompt_seed: int | None = Field(
        None, ge=0, description="seed of the prompts' text (each cell's prompt_key adds its "
        "identity); default: one drawn per run, so no run meets prompts a server that outlives "
        "runs (static, a retried task) has cached; set a run's (runs.prompt_seed) to "
        "reproduce it")
    warmup_requests: int = Field(2, ge=0, description="per cell, sent first, not measured")
    request_timeout_s: float = Field(120.0, gt=0, description="a request past it fails")
    max_error_rate: float = Field(
        0.0, ge=0, lt=1,
        description="share of measured requests that may fail in a cell that stays comparable "
                    "(default: none)")
    slo_search: SloSearch | None = Field(
        None, description="an `slo` point per workload: the most load within the sweep's slos")
    client_processes: int | Literal["auto"] = Field(
        1, description="load-generator processes per cell; auto: one, doubled while the cell "
                       "is client_saturated (up to the CPU count), the re-runs logged")

    @model_validator(mode="after")
    def _some_point(self) -> LoadPoints:
        if isinstance(self.client_processes, int) and self.client_processes < 1:
            raise ValueError("client_processes must be >= 1 or 'auto'")
        return self

    def points(self) -> list[LoadPoint]:
        closed = [LoadPoint(label=f"c{c}", mode="closed", concurrency=c) for c in self.concurrency]
        opened = [LoadPoint(label=f"r{r:g}", mode="open", concurrency=self.max_concurrency,
                            request_rate=r) for r in self.rates]
        ceiling = [LoadPoint(label="max", mode="max", concurrency=self.max_concurrency)
                   ] if self.max_throughput else []
        slo = [LoadPoint(label="slo", mode="slo", concurrency=self.max_concurrency)
               ] if self.slo_search else []
        return closed + opened + ceiling + slo

    def points_for(self, workload: Workload) -> list[LoadPoint]:
        """A workload's load points: a trace's own arrivals (one ``trace`` point, capped by
        ``max_concurrency``), else the sweep's."""
        if isinstance(workload, TraceWorkload):
            return [LoadPoint(label="trace", mode="trace", concurrency=self.max_concurrency)]
        return self.points()


class GoldenSetRef(_Strict):
    """A golden set (JSONL) and how many tokens its answers may take."""

    name: str
    path: str = Field(description="JSONL path, relative to the project root")
    max_tokens: int = Field(16, gt=0)
    concurrency: int = Field(4, gt=0)


class GateSpec(_Strict):
    """Quality gate: a variant fails on a significant drop below ``floor`` x baseline."""

    alpha: float = Field(0.01, gt=0, lt=1, description="significance of the exact McNemar test")
    floor: float = Field(0.99, gt=0, le=1, description="minimum accuracy relative to baseline")


class TrendsSpec(_Strict):
    """How the nightly detector judges this sweep's history (``servebench.trends``)."""

    min_change: float = Field(
        0.005, ge=0, lt=1,
        description="smallest relative change of a perf metric worth an alert, on top of each "
                    "series' own noise (accuracy keeps its binomial test); raise it where the "
                    "host's own speed wanders, e.g. 0.2 on a shared VM")


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


class CrossStackGroup(_Strict):
    """Variants that serve the same model at the same precision on different stacks: their
    golden-set answers should agree, and a member that disagrees has a correctness bug."""

    name: str
    members: list[str] = Field(min_length=2, description="'target/variant' names")
    min_agreement: float = Field(0.98, gt=0, le=1, description="share of identical answers")


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
        None, description="where prompts are cut to exact token counts for a stack without a "
        "tokenize endpoint (a hosted API, TGI, TensorRT-LLM): a folder with tokenizer.json or a "
        "hub id in this worker's Hugging Face cache; default: the model's")
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


class GpuOptions(BaseModel):
    """The GPU engines serving a Hugging Face checkpoint (vllm, sglang, trtllm, tgi)."""

    revision: str | None = Field(None, description="hub revision (commit) of the model")
    kv_cache_dtype: str | None = Field(None, description="auto, fp8, fp8_e4m3, fp8_e5m2, ...")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="tokens per step")
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    speculative: SpeculativeSpec | None = None
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)


class LlamaCppVariant(VariantOptions, ThreadsOption, ContainerOption):
    """What a llama.cpp variant may set (a GGUF file, CPU threads, the server image)."""


class TransformersVariant(VariantOptions, ThreadsOption, DtypeOption):
    """What a transformers serve variant may set (a local checkpoint, CPU threads, dtype)."""


class HfGpuVariant(VariantOptions, DtypeOption, ContainerOption, GpuOptions):
    """What a variant of a GPU engine may set."""


class VllmVariant(HfGpuVariant, ThreadsOption):
    """What a vLLM variant may set: the GPU engines' knobs, and ``threads`` for the CPU
    build."""


# Each stack's options model, by stack name: what a variant of that stack may set. Declared
# here, beside the knob groups, so the spec validates itself without importing the adapters
# (which import the spec). A hosted API takes VariantOptions alone: its serving configuration
# (dtype, KV cache, parallelism, image) is the provider's. A test keeps these names equal to
# the registered adapters'.
STACK_OPTIONS: dict[str, type[VariantOptions]] = {
    "llama_cpp": LlamaCppVariant,
    "transformers": TransformersVariant,
    "vllm": VllmVariant,
    "sglang": HfGpuVariant,
    "tgi": HfGpuVariant,
    "trtllm": HfGpuVariant,
    "openai_api": VariantOptions,
}


def stack_options(name: str) -> type[VariantOptions] | None:
    """The options model of stack ``name`` (None: no such stack)."""
    return STACK_OPTIONS.get(name)


class VariantSpec(GpuOptions, ContainerOption, DtypeOption, ThreadsOption, VariantOptions):
    """A variant as the runtime carries it: every stack's knobs (unset ones at their
    defaults); a spec file may set only those of its target's stack (``TargetSpec``)."""


class LocalProvision(_Strict):
    """Each variant's server is started as a process on the worker that runs its bench task,
    and stopped after it (the teardown task stops any that a crash left)."""

    kind: Literal["local"]
    health_timeout_s: float | None = Field(
        None, gt=0, description="how long a variant's server may take to answer its health "
        "check (weights loaded, kernels compiled); default: the setting "
        "SERVEBENCH_HEALTH_TIMEOUT_S (300), or 1800 for a GPU engine serving a hub "
        "checkpoint (a first start downloads it)")


class StaticProvision(_Strict):
    """Servers that already run -- a shared GPU box, a vLLM or llama.cpp server someone else
    runs, a hosted API: each variant names its own in ``endpoint``; nothing is launched or
    torn down; each is health-checked before its cells run. The variant's ``model`` must be
    the name the server answers with."""

    kind: Literal["static"]
    hardware: str | None = Field(
        None, description="what the servers run on, recorded as the cells' hardware (their "
        "trend series key on it); default: 'static endpoint <host>'")
    health_path: str | None = Field(
        None, description="probed (GET, 200) before use; default: the stack's own "
        "(/health; /models for openai_api)")
    metrics_path: str | None = Field(
        None, description="Prometheus metrics to scrape per cell; default: the stack's own "
        "(/metrics; /prometheus/metrics/ for trtllm); null: none")
    health_timeout_s: float = Field(60.0, gt=0)


class Ec2Fallback(_Strict):
    """Another way to the target's instance, tried in order when EC2 has no capacity or quota
    for the ones before (``InsufficientInstanceCapacity``, ``VcpuLimitExceeded``, ...): each
    field left unset keeps the target's own. Another instance type is other hardware: its
    cells are their own trend series, priced at its own price."""

    instance_type: str | None = Field(None, min_length=1)
    subnet_id: str | None = Field(None, pattern=r"^subnet-[0-9a-f]+$",
                                  description="another subnet (another availability zone)")
    market: Literal["on-demand", "spot"] | None = None
    price_per_hour: float | None = Field(
        None, ge=0, description="USD per hour of this placement (required with another "
        "instance type or market where the target names its price)")
    hardware: str | None = Field(None, description="the cells' hardware on it (required with "
                                 "another instance type where the target names its hardware)")


class Ec2Provision(_Strict):
    """One EC2 instance per target, launched by the setup task (boto3, credentials from the
    Airflow AWS connection), tagged for the janitor and terminated by the teardown task; each
    variant's container is started on it through SSM Run Command and reached over the
    instance's address. docs/provisioning.md ("EC2") lists the IAM permissions this needs."""

    kind: Literal["ec2"]
    instance_type: str = Field(min_length=1, description="e.g. p5.48xlarge, g6e.xlarge")
    ami: str | None = Field(None, pattern=r"^ami-[0-9a-f]+$",
                            description="image with Docker, the NVIDIA runtime and the SSM agent")
    launch_template: str | None = Field(
        None, description="launch template id (lt-...) or name, instead of ami")
    subnet_id: str | None = Field(None, pattern=r"^subnet-[0-9a-f]+$")
    security_group_ids: list[str] = Field(default_factory=list)
    instance_profile: str | None = Field(
        None, description="IAM instance profile (name or ARN) that lets the SSM agent work")
    market: Literal["on-demand", "spot"] = "on-demand"
    region: str | None = Field(None, description="default: the AWS connection's region")
    aws_conn_id: str = "aws_default"
    address: Literal["private", "public"] = Field(
        "private", description="which of the instance's addresses the worker reaches it by")
    port: int = Field(8000, ge=1, le=65535, description="host port the server is published on")
    price_per_hour: float | None = Field(
        None, ge=0, description="USD per hour of this instance type (default: the sweep's)")
    ttl_hours: float = Field(
        8.0, gt=0, description="the instance's tag expires_at = launch + ttl, moved to ttl "
        "from now at each unit's launch and while its units measure: the janitor terminates "
        "it after that whatever the run's state")
    hardware: str | None = Field(None, description="recorded as the cells' hardware; "
                                 "default: 'aws <instance_type>'")
    root_volume_gb: int | None = Field(
        None, ge=8, le=16384, description="root EBS volume size (GiB), where images and "
        "model_cache live: a 70B model's weights are ~140 GB (default: the AMI's)")
    root_volume_type: Literal["gp3", "gp2", "io1", "io2"] = "gp3"
    model_cache: str = Field("/opt/servebench/hub", description="host folder for weights, "
                             "mounted as the stack's hub cache (kept across variants)")
    instance_store: bool = Field(
        True, description="where the instance type has NVMe instance-store volumes, format "
        "them at the first launch (RAID 0 when several) and keep Docker's images and "
        "model_cache there instead of the root volume (ephemeral: gone with the instance)")
    hf_token_parameter: str | None = Field(
        None, description="SSM parameter (SecureString) the instance reads HF_TOKEN from; "
        "the token never travels in the command")
    health_timeout_s: float = Field(1800.0, gt=0, description="image pull + weight load")
    ssm_timeout_s: float = Field(
        600.0, gt=0, description="how long the instance's SSM agent may take to come online "
        "after the launch: past it the variant fails, naming the instance profile")
    max_instances: int | None = Field(
        None, ge=1, description="project instances of this target's instance types (its own "
        "and its fallbacks') that may run at once, this run's other targets included (your "
        "GPU quota): a launch waits for one to end, up to acquire_timeout_s")
    acquire_timeout_s: float = Field(3600.0, gt=0)
    fallbacks: list[Ec2Fallback] = Field(
        default_factory=list, description="placements tried in order when EC2 has no "
        "capacity or quota for the instance (other subnets/zones, instance types, spot -> "
        "on-demand)")

    @model_validator(mode="after")
    def _one_image(self) -> Ec2Provision:
        if (self.ami is None) == (self.launch_template is None):
            raise ValueError("exactly one of ami and launch_template")
        if self.root_volume_gb is not None and self.launch_template is not None:
            raise ValueError("root_volume_gb: with a launch_template, size the root volume "
                             "in the template")
        for i, fb in enumerate(self.fallbacks):
            other_type = fb.instance_type not in (None, self.instance_type)
            other_market = fb.market not in (None, self.market)
            if self.price_per_hour is not None and fb.price_per_hour is None \
                    and (other_type or other_market):
                raise ValueError(f"fallbacks[{i}].price_per_hour: another instance type or "
                                 "market has another price")
            if self.hardware is not None and fb.hardware is None and other_type:
                raise ValueError(f"fallbacks[{i}].hardware: another instance type is other "
                                 "hardware")
        return self

    def placements(self) -> list[Ec2Placement]:
        """Where the instance may come from, in the order tried: the target's own, then each
        fallback with what it leaves unset taken from the target."""
        own = Ec2Placement(instance_type=self.instance_type, subnet_id=self.subnet_id,
                           market=self.market, price_per_hour=self.price_per_hour,
                           hardware=self.hardware or f"aws {self.instance_type}")
        out = [own]
        for fb in self.fallbacks:
            itype = fb.instance_type or self.instance_type
            out.append(Ec2Placement(
                instance_type=itype, subnet_id=fb.subnet_id or self.subnet_id,
                market=fb.market or self.market,
                price_per_hour=fb.price_per_hour if fb.price_per_hour is not None
                else self.price_per_hour,
                hardware=fb.hardware or (self.hardware if itype == self.instance_type
                                         else None) or f"aws {itype}"))
        return out


class Ec2Placement(BaseModel):
    """One placement an EC2 target's instance is asked for (``Ec2Provision.placements``)."""

    instance_type: str
    subnet_id: str | None
    market: Literal["on-demand", "spot"]
    price_per_hour: float | None
    hardware: str


class KubernetesProvision(_Strict):
    """Each variant as a Pod (GPU limits, the stack's container) behind a ClusterIP Service
    in ``namespace``, reached at ``<service>.<namespace>.svc``: the worker runs in the
    cluster (or resolves its services). Deleted when the variant is done; the teardown and
    the janitor delete what is left, by label. docs/provisioning.md ("Kubernetes") says what
    was not run against a cluster here."""

    kind: Literal["kubernetes"]
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    context: str | None = Field(None, description="kubeconfig context (default: in-cluster, "
                                "else the kubeconfig's current context)")
    kubeconfig: str | None = None
    port: int = Field(8000, ge=1, le=65535)
    gpu_resource: str = Field("nvidia.com/gpu", description="the device plugin's resource")
    # requests == limits: a Guaranteed pod, the last the kubelet evicts under node pressure
    cpu: str = Field("8", pattern=r"^[0-9]+(\.[0-9]+)?m?$",
                     description="the server container's CPU request and limit (cores, or "
                     "millicores with m)")
    memory: str = Field("64Gi", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$",
                        description="the server container's memory request and limit; the "
                        "/dev/shm memory volume counts against it (the plan checks it fits)")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, str]] = Field(default_factory=list)
    model_cache_pvc: str | None = Field(
        None, description="PVC mounted as the hub cache (weights kept across variants and "
        "nights); default: an emptyDir per pod")
    hf_token_secret: str | None = Field(
        None, description="Secret whose key `token` becomes HF_TOKEN")
    price_per_hour: float | None = Field(None, ge=0)
    ttl_hours: float = Field(8.0, gt=0, description="the pod's activeDeadlineSeconds and "
                             "its expires-at annotation")
    hardware: str | None = None
    health_timeout_s: float = Field(1800.0, gt=0)
    unschedulable_grace_s: float = Field(
        60.0, gt=0, description="how long the pod may stay unschedulable before the variant "
        "fails; a cluster autoscaler's TriggeredScaleUp event waits on (to health_timeout_s), "
        "its NotTriggerScaleUp fails at once")


Provision = Annotated[LocalProvision | StaticProvision | Ec2Provision | KubernetesProvision,
                      Field(discriminator="kind")]
# stacks that serve nothing themselves: only ever static
HOSTED_STACKS = frozenset({"openai_api"})


class TargetSpec(_Strict):
    """A model served by one stack, in one or more variants; ``baseline`` is the reference.
    ``provision`` says where the servers come from (default: local; static for a hosted
    API)."""

    name: str
    stack: str = Field(description="llama_cpp, transformers, vllm, sglang, tgi, trtllm, "
                                   "openai_api")
    variants: list[VariantSpec] = Field(min_length=1)
    baseline: str | None = Field(None, description="the variant the gate and the levers "
                                                   "compare with (default: the first)")
    golden_sets: list[str] = Field(default_factory=list)
    provision: Provision | None = None

    def price_per_hour(self, sweep_price: float) -> float:
        """USD per hour of the host this target runs on: its provision's (ec2: the instance
        type's) where it names one, else the sweep's."""
        own = getattr(self.provision, "price_per_hour", None)
        return sweep_price if own is None else own

    @model_validator(mode="before")
    @classmethod
    def _stack_options(cls, data: object) -> object:
        """Each variant sets only what its stack's options model has (an unknown stack is
        the plan's to report)."""
        if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
            return data
        options = stack_options(str(data.get("stack")))
        if options is None:
            return data
        fields = VariantSpec.model_fields
        for i, variant in enumerate(data["variants"]):
            if isinstance(variant, dict):
                # a knob at its default says nothing (a spec dumped whole and read back)
                lacks = sorted(k for k, v in variant.items() if k not in options.model_fields
                               and not (k in fields and fields[k].get_default(
                                   call_default_factory=True) == v))
                if lacks:
                    raise ValueError(
                        f"variants[{i}](name={variant.get('name')}).{lacks[0]}: stack "
                        f"{data.get('stack')!r} has no option{'s' * (len(lacks) > 1)} "
                        f"{', '.join(lacks)} (its options: {', '.join(options.model_fields)})")
        return data

    @property
    def provision_kind(self) -> str:
        if self.provision is not None:
            return self.provision.kind
        return "static" if self.stack in HOSTED_STACKS else "local"

    @model_validator(mode="after")
    def _check_variants(self) -> TargetSpec:
        names = [v.name for v in self.variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate variant names {dupes}")
        if self.baseline is not None and self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not one of the variants {names}")
        kind = self.provision_kind
        if self.stack in HOSTED_STACKS and kind != "static":
            raise ValueError(f"provision.kind {kind!r}: stack {self.stack!r} is a hosted API; "
                             "it can only be provision kind 'static'")
        for variant in self.variants:
            if kind == "static" and variant.endpoint is None:
                raise ValueError(f"variant {variant.name!r} has no endpoint: with provision "
                                 "kind 'static' each variant names the server it measures")
            if kind != "static" and variant.endpoint is not None:
                raise ValueError(f"variant {variant.name!r} sets endpoint, which only a "
                                 f"target with provision kind 'static' uses (this is {kind!r})")
        return self


class SweepSpec(_Strict):
    """A whole sweep: every target x variant x workload x load point, one sampling spec."""

    name: str
    description: str = ""
    sampling: SamplingSpec = SamplingSpec()
    slos: SLOSpec = SLOSpec()
    price_per_hour: float = Field(ge=0, description="USD per hour of the serving host")
    workloads: list[Workload] = Field(min_length=1)
    load: LoadPoints
    golden_sets: list[GoldenSetRef] = Field(default_factory=list)
    gate: GateSpec = GateSpec()
    cross_stack: list[CrossStackGroup] = Field(default_factory=list)
    trends: TrendsSpec = TrendsSpec()
    targets: list[TargetSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_references(self) -> SweepSpec:
        if not self.load.points() and any(not isinstance(w, TraceWorkload)
                                          for w in self.workloads):
            raise ValueError("load: give at least one closed-loop concurrency, open-loop rate, "
                             "max_throughput: true or slo_search (only trace workloads bring "
                             "their own)")
        if self.load.slo_search and not (self.slos.ttft_ms or self.slos.tpot_ms
                                         or self.slos.e2e_ms):
            raise ValueError("load.slo_search: name at least one of slos.ttft_ms, slos.tpot_ms, "
                             "slos.e2e_ms to search within")
        for kind, names in (
            ("workload", [w.name for w in self.workloads]),
            ("target", [t.name for t in self.targets]),
            ("golden set", [g.name for g in self.golden_sets]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {kind} names {dupes}")
        variants = {f"{t.name}/{v.name}" for t in self.targets for v in t.variants}
        for group in self.cross_stack:
            unknown = [m for m in group.members if m not in variants]
            if unknown:
                raise ValueError(f"cross_stack group {group.name!r} names {unknown}, which are "
                                 f"not target/variant pairs of this sweep")
        known = {g.name for g in self.golden_sets}
        for target in self.targets:
            missing = [g for g in target.golden_sets if g not in known]
            if missing:
                raise ValueError(
                    f"target {target.name!r} names golden sets {missing} that the sweep does not "
                    f"define (defined: {sorted(known)})"
                )
        return self

    def spec_hash(self) -> str:
        """What the runs measured: how their history is judged (``trends``) is not part of
        it, so raising the alert floor is not a sweep change that breaks comparability."""
        payload = json.dumps(self.model_dump(mode="json", exclude={"trends"}),
                             sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]

    def golden_set(self, name: str) -> GoldenSetRef:
        return next(g for g in self.golden_sets if g.name == name)

    def target(self, name: str) -> TargetSpec:
        return next(t for t in self.targets if t.name == name)


def _field_path(loc: tuple, data: object) -> str:
    """Turn a pydantic error location into ``targets[0](name=x).variants[1].quant``."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                if isinstance(node, dict) and "name" in node:
                    label += f"(name={node['name']})"
            parts.append(label)
        else:
            # discriminated unions put the tag ('fixed') in the location: it is no field
            if isinstance(node, dict) and node.get("kind") == item and item not in node:
                continue
            node = node.get(item) if isinstance(node, dict) else None
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def parse_sweep(data: object, source: str) -> SweepSpec:
    """Validate a loaded YAML/JSON document; errors name ``source`` and every bad field."""
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid sweep spec ({exc.error_count()} error(s))"]
        for err in exc.errors():
            lines.append(f"  {source}: field {_field_path(err['loc'], data)}: {err['msg']}")
        raise SpecError("\n".join(lines)) from None


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read sweep spec: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    return parse_sweep(data, str(path))
