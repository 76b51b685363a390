"""Writes include/datasets/chat_lengths.jsonl: a table of chat-like request lengths.

Synthetic, and labelled so: no public chat trace can be downloaded here. The shape is the one
chat traces show -- log-normal, a long right tail, outputs a little shorter than inputs --
with medians of 180 input and 120 output tokens. A sweep samples rows from it (seeded) and
clips them to what the model serves (ChatLengthsWorkload.max_input_tokens/max_output_tokens).
Deterministic: re-running writes the same file.
"""

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "include" / "datasets" / "chat_lengths.jsonl"


def main() -> None:
    rng = random.Random(20261130)
    rows = []
    for _ in range(1000):
        n_in = min(4096, max(4, round(rng.lognormvariate(5.19, 0.9))))  # median e^5.19 = 180
        n_out = min(2048, max(4, round(rng.lognormvariate(4.79, 0.8))))  # median 120
        rows.append({"input_tokens": n_in, "output_tokens": n_out})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(OUT)


if __name__ == "__main__":
    main()
