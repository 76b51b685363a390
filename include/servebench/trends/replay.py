"""Replay a history night by night through the rules the nightly DAG judges a series by
(``series.detect_series``: the detector, the tail rule, accuracy's binomial noise).

For each series and each night t the detector sees nights 0..t only, and its baseline starts
after the last change it already alerted (as the DAG's does, from the ``changes`` table):
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
from servebench.trends.detect import DIRECTIONS, DetectorSettings, restart_prior
from servebench.trends.series import binomial_count, detect_series, series_detectability

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
        change = detect_series(series.values[:t + 1], series.metric, series.direction,
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


CALIBRATION_COLUMNS = ["series_id", "metric", "night", "baseline_nights", "step",
                       "raised", "raised_half"]


def calibrate(history: list[SeriesHistory], *, alerts: pd.DataFrame | None = None,
              changes: dict[str, int] | None = None, per_series: int = 2, seed: int = 0,
              settings: DetectorSettings | None = None) -> pd.DataFrame:
    """Whether each series catches what it claims to (``series.series_detectability``): at
    up to ``per_series`` nights t of each series (drawn with ``seed``) where it is quiet --
    no alert of ``alerts`` (its replay) flagged within the nights a step there would take,
    and before its first known change (``changes``: series_id -> night, for a generated
    history) --, a worse step of the size the series claims tonight is injected from night
    t+1 on, and the detector, its baseline restarted at the last alert before t as the
    nightly task's is, judges the nights after: ``raised`` when it raises it, the change
    night within ``locate_tolerance``, by the ``min_nights_after``-th night of the step;
    ``raised_half`` the same for a step of half that size. ``step`` is None where the series
    is too short to judge, inf where it catches no step; those rows raise nothing. One row
    per injection (CALIBRATION_COLUMNS)."""
    s = settings or DetectorSettings()
    k = s.min_nights_after
    rng = np.random.default_rng(seed)
    flagged = ({} if alerts is None or alerts.empty else
               alerts.groupby("series_id")["night_flagged"].apply(sorted).to_dict())
    rows = []
    for series in history:
        values = series.values
        marks = flagged.get(series.series_id, [])
        end = min(len(values), (changes or {}).get(series.series_id, len(values)))
        present = np.cumsum(~np.isnan(values))
        quiet = [t for t in range(len(values) - k)
                 if t + k < end and not np.isnan(values[t:t + 1 + k]).any()
                 and not any(t + 1 - s.locate_tolerance <= f <= t + k + s.locate_tolerance
                             for f in marks)
                 and _judged(values, t, _start(marks, t), present, series, s)]
        for t in sorted(rng.choice(quiet, size=min(per_series, len(quiet)), replace=False)):
            rows.append(_inject(series, int(t), _start(marks, int(t)), s))
    return pd.DataFrame(rows, columns=CALIBRATION_COLUMNS)


def _start(marks: list[int], t: int) -> int:
    """The baseline's start at night ``t``: the last change flagged by then (or night 0)."""
    return max([f for f in marks if f <= t], default=0)


def _judged(values: np.ndarray, t: int, start: int, present: np.ndarray,
            series: SeriesHistory, s: DetectorSettings) -> bool:
    """Whether the detector judges the series from night t+1 on: enough nights since
    ``start`` (fewer after a restart, ``detect.restart_prior``)."""
    count = binomial_count(values[:t + 1], series.metric, series.binomial_n)
    needed = restart_prior(values[:t + 1], start, count, s)[1]
    return present[t] - (present[start - 1] if start else 0) >= needed


def _inject(series: SeriesHistory, t: int, start: int, s: DetectorSettings) -> dict:
    """One row of ``calibrate``: steps injected after night ``t`` of ``series``."""
    k = s.min_nights_after
    values = series.values[:t + 1 + k]
    count = binomial_count(values[:t + 1], series.metric, series.binomial_n)
    found = series_detectability(values[:t + 1], series.metric, series.direction,
                                 start=start, binomial_n=count, settings=s)
    row = {"series_id": series.series_id, "metric": series.metric, "night": t,
           "baseline_nights": found.nights if found else None,
           "step": found.step if found else None}
    if found is None or not np.isfinite(found.step):
        return {**row, "raised": None, "raised_half": None}
    worse = 1.0 if series.direction == "higher_is_worse" else -1.0
    for key, share in (("raised", 1.0), ("raised_half", 0.5)):
        delta = share * found.step_abs
        if count:  # a share moves by whole items
            delta = round(delta * count) / count
        moved = values.copy()
        moved[t + 1:] += worse * delta
        row[key] = any(
            (change := detect_series(moved[:night + 1], series.metric, series.direction,
                                     start=start, binomial_n=count, settings=s)) is not None
            and change.worse and abs(change.night - (t + 1)) <= s.locate_tolerance
            for night in range(t + 1, t + 1 + k))
    return row


def calibration_summary(frame: pd.DataFrame) -> dict:
    """The shares ``calibrate``'s injections were raised: at the claimed size and at half
    of it; with how many were judged and how many could not be (too short, or no step
    caught)."""
    judged = frame.dropna(subset=["raised"])
    return {"injected": len(frame), "judged": len(judged),
            "too_short": int(frame["step"].isna().sum()),
            "none_caught": int(np.isinf(frame["step"].astype(float)).sum()),
            "raised": float(judged["raised"].astype(bool).mean()) if len(judged) else np.nan,
            "raised_half": float(judged["raised_half"].astype(bool).mean())
            if len(judged) else np.nan,
            "median_step": float(judged["step"].median()) if len(judged) else np.nan}
