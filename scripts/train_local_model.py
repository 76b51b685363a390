#!/usr/bin/env python3
"""Train servebench's own small local model: "adder-3m", a ~3.5M-parameter Llama that adds.

Deterministic recipe (fixed seeds, 2 CPU threads, fixed step count) that trains a
transformers LlamaForCausalLM on 2-digit addition ("12+34=" -> "46" + eos) with a byte-level BPE
tokenizer, holds out a golden set never seen in training, and writes:

  include/models/adder-3m/   HF checkpoint (bf16 safetensors, config, generation config,
                             tokenizer.json, tokenizer_config.json with the chat template)
  include/golden/addition.jsonl   the held-out golden set

The model is deliberately *under*-trained (a fixed early step count: 350 steps of batch 128, ~95 s
on 2 idle cores) so that it is good but not perfect at f16 (golden accuracy 0.925 through
llama-server) and degrades visibly when quantized hard (0.795 at GGUF Q2_K): quality gates need
that headroom to have something to detect. Training to 550 steps gives 0.96 but Q2_K then only
drops to 0.95. The recipe is bit-for-bit reproducible on the same torch build.

All dims are multiples of 256 so every llama.cpp k-quant (q2_K ... q6_K) applies without fallback.

Run with the stacks venv:  .venv-stacks/bin/python scripts/train_local_model.py
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
SEED = 1234
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
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


@torch.no_grad()
def accuracy(model, tok, pairs, max_new_tokens: int = 4) -> float:
    """Greedy decode of bos + "a+b=" (batched, left padded) and exact match of the answer."""
    model.eval()
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    prompts = [[bos] + tok.encode(f"{a}+{b}=", add_special_tokens=False) for a, b in pairs]
    n = max(map(len, prompts))
    ids = torch.full((len(prompts), n), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos, pad_token_id=pad)
    correct = 0
    for (a, b), row in zip(pairs, out[:, n:].tolist()):
        if eos in row:
            row = row[: row.index(eos)]
        correct += tok.decode(row, skip_special_tokens=True).strip() == str(a + b)
    model.train()
    return correct / len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "include/models/adder-3m")
    ap.add_argument("--golden", type=Path, default=REPO / "include/golden/addition.jsonl")
    ap.add_argument("--steps", type=int, default=350)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--golden-n", type=int, default=200)
    ap.add_argument("--vocab-size", type=int, default=320)
    ap.add_argument("--eval-every", type=int, default=100)
    args = ap.parse_args()

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
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
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
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % args.eval_every == 0 or step == args.steps:
            acc = accuracy(model, tok, golden)
            print(f"step={step} loss={loss.item():.4f} golden_acc={acc:.3f} t={time.time() - t0:.0f}s", flush=True)

    # Save in bf16 (half the size of f32; converts cleanly to GGUF f16) and score what was saved.
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        do_sample=False, max_new_tokens=8,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    # Keep the chat template inside tokenizer_config.json (read by transformers and by
    # llama.cpp's converter alike) rather than a side file.
    tc_path = args.out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = CHAT_TEMPLATE
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"  # loadable by transformers 4.x and 5.x alike
    tc["add_bos_token"] = False
    tc["add_eos_token"] = False
    tc_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    (args.out / "chat_template.jinja").unlink(missing_ok=True)
    for p in args.out.iterdir():
        p.chmod(0o644)
    final = accuracy(model.float(), tok, golden)
    print(f"saved {args.out} (bf16) golden_acc={final:.3f}", flush=True)

    args.golden.parent.mkdir(parents=True, exist_ok=True)
    with args.golden.open("w") as f:
        for i, (a, b) in enumerate(golden, 1):
            f.write(json.dumps({
                "id": f"add-{i:04d}",
                "messages": [{"role": "user", "content": f"{a}+{b}="}],
                "reference": str(a + b),
                "scorer": "exact",
                "tags": ["addition"],
            }) + "\n")
    print(f"wrote {args.golden} ({len(golden)} items)", flush=True)


if __name__ == "__main__":
    main()
