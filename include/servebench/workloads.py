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


def _question(rng: random.Random) -> str:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f" {a}+{b}="


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _ending_in_question(tokenizer: Tokenizer, head: str, question: str, n_tokens: int) -> str:
    """``n_tokens`` tokens of ``head`` (cut) followed by ``question``.

    Prompts end in an open question so that every stack's first generated token is visible
    text: a model that opens with its end-of-sequence token (streamed as no text by some
    servers) would leave TTFT unobservable.
    """
    q_tokens = len(tokenizer.encode(question))
    for cut in (n_tokens - q_tokens, n_tokens - q_tokens - 1, n_tokens - q_tokens + 1):
        if cut <= 0:
            break
        text = text_of_length(tokenizer, head, cut) + question
        if len(tokenizer.encode(text)) == n_tokens:
            return text
    raise ValueError(f"cannot build a {n_tokens}-token prompt ending in {question!r}")


def build_prompts(
    workload: FixedWorkload | SharedPrefixWorkload, tokenizer: Tokenizer, seed: int
) -> list[PromptItem]:
    """The ``num_requests`` prompts of a workload, deterministic in ``seed``."""
    rng = random.Random(f"{seed}:{workload.name}")
    if isinstance(workload, FixedWorkload):
        n = workload.input_tokens
        return [
            PromptItem(_user(_ending_in_question(tokenizer, _filler(rng, n), _question(rng), n)),
                       n, workload.output_tokens)
            for _ in range(workload.num_requests)
        ]
    prefixes = [
        text_of_length(tokenizer, _filler(rng, workload.prefix_tokens), workload.prefix_tokens)
        for _ in range(workload.num_prefixes)
    ]
    total = workload.prefix_tokens + workload.suffix_tokens
    items = []
    for i in range(workload.num_requests):
        prefix = prefixes[i % workload.num_prefixes]
        # cut as one text so the count is exact across the seam; the prefix must survive whole
        head = prefix + " " + _filler(rng, workload.suffix_tokens)
        text = _ending_in_question(tokenizer, head, _question(rng), total)
        if not text.startswith(prefix):
            raise ValueError(f"workload {workload.name}: prefix changed when cut to {total} tokens")
        items.append(PromptItem(_user(text), total, workload.output_tokens))
    return items
