"""Two runs side by side, cell by cell: each compared statistic a -> b with its change, both
statuses and gate verdicts. One definition for the CLI's ``servebench compare`` (a rich table)
and the Benchmarks view's compare page (HTML)."""

from __future__ import annotations

import math

import pandas as pd

from servebench.metric_catalogue import shown_in

# (column, label): the catalogue's compare view
COMPARED = tuple((m.column, m.label) for m in shown_in("compare"))
CELL_KEY = ["target", "variant", "workload", "load_point"]


def change_pct(a: float | None, b: float | None) -> float | None:
    """b against a in percent; None where either is missing or a is 0."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or a == 0:
        return None
    return 100 * (b / a - 1)


def compare_cells(cells: pd.DataFrame, run_a: str, run_b: str) -> list[dict]:
    """One row per cell of either run (``cells`` holds both runs' rows): its key, and for
    each COMPARED column ``{column: (a, b, change %)}``, ``status`` and ``gate`` as (a, b);
    a cell only one run has gets None on the other side."""
    a = cells[cells["run_id"] == run_a].set_index(CELL_KEY)
    b = cells[cells["run_id"] == run_b].set_index(CELL_KEY)
    rows = []
    for key in sorted(set(a.index) | set(b.index), key=lambda k: tuple(map(str, k))):
        ra = a.loc[key].to_dict() if key in a.index else {}
        rb = b.loc[key].to_dict() if key in b.index else {}
        row: dict = dict(zip(CELL_KEY, key, strict=True))
        for column, _ in COMPARED:
            va, vb = _value(ra.get(column)), _value(rb.get(column))
            row[column] = (va, vb, change_pct(va, vb))
        row["status"] = (ra.get("status"), rb.get("status"))
        row["gate"] = (_text(ra.get("gate_verdict")), _text(rb.get("gate_verdict")))
        rows.append(row)
    return rows


def _value(v) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _text(v) -> str | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def shown_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """The COMPARED columns some cell of either run has a value in (no slo cells: no load
    within SLO column)."""
    return [(column, label) for column, label in COMPARED
            if any(v is not None for r in rows for v in r[column][:2])]
