"""The lever table: each variant against its baseline, cell by cell (``servebench.levers``
rows), as the digest writes it in Markdown and the report in HTML -- its columns, its
intervals' caption and their mark."""

from __future__ import annotations

from servebench.metric_catalogue import metric_label
from servebench.notify.formatting import (
    MISSING,
    Column,
    fmt_text,
    fmt_verdict,
    is_missing,
    render_table,
)

REQUESTS_ONLY_MARK = "\u2020"  # an interval over one night's requests only (levers.REQUESTS_ONLY)


def fmt_change(row: dict, key: str) -> str:
    """``+12.3% [+8.1, +16.0]``: a lever's % change with its 95% interval, marked
    ``REQUESTS_ONLY_MARK`` where it holds one night's requests and not the launch noise."""
    pct, lo, hi = (row.get(f"{key}_{s}") for s in ("pct", "lo", "hi"))
    if is_missing(pct):
        return MISSING
    if is_missing(lo) or is_missing(hi):
        return f"{pct:+.1f}%"
    mark = REQUESTS_ONLY_MARK if is_missing(row.get(f"{key}_launch")) else ""
    return f"{pct:+.1f}% [{lo:+.1f}, {hi:+.1f}]{mark}"


def lever_table(rows: list[dict], markdown: bool = True) -> str:
    """Each variant against its baseline, cell by cell (servebench.levers rows)."""
    return render_table(lever_columns(rows), rows, markdown=markdown)


def lever_caption(rows: list[dict]) -> str:
    """What the lever table's intervals cover (servebench.levers), and what its mark means
    where some interval holds one night's requests only."""
    from servebench.levers import LEVERS, REQUESTS_ONLY

    text = ("% change with a 95% interval over both cells' requests and how far each cell "
            "moves from one server launch to the next (from its series' nights)")
    if any(not is_missing(r.get(f"{k}_lo")) and is_missing(r.get(f"{k}_launch"))
           for r in rows for k, _ in LEVERS):
        text += (f"; {REQUESTS_ONLY_MARK}: {REQUESTS_ONLY} -- its series has too few nights "
                 "since its start or last change to know its launch noise, so the interval "
                 "is too narrow")
    return text + "; lower is better for TTFT, TPOT and cost."


# what a variant holds against its baseline (levers.memory_change): one measurement a unit
MEMORY_LEVER_COLUMNS: list[Column] = [
    ("peak memory", lambda r: MISSING if is_missing(r.get("memory_pct")) else
     f"{r['memory_pct']:+.1f}% {fmt_text(r.get('memory_basis')).upper()}", True),
    (metric_label("kv_cache_tokens"), lambda r: MISSING if is_missing(r.get("kv_cache_pct")) else
     f"{r['kv_cache_pct']:+.1f}%", True),
]


# joules per output token against the baseline's (levers.energy_change), where counted
ENERGY_LEVER_COLUMN: Column = (
    metric_label("energy_j_per_output_token"),
    lambda r: MISSING if is_missing(r.get("energy_pct")) else f"{r['energy_pct']:+.1f}%", True)


# a speculative variant's own acceptance (telemetry.speculation), beside its TPOT change
SPEC_LEVER_COLUMN: Column = (
    metric_label("spec_acceptance_rate"),
    lambda r: MISSING if is_missing(r.get("spec_acceptance_rate")) else
    f"{r['spec_acceptance_rate']:.0%}" + (
        "" if is_missing(r.get("spec_acceptance_length"))
        else f" ({r['spec_acceptance_length']:.2f} tok/step)"), True)


def lever_columns(rows: list[dict]) -> list[Column]:
    """The lever table's columns (an engine column where some variant's engine differs)."""
    from servebench.levers import LEVERS

    columns: list[Column] = [
        ("variant vs baseline", lambda r: f"{r['variant']} vs {r['baseline']}", False),
        ("workload", lambda r: fmt_text(r.get("workload")), False),
        ("load", lambda r: fmt_text(r.get("load_point")), False),
        *[(label, lambda r, k=key: fmt_change(r, k), True) for key, label in LEVERS],
        *(MEMORY_LEVER_COLUMNS if any(not is_missing(r.get("memory_pct"))
                                      or not is_missing(r.get("kv_cache_pct"))
                                      for r in rows) else []),
        *([ENERGY_LEVER_COLUMN] if any(not is_missing(r.get("energy_pct")) for r in rows)
          else []),
        *([SPEC_LEVER_COLUMN] if any(not is_missing(r.get("spec_acceptance_rate"))
                                     for r in rows) else []),
        (metric_label("accuracy"), lambda r: MISSING if is_missing(r.get("accuracy_delta_points"))
         else f"{r['accuracy_delta_points']:+.1f} pts", True),
        ("gate", lambda r: fmt_verdict(r.get("gate_verdict")), False),
    ]
    if any(not is_missing(r.get("engine_note")) for r in rows):
        columns.append(("engine vs baseline", lambda r: fmt_text(r.get("engine_note")), False))
    return columns
