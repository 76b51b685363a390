"""The workloads of a sweep: what its prompts are (fixed lengths, shared prefixes, long
context, chat lengths, multi-turn conversations, a replayed trace) and what text they are cut
from."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from servebench.config.base import _Strict


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
