"""What one night raises, from the committed history: the rows of the ``changes`` table.

- **regression / improvement**: a change point in a series (``trends.detect``), judged on the
  nights up to this one, its baseline starting after the last change already alerted for that
  series (or an annotation), so each change is raised once;
- **newly_failing**: a cell that was ``ok`` the night before and is not now (with its reason);
- **gate_failure**: a variant the quality gate failed tonight;
- **host_change**: a change with nothing recorded behind it that the other variants of the
  target show too (at least half of them), the same way, from the same night (by half to
  twice as much and beyond its own noise; one with a recorded change of its own then
  witnesses neither way): the host moved -- a busier or throttled machine, an unrecorded OS
  change --, not the variant. Said apart, once per series like a regression; a change one
  variant shows alone stays a regression, and so does one whose ratio to each like-moving
  variant moved too (``beyond_host``: it moved with the host and by more), said with its
  size beyond them. A cell with a host move so confirmed is on a moved
  host: its other statistics' changes from that night, the same way, with nothing recorded,
  are host changes too (a tail amplifies a host's move past the like-move share, and a
  variant of another kind -- f16 beside q8_0 -- moves its tail apart). A tail's change with
  nothing recorded behind it whose cell's typical request moves the same way, not yet judged,
  waits for that verdict (at most two nights past its first): it is the tail's too.

Each regression or improvement is **attributed**: the provenance of the night before the change
and of the change night is compared (engine version, launch args, model file, sampling, hardware
and CPU features, suite git sha, and the cell's own part of the sweep spec -- another variant's
knob is no cause of this one's change) and what changed is named -- a recorded change within
the detector's locate tolerance of its night is taken as the change night -- or, when nothing
recorded changed, it says so (the host or noise). Alerts that share a change night, a kind and
a cause are one **finding** (an engine upgrade that slows 40 series is one regression, not 40).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import pandas as pd

from servebench.config import TrendsSpec
from servebench.metric_catalogue import metric_label
from servebench.results.store import ResultStore
from servebench.trends.annotations import Annotation, reset_night
from servebench.trends.attribution import (
    NOTHING_CHANGED,
    WHERE,
    attribute,
    matching,
    recorded_change,
)
from servebench.trends.detect import DetectorSettings, noise_sigma
from servebench.trends.series import (
    ACCURACY,
    BY_COLUMN,
    CELL_KEY,
    build_series,
    detect_series,
    nightly_runs,
    series_detectability,
    series_id,
)

log = logging.getLogger(__name__)

HOST_CHANGED = ("the host: the target's other variants (those with no recorded change of "
                "their own) moved the same way from that night, and nothing recorded changed")
HOST_CELL = ("the host: this cell's {metrics} moved with the target's other variants from "
             "that night, the same way, and nothing recorded changed")
MOVES = ("regression", "improvement", "host_change")  # a series' change, raised once
# ... and one the same morning's relaunches did not reproduce (trends.confirm): a series' change
# still, drawn on its chart, but no restart of its baseline
SERIES_KINDS = (*MOVES, "unconfirmed")
HOST_SHARE = 0.5  # a sibling variant moved the same way by 0.5x to 2x as much
HOST_BEFORE_NIGHTS = 7  # the sibling's level before: the median of its last nights
BEYOND_HOST = ("its own, beyond the host's: {beyond:+.0f}% against the target's other "
               "variants, which moved {host:+.0f}% the same way from that night (it moved "
               "{moved:+.0f}%), and nothing recorded changed")
# a variant moved with its host (a like move) is its own change too where its ratio to each
# like-moving sibling moved from that night by this much and beyond that ratio's noise
BEYOND_MIN = 0.10
BEYOND_SIGMAS = 3.5
BEYOND_NIGHTS = 30  # the ratio's nights before that make its level and noise


class Judged(NamedTuple):
    """What the detect task attaches to a night: its ``changes`` rows (the alerts) and
    its ``detectability`` rows (what each series it judged can catch from tomorrow on)."""

    alerts: list[dict]
    detectability: list[dict]


def night_changes(store: ResultStore, run_id: str, *, annotations: Iterable[Annotation] = (),
                  settings: DetectorSettings | None = None) -> Judged:
    """The ``changes`` and ``detectability`` rows of committed run ``run_id``, judged
    with ``settings`` (default: the detector's, with the run's sweep's ``trends`` floor)."""
    runs, cells, series = load_nights(store, run_id)
    spec_json = runs["spec_json"].iloc[-1]
    s = settings or detector_settings(spec_json)
    tonight = int(runs["night"].iloc[-1])
    run_ids = runs["run_id"].tolist()
    earlier = store.read_table("changes", run_ids=run_ids[:-1]).to_pandas()
    night_of = dict(zip(runs["run_id"], runs["night"], strict=True))
    alerted = alerted_nights(earlier, night_of)
    dates = runs["run_date"].tolist()
    annotations = list(annotations)

    rows: list[dict] = []
    judged: list[tuple[dict, np.ndarray, int, int | None]] = []
    for sid, group in series.groupby("series_id", sort=True):
        if group["night"].iloc[-1] != tonight:
            continue  # no ok value tonight: nothing to judge (newly_failing says why)
        first = group.iloc[-1].to_dict()
        values = np.full(tonight + 1, np.nan)
        values[group["night"].to_numpy(dtype=int)] = group["value"].to_numpy(dtype=float)
        start = max(int(alerted.get(sid, 0)),
                    reset_night(annotations, first, dates))
        n = group["binomial_n"].dropna()
        count = int(n.iloc[-1]) if len(n) else None
        judged.append((first, values, start, count))
        change = detect_series(values, first["metric"], first["direction"], start=start,
                               binomial_n=count, settings=s)
        if change is None:
            continue
        if change.drastic and first["metric"] in TYPICAL and not _corroborated(
                cells, night_of, first, start, tonight, s):
            log.info("detect %s: %s jumped %+.0f%% tonight with the cell's median E2E and "
                     "tok/s unchanged: one statistic's night, not raised", run_id, sid,
                     100 * change.rel_change)
            continue
        # a drastic jump is tonight, exactly; a change found over several nights is placed to
        # within the detector's locate tolerance
        tolerance = 0 if change.drastic else s.locate_tolerance
        night, cause = attribute(cells, runs, first, change.night, lo=start, hi=tonight,
                                  tolerance=tolerance, values=values,
                                  lead=s.locate_tolerance if change.drastic else 0)
        before, after, rel_change = change.before, change.after, change.rel_change
        if abs(night - change.night) > tolerance:  # re-dated to a recorded change: its levels
            before = float(np.nanmedian(values[start:night]))
            after = float(np.nanmean(values[night:]))
            rel_change = after / before - 1 if before else math.nan
        kind = "regression" if change.worse else "improvement"
        if cause == NOTHING_CHANGED:
            hosts = _host_wide(series, cells, runs, first, night, rel_change, tonight, s)
            beyond = beyond_host(group, [h for h, _ in hosts], night) if hosts else None
            if beyond is not None and beyond * rel_change > 0:
                # it moved with the host, and by more than the host moved the others: its own
                host = float(np.median([moved for _, moved in hosts]))
                cause = BEYOND_HOST.format(beyond=100 * beyond, moved=100 * rel_change,
                                           host=100 * host)
            elif hosts:
                kind, cause = "host_change", HOST_CHANGED
        rows.append({
            "series_id": sid, **_where(first), "metric": first["metric"],
            "kind": kind,
            "before": before, "after": after,
            "change_pct": 100 * rel_change if math.isfinite(rel_change) else None,
            "z": change.z, "drastic": change.drastic and night == change.night,
            "change_date": runs["run_date"].iloc[night],
            "change_run_id": runs["run_id"].iloc[night],
            "nights_since": tonight - night + 1,
            "cause": cause,
        })
    _on_a_moved_host(rows, earlier, night_of, s.locate_tolerance)
    rows = _held_for_their_cell(rows, earlier, series, night_of, tonight, s)
    rows += _newly_failing(cells, runs, tonight)
    rows += _gate_failures(cells, run_id)
    group_findings(rows)
    log.info("detect %s: %d alerts (%s)", run_id, len(rows),
             pd.Series([r["kind"] for r in rows], dtype=str).value_counts().to_dict())
    return Judged(rows, _detectability(judged, rows, night_of, _trends(spec_json), s))


def alerted_nights(earlier: pd.DataFrame, night_of: dict[str, int]) -> dict[str, int]:
    """Each series' last change night raised before tonight (``earlier``: the nights before's
    ``changes``): where its baseline starts again."""
    return (earlier[earlier["kind"].isin(MOVES)]
            .assign(night=lambda f: f["change_run_id"].map(night_of))
            .groupby("series_id")["night"].max().to_dict())


def baseline_starts(store: ResultStore, runs: pd.DataFrame, series: pd.DataFrame,
                    annotations: Iterable[Annotation] = ()) -> dict[str, int]:
    """Where each series' baseline starts tonight, as ``night_changes`` judges it: after its
    last change raised on an earlier night, or an annotation's reset."""
    night_of = dict(zip(runs["run_id"], runs["night"], strict=True))
    earlier = store.read_table("changes", run_ids=runs["run_id"].tolist()[:-1]).to_pandas()
    alerted = alerted_nights(earlier, night_of)
    dates, annotations = runs["run_date"].tolist(), list(annotations)
    return {sid: max(int(alerted.get(sid, 0)),
                     reset_night(annotations, group.iloc[-1].to_dict(), dates))
            for sid, group in series.groupby("series_id", sort=True)}


def _detectability(judged: list[tuple[dict, np.ndarray, int, int | None]],
                   alerts: list[dict], night_of: dict[str, int], trends: TrendsSpec,
                   s: DetectorSettings) -> list[dict]:
    """A ``detectability`` row for each series judged tonight: what it can catch from
    tomorrow on, its baseline starting where the detector's will (after a change raised
    tonight, at its night), and the step the sweep asks it to catch (``goal``)."""
    restarted = {r["series_id"]: night_of[r["change_run_id"]] for r in alerts
                 if r["kind"] in MOVES}
    out = []
    for first, values, start, count in judged:
        sid = first["series_id"]
        found = series_detectability(values, first["metric"], first["direction"],
                                     start=max(start, restarted.get(sid, start)),
                                     binomial_n=count, settings=s)
        level = found.level if found else float(values[-1])
        out.append({"series_id": sid, **_where(first), "metric": first["metric"],
                    "nights": found.nights if found else None, "level": level,
                    "noise": found.sigma if found else None,
                    "autocorr": found.rho if found else None,
                    "binomial_n": count, "detectable": found.step if found else None,
                    "goal": detect_goal(trends, first["metric"], level)})
    return out


def detect_goal(trends: TrendsSpec, metric: str, level: float) -> float | None:
    """The worse step, relative to ``level``, the sweep asks a series of ``metric`` to catch
    within three nights: ``trends.detect_at_least``; for accuracy its
    ``detect_accuracy_drop`` points at that level."""
    if metric != ACCURACY.column:
        return trends.detect_at_least
    return trends.detect_accuracy_drop / 100 / level if level else None


def detector_settings(spec_json: str | None) -> DetectorSettings:
    """The detector's settings for a run of the sweep whose spec is ``spec_json``: the
    measured defaults, with the sweep's ``trends.min_change`` as the smallest change raised."""
    return dataclasses.replace(DetectorSettings(), min_rel_change=max(
        DetectorSettings.min_rel_change, _trends(spec_json).min_change))


def _trends(spec_json: str | None) -> TrendsSpec:
    """The ``trends`` section of a run's stored spec (its defaults where it has none)."""
    spec = json.loads(spec_json) if isinstance(spec_json, str) and spec_json else {}
    return TrendsSpec.model_validate(spec.get("trends") or {})


def load_nights(store: ResultStore, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame,
                                                         pd.DataFrame]:
    """(runs, cells, series) of the nights of ``run_id``'s sweep and DAG up to it, numbered
    0..tonight: what the detector judges, and what the digest's charts draw."""
    all_runs = store.read_table("runs").to_pandas()
    this = all_runs[all_runs["run_id"] == run_id]
    if this.empty:
        raise ValueError(f"run {run_id!r} is not committed")
    this = this.iloc[0]
    runs = nightly_runs(all_runs, this["sweep_name"], this["dag_id"], include=run_id)
    tonight = int(runs.loc[runs["run_id"] == run_id, "night"].iloc[0])
    runs = runs[runs["night"] <= tonight]  # a re-run of an old night sees only its past
    run_ids = runs["run_id"].tolist()
    cells = store.read_table("cells", run_ids=run_ids).to_pandas()
    evals = store.read_table("evals", run_ids=run_ids,
                             columns=["run_id", "target", "variant", "golden_set"]).to_pandas()
    sizes = evals.groupby(["run_id", "target", "variant", "golden_set"]).size().to_dict()
    return runs, cells, build_series(cells, runs, sizes)


# A same-night (drastic) jump of a cell's statistic (never a tail's: series.same_night) is
# raised only when the cell's typical request agrees: its median E2E or its throughput. Seen
# in the local proof on llama-server: nights of TTFT p50 -38% at the same E2E and tok/s (time
# shifted between the parts of a request). A tail is no witness: a host's stalled second gave
# E2E p95 +37% with the median +17% (and ITL p95 x2.5). A disaster moves the typical request.
# (TYPICAL: the typical request's statistics of a cell; a tail moving with them also waits
# for their verdict, _held_for_their_cell.)
TYPICAL = ("ttft_ms_p50", "tpot_ms_p50", "output_throughput", "goodput",
           "cost_per_1m_output_tokens")
WITNESSES = (("e2e_ms_p50", 1.0), ("output_throughput", -1.0))


def _corroborated(cells: pd.DataFrame, night_of: dict[str, int], row: dict, start: int,
                  tonight: int, s: DetectorSettings) -> bool:
    """Whether a typical-request statistic of ``row``'s cell (E2E p50, output tok/s; not the
    alert's own) is worse tonight than on its nights since ``start`` by
    ``outlier_sigmas`` of their own noise and by ``witness_rel`` of their level."""
    mask = (cells["status"] == "ok") & matching(cells, row, WHERE)
    mine = cells[mask].assign(night=lambda f: f["run_id"].map(night_of))
    mine = mine[mine["night"] >= start].sort_values("night")
    before, now = mine[mine["night"] < tonight], mine[mine["night"] == tonight]
    if now.empty or len(before) < 4:
        return True  # too little to tell: the jump stands
    for column, worse in WITNESSES:
        if column == row["metric"] or column not in mine.columns:
            continue
        values = before[column].dropna().to_numpy(dtype=float)
        tonight_value = now[column].iloc[0]
        if len(values) < 4 or pd.isna(tonight_value):
            continue
        base = float(np.median(values))
        moved = worse * (tonight_value - base)
        if moved > s.outlier_sigmas * max(noise_sigma(values), abs(base) * 1e-3) \
                and moved > s.witness_rel * abs(base):
            return True
    return False




def _host_wide(series: pd.DataFrame, cells: pd.DataFrame, runs: pd.DataFrame, row: dict,
               night: int, rel_change: float, tonight: int, s: DetectorSettings
               ) -> list[tuple[pd.DataFrame, float]]:
    """The other variants of ``row``'s target that show its change too (each one's series and
    relative move), where they are enough to say the host moved (else none): at least half of
    them (and one) the same metric, workload and load point, from ``night`` (the median since
    against the median of its nights before) the same way, by HOST_SHARE to 1/HOST_SHARE
    times as much (a like move, so each variant's alert reads the other the same way) and by
    more than its own noise. Half, not all: a host's drift reaches the variants, measured
    minutes apart, at different nights (seen in the local proof: the untouched q8_0's TPOT
    p50 +32% and the slowed variant's +42% before its cut from one night, the f16's +8% from
    it, its rise having begun four nights earlier). A variant with a recorded change of its
    own near that night (a slowdown under test, an upgrade) witnesses neither way and is left
    out; none without a witness left, or with one too short to tell."""
    if row["metric"] == "accuracy" or not math.isfinite(rel_change) or rel_change == 0:
        return []
    mask = ((series["target"] == row["target"]) & (series["metric"] == row["metric"])
            & (series["workload"] == row["workload"])
            & (series["load_point"] == row["load_point"]) & (series["variant"] != row["variant"]))
    witnesses, alike = 0, []
    for _, sibling in series[mask].groupby("variant", sort=False):
        _, cause = attribute(cells, runs, sibling.iloc[-1].to_dict(), night, lo=0,
                              hi=tonight, tolerance=s.locate_tolerance)
        if cause != NOTHING_CHANGED:  # its own move, if any, has a recorded cause
            continue
        shift = _shift(sibling, night)
        if shift is None:
            return []
        witnesses += 1
        base, level, noise = shift
        moved = level / base - 1 if base else math.nan
        if (math.isfinite(moved) and moved * rel_change > 0
                and HOST_SHARE <= moved / rel_change <= 1 / HOST_SHARE
                and abs(level - base) > 2 * noise):
            alike.append((sibling, moved))
    return alike if alike and 2 * len(alike) >= witnesses else []


def beyond_host(mine: pd.DataFrame, hosts: list[pd.DataFrame], night: int) -> float | None:
    """How far a series (``mine``: its nights, ``night`` and ``value``) moved from ``night``
    beyond the variants that moved with it (``hosts``, ``_host_wide``'s): its ratio to each
    one's value night by night, the median from ``night`` on against the median of up to
    BEYOND_NIGHTS nights before -- what the host did to both cancels in the ratio --, the
    smallest such move of the ratios; None unless every ratio moved the same way, by at
    least BEYOND_MIN and by BEYOND_SIGMAS of its error (the ratio's night-to-night
    robust sigma over the root of the nights on either side). The ratios must agree with
    each other; the caller asks that they agree with the series' own change too: a variant
    that slowed with its host by more than the host slowed it is its own regression, said
    with that size.
    ``tests/unit/trends/test_beyond_host.py`` holds its false alarms on like-moving nulls and
    its catch of an injected step."""
    moves = []
    for sibling in hosts:
        both = mine[["night", "value"]].merge(sibling[["night", "value"]], on="night",
                                              suffixes=("", "_host"))
        ratio = (both["value"] / both["value_host"]).to_numpy(dtype=float)
        nights = both["night"].to_numpy()
        before = ratio[nights < night][-BEYOND_NIGHTS:]
        after = ratio[nights >= night]
        if len(before) < 4 or len(after) == 0:
            return None
        base, level = float(np.median(before)), float(np.median(after))
        error = noise_sigma(before) * math.sqrt(1 / len(after) + 1 / len(before))
        if abs(level - base) <= max(BEYOND_SIGMAS * error, BEYOND_MIN * base):
            return None
        moves.append(level / base - 1)
    if not moves or not (all(m > 0 for m in moves) or all(m < 0 for m in moves)):
        return None
    return min(moves, key=abs)


def _on_a_moved_host(rows: list[dict], earlier: pd.DataFrame, night_of: dict[str, int],
                     tolerance: int) -> None:
    """Make ``rows``' changes with nothing recorded behind them host changes where their cell
    has a host change (``_host_wide``, tonight or raised before) of another statistic, the
    same way (worse or better) and from the same night to within ``tolerance``: the host
    moved the whole cell, and this statistic moved with it by more, or apart from the target's
    other variants' (seen in the local proof: a faster host's nights, the untouched q8_0's
    TPOT p50 -10% with the f16 baseline's, its ITL p95 -35% while the f16's stayed)."""
    hosts = [r for r in rows if r["kind"] == "host_change"]
    hosts += earlier[earlier["kind"] == "host_change"].to_dict("records")
    for row in rows:
        if row["kind"] not in ("regression", "improvement") or row["cause"] != NOTHING_CHANGED:
            continue
        night = night_of[row["change_run_id"]]
        confirmed = sorted({
            h["metric"] for h in hosts
            if h["metric"] != row["metric"] and _where(h) == _where(row)
            and abs(night_of.get(h["change_run_id"], math.inf) - night) <= tolerance
            and _worse(h) == (row["kind"] == "regression")})
        if confirmed:
            row["kind"] = "host_change"
            row["cause"] = HOST_CELL.format(metrics=", ".join(map(metric_label, confirmed)))


def _held_for_their_cell(rows: list[dict], earlier: pd.DataFrame, series: pd.DataFrame,
                         night_of: dict[str, int], tonight: int,
                         s: DetectorSettings) -> list[dict]:
    """``rows`` less the tail changes (a p95) with nothing recorded behind them whose cell's
    typical request (TYPICAL) moves the same way, worse or better, from their night (to within
    the locate tolerance) beyond its noise and has not been judged yet (no alert of it since
    then, tonight's included): the typical statistic's verdict -- the host, or the variant --
    is the tail's too (``_on_a_moved_host``), so the tail waits for it rather than be raised
    the other way first. Seen in the local proof: the host ~50% slower for two variants, the
    untouched q8_0's TPOT p95 +53% raised as a regression the night before its TPOT p50 +70%
    was said as a host change with the f16's. Held at most ``locate_tolerance`` nights past
    the first night it could be raised (``min_nights_after``), then raised as it stands; each
    night held is logged."""
    limit = s.min_nights_after + s.locate_tolerance
    judged = [r for r in rows if r["kind"] in MOVES]
    judged += earlier[earlier["kind"].isin(MOVES)].to_dict("records")
    kept = []
    for row in rows:
        metric = BY_COLUMN.get(row["metric"])
        if (row["kind"] not in ("regression", "improvement") or row["cause"] != NOTHING_CHANGED
                or metric is None or not metric.tail or row["nights_since"] >= limit):
            kept.append(row)
            continue
        night = night_of[row["change_run_id"]]
        verdicts = {j["metric"] for j in judged if _where(j) == _where(row)
                    and night_of.get(j["change_run_id"], -math.inf) >= night - s.locate_tolerance}
        starts = range(max(night - s.locate_tolerance, 1),
                       min(night + s.locate_tolerance, tonight) + 1)
        moving = [m for m in TYPICAL if m not in verdicts and _moved_from(
            series, row, m, starts, worse=row["kind"] == "regression")]
        if not moving:
            kept.append(row)
            continue
        log.info("detect: %s %+.0f%% since %s (nothing recorded) held: its cell's %s moved "
                 "the same way, with no verdict yet (the host, or the variant)", row["series_id"],
                 row["change_pct"] or 0, row["change_date"],
                 ", ".join(map(metric_label, moving)))
    return kept


def _moved_from(series: pd.DataFrame, row: dict, metric: str, nights: range, *,
                worse: bool) -> bool:
    """Whether ``row``'s cell's ``metric`` stands off its level before one of ``nights`` (the
    median of its last HOST_BEFORE_NIGHTS nights before it) on the ``worse`` (or better) side
    from that night on: the median since, beyond twice the noise of such a median."""
    mine = series[(series["metric"] == metric) & matching(series, row, WHERE)]
    sign = BY_COLUMN[metric].worse_sign * (1 if worse else -1)
    for start in nights:
        shift = _shift(mine, start)
        if shift is not None and sign * (shift[1] - shift[0]) > 2 * shift[2]:
            return True
    return False


def _shift(series: pd.DataFrame, night: int) -> tuple[float, float, float] | None:
    """(level before, level since, noise of that level) of one series' nights (``night``,
    ``value``) around ``night``: the median of its last HOST_BEFORE_NIGHTS nights before it,
    the median of its nights from it on, the first's noise over the root of the second's
    count. None with fewer than 4 nights before or none since: too short to tell."""
    before = series[series["night"] < night].tail(HOST_BEFORE_NIGHTS)["value"]
    after = series[series["night"] >= night]["value"]
    if len(before) < 4 or after.empty:
        return None
    noise = noise_sigma(before.to_numpy(dtype=float)) / math.sqrt(len(after))
    return float(before.median()), float(after.median()), noise


def _worse(row: dict) -> bool:
    """Whether an alert's change is the worse way for its metric."""
    return (row.get("change_pct") or 0) * BY_COLUMN[row["metric"]].worse_sign > 0


def _where(row: dict) -> dict:
    return {k: row.get(k) for k in WHERE}


def _newly_failing(cells: pd.DataFrame, runs: pd.DataFrame, tonight: int) -> list[dict]:
    if tonight == 0:
        return []
    now = cells[cells["run_id"] == runs["run_id"].iloc[tonight]]
    before = cells[cells["run_id"] == runs["run_id"].iloc[tonight - 1]]
    was_ok = {tuple(r[k] for k in CELL_KEY) for r in before[before["status"] == "ok"]
              .to_dict("records")}
    rows = []
    for cell in now[now["status"] != "ok"].to_dict("records"):
        if tuple(cell[k] for k in CELL_KEY) not in was_ok:
            continue
        rows.append({"series_id": series_id(cell, "status"), **_where(cell),
                     "metric": "status", "kind": "newly_failing",
                     "change_date": runs["run_date"].iloc[tonight],
                     "change_run_id": runs["run_id"].iloc[tonight], "nights_since": 1,
                     "reason": f"{cell['status']}: {cell.get('reason')}",
                     "cause": recorded_change(cells, runs, cell, tonight)})
    return rows


def _gate_failures(cells: pd.DataFrame, run_id: str) -> list[dict]:
    now = cells[(cells["run_id"] == run_id) & (cells["gate_verdict"] == "fail")]
    rows = []
    for cell in now.drop_duplicates(["target", "variant"]).to_dict("records"):
        where = {**_where(cell), "workload": None, "load_point": None}
        rows.append({"series_id": series_id({**cell, **where}, "gate"), **where,
                     "metric": "accuracy", "kind": "gate_failure", "after": cell.get("accuracy"),
                     "change_date": cell.get("run_date"), "change_run_id": run_id,
                     "nights_since": 1, "reason": cell.get("gate_reason")})
    return rows


def group_findings(rows: list[dict]) -> None:
    """Set ``finding``: one id per (kind, change night, cause)."""
    for row in rows:
        key = f"{row['kind']}|{row.get('change_run_id')}|{row.get('cause')}"
        row["finding"] = hashlib.sha256(key.encode()).hexdigest()[:10]
