"""Replay a history night by night through the rules the nightly DAG judges a series by
(``series.judge_series``: the detector, the tail rule, accuracy's binomial noise).

For each series and each night t the detector sees nights 0..t only, and its baseline starts
after the last change it already alerted (as the DAG's does, from the ``regressions`` table):
so each change is raised once, on the first night the evidence is enough.

HISTORY is long-format Parquet: ``series_id`` (string), ``metric`` (string), ``direction``
(``higher_is_worse`` | ``lower_is_worse``), ``night`` (int, 0-based), ``date``, ``value``
(float), and optionally ``binomial_n`` (int: the golden-set size of an accuracy series). The
output has one row per alert: ``series_id, night_flagged, night_alerted, direction``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from servebench.errors import HistoryError
from servebench.trends.detect import DIRECTIONS, DetectorSettings
from servebench.trends.series import judge_series

REQUIRED = ("series_id", "metric", "direction", "night", "value")
ALERT_COLUMNS = ["series_id", "night_flagged", "night_alerted", "direction"]


@dataclass(frozen=True)
class SeriesHistory:
    series_id: str
    direction: str
    values: np.ndarray  # index = night; NaN where the night has no value
    binomial_n: int | None = None
    metric: str = ""  # a tail statistic's one night raises nothing (series.same_night)


def read_history(path: str | Path) -> list[SeriesHistory]:
    """Read and check a long-format history file."""
    try:
        frame = pq.read_table(path).to_pandas()
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{path}: cannot read Parquet: {exc}") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise HistoryError(f"{path}: missing column(s) {missing}; need {list(REQUIRED)}")
    bad = sorted(set(frame["direction"]) - set(DIRECTIONS))
    if bad:
        raise HistoryError(f"{path}: column direction: unknown value(s) {bad}; "
                           f"use {list(DIRECTIONS)}")
    if (frame["night"] < 0).any():
        raise HistoryError(f"{path}: column night: negative nights")
    out = []
    for series_id, group in frame.groupby("series_id", sort=True):
        directions = group["direction"].unique()
        if len(directions) != 1:
            raise HistoryError(f"{path}: series {series_id!r} has directions {list(directions)}")
        if group["night"].duplicated().any():
            raise HistoryError(f"{path}: series {series_id!r} has a night twice")
        values = np.full(int(group["night"].max()) + 1, np.nan)
        values[group["night"].to_numpy(dtype=int)] = group["value"].to_numpy(dtype=float)
        n = None
        if "binomial_n" in group and group["binomial_n"].notna().any():
            n = int(group["binomial_n"].dropna().iloc[0])
        metrics = group["metric"].unique()
        if len(metrics) != 1:
            raise HistoryError(f"{path}: series {series_id!r} has metrics {list(metrics)}")
        out.append(SeriesHistory(str(series_id), str(directions[0]), values, n,
                                 str(metrics[0])))
    return out


def replay_series(series: SeriesHistory, settings: DetectorSettings | None = None,
                  resets: tuple[int, ...] = ()) -> list[dict]:
    """Alerts for one series, night by night; ``resets`` are annotated nights where the
    baseline starts afresh (an expected change, e.g. an engine upgrade)."""
    alerts = []
    start = 0
    for t in range(len(series.values)):
        if t in resets:
            start = t
        change = judge_series(series.values[:t + 1], series.metric, series.direction,
                              start=start, binomial_n=series.binomial_n, settings=settings)
        if change is None:
            continue
        alerts.append({"series_id": series.series_id, "night_flagged": change.night,
                       "night_alerted": t, "direction": change.direction})
        start = change.night
    return alerts


def replay(history: list[SeriesHistory], settings: DetectorSettings | None = None) -> pd.DataFrame:
    rows = [alert for series in history for alert in replay_series(series, settings)]
    return pd.DataFrame(rows, columns=ALERT_COLUMNS)
