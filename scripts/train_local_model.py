#!/usr/bin/env python3
"""Train servebench's own small local model: "adder-3m", a ~3.5M-parameter Llama that adds.

Deterministic recipe (fixed seeds, 2 CPU threads, fixed step count) that trains a
transformers LlamaForCausalLM on 2-digit addition with a byte-level BPE tokenizer, holds out a
golden set never seen in training, and writes:

  include/models/adder-3m/   HF checkpoint (bf16 safetensors, config, generation config,
                             tokenizer.json, tokenizer_config.json with the chat template)
  include/golden/addition.jsonl   the held-out golden set (checked, never changed, when present)

Every step trains on a mixture of two formats, from training pairs only (golden pairs never
appear, neither as questions nor as context):

  single  "<s>12+34=" -> "46</s>"  the golden set's format (chat template = bos + content); loss
          on the answer and eos.
  packed  "<s>16+12=28 68+21=89 13+64=77 ..." one PACKED_LEN-token run of equations separated by
          single spaces, as the benchmark's perf prompts are built (include/servebench/
          workloads.py); loss on every token: answers, separators and the next equations, so the
          model answers the open question at any position up to ~200 tokens and then keeps
          writing visible equations. Packed runs never end with eos (a forced-length request
          must stream visible text; llama.cpp bans eos there anyway). Like the benchmark's
          prompts, which are cut to exact token counts, a few equations are cut short ("45+3",
          "45+37=8", or a doubled space) before the next one; the token after a cut is not
          scored. Neither is the separator after the first equation: "<s>a+b=c" is followed by
          eos in the single format, and after it the model must keep answering eos.

The step count and the packed share trade f16 accuracy against visible damage at hard
quantization (quality gates need a variant that fails). Measured through llama-server (golden
set, greedy, max_tokens 8; paired exact McNemar of q2_K against f16):
  16 packed runs per step: 450 steps 0.955 at f16, q8_0, q4_K_M and q2_K alike -- q2_K no
     longer degrades at any step count that reaches 0.90, so there is nothing left to gate.
  4 packed runs per step (the default): 350 steps f16 0.870 / q2_K 0.775; 375: 0.925 / 0.845
     (p=0.0009); 400: 0.925 / 0.845; 425 (the default): f16 0.970, q8_0 0.970, q4_K_M 0.965,
     q2_K 0.900 (15 items lost, 1 gained, p=0.0005), transformers serve 0.970 item for item
     like llama.cpp f16; 450: 0.950 / 0.885 (p=0.007). At 425, every 64- and 144-token perf
     prompt is answered with digits first on both stacks (~0.45 s/step on 2 idle cores).
(The single-format-only recipe this replaced: 350 steps, 0.925 f16 / 0.795 Q2_K, but garbage or
an immediate eos after 64+ tokens of context.) The recipe is bit-for-bit reproducible on the
same torch build.

All dims are multiples of 256 so every llama.cpp k-quant (q2_K ... q6_K) applies without fallback.

``--arch draft`` trains adder-3m's draft model for speculative decoding, "adder-300k"
(include/models/adder-300k): the same recipe, data, seeds, tokenizer (checked byte for byte
against adder-3m's, which a draft must share with its target) and golden set, in one layer of
width 128 -- about a tenth of adder-3m's parameters and a quarter of its layers. It is served
as a draft (llama.cpp ``--spec-type draft-simple``) and, as the "smaller model" lever, on its
own; it is never quantized (its width is not a multiple of 256).

Run with the stacks venv:  .venv-stacks/bin/python scripts/train_local_model.py [--arch draft]
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
SEED = 1234
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
# Packed runs per step (next to --batch-size single questions), their length in tokens (bos
# included; the perf prompts are up to 144 tokens + 32 forced output tokens), and the chance that
# one of their equations is cut short as the benchmark's exact-length prompts cut them.
PACKED_BATCH = 4
PACKED_LEN = 208
CUT_P = 0.05
# The chat template renders a conversation exactly as the model was trained: bos + the user's
# text ("12+34="); the generation prompt adds nothing. An assistant turn is its text + eos.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{{- message['content'] + eos_token -}}"
    "{%- elif message['role'] == 'user' -%}{{- message['content'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
# A little fixed English so the BPE learns some merges that never touch digits: every digit
# stays its own token, which makes addition learnable and keeps HF and llama.cpp tokenization equal.
MERGE_TEXT = (
    "the sum of two numbers is the answer to the question what is the total "
    "add these numbers together and return the result of the addition "
) * 8


# the model's shape per --arch; everything else (data, steps, seeds, tokenizer) is shared
ARCHS = {
    "adder-3m": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=4),
    "draft": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2),
}
DEFAULT_OUT = {"adder-3m": REPO / "include/models/adder-3m",
               "draft": REPO / "include/models/adder-300k"}


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([MERGE_TEXT], trainer=trainer)
    # Byte-level post-processing only (offsets); no automatic bos: the chat template adds it.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def all_pairs() -> list[tuple[int, int]]:
    # Two-digit operands only (10..99): fixed positions make the task learnable in a few hundred steps.
    return [(a, b) for a in range(10, 100) for b in range(10, 100)]


def split(golden_n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    pairs = all_pairs()
    rng = random.Random(SEED)
    rng.shuffle(pairs)
    golden = sorted(pairs[:golden_n])
    train = pairs[golden_n:]
    return train, golden


def encode_batch(tok, pairs, device="cpu"):
    """bos + "a+b=" + "c" + eos, right padded; labels only on the answer and eos."""
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    seqs, labs = [], []
    for a, b in pairs:
        p = [bos] + tok.encode(f"{a}+{b}=", add_special_tokens=False)
        ans = tok.encode(str(a + b), add_special_tokens=False) + [eos]
        seqs.append(p + ans)
        labs.append([-100] * len(p) + ans)
    n = max(map(len, seqs))
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    labels = torch.full((len(seqs), n), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labs)):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(l)] = torch.tensor(l)
        mask[i, : len(s)] = 1
    return ids.to(device), labels.to(device), mask.to(device)


def char_ids(tok) -> dict[str, int]:
    """Digits, "+", "=" and " " are one token each (no BPE merge touches them): a packed run is
    tokenized character by character, checked against the tokenizer itself."""
    table = {c: tok.convert_tokens_to_ids(t) for c, t in
             zip("0123456789+= ", list("0123456789+=") + ["\u0120"])}
    text = "16+12=28 68+21=89  45+3 13+64=77 12+34="
    assert tok.encode(text, add_special_tokens=False) == [table[c] for c in text]
    return table


def packed_example(table, rng: random.Random, pairs, n_tokens: int, cut_p: float):
    """bos + a run of "a+b=c" separated by spaces, exactly ``n_tokens`` tokens long (no eos).

    Labels on every token except the separator after the first equation (there the single
    format has eos) and the token right after an equation cut short."""
    ids, labels = [-1], [-100]  # bos, set by the caller
    first = True
    while len(ids) < n_tokens:
        a, b = rng.choice(pairs)
        eq = f"{a}+{b}={a + b}"
        cut = not first and rng.random() < cut_p
        if cut:  # "4", "45+3", "45+37=", "45+37=8", or "45+37=82 " (then a doubled space)
            eq = (eq + " ")[: rng.randint(1, len(eq) + 1)]
        for c in eq:
            ids.append(table[c])
            labels.append(table[c])
        ids.append(table[" "])
        labels.append(-100 if (first or cut) else table[" "])
        first = False
    return ids[:n_tokens], labels[:n_tokens]


def packed_batch(tok, table, rng, pairs, n: int, n_tokens: int, cut_p: float):
    rows = [packed_example(table, rng, pairs, n_tokens, cut_p) for _ in range(n)]
    ids = torch.tensor([r[0] for r in rows], dtype=torch.long)
    ids[:, 0] = tok.bos_token_id
    labels = torch.tensor([r[1] for r in rows], dtype=torch.long)
    return ids, labels


def packed_questions(table, rng, context_pairs, questions, n_tokens: int):
    """Perf-workload-like prompts: ~n_tokens of packed equations ending in " a+b=" (no bos)."""
    prompts = []
    for a, b in questions:
        q = [table[" "]] + [table[c] for c in f"{a}+{b}="]
        head = []
        while len(head) < n_tokens - len(q):
            x, y = rng.choice(context_pairs)
            head += [table[c] for c in f"{x}+{y}={x + y} "]
        head = head[: n_tokens - len(q)]
        if head[-1] == table[" "]:
            head = head[:-1]
        prompts.append(head + q)
    return prompts


@torch.no_grad()
def accuracy(model, tok, pairs, max_new_tokens: int = 4, contexts=None) -> tuple[float, float]:
    """Greedy decode of bos + [context] + "a+b=" (batched, left padded); returns the exact-match
    accuracy of the answer and the share of answers whose first token is a digit."""
    model.eval()
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    if contexts is None:
        prompts = [[bos] + tok.encode(f"{a}+{b}=", add_special_tokens=False) for a, b in pairs]
    else:
        prompts = [[bos] + c for c in contexts]
    n = max(map(len, prompts))
    ids = torch.full((len(prompts), n), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos, pad_token_id=pad)
    correct = digit_first = 0
    for (a, b), row in zip(pairs, out[:, n:].tolist()):
        digit_first += tok.decode(row[:1], skip_special_tokens=True)[:1].isdigit()
        if eos in row:
            row = row[: row.index(eos)]
        text = tok.decode(row, skip_special_tokens=True)
        if contexts is not None:  # a packed answer is followed by " next+equation"
            text = text.split(" ")[0]
        correct += text.strip() == str(a + b)
    model.train()
    return correct / len(pairs), digit_first / len(pairs)


def save_checkpoint(model, tok, out: Path) -> None:
    """Save in bf16 (half the size of f32; converts cleanly to GGUF f16); ``model`` is cast."""
    from transformers import GenerationConfig

    model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        do_sample=False, max_new_tokens=8,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    # Keep the chat template inside tokenizer_config.json (read by transformers and by
    # llama.cpp's converter alike) rather than a side file.
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = CHAT_TEMPLATE
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"  # loadable by transformers 4.x and 5.x alike
    tc["add_bos_token"] = False
    tc["add_eos_token"] = False
    tc_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)
    for p in out.iterdir():
        p.chmod(0o644)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=sorted(ARCHS), default="adder-3m",
                    help="adder-3m, or its one-layer draft model adder-300k")
    ap.add_argument("--out", type=Path, default=None,
                    help="checkpoint folder (default: include/models/<the arch's name>)")
    ap.add_argument("--golden", type=Path, default=REPO / "include/golden/addition.jsonl")
    ap.add_argument("--steps", type=int, default=425)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--golden-n", type=int, default=200)
    ap.add_argument("--vocab-size", type=int, default=320)
    ap.add_argument("--packed-batch-size", type=int, default=PACKED_BATCH)
    ap.add_argument("--packed-len", type=int, default=PACKED_LEN,
                    help="tokens per packed run, bos included")
    ap.add_argument("--cut-p", type=float, default=CUT_P,
                    help="chance that an equation of a packed run is cut short")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--snapshot-dir", type=Path, default=None,
                    help="also save a bf16 checkpoint at every eval step under DIR/step-N (for "
                         "choosing --steps; the final checkpoint of --steps N equals DIR/step-N)")
    args = ap.parse_args()
    out = args.out or DEFAULT_OUT[args.arch]

    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    tok = build_tokenizer(args.vocab_size)
    for d in "0123456789":
        assert len(tok.encode(d, add_special_tokens=False)) == 1
    assert tok.encode("12+34=", add_special_tokens=False) == [tok.convert_tokens_to_ids(c) for c in "12+34="]
    rendered = tok.apply_chat_template([{"role": "user", "content": "12+34="}],
                                       add_generation_prompt=True, tokenize=True)
    if isinstance(rendered, dict) or hasattr(rendered, "input_ids"):
        rendered = rendered["input_ids"]
    assert list(rendered) == [tok.bos_token_id] + tok.encode("12+34=", add_special_tokens=False), rendered

    train, golden = split(args.golden_n)
    # the held-out set: never rewritten; a recipe change that would move it fails here, early
    golden_text = "".join(
        json.dumps({
            "id": f"add-{i:04d}",
            "messages": [{"role": "user", "content": f"{a}+{b}="}],
            "reference": str(a + b),
            "scorer": "exact",
            "tags": ["addition"],
        }) + "\n"
        for i, (a, b) in enumerate(golden, 1)
    )
    if args.golden.is_file() and args.golden.read_text() != golden_text:
        raise SystemExit(f"{args.golden} differs from this recipe's held-out set: left as it is")
    table = char_ids(tok)
    # perf-workload-like probes (64 and 144 tokens of packed training equations ending in a
    # golden question): the answer's first token must be a digit at every length.
    probe_rng = random.Random(SEED + 2)
    probes = {n: packed_questions(table, probe_rng, train, golden[::2], n) for n in (64, 144)}
    cfg = LlamaConfig(
        vocab_size=len(tok),
        **ARCHS[args.arch],
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params={n_params} vocab={len(tok)} train={len(train)} golden={len(golden)}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    rng = random.Random(SEED + 1)
    model.train()
    t0 = time.time()
    for step in range(1, args.steps + 1):
        batch = rng.sample(train, args.batch_size)
        ids, labels, mask = encode_batch(tok, batch)
        loss_single = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss = loss_single
        if args.packed_batch_size:
            ids, labels = packed_batch(tok, table, rng, train, args.packed_batch_size,
                                       args.packed_len, args.cut_p)
            loss_packed = model(input_ids=ids, labels=labels).loss
            loss = loss_single + loss_packed
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % args.eval_every == 0 or step == args.steps:
            acc, _ = accuracy(model, tok, golden)
            line = (f"step={step} loss_single={loss_single.item():.4f} "
                    f"loss_packed={(loss - loss_single).item():.4f} golden_acc={acc:.3f}")
            for n, ctx in probes.items():
                pacc, digit = accuracy(model, tok, golden[::2], contexts=ctx)
                line += f" packed{n}_acc={pacc:.3f} packed{n}_digit_first={digit:.2f}"
            print(f"{line} t={time.time() - t0:.0f}s", flush=True)
            if args.snapshot_dir is not None:
                save_checkpoint(copy.deepcopy(model), tok, args.snapshot_dir / f"step-{step}")

    save_checkpoint(model, tok, out)
    target_tokenizer = DEFAULT_OUT["adder-3m"] / "tokenizer.json"
    if out != DEFAULT_OUT["adder-3m"] and target_tokenizer.is_file() and \
            (out / "tokenizer.json").read_bytes() != target_tokenizer.read_bytes():
        raise SystemExit(f"{out}/tokenizer.json differs from {target_tokenizer}: a draft model "
                         "must share its target's vocabulary")
    model = model.float()
    final, _ = accuracy(model, tok, golden)
    line = f"saved {out} (bf16) golden_acc={final:.3f}"
    for n, ctx in probes.items():
        pacc, digit = accuracy(model, tok, golden[::2], contexts=ctx)
        line += f" packed{n}_acc={pacc:.3f} packed{n}_digit_first={digit:.2f}"
    print(line, flush=True)

    if args.golden.is_file():
        print(f"checked {args.golden} ({len(golden)} items, unchanged)", flush=True)
    else:
        args.golden.parent.mkdir(parents=True, exist_ok=True)
        args.golden.write_text(golden_text)
        print(f"wrote {args.golden} ({len(golden)} items)", flush=True)


if __name__ == "__main__":
    main()
