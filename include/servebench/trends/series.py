"""Nightly series from the result history: one per (target, stack, variant, model file,
workload, load point, hardware, metric), over the committed runs of one sweep, in run order.

Only ``ok`` cells enter a series (a night whose cell is invalid or failed has no value there;
that cell is an alert of its own kind, ``newly_failing``). Accuracy is a property of the
variant, not of a cell: its series is per (target, stack, variant, model file, hardware,
golden set), with the golden-set size for binomial noise. So is memory (``UNIT_METRICS``: a
unit's weights, KV-cache capacity and peak memory, copied into each of its cells): one value
per (target, stack, variant, model file, hardware) and night, from its ok cells.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import pandas as pd

from servebench.loadgen.modes import SEARCHED_MODES
from servebench.metric_catalogue import ACCURACY, TRENDED, Direction, Metric, trended
from servebench.trends.detect import Change, DetectorSettings, detect, infer_binomial_n
from servebench.trends.detectability import Detectability, detectability

# what a nightly series can be made of (servebench.metric_catalogue): a cell's, a variant's
# accuracy, and a unit's memory
METRICS: tuple[Metric, ...] = trended("cell")
UNIT_METRICS: tuple[Metric, ...] = trended("unit")
BY_COLUMN = TRENDED  # a series' metric by column

CELL_KEY = ("target", "stack", "variant", "model_file_sha256", "workload", "load_point",
            "hardware")
VARIANT_KEY = ("target", "stack", "variant", "model_file_sha256", "hardware", "golden_set")
UNIT_KEY = VARIANT_KEY[:-1]


def same_night(metric: str) -> bool:
    """Whether one night of ``metric`` may raise a change the same morning (the detector's
    drastic guard): not for a tail statistic; any metric this suite does not define may."""
    found = BY_COLUMN.get(metric)
    return not (found and found.tail)


def detect_series(values, metric: str, direction: Direction, *, start: int = 0,
                  binomial_n: int | None = None,
                  settings: DetectorSettings | None = None) -> Change | None:
    """What the last night of one series (``values``, nights 0..t, NaN = no value) raises by
    every rule that applies to a series on its own: the detector over the nights from
    ``start`` (after the last change raised, or an annotation); no same-morning alert for a
    tail statistic (``same_night``); and an accuracy series' binomial noise from its
    golden-set size or, given as bare proportions, from the count they are whole multiples
    of (``detect.infer_binomial_n``; so too for a metric this suite does not define whose
    every value is such a proportion). The nightly task (``trends.nightly``) and the replay
    (``trends.replay``) both judge a series by this."""
    return detect(np.asarray(values, dtype=float), direction, start=start,
                  binomial_n=binomial_count(values, metric, binomial_n), settings=settings,
                  same_night=same_night(metric))


def series_detectability(values, metric: str, direction: Direction, *, start: int = 0,
                         binomial_n: int | None = None,
                         settings: DetectorSettings | None = None) -> Detectability | None:
    """The smallest worse step the series ``values`` (nights 0..t) would raise within
    ``min_nights_after`` nights from night t+1 on (``trends.detectability``), its noise read
    as ``detect_series`` reads it (an accuracy series' binomial count, given or inferred)."""
    return detectability(np.asarray(values, dtype=float), direction, start=start,
                         binomial_n=binomial_count(values, metric, binomial_n),
                         settings=settings)


def binomial_count(values, metric: str, binomial_n: int | None) -> int | None:
    """The item count behind a series' binomial noise: ``binomial_n`` where given; for an
    accuracy series, or a metric this suite does not define, the count its values are whole
    multiples of (``detect.infer_binomial_n``); else None (continuous noise)."""
    if binomial_n is None and (metric == ACCURACY.column or metric not in BY_COLUMN):
        return infer_binomial_n(values)
    return binomial_n


SERIES_COLUMNS = ["series_id", "metric", "direction", "night", "date", "value", "binomial_n",
                  "run_id", "target", "stack", "variant", "workload", "load_point"]


def series_id(row: dict | pd.Series, metric: str) -> str:
    """``target/variant/workload/load_point/metric#hash`` (hash of stack, model file and
    hardware, which split a series without being worth reading)."""
    where = "/".join(str(row.get(k) or "*") for k in ("target", "variant", "workload",
                                                          "load_point"))
    hidden = "|".join(str(row.get(k)) for k in ("stack", "model_file_sha256", "hardware"))
    if row.get("length_control") == "natural":  # never compared with exact-length history
        hidden += "|natural"
    return f"{where}/{metric}#{hashlib.sha256(hidden.encode()).hexdigest()[:8]}"


# the DAG run types that are nights of the series on their own: the schedule's, and a backfill
# of nights the schedule missed; a manual trigger is one only where a person marks it
NIGHT_RUN_TYPES = frozenset({"scheduled", "backfill"})


def counts_as_night(run_type: object, marked_nightly: bool = False) -> bool:
    """Whether a DAG run enters its sweep's nightly series (the ``runs.nightly`` column): a
    scheduled or backfill run, or a manual one a person marked (the DAG's ``nightly`` param,
    e.g. a failed night run again by hand). A developer's ad-hoc trigger is judged against the
    nights but never becomes one."""
    # the task SDK's DagRunType is a str enum without Airflow core's __str__: its value
    return getattr(run_type, "value", run_type) in NIGHT_RUN_TYPES or bool(marked_nightly)


def missing_nights(runs: pd.DataFrame, run: dict, schedule: str) -> list[dt.datetime]:
    """The scheduled nights (``schedule``, a cron in UTC) since the last committed night of
    ``run``'s sweep and DAG before ``run``, and before ``run``, that have no committed run of
    their own: the nights that broke before their digest, or never started. A night is had
    when a committed night (``run`` included) falls in its schedule interval, from its fire
    time to the next: a manual run marked nightly stands in for the night it ran in. None
    for an ad-hoc run, or without an earlier night."""
    from croniter import croniter

    if run.get("nightly") is False or pd.isna(run.get("logical_date")):
        return []
    tonight = pd.Timestamp(run["logical_date"]).to_pydatetime()
    nights = nightly_runs(runs, run["sweep_name"], run.get("dag_id"))
    stamps = [pd.Timestamp(t).to_pydatetime() for t in nights["logical_date"].dropna()]
    before = [t for t in stamps if t < tonight]
    if not before:
        return []
    had = sorted({*stamps, tonight})
    ticks = croniter(schedule, max(before))
    missing, tick = [], ticks.get_next(dt.datetime)
    while tick < tonight and len(missing) < MISSING_MAX:
        following = ticks.get_next(dt.datetime)
        if not any(tick <= t < following for t in had):
            missing.append(tick)
        tick = following
    return missing


MISSING_MAX = 400  # a year of nights: past that the digest says "and more"


def nightly_runs(runs: pd.DataFrame, sweep_name: str | None, dag_id: str | None = None,
                 include: str | None = None) -> pd.DataFrame:
    """The committed nights of one sweep (None: of any sweep) and DAG, oldest first,
    numbered 0..n-1: its runs except the ad-hoc ones (``nightly`` false; null, from before
    the column, counts), and the run ``include`` whatever it is (the run being judged)."""
    picked = runs if sweep_name is None else runs[runs["sweep_name"] == sweep_name]
    if "nightly" in picked.columns:
        picked = picked[(picked["nightly"] != False) | (picked["run_id"] == include)]  # noqa: E712
    if dag_id is not None:
        picked = picked[picked["dag_id"] == dag_id]
    order = ["logical_date", "finished_at", "run_id"]
    picked = picked.sort_values([c for c in order if c in picked.columns]).reset_index(drop=True)
    return picked.assign(night=range(len(picked)))


def build_series(cells: pd.DataFrame, runs: pd.DataFrame,
                 golden_sizes: dict[tuple[str, str, str, str], int] | None = None) -> pd.DataFrame:
    """Long-format series (SERIES_COLUMNS) from ``cells`` of the runs in ``runs`` (which
    carries ``night``); ``golden_sizes`` maps (run_id, target, variant, golden_set) to the
    number of items answered, for the accuracy series' binomial noise."""
    nights = runs.set_index("run_id")[["night", "run_date"]]
    ok = cells[(cells["status"] == "ok") & cells["run_id"].isin(nights.index)]
    frames = []
    for metric in METRICS:
        if metric.column not in ok.columns:
            continue
        part = ok[ok[metric.column].notna()]
        if "load_mode" in part.columns:
            part = part[part["load_mode"].isin(SEARCHED_MODES) != metric.fixed_load]
        if part.empty:
            continue
        frames.append(_long(part, metric, metric.column, nights))
    for metric in UNIT_METRICS:
        if metric.column not in ok.columns:
            continue
        part = ok[ok[metric.column].notna()].drop_duplicates(["run_id", *UNIT_KEY])
        if not part.empty:
            frames.append(_long(part.assign(workload=None, load_point=None), metric,
                                metric.column, nights))
    if "accuracy" in cells.columns:
        # accuracy does not depend on the perf cell's status: one value per variant and night
        acc = cells[cells["accuracy"].notna() & cells["run_id"].isin(nights.index)]
        acc = acc.drop_duplicates(["run_id", *VARIANT_KEY]).assign(workload=None,
                                                                   load_point=None)
        if not acc.empty:
            sizes = golden_sizes or {}
            frame = _long(acc, ACCURACY, "accuracy", nights)
            frame["binomial_n"] = [
                sizes.get((r, t, v, g)) for r, t, v, g in
                zip(acc["run_id"], acc["target"], acc["variant"], acc["golden_set"], strict=True)]
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["series_id", "night"]).reset_index(drop=True)[SERIES_COLUMNS]


def _long(part: pd.DataFrame, metric: Metric, column: str, nights: pd.DataFrame) -> pd.DataFrame:
    records = part.to_dict("records")
    return pd.DataFrame({
        "series_id": [series_id(r, metric.column) for r in records],
        "metric": metric.column,
        "direction": metric.direction,
        "night": nights.loc[part["run_id"], "night"].to_numpy(),
        "date": nights.loc[part["run_id"], "run_date"].to_numpy(),
        "value": part[column].astype(float).to_numpy(),
        "binomial_n": None,
        "run_id": part["run_id"].to_numpy(),
        "target": part["target"].to_numpy(),
        "stack": part["stack"].to_numpy(),
        "variant": part["variant"].to_numpy(),
        "workload": part["workload"].to_numpy(),
        "load_point": part["load_point"].to_numpy(),
    })
