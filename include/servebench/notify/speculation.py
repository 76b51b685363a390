"""The speculative-decoding lines of a run (the digest, the report and ``servebench summary``
list them): per speculative variant, what its drafts bought -- the engine's acceptance over
its cells -- and whether its greedy answers stayed its twin's (``evals.gate.exactness``)."""

from __future__ import annotations

import pandas as pd


def speculation_lines(cells: pd.DataFrame) -> list[str]:
    """One line per variant whose engine counted drafted tokens: acceptance rate and length
    over its cells (the range where they differ), tokens accepted of drafted, and the gate's
    word on its answers."""
    if cells.empty or "spec_draft_tokens" not in cells.columns:
        return []
    lines = []
    drafted = cells[cells["spec_draft_tokens"].notna()]
    for (target, variant), mine in drafted.groupby(["target", "variant"], sort=False):
        rate, length = mine["spec_acceptance_rate"].dropna(), \
            mine["spec_acceptance_length"].dropna()
        total, accepted = mine["spec_draft_tokens"].sum(), mine["spec_accepted_tokens"].sum()
        if rate.empty:
            said = f"drafted {total:,.0f} tokens, none verified"
        else:
            said = (f"acceptance {_span(rate, '{:.0%}')}, "
                    f"{_span(length, '{:.2f}')} tokens per target step, "
                    f"{accepted:,.0f} of {total:,.0f} drafted tokens accepted")
        cells_said = f"over {len(mine)} cell{'s' if len(mine) > 1 else ''}"
        reason = mine["gate_reason"].dropna() if "gate_reason" in mine.columns else []
        answers = f"; answers: {str(reason.iloc[0]).split(';')[0]}" if len(reason) else ""
        lines.append(f"{target}/{variant}: {said} {cells_said}{answers}")
    return lines


def _span(values: pd.Series, fmt: str) -> str:
    lo, hi = float(values.min()), float(values.max())
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else \
        f"{fmt.format(lo)}-{fmt.format(hi)}"
