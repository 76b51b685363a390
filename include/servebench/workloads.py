"""Workloads: the chat messages a cell sends, with the token lengths they were built to have.

Prompts are made of seeded random arithmetic text (in the local model's domain, so servers
see realistic token statistics) cut to exact token counts with the serving stack's tokenizer.
The same seed gives the same prompts for every stack and every night.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from servebench.config import (
    ChatLengthsWorkload,
    FixedWorkload,
    MultiTurnWorkload,
    SharedPrefixWorkload,
    Workload,
)
from servebench.tokenize import Tokenizer, text_of_length

# Chat templates add a few tokens around the content (BOS, role markers). The delivered
# prompt length (server usage) must lie within [requested, requested + this] -- per message,
# since multi-turn prompts carry a marker around every message.
TEMPLATE_OVERHEAD_PER_MESSAGE = 8
TEMPLATE_OVERHEAD_MAX = 16


@dataclass(frozen=True)
class PromptItem:
    messages: list[dict]
    input_tokens: int  # tokens of the message content, as built
    output_tokens: int  # exact output length requested

    @property
    def template_slack(self) -> int:
        """How many tokens the chat template may add around this prompt's messages."""
        return max(TEMPLATE_OVERHEAD_MAX, TEMPLATE_OVERHEAD_PER_MESSAGE * len(self.messages))


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


def load_length_table(path: str | Path) -> list[tuple[int, int]]:
    """(input_tokens, output_tokens) rows of a length table (JSONL); errors name the line."""
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pair = (int(row["input_tokens"]), int(row["output_tokens"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: expected input_tokens and output_tokens: "
                             f"{exc}") from None
        if min(pair) <= 0:
            raise ValueError(f"{path}:{number}: lengths must be positive")
        rows.append(pair)
    if not rows:
        raise ValueError(f"{path}: length table is empty")
    return rows


def build_prompts(workload: Workload, tokenizer: Tokenizer, seed: int,
                  root: Path | None = None) -> list[PromptItem]:
    """The prompts of a workload, deterministic in ``seed``; ``root`` resolves dataset paths."""
    rng = random.Random(f"{seed}:{workload.name}")
    if isinstance(workload, ChatLengthsWorkload):
        table = load_length_table((root or Path.cwd()) / workload.dataset)
        items = []
        for _ in range(workload.num_requests):
            n_in, n_out = rng.choice(table)
            n_in = min(n_in, workload.max_input_tokens or n_in)
            n_out = min(n_out, workload.max_output_tokens or n_out)
            n_in = max(n_in, 8)  # room for the closing question
            text = _ending_in_question(tokenizer, _filler(rng, n_in), _question(rng), n_in)
            items.append(PromptItem(_user(text), n_in, n_out))
        return items
    if isinstance(workload, MultiTurnWorkload):
        return _multi_turn(workload, tokenizer, rng)
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


def _multi_turn(workload: MultiTurnWorkload, tokenizer: Tokenizer,
                rng: random.Random) -> list[PromptItem]:
    """Turn-major order (every conversation's turn 1, then turn 2, ...) so that a closed loop
    sends a conversation's next turn after its previous one, as a user would."""
    n, k_out = workload.turn_input_tokens, workload.output_tokens
    conversations = []
    for _ in range(workload.num_conversations):
        turns, history, tokens = [], [], 0
        for _ in range(workload.turns):
            user = _ending_in_question(tokenizer, _filler(rng, n), _question(rng), n)
            history = history + [{"role": "user", "content": user}]
            tokens += n
            turns.append(PromptItem(list(history), tokens, k_out))
            # the assistant's reply stands in for what the server said (same length asked)
            reply = text_of_length(tokenizer, _filler(rng, k_out), k_out)
            history = history + [{"role": "assistant", "content": reply}]
            tokens += k_out
        conversations.append(turns)
    return [conv[t] for t in range(workload.turns) for conv in conversations]


def max_sequence_tokens(workload: Workload, root: Path) -> int:
    """The longest prompt + output a workload asks for (content tokens, before the template)."""
    if isinstance(workload, FixedWorkload):
        return workload.input_tokens + workload.output_tokens
    if isinstance(workload, SharedPrefixWorkload):
        return workload.prefix_tokens + workload.suffix_tokens + workload.output_tokens
    if isinstance(workload, MultiTurnWorkload):
        return workload.turns * (workload.turn_input_tokens + workload.output_tokens)
    table = load_length_table(root / workload.dataset)
    return max(min(i, workload.max_input_tokens or i) + min(o, workload.max_output_tokens or o)
               for i, o in table)
