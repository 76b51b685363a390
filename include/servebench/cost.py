"""Cost of a cell: the host's price over the measured window, per output token and per success.

cost_per_1m_output_tokens = price_per_hour * duration_s / 3600 / output_tokens * 1e6
cost_per_1k_successes     = price_per_hour * duration_s / 3600 / successes * 1e3

A success is a request that completed without error; errors and truncations do not count,
so a cheaper-looking variant that fails requests does not look cheaper per success.
"""

from __future__ import annotations

import math


def cost_fields(*, price_per_hour: float, duration_s: float, output_tokens: int,
                successes: int) -> dict[str, float]:
    spent = price_per_hour * duration_s / 3600.0 if duration_s > 0 else math.nan
    return {
        "cost_per_1m_output_tokens": spent / output_tokens * 1e6 if output_tokens else math.nan,
        "cost_per_1k_successes": spent / successes * 1e3 if successes else math.nan,
    }
