"""How the digest, the report, the summary and the lever table write a value: a missing one
as "-", numbers, shares, bytes, verdicts, and a table of columns as Markdown or fixed width."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

MISSING = "-"


def is_missing(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return math.isnan(v)
    except TypeError:
        return False


def fmt_num(v: Any) -> str:
    """Latency/throughput: 3 significant-ish digits, no noise ("1234", "56.7", "8.91")."""
    if is_missing(v):
        return MISSING
    v = float(v)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_pct(v: Any) -> str:
    return MISSING if is_missing(v) else f"{100 * float(v):.1f}%"


def fmt_int(v: Any) -> str:
    return MISSING if is_missing(v) else str(int(v))


def fmt_text(v: Any) -> str:
    return MISSING if is_missing(v) or v == "" else str(v)


def fmt_bytes(v: Any) -> str:
    """``14.5 MB``, ``2.09 GB`` (decimal units, 3 significant digits)."""
    if is_missing(v):
        return MISSING
    v = float(v)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{fmt_num(v / size)} {unit}"
    return f"{v:.0f} B"


def fmt_more_less(pct: Any, what: str) -> str:
    """``38% less memory``, ``100% more KV capacity``, ``the same KV capacity``."""
    if is_missing(pct):
        return f"{what} {MISSING}"
    if round(float(pct)) == 0:
        return f"the same {what}"
    return f"{abs(float(pct)):.0f}% {'more' if pct > 0 else 'less'} {what}"


def fmt_errors(row: dict) -> str:
    n_err, n_req = row.get("n_errors"), row.get("n_requests")
    if is_missing(n_err):
        return MISSING
    return f"{int(n_err)}/{int(n_req)}" if not is_missing(n_req) else str(int(n_err))


def fmt_verdict(v: Any) -> str:
    """A gate verdict as words: ``not_judged`` reads "not judged"."""
    return fmt_text(v).replace("_", " ")


def fmt_status(v: Any) -> str:
    s = fmt_text(v)
    return s if s in ("ok", MISSING) else s.upper()


# (header, formatter over the row dict, right-aligned?)
Column = tuple[str, Callable[[dict], str], bool]


def _col(header: str, key: str, fmt: Callable[[Any], str], right: bool = True) -> Column:
    return (header, lambda r: fmt(r.get(key)), right)


def render_table(columns: Sequence[Column], rows: list[dict], markdown: bool) -> str:
    headers = [c[0] for c in columns]
    body = [[c[1](r) for c in columns] for r in rows]
    if markdown:
        body = [[v.replace("|", "\\|") for v in line] for line in body]
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if c[2] else v.ljust(w) for v, w, c in zip(values, widths, columns)]
        return f"| {' | '.join(parts)} |" if markdown else "  ".join(parts).rstrip()

    if markdown:
        rule = "|" + "|".join(("-" * (w + 1) + ":") if c[2] else ("-" * (w + 2))
                              for w, c in zip(widths, columns)) + "|"
    else:
        rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(v) for v in body)])
