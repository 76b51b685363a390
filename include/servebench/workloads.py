"""Workloads: the chat messages a cell sends, with the token lengths they were built to have.

Prompts are made of seeded random arithmetic text (in the local model's domain, so servers
see realistic token statistics) cut to exact token counts with the serving stack's tokenizer.
The same seed gives the same prompts for every stack and every night.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from servebench.config import FixedWorkload, SharedPrefixWorkload
from servebench.tokenize import Tokenizer, text_of_length

# Chat templates add a few tokens around the content (BOS, role markers). The delivered
# prompt length (server usage) must lie within [requested, requested + this].
TEMPLATE_OVERHEAD_MAX = 16


@dataclass(frozen=True)
class PromptItem:
    messages: list[dict]
    input_tokens: int  # tokens of the message content, as built
    output_tokens: int  # exact output length requested


def _filler(rng: random.Random, approx_tokens: int) -> str:
    parts = []
    for _ in range(approx_tokens):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        parts.append(f"{a}+{b}={a + b}")
    return " ".join(parts)


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def build_prompts(
    workload: FixedWorkload | SharedPrefixWorkload, tokenizer: Tokenizer, seed: int
) -> list[PromptItem]:
    """The ``num_requests`` prompts of a workload, deterministic in ``seed``."""
    rng = random.Random(f"{seed}:{workload.name}")
    if isinstance(workload, FixedWorkload):
        items = []
        for _ in range(workload.num_requests):
            text = text_of_length(tokenizer, _filler(rng, workload.input_tokens), workload.input_tokens)
            items.append(PromptItem(_user(text), workload.input_tokens, workload.output_tokens))
        return items
    prefixes = [
        text_of_length(tokenizer, _filler(rng, workload.prefix_tokens), workload.prefix_tokens)
        for _ in range(workload.num_prefixes)
    ]
    items = []
    for i in range(workload.num_requests):
        prefix = prefixes[i % workload.num_prefixes]
        # the suffix is cut so that prefix + suffix is exact as one text (merges at the seam)
        total = workload.prefix_tokens + workload.suffix_tokens
        text = text_of_length(tokenizer, prefix + " " + _filler(rng, workload.suffix_tokens), total)
        if not text.startswith(prefix):
            raise ValueError(f"workload {workload.name}: prefix changed when cut to {total} tokens")
        items.append(PromptItem(_user(text), total, workload.output_tokens))
    return items
