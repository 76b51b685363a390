"""Trend panels the browser can read: inline SVG small multiples for the Benchmarks view -- one
panel per workload x load point of a target's metric, a line per variant, each night a point
whose hover shows its date, value, run and, on a change night, what changed; the change nights
marked with their kind and cause; under each panel, what each variant's series catches within
three nights (``notify.detectable``), one that cannot catch the sweep's step marked.

Why hand-written SVG and not a charting library: the view must work offline inside Airflow's
iframe with nothing fetched at view time, and a hover needs no script at all -- an SVG
element's ``<title>`` is the browser's own tooltip. The Slack digest keeps matplotlib's PNGs
(``charts.py``), which Slack can show and SVG it cannot.
"""

from __future__ import annotations

import math
from html import escape

import pandas as pd

from servebench.metric_catalogue import metric_label
from servebench.notify.detectable import WITHIN, goal_words, misses_goal, step_text
from servebench.trends.nightly import MOVES

WIDTH, HEIGHT = 330, 170
LEFT, RIGHT, TOP, BOTTOM = 46, 8, 20, 24
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
KIND_COLORS = {"regression": "#c0392b", "improvement": "#1e8449", "host_change": "#b9770e",
               "newly_failing": "#c0392b", "gate_failure": "#c0392b"}


def trend_panels(series: pd.DataFrame, target: str, metric: str,
                 alerts: pd.DataFrame | None = None, nights: int = 45,
                 detectability: pd.DataFrame | None = None) -> str:
    """The panels of ``target``'s ``metric`` (``series`` in SERIES_COLUMNS) over its last
    ``nights`` nights, with a shared legend of its variants and, from the latest night's
    ``detectability`` table, what each line catches; "" when there is nothing."""
    data = series[(series["target"] == target) & (series["metric"] == metric)]
    data = data.dropna(subset=["value"])
    if data.empty:
        return ""
    dates = sorted(pd.to_datetime(data["date"]).unique())[-nights:]
    data = data[pd.to_datetime(data["date"]).isin(dates)]
    variants = sorted(data["variant"].dropna().astype(str).unique())
    color = {v: COLORS[i % len(COLORS)] for i, v in enumerate(variants)}
    changes = _changes(alerts, target, metric, dates[0])
    catches = _catches(detectability, target, metric)
    panels = []
    for (workload, point), panel in data.groupby(["workload", "load_point"], dropna=False,
                                                 sort=True):
        where = " · ".join(str(p) for p in (workload, point) if pd.notna(p)) or "variant"
        caption = _caption([catches.get((v, _key(workload), _key(point))) for v in
                            sorted(panel["variant"].dropna().astype(str).unique())], color)
        panels.append(f"<figure class='panel'>{_panel(panel, where, dates, color, changes, metric)}"
                      f"{caption}</figure>")
    legend = "".join(f"<span class='key'><i style='background:{color[v]}'></i>"
                     f"{escape(v)}</span>" for v in variants)
    return (f"<div class='panels' data-target='{escape(target, quote=True)}' "
            f"data-metric='{escape(metric, quote=True)}'><div class='legend'>"
            f"<strong>{escape(metric_label(metric))}</strong> {legend}</div>"
            + "".join(panels) + "</div>")


def _key(value):
    return None if pd.isna(value) else value


def _catches(detectability: pd.DataFrame | None, target: str,
             metric: str) -> dict[tuple, dict]:
    """(variant, workload, load point) -> its series' ``detectability`` row."""
    if detectability is None or detectability.empty:
        return {}
    mine = detectability[(detectability["target"] == target)
                         & (detectability["metric"] == metric)]
    blind = misses_goal(mine)
    return {(r["variant"], _key(r["workload"]), _key(r["load_point"])): {**r, "blind": b}
            for r, b in zip(mine.to_dict("records"), blind, strict=True)}


def _caption(rows: list[dict | None], color: dict) -> str:
    """``within 3 nights: f16 catches >= 6% · q4 catches >= 23%`` (one that cannot catch the
    sweep's step marked)."""
    said = []
    for row in (r for r in rows if r):
        title = (f" title='cannot catch the sweep&#39;s {escape(goal_words(row))} "
                 f"{WITHIN}'" if row["blind"] else "")
        said.append(f"<span class='catches{' blind' * bool(row['blind'])}'{title}>"
                    f"<i style='background:{color[str(row['variant'])]}'></i>"
                    f"{escape(str(row['variant']))} {escape(step_text(row))}</span>")
    return f"<figcaption>{WITHIN}: {' · '.join(said)}</figcaption>" if said else ""


def _changes(alerts: pd.DataFrame | None, target: str, metric: str,
             since) -> dict[tuple, list[dict]]:
    """(variant, workload, load point, date) -> the alerts whose change night that is."""
    if alerts is None or alerts.empty:
        return {}
    mine = alerts[(alerts["target"] == target) & (alerts["metric"] == metric)
                  & alerts["kind"].isin(MOVES)  # a panel marks a series' change
                  & (pd.to_datetime(alerts["change_date"]) >= since)]
    out: dict[tuple, list[dict]] = {}
    for row in mine.to_dict("records"):
        key = (row.get("variant"), row.get("workload"), row.get("load_point"),
               pd.Timestamp(row["change_date"]))
        out.setdefault(key, []).append(row)
    return out


def _panel(panel: pd.DataFrame, where: str, dates: list, color: dict, changes: dict,
           metric: str) -> str:
    values = panel["value"].astype(float)
    lo, hi = float(values.min()), float(values.max())
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    index = {d: i for i, d in enumerate(dates)}
    span = max(len(dates) - 1, 1)

    def x(date) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * index[pd.Timestamp(date)] / span

    def y(value: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (hi - value) / (hi - lo)

    out = [f"<svg class='panel' width='{WIDTH}' height='{HEIGHT}' role='img' "
           f"aria-label='{escape(where, quote=True)}' xmlns='http://www.w3.org/2000/svg'>",
           f"<text x='{LEFT}' y='13' class='title'>{escape(where)}</text>",
           f"<line x1='{LEFT}' y1='{HEIGHT - BOTTOM}' x2='{WIDTH - RIGHT}' "
           f"y2='{HEIGHT - BOTTOM}' class='axis'/>",
           f"<text x='{LEFT - 4}' y='{TOP + 4}' class='tick' text-anchor='end'>"
           f"{_fmt(hi - pad)}</text>",
           f"<text x='{LEFT - 4}' y='{HEIGHT - BOTTOM}' class='tick' text-anchor='end'>"
           f"{_fmt(lo + pad)}</text>",
           f"<text x='{LEFT}' y='{HEIGHT - 8}' class='tick'>"
           f"{pd.Timestamp(dates[0]).date()}</text>",
           f"<text x='{WIDTH - RIGHT}' y='{HEIGHT - 8}' class='tick' text-anchor='end'>"
           f"{pd.Timestamp(dates[-1]).date()}</text>"]
    marked = set()
    for variant, line in panel.groupby("variant", sort=True):
        line = line.sort_values("date")
        for row in line.to_dict("records"):
            date = pd.Timestamp(row["date"])
            key = (variant, row.get("workload"), row.get("load_point"), date)
            for alert in changes.get(key, []):
                if (date, alert["kind"]) in marked:
                    continue
                marked.add((date, alert["kind"]))
                pct = alert.get("change_pct")
                label = (f"{alert['kind'].replace('_', ' ')} "
                         + (f"{pct:+.1f}% " if pct is not None and not math.isnan(pct) else "")
                         + f"since {date.date()} ({variant}): {alert.get('cause') or ''}")
                out.append(f"<line class='change {escape(alert['kind'])}' x1='{x(date):.1f}' "
                           f"x2='{x(date):.1f}' y1='{TOP}' y2='{HEIGHT - BOTTOM}' "
                           f"stroke='{KIND_COLORS[alert['kind']]}'><title>{escape(label)}"
                           "</title></line>")
        points = " ".join(f"{x(d):.1f},{y(v):.1f}" for d, v in zip(line["date"], line["value"],
                                                                   strict=True))
        out.append(f"<polyline points='{points}' fill='none' stroke='{color[str(variant)]}' "
                   "stroke-width='1.2'/>")
        for row in line.to_dict("records"):
            date = pd.Timestamp(row["date"])
            key = (variant, row.get("workload"), row.get("load_point"), date)
            causes = "; ".join(f"{a['kind'].replace('_', ' ')}: {a.get('cause') or ''}"
                               for a in changes.get(key, []))
            tip = (f"{variant} · {date.date()}: {_fmt(row['value'])} "
                   f"({metric_label(metric)}), run {row['run_id']}"
                   + (f" -- {causes}" if causes else ""))
            out.append(f"<circle class='night' cx='{x(date):.1f}' cy='{y(row['value']):.1f}' "
                       f"r='2.6' fill='{color[str(variant)]}'><title>{escape(tip)}</title>"
                       "</circle>")
    out.append("</svg>")
    return "".join(out)


def _fmt(value: float) -> str:
    return f"{value:.4g}"


STYLE = """
.panels { margin: 6px 0 14px; } .panels .legend { font-size: 12px; margin: 4px 0; }
.panels .key { margin-left: 10px; } .panels .key i { display: inline-block; width: 10px;
height: 10px; margin-right: 4px; vertical-align: middle; }
svg.panel { border: 1px solid #eee; margin: 4px 6px 4px 0; background: #fff; }
svg.panel .title { font: 11px system-ui, sans-serif; fill: #1f2933; }
svg.panel .tick { font: 9px system-ui, sans-serif; fill: #6b7785; }
svg.panel .axis { stroke: #ccd; } svg.panel .change { stroke-dasharray: 4 3; stroke-width: 1.4; }
svg.panel circle.night:hover { r: 4.5; }
figure.panel { display: inline-block; margin: 4px 6px 4px 0; vertical-align: top; }
figure.panel svg.panel { margin: 0; } figure.panel figcaption { font-size: 11px;
max-width: 330px; color: #3e4c59; } figure.panel .catches i { display: inline-block;
width: 8px; height: 8px; margin-right: 3px; } .catches.blind { color: #c0392b; }
"""
