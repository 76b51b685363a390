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
from servebench.evals.scorers import ScoreResult, score_answer
from servebench.loadgen.engine import LoadSpec, run_load_sync
from servebench.metrics import e2e_s
from servebench.settings import Settings
from servebench.stacks.adapter import StackAdapter

if TYPE_CHECKING:
    from servebench.endpoint import Endpoint


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
    load = run_load_sync(
        endpoint.base_url, endpoint.chat_path, bodies, LoadSpec.closed(ref.concurrency), warmup=0,
        cell_id=f"{cell_prefix}/golden/{ref.name}", headers=endpoint.headers,
    )
    rows, correct, errors = [], 0, 0
    for item, rec in zip(items, load.records, strict=True):
        answer = rec.output_text
        # a failed request scores 0 and keeps its error; a scorer that could not judge (the
        # judge endpoint down) scores 0 with score_error, not counted as the model's error
        result = score_answer(item.scorer, answer, item.reference) if rec.ok \
            else ScoreResult(0.0, False)
        errors += not rec.ok
        correct += result.correct
        rows.append({
            "golden_set": ref.name,
            "item_id": item.id,
            "reference": item.reference,
            "answer": answer,
            "score": result.score,
            "correct": result.correct,
            "latency_ms": e2e_s(rec) * 1000.0 if not math.isnan(e2e_s(rec)) else None,
            "finish_reason": rec.finish_reason,
            "error": rec.error,
            "score_error": result.error,
        })
    return EvalOutcome(ref.name, correct / len(items), len(items), errors, rows)
