"""PNG charts for the digest and the pages, drawn with matplotlib (Agg, no display): a trend
chart per regression, improvement or host change -- the last nights of its series, the change
night marked, the level before and after -- and a latency-vs-throughput chart per target for
tonight's load points. (The Benchmarks view's trends are SVG panels: ``panels.py``.)
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # before pyplot: workers have no display

import matplotlib.pyplot as plt
import pandas as pd

from servebench.metric_catalogue import metric_label
from servebench.notify.panels import KIND_COLORS

NIGHTS_SHOWN = 45
NEUTRAL = "#34495e"


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def trend_chart(series: pd.DataFrame, alert: dict, noise: float | None = None,
                nights: int = NIGHTS_SHOWN) -> bytes:
    """The last ``nights`` nights of one series (columns ``date``, ``value``), the change
    night of ``alert`` (a ``changes`` row) marked, its before and after levels drawn; with
    ``noise`` (the series' sigma before the change), the before level's band of two sigmas
    shaded: where the nights would lie had nothing changed."""
    data = series.sort_values("date").tail(nights)
    dates = pd.to_datetime(data["date"])
    change = pd.Timestamp(alert["change_date"])
    color = KIND_COLORS[alert["kind"]]
    fig, ax = plt.subplots(figsize=(7.0, 2.8))
    ax.plot(dates, data["value"], marker="o", markersize=3, linewidth=1, color=NEUTRAL)
    ax.axvline(change, color=color, linestyle="--", linewidth=1.2)
    before = dates[dates < change]
    after = dates[dates >= change]
    if len(before) and alert.get("before") is not None:
        ax.hlines(alert["before"], before.iloc[0], before.iloc[-1], color=NEUTRAL,
                  linestyle=":", linewidth=1)
    if noise and alert.get("before") is not None:
        ax.axhspan(alert["before"] - 2 * noise, alert["before"] + 2 * noise, color=NEUTRAL,
                   alpha=0.08, label="before ± 2σ (noise)")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if len(after) and alert.get("after") is not None:
        ax.hlines(alert["after"], after.iloc[0], after.iloc[-1], color=color, linewidth=2)
    where = " / ".join(str(alert[k]) for k in ("target", "variant", "workload", "load_point")
                       if alert.get(k))
    pct = alert.get("change_pct")
    ax.set_title(f"{metric_label(alert['metric'])} {pct:+.1f}% since {change.date()}  ({where})"
                 if pct is not None else f"{metric_label(alert['metric'])} ({where})",
                 fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


def latency_throughput_chart(cells: pd.DataFrame, target: str) -> bytes | None:
    """TTFT p95 against output tok/s for each variant of ``target`` across tonight's load
    points (ok cells only); None when there is nothing to draw."""
    ok = cells[(cells["target"] == target) & (cells["status"] == "ok")]
    ok = ok.dropna(subset=["ttft_ms_p95", "output_throughput"])
    if ok.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for (variant, workload), group in ok.groupby(["variant", "workload"], sort=True):
        group = group.sort_values("output_throughput")
        ax.plot(group["output_throughput"], group["ttft_ms_p95"], marker="o", markersize=4,
                linewidth=1, label=f"{variant} · {workload}")
        for _, row in group.iterrows():
            ax.annotate(str(row["load_point"]), (row["output_throughput"], row["ttft_ms_p95"]),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("output tokens/s", fontsize=8)
    ax.set_ylabel("TTFT p95 (ms)", fontsize=8)
    ax.set_title(f"{target}: latency vs throughput", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    return _png(fig)
