"""Writes include/datasets/trace-mooncake-small.jsonl: a small request trace in Mooncake's
format (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``), for the tests
and the docs' example of a ``trace`` workload.

Synthetic, and labelled so: no public trace can be downloaded here, and the real ones ask for
thousands of tokens the local model (512-token context) cannot take. The shape follows what
Mooncake's traces show, at a small scale: bursty arrivals (gamma gaps, CV 2), a few system
prompts most requests begin with, and conversations whose next turn re-sends the previous
turn's blocks. Blocks are 32 tokens here (set ``block_tokens: 32`` in the workload; Mooncake's
own traces use 512). Deterministic: re-running writes the same file.
"""

import json
import random
from pathlib import Path

OUT = (Path(__file__).resolve().parents[1] / "include" / "datasets"
       / "trace-mooncake-small.jsonl")
BLOCK = 32
REQUESTS = 40
RATE = 4.0  # requests/s on average
SYSTEM_PROMPTS = 3  # chains of two blocks each


def main() -> None:
    rng = random.Random(20261204)
    next_id = 0

    def new_ids(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    systems = [new_ids(2) for _ in range(SYSTEM_PROMPTS)]
    conversations: list[list[int]] = []  # each: the blocks its last turn sent
    rows, t = [], 0.0
    for _ in range(REQUESTS):
        t += rng.gammavariate(0.25, 1.0 / (RATE * 0.25))  # mean 1/RATE, CV 2
        if conversations and rng.random() < 0.3:  # a conversation's next turn
            k = rng.randrange(len(conversations))
            chain = conversations[k] + new_ids(rng.randint(1, 2))
            conversations[k] = chain
        else:
            chain = rng.choice(systems) + new_ids(rng.randint(0, 2))
            conversations.append(chain)
        if len(chain) > 9:  # stay inside the local model's context
            chain = chain[:9]
        n_in = len(chain) * BLOCK - rng.randrange(0, BLOCK // 2)  # the last block partial
        rows.append({"timestamp": round(t * 1000), "input_length": n_in,
                     "output_length": rng.choice([8, 12, 16, 24, 32]), "hash_ids": chain})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(OUT)


if __name__ == "__main__":
    main()
