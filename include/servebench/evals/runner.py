"""Run a golden set through the same endpoint, with the same sampling, as the perf cells.

Answers end where the model ends them (no forced length), capped by the set's max_tokens.
Every item yields a row: answer, score, latency, finish reason, error. An item whose request
failed scores 0 and carries the error: failures are not dropped from the denominator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servebench.config import GoldenSetRef, SamplingSpec, VariantSpec
from servebench.evals.golden import load_golden_set
from servebench.evals.scorers import get_scorer
from servebench.loadgen.closed_loop import run_closed_loop_sync
from servebench.settings import Settings
from servebench.stacks.base import StackAdapter

if TYPE_CHECKING:
    from servebench.runner import Endpoint


@dataclass
class EvalOutcome:
    name: str
    accuracy: float
    n_items: int
    n_errors: int
    rows: list[dict]


def run_golden_set(
    ref: GoldenSetRef,
    *,
    adapter: StackAdapter,
    endpoint: Endpoint,
    sampling: SamplingSpec,
    variant: VariantSpec,
    settings: Settings,
    cell_prefix: str,
) -> EvalOutcome:
    items = load_golden_set(settings.resolve(ref.path))
    bodies = [
        {**adapter.chat_body(
            served_model=endpoint.served_model, messages=item.chat_messages(), sampling=sampling,
            max_tokens=ref.max_tokens, force_length=False, variant=variant,
        ), **variant.request_overrides}
        for item in items
    ]
    load = run_closed_loop_sync(
        endpoint.base_url, endpoint.chat_path, bodies, concurrency=ref.concurrency, warmup=0,
        cell_id=f"{cell_prefix}/golden/{ref.name}", headers=endpoint.headers,
    )
    rows, correct, errors = [], 0, 0
    for item, rec in zip(items, load.records, strict=True):
        answer = rec.output_text
        score = get_scorer(item.scorer)(answer, item.reference) if rec.ok else 0.0
        errors += not rec.ok
        correct += score >= 1.0
        rows.append({
            "golden_set": ref.name,
            "item_id": item.id,
            "reference": item.reference,
            "answer": answer,
            "score": score,
            "correct": score >= 1.0,
            "latency_ms": rec.e2e_s * 1000.0 if not math.isnan(rec.e2e_s) else None,
            "finish_reason": rec.finish_reason,
            "error": rec.error,
        })
    return EvalOutcome(ref.name, correct / len(items), len(items), errors, rows)
