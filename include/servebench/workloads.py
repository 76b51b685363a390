"""Workloads: the chat messages a cell sends, with the token lengths they were built to have.

Prompts are cut to exact token counts with the serving stack's tokenizer from seeded random
text: English prose by default (``text: natural``: a numbered window of ``data/prose.txt``,
the Python Language Reference's prose, from a random word), random words (``text: random``) or
arithmetic equations (``text: arithmetic``, the local model's domain). The text matters beyond its length: n-gram speculative decoding
proposes tokens the prompt repeats, and equations repeat far more than prose does.

Prompts belong to their cell: the text is seeded by the cell's *prompt key* (:func:`prompt_key`:
the run's prompt seed, the workload, the load point, the release-gate repetition, the task's
try, the re-run and ``warmup`` for a cell's warm-up), so no cell re-sends another cell's
prompts to a server that has cached them -- nor another run's (:func:`draw_prompt_seed`), nor
the first try's to a server that outlived it -- and the same key gives the same prompts for
every stack of the run, and again to reproduce it. The lengths (a
``chat_lengths`` draw) are seeded by the sampling seed and the workload alone: every cell of a
workload sends the same lengths, every night. Each :class:`PromptItem` says how many of its
tokens the workload means to share with an earlier prompt of its cell (``shared_tokens``): a
shared-prefix group's prefix, a conversation's history, nothing else -- what
``metrics.prefix_cache_reuse_reason`` holds a cell's measured prefix-cache hit rate to.
A ``trace`` workload's prompts have its rows' lengths and arrival times (``arrival_s``), and
the same text for the blocks its rows share (``traces``).
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from servebench.config import (
    ChatLengthsWorkload,
    FixedWorkload,
    LongContextWorkload,
    MultiTurnWorkload,
    SharedPrefixWorkload,
    TraceWorkload,
    Workload,
)
from servebench.tokenizer import Tokenizer, text_of_length
from servebench.traces import TraceRequest, load_trace

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
    # content tokens at its start that an earlier prompt of the same cell sent too (the
    # shared-prefix group's prefix, the conversation's history): what a prefix cache may serve
    shared_tokens: int = 0
    arrival_s: float | None = None  # a trace's: when it is sent, from the measured start

    @property
    def template_slack(self) -> int:
        """How many tokens the chat template may add around this prompt's messages."""
        return max(TEMPLATE_OVERHEAD_MAX, TEMPLATE_OVERHEAD_PER_MESSAGE * len(self.messages))


PROSE = Path(__file__).resolve().parent / "data" / "prose.txt"  # scripts/make_prose.py


@lru_cache(maxsize=1)
def _prose_words() -> tuple[str, ...]:
    lines = PROSE.read_text().splitlines()
    return tuple(" ".join(line for line in lines if not line.startswith("#")).split())


def _prose(rng: random.Random, approx_tokens: int) -> str:
    """A numbered excerpt: a random number, then running prose from a random word of the
    corpus (wrapping at its end), enough words for ``approx_tokens`` tokens of any tokenizer
    (a word is a token or more). The number makes every excerpt its own from its first
    tokens: with some 25,000 start words, a server that outlives runs meets a window it has
    cached within a few hundred prompts (seen: a llama-server shared by a test module served
    a cell 10% from its cache), and a prefix cache matches from the first token on."""
    words = _prose_words()
    start, n = rng.randrange(len(words)), approx_tokens + 16
    return f"{_number(rng)}. " + " ".join(words[(start + i) % len(words)] for i in range(n))


def _number(rng: random.Random) -> int:
    return rng.randrange(10**5, 10**6)


@lru_cache(maxsize=1)
def _vocabulary() -> tuple[str, ...]:
    return tuple(sorted(set(_prose_words())))


def _random_words(rng: random.Random, approx_tokens: int) -> str:
    """Words drawn uniformly from the prose's vocabulary: text no phrase of which repeats."""
    vocabulary = _vocabulary()
    return f"{_number(rng)}. " + " ".join(rng.choice(vocabulary)
                                          for _ in range(approx_tokens + 16))


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


def draw_prompt_seed(fixed: int | None = None) -> int:
    """A run's prompt seed: ``fixed`` (the sweep's ``load.prompt_seed``, to reproduce a run),
    else a fresh one, so a server that outlives runs has cached none of its prompts."""
    return fixed if fixed is not None else secrets.randbelow(2**31)


def prompt_key(seed: int, workload: str, load_point: str, *, repetition: int = 0,
               try_number: int = 1, rerun: int = 0, warmup: bool = False) -> str:
    """The key a cell's prompts are drawn from (stored with the cell as ``prompt_key``):
    deterministic, so a night can be reproduced, and different for every cell, release-gate
    repetition, try of the task that measures it (``try_number``, from 1: a retry meets a
    server that may have kept the first try's prompts), re-run and warm-up, so none re-sends
    another's prompts. A first try's key names no try."""
    if try_number < 1:
        raise ValueError(f"try_number counts from 1, not {try_number}")
    key = f"{seed}:{workload}:{load_point}:r{repetition}"
    if try_number > 1:
        key += f":try{try_number}"
    if rerun:
        key += f":rerun{rerun}"
    return key + (":warmup" if warmup else "")


def build_prompts(workload: Workload, tokenizer: Tokenizer, seed: int,
                  root: Path | None = None, *, key: str | None = None,
                  count: int | None = None, max_model_len: int | None = None
                  ) -> list[PromptItem]:
    """The prompts of a workload: lengths deterministic in ``seed``, text in ``key`` (a cell's
    :func:`prompt_key`; default: the seed alone); ``root`` resolves dataset paths; ``count``
    builds only the first that many (a warm-up); ``max_model_len``: the variant's, which a
    ``long_context`` workload's lengths follow."""
    lengths_rng = random.Random(f"{seed}:{workload.name}")
    key = key if key is not None else f"{seed}:{workload.name}"
    rng = random.Random(key)
    fill = {"natural": _prose, "random": _random_words, "arithmetic": _filler}[workload.text]
    if isinstance(workload, TraceWorkload):
        rows = trace_requests(workload, root or Path.cwd())
        return _trace(rows if count is None else rows[:count], tokenizer, rng, key, fill)
    n_items = workload_requests(workload) if count is None else count
    if isinstance(workload, ChatLengthsWorkload):
        table = load_length_table((root or Path.cwd()) / workload.dataset)
        items = []
        for _ in range(n_items):
            n_in, n_out = lengths_rng.choice(table)
            n_in = min(n_in, workload.max_input_tokens or n_in)
            n_out = min(n_out, workload.max_output_tokens or n_out)
            n_in = max(n_in, 8)  # room for the closing question
            text = _ending_in_question(tokenizer, fill(rng, n_in), _question(rng), n_in)
            items.append(PromptItem(_user(text), n_in, n_out))
        return items
    if isinstance(workload, MultiTurnWorkload):
        return _multi_turn(workload, tokenizer, rng, fill)[:n_items]
    if isinstance(workload, FixedWorkload | LongContextWorkload):
        n = workload.input_tokens if isinstance(workload, FixedWorkload) else \
            long_context_tokens(workload, max_model_len)
        return [
            PromptItem(_user(_ending_in_question(tokenizer, fill(rng, n), _question(rng), n)),
                       n, workload.output_tokens)
            for _ in range(n_items)
        ]
    groups = min(workload.num_prefixes, n_items)
    prefixes = [
        text_of_length(tokenizer, fill(rng, workload.prefix_tokens), workload.prefix_tokens)
        for _ in range(groups)
    ]
    total = workload.prefix_tokens + workload.suffix_tokens
    items = []
    for i in range(n_items):
        prefix = prefixes[i % workload.num_prefixes]
        # cut as one text so the count is exact across the seam; the prefix must survive whole
        head = prefix + " " + fill(rng, workload.suffix_tokens)
        text = _ending_in_question(tokenizer, head, _question(rng), total)
        if not text.startswith(prefix):
            raise ValueError(f"workload {workload.name}: prefix changed when cut to {total} tokens")
        # the first of each group is the one that puts its prefix in a cache
        shared = workload.prefix_tokens if i >= workload.num_prefixes else 0
        items.append(PromptItem(_user(text), total, workload.output_tokens, shared))
    return items


def trace_requests(workload: TraceWorkload, root: Path) -> tuple[TraceRequest, ...]:
    """The rows a trace workload replays (``traces.load_trace`` of its file: read once per
    process, so the plan, the warm-up and every variant's cells share one read)."""
    return load_trace(root / workload.path, workload.format, block_tokens=workload.block_tokens,
                      time_scale=workload.time_scale, max_requests=workload.max_requests,
                      max_duration_s=workload.max_duration_s,
                      max_input_tokens=workload.max_input_tokens,
                      max_output_tokens=workload.max_output_tokens)


def _trace(rows: Sequence[TraceRequest], tokenizer: Tokenizer, rng: random.Random,
           key: str, fill: Callable[[random.Random, int], str]) -> list[PromptItem]:
    """A trace's prompts: each row's blocks as the same text wherever its chain recurs (drawn
    from the cell's key and the block's, so no other cell shares it), then text of the row's
    own to its input length; ``shared_tokens``: the leading blocks an earlier row sent."""
    texts: dict[str, str] = {}
    seen: set[str] = set()
    items = []
    for row in rows:
        for block, tokens in row.blocks:
            if block not in texts:
                texts[block] = text_of_length(
                    tokenizer, fill(random.Random(f"{key}:block:{block}"), tokens), tokens)
        head = " ".join(texts[block] for block, _ in row.blocks)
        n_in = max(row.input_tokens, 8)  # room for the closing question
        question = _question(rng)
        text = _ending_in_question(tokenizer, (head + " " if head else "") + fill(rng, n_in),
                                   question, n_in)
        shared = 0
        for block, tokens in row.blocks:
            if block not in seen:
                break
            shared += tokens
        # the closing question may cut into the last block
        shared = min(shared, n_in - len(tokenizer.encode(question)))
        seen.update(block for block, _ in row.blocks)
        items.append(PromptItem(_user(text), n_in, row.output_tokens, max(shared, 0),
                                arrival_s=row.arrival_s))
    return items


def long_context_tokens(workload: LongContextWorkload, max_model_len: int | None) -> int:
    """A long-context prompt's content tokens on a variant serving ``max_model_len``: its
    share of the context, less the output and what the chat template may add."""
    if max_model_len is None:
        raise ValueError(f"workload {workload.name}: long_context needs the variant's "
                         "max_model_len")
    n = int(max_model_len * workload.context_share) - workload.output_tokens \
        - TEMPLATE_OVERHEAD_MAX
    if n < 8:
        raise ValueError(f"workload {workload.name}: {workload.context_share:g} of "
                         f"max_model_len {max_model_len} leaves {n} prompt tokens after "
                         f"{workload.output_tokens} output tokens and the template")
    return n


def workload_requests(workload: Workload) -> int:
    """How many prompts one pass of a workload sends (a trace's: ``trace_requests``)."""
    if isinstance(workload, MultiTurnWorkload):
        return workload.num_conversations * workload.turns
    return workload.num_requests


def _multi_turn(workload: MultiTurnWorkload, tokenizer: Tokenizer, rng: random.Random,
                fill: Callable[[random.Random, int], str]) -> list[PromptItem]:
    """Turn-major order (every conversation's turn 1, then turn 2, ...) so that a closed loop
    sends a conversation's next turn after its previous one, as a user would. A turn shares
    its conversation's history (every earlier message) with the turn before it."""
    n, k_out = workload.turn_input_tokens, workload.output_tokens
    conversations = []
    for _ in range(workload.num_conversations):
        turns, history, tokens = [], [], 0
        for _ in range(workload.turns):
            user = _ending_in_question(tokenizer, fill(rng, n), _question(rng), n)
            history = history + [{"role": "user", "content": user}]
            turns.append(PromptItem(list(history), tokens + n, k_out, shared_tokens=tokens))
            tokens += n
            # the assistant's reply stands in for what the server said (same length asked)
            reply = text_of_length(tokenizer, fill(rng, k_out), k_out)
            history = history + [{"role": "assistant", "content": reply}]
            tokens += k_out
        conversations.append(turns)
    return [conv[t] for t in range(workload.turns) for conv in conversations]


def max_sequence_tokens(workload: Workload, root: Path) -> int | None:
    """The longest prompt + output a workload asks for (content tokens, before the template);
    None for a long-context workload, which each variant's own max_model_len sizes."""
    if isinstance(workload, LongContextWorkload):
        return None
    if isinstance(workload, FixedWorkload):
        return workload.input_tokens + workload.output_tokens
    if isinstance(workload, SharedPrefixWorkload):
        return workload.prefix_tokens + workload.suffix_tokens + workload.output_tokens
    if isinstance(workload, MultiTurnWorkload):
        return workload.turns * (workload.turn_input_tokens + workload.output_tokens)
    if isinstance(workload, TraceWorkload):
        return max(max(r.input_tokens, 8) + r.output_tokens
                   for r in trace_requests(workload, root))
    table = load_length_table(root / workload.dataset)
    return max(min(i, workload.max_input_tokens or i) + min(o, workload.max_output_tokens or o)
               for i, o in table)
