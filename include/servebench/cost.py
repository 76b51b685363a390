"""Cost of a cell: the host's price over the measured window, per output token and per success.

cost_per_1m_output_tokens = price_per_hour * duration_s / 3600 / output_tokens * 1e6
cost_per_1k_successes     = price_per_hour * duration_s / 3600 / successes * 1e3

A success is a request that completed without error *and* whose answer would have been right:
successes = ok requests x the variant's golden-set accuracy on the same endpoint and sampling
(the perf prompts have no reference answer, so the golden set supplies the rate). Errors,
truncated or wrong answers are not successes, so a quant that is cheaper per token but answers
worse does not look cheaper per success. Without a golden set, successes = ok requests.
"""

from __future__ import annotations

import math


def cost_fields(*, price_per_hour: float, duration_s: float, output_tokens: int,
                n_ok: int, accuracy: float | None = None) -> dict[str, float]:
    successes = n_ok * accuracy if accuracy is not None and not math.isnan(accuracy) else n_ok
    spent = price_per_hour * duration_s / 3600.0 if duration_s > 0 else math.nan
    return {
        "cost_per_1m_output_tokens": spent / output_tokens * 1e6 if output_tokens else math.nan,
        "cost_per_1k_successes": spent / successes * 1e3 if successes else math.nan,
    }
