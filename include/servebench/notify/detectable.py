"""What each series can catch, said where people look: the digest's short list of the series
that cannot see the sweep's ``trends.detect_at_least`` (Markdown, and HTML for the report),
the words beside each line of the Benchmarks view's trend panels and on a finding's page.
Read from a night's ``detectability`` table (``trends.nightly``; computed by
``trends.detectability``)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

import pandas as pd

from servebench.metric_catalogue import ACCURACY, metric_label
from servebench.notify.digest import fmt_text, is_missing

SHOWN = 8  # series named in the digest; past that, a count
WITHIN = "within 3 nights"


def step_text(row: dict) -> str:
    """``catches >= 6%``; for accuracy ``catches a drop >= 7.2 points``; ``catches no step``
    (none up to 4x its level); ``too few nights to judge yet``."""
    step = row.get("detectable")
    if is_missing(step):
        return "too few nights to judge yet"
    if math.isinf(float(step)):
        return "catches no step"
    if row.get("metric") == ACCURACY.column and not is_missing(row.get("level")):
        return f"catches a drop >= {_points(float(step) * float(row['level']))} points"
    return f"catches >= {_pct(float(step))}"


def misses_goal(frame: pd.DataFrame) -> pd.Series:
    """Per row of a ``detectability`` table: whether the series cannot catch the step the
    sweep asks of it (``goal``) within three nights; False where it is too new to tell."""
    if frame.empty:
        return pd.Series(dtype=bool)
    step = frame["detectable"].astype(float)
    return step.notna() & frame["goal"].notna() & (step > frame["goal"].astype(float) + 1e-9)


def goal_words(row: dict) -> str:
    """What the sweep asks a series to catch: ``10%``; for accuracy ``a 5-point drop``."""
    goal, level = row.get("goal"), row.get("level")
    if is_missing(goal):
        return "-"
    if row.get("metric") == ACCURACY.column and not is_missing(level):
        return f"a {_points(float(goal) * float(level))}-point drop"
    return _pct(float(goal))


def goal_text(frame: pd.DataFrame) -> str:
    """``10% (accuracy: a 5-point drop)``: what the sweep asks, from the rows' goals."""
    perf = frame[frame["metric"] != ACCURACY.column].dropna(subset=["goal"])
    acc = frame[frame["metric"] == ACCURACY.column].dropna(subset=["goal", "level"])
    parts = [goal_words(perf.iloc[0].to_dict())] if len(perf) else []
    if len(acc):
        drop = goal_words(acc.iloc[0].to_dict())
        parts.append(f"accuracy: {drop}" if parts else f"{drop} of accuracy")
    return parts[0] + (f" ({parts[1]})" if len(parts) > 1 else "") if parts else "-"


def blind_lines(frame: pd.DataFrame | None, markdown: bool = True) -> list[str]:
    """The digest's section: how many series cannot catch the sweep's step within three
    nights, the worst ``SHOWN`` of them named (Markdown; or HTML list items), or that all
    can. Nothing without a ``detectability`` table (a night judged before it existed)."""
    if frame is None or frame.empty:
        return []
    blind = frame[misses_goal(frame)].copy()
    young = int(frame["detectable"].isna().sum())
    head = (f"{len(blind)} of {len(frame)} series cannot catch a worse step of "
            f"{goal_text(frame)} {WITHIN} from their own noise (`trends.detect_at_least`)"
            if len(blind) else
            f"All {len(frame) - young} series judged catch a worse step of {goal_text(frame)} "
            f"{WITHIN}")
    head += f"; {young} too new to judge." if young else "."
    blind["ratio"] = blind["detectable"].astype(float) / blind["goal"].astype(float)
    items = [_item(r, markdown) for r in blind.sort_values("ratio", ascending=False)
             .head(SHOWN).to_dict("records")]
    if len(blind) > SHOWN:
        items.append(f"and {len(blind) - SHOWN} more (each trend panel of the Benchmarks view "
                     "says what its series catch)")
    if not markdown:
        return [escape(head).replace("`trends.detect_at_least`",
                                     "<code>trends.detect_at_least</code>"), *items]
    return ["", "## What the series cannot see", "", f"_{head}_", "",
            *[f"- {item}" for item in items]]


def _item(row: dict, markdown: bool) -> str:
    where = " / ".join(fmt_text(row.get(k)) for k in ("target", "variant", "workload",
                                                     "load_point") if not is_missing(row.get(k)))
    noise = _noise(row)
    text = f"{metric_label(fmt_text(row.get('metric')))}: {step_text(row)} {WITHIN}" + (
        f" ({noise})" if noise else "")
    return f"`{where}` {text}" if markdown else f"<code>{escape(where)}</code> {escape(text)}"


def _noise(row: dict) -> str:
    """``noise 9.1% a night over 30 nights`` (accuracy: in points)."""
    sigma, level, nights = row.get("noise"), row.get("level"), row.get("nights")
    if is_missing(sigma) or is_missing(level) or not level or is_missing(nights):
        return ""
    size = (f"{_points(float(sigma))} points" if row.get("metric") == ACCURACY.column
            else _pct(float(sigma) / abs(float(level))))
    return f"noise {size} a night over {int(nights)} nights"


def _pct(value: float) -> str:
    """``23%``, ``6.5%``, ``1%``."""
    return (f"{100 * value:.0f}" if value >= 0.095
            else f"{100 * value:.1f}".removesuffix(".0")) + "%"


def _points(share: Any) -> str:
    """``7.2``, ``5`` (points of a share)."""
    return f"{100 * float(share):.1f}".removesuffix(".0")
