"""The night's suspects, and the same morning's verdict on each from interleaved relaunches
(``bench.confirm`` measures them; docs/trends.md, "Confirmed the same morning").

A **suspect** is a cell series judged tonight that is worse than its baseline beyond its
noise (``confirm.suspect_sigmas`` of its nights' robust sigma, and by ``trends.min_change``)
-- its own value, or its ratio to its target's baseline variant the same night --
whether the detector raised it or not, or any regression, improvement or host change raised
tonight (an improvement is asked whether it holds, as a regression is: on a noisy host a
slow baseline makes one as easily). Its
variant is relaunched ``launches`` times interleaved with a **reference** -- a variant of its
target with nothing recorded changed, its baseline first -- on the same host (ABBA), and only
its suspect cells are measured. The verdict comes from tonight's launches alone: each
relaunch pair's log ratio (suspect / reference) against the same ratio over the baseline's
nights, a t-interval over the pairs (the launch-to-launch variance), widened by the
uncertainty of the baseline's ratio."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

from servebench.metric_catalogue import BY_COLUMN, metric_label, shown_in
from servebench.trends.attribution import NOTHING_CHANGED, recorded_change
from servebench.trends.detect import noise_sigma, robust_sigma_df

# the series a quiet night can make a suspect of: the typical request's (a tail's one night
# is the host's stalled second more often than not; it is re-measured when raised)
SUSPECT_METRICS = tuple(m.column for m in shown_in("suspect"))
ALERT_KINDS = ("regression", "improvement", "host_change")  # raised tonight: re-measured
MIN_BASELINE = 5  # nights before a quiet series' night can make it a suspect
# a night this many of its nights' sigmas beyond its relaunches' worst case does not reproduce
DISMISS_SIGMAS = 2.0

Verdict = Literal["confirmed", "host", "dismissed", "inconclusive", "over_budget",
                  "not_measured"]
VERDICTS: tuple[str, ...] = Verdict.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Suspect:
    """One series to re-measure: where, what tonight showed against its baseline."""

    series_id: str
    target: str
    stack: str
    variant: str
    workload: str
    load_point: str
    metric: str
    source: Literal["alert", "suspect"]
    value: float  # tonight's
    # the baseline's median; for a suspect ``against`` a variant, what tonight's value would
    # have been at the baseline nights' ratio to it
    level: float
    noise: float  # its robust per-night sigma (against a variant: the ratio's, scaled)
    start: int  # the baseline's first night
    night: int  # the change night (an alert's) or tonight
    alert_kind: str | None = None
    better: bool = False  # raised as better than its baseline: is it?
    # how far off tonight was, in its nights' sigmas: its own value, and its ratio to its
    # target's baseline variant the same night (None: no such ratio; see find_suspects)
    sigmas: float | None = None
    relative_sigmas: float | None = None
    against: str | None = None  # the baseline variant whose same night made it a suspect

    @property
    def sign(self) -> float:
        """+1 where the metric's higher values are the way the suspect moved, else -1."""
        return BY_COLUMN[self.metric].worse_sign * (-1.0 if self.better else 1.0)

    @property
    def moved(self) -> float:
        """Tonight's change against the baseline, positive the way it was raised (worse;
        better for an improvement), a log ratio."""
        return self.sign * math.log(self.value / self.level)

    @property
    def cell(self) -> tuple[str, str]:
        return self.workload, self.load_point


@dataclass(frozen=True)
class _Relative:
    """Tonight's ratio of a series to its target's baseline variant, against the ratio's
    baseline nights: ``sigmas`` of its robust sigma (``sigma``, a log) the worse way, its
    move ``log_move`` (a log, unsigned)."""

    sigmas: float
    log_move: float
    sigma: float


def _relative(series: pd.DataFrame, last: pd.Series, group: pd.DataFrame,
              baseline: str | None, start: int, tonight: int,
              worse_sign: float) -> _Relative | None:
    """How far tonight's ratio of the series to the same cell and metric of its target's
    ``baseline`` variant lies from that ratio's median over the baseline nights; None where
    there is no such ratio (the baseline itself, fewer than ``MIN_BASELINE`` shared nights).
    The host's night hits both variants alike, so the ratio is the quieter series where the
    host's nights move more than a launch does (docs/trends.md, "Confirmed the same
    morning")."""
    if baseline is None or last["variant"] == baseline:
        return None
    ref = _cell_series(series, last, baseline)
    measured = ref[ref["night"] == tonight]["series_id"]
    if measured.empty:
        return None
    # the one measured tonight: a series is bound to its hardware, as the suspect's is
    ref = ref[ref["series_id"] == measured.iloc[0]]
    both = pd.merge(group[group["night"] >= start][["night", "value"]],
                    ref[["night", "value"]], on="night", suffixes=("", "_ref"))
    both = both[(both["value"] > 0) & (both["value_ref"] > 0)]
    logs = np.log(both["value"].to_numpy(dtype=float) / both["value_ref"].to_numpy(dtype=float))
    nights = both["night"].to_numpy()
    before, now = logs[nights < tonight], logs[nights == tonight]
    if len(before) < MIN_BASELINE or len(now) != 1:
        return None
    log_move, sigma = float(now[0] - np.median(before)), max(noise_sigma(before), 1e-3)
    return _Relative(worse_sign * log_move / sigma, log_move, sigma)


def find_suspects(series: pd.DataFrame, alerts: list[dict], starts: dict[str, int],
                  night_of: dict[str, int], tonight: int, *, sigmas: float,
                  min_change: float, baselines: dict[str, str] | None = None) -> list[Suspect]:
    """Tonight's suspects, alerts first, then the most sigmas off first. ``starts``: each
    series' baseline start as the detector had it; ``alerts`` tonight's ``changes`` rows;
    ``baselines``: each target's baseline variant, whose same night a quiet series of the
    target's other variants is also judged against (its ratio to it beyond ``sigmas`` of the
    ratio's nights: the variant moved more than its host)."""
    raised = {a["series_id"]: a for a in alerts
              if a.get("kind") in ALERT_KINDS and a.get("workload") is not None}
    baselines = baselines or {}
    out: list[tuple[float, Suspect]] = []
    for sid, group in series.groupby("series_id", sort=True):
        last = group.iloc[-1]
        metric = BY_COLUMN.get(last["metric"])
        if last["night"] != tonight or metric is None or metric.level != "cell" \
                or last["workload"] is None or pd.isna(last["workload"]):
            continue
        alert = raised.get(sid)
        if alert is None and last["metric"] not in SUSPECT_METRICS:
            continue
        night = night_of.get(alert["change_run_id"], tonight) if alert else tonight
        start = starts.get(sid, 0)
        before = group[(group["night"] >= start) & (group["night"] < night)]["value"]
        before = before.to_numpy(dtype=float)
        value = float(last["value"])
        if alert is not None and not pd.isna(alert.get("before")):
            level = float(alert["before"])
        elif len(before) >= MIN_BASELINE:
            level = float(np.median(before))
        else:
            continue
        if level <= 0 or value <= 0:
            continue
        noise = noise_sigma(before) if len(before) >= 4 else 0.0
        worse = metric.worse_sign * (value - level)
        better = alert is not None and (alert["kind"] == "improvement" or (
            alert["kind"] == "host_change" and worse < 0))
        z = worse / max(noise, abs(level) * 1e-3)
        rel = _relative(series, last, group, baselines.get(last["target"]), start, tonight,
                        metric.worse_sign) if alert is None else None
        own = z > sigmas and worse > min_change * abs(level)
        against = rel is not None and rel.sigmas > sigmas \
            and metric.worse_sign * rel.log_move > math.log1p(min_change)
        if alert is None and not own:
            if not against:
                continue
            # held to the baseline variant's night: the value that night implied, and the
            # ratio's noise at that level
            level = value * math.exp(-rel.log_move)
            noise = rel.sigma * level
        out.append(((0 if alert else 1, -max(z, rel.sigmas if rel else 0.0)), Suspect(
            series_id=sid, target=last["target"], stack=last["stack"],
            variant=last["variant"], workload=last["workload"],
            load_point=last["load_point"], metric=last["metric"],
            source="alert" if alert else "suspect", value=value, level=level, noise=noise,
            start=start, night=night, alert_kind=alert["kind"] if alert else None,
            better=better, sigmas=z, relative_sigmas=rel.sigmas if rel else None,
            against=baselines[last["target"]] if alert is None and not own else None)))
    return [s for _, s in sorted(out, key=lambda pair: pair[0])]


@dataclass
class Session:
    """One suspect variant's relaunches against its reference: every suspect of that
    variant, the cells they need (each measured once per launch)."""

    target: str
    variant: str
    reference: str | None
    suspects: list[Suspect] = field(default_factory=list)
    estimate_s: float = 0.0
    why_no_reference: str | None = None

    @property
    def cells(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(s.cell for s in self.suspects))


def sessions_for(suspects: list[Suspect], variants: dict[str, list[str]],
                 cells: pd.DataFrame, runs: pd.DataFrame) -> list[Session]:
    """The suspects grouped by variant, in the order of their first suspect, each with its
    reference: the first of its target's ``variants`` (baseline first) other than itself
    whose cells tonight are ok on every suspect cell and whose provenance recorded no change
    from the suspects' change nights to tonight (a reference that changed too cannot tell
    the variant from the change); None, with why, where none is left."""
    out: dict[tuple[str, str], Session] = {}
    for s in suspects:
        session = out.get((s.target, s.variant))
        if session is None:
            session = out[(s.target, s.variant)] = Session(s.target, s.variant, None)
        session.suspects.append(s)
    tonight_run = runs["run_id"].iloc[-1]
    tonight = cells[cells["run_id"] == tonight_run]
    for session in out.values():
        nights = sorted({s.night for s in session.suspects})
        why = "the target has no other variant"
        for name in variants.get(session.target, []):
            if name == session.variant:
                continue
            mine = tonight[(tonight["target"] == session.target)
                           & (tonight["variant"] == name)]
            ok = {(w, p) for w, p, st in zip(mine["workload"], mine["load_point"],
                                             mine["status"], strict=True) if st == "ok"}
            if not set(session.cells) <= ok:
                why = f"{name}'s cells were not ok tonight"
                continue
            row = mine.iloc[0].to_dict()
            if any(recorded_change(cells, runs, row, n) != NOTHING_CHANGED
                   for n in range(min(nights), len(runs))):
                why = f"{name}'s own provenance changed"
                continue
            session.reference = name
            break
        session.why_no_reference = None if session.reference else why
    return list(out.values())


def estimate_s(session: Session, units: pd.DataFrame, cells: pd.DataFrame,
               launches: int) -> float:
    """Seconds ``session`` will take: ``launches`` relaunches of each side, priced at
    tonight's launch, warm-up and stop of each and its suspect cells' measured seconds."""
    total = 0.0
    for variant in filter(None, (session.variant, session.reference)):
        unit = units[(units["target"] == session.target) & (units["variant"] == variant)]
        mine = cells[(cells["target"] == session.target) & (cells["variant"] == variant)]
        picked = mine[[(w, p) in session.cells for w, p in
                       zip(mine["workload"], mine["load_point"], strict=True)]]
        fixed = 0.0
        if not unit.empty:
            u = unit.iloc[0]
            share = len(picked) / max(len(mine), 1)
            fixed = sum(_num(u.get(k)) for k in ("load_s", "stop_s")) \
                + share * _num(u.get("warmup_s"))
        total += launches * (fixed + float(picked["duration_s"].fillna(0).sum()))
    return total


def within_budget(sessions: list[Session], budget_s: float) -> tuple[list[Session],
                                                                      list[Session]]:
    """(the sessions that fit ``budget_s``, in order, the rest): a session is skipped, not
    the ones after it, when it alone would overrun what is left."""
    kept, over, left = [], [], budget_s
    for session in sessions:
        if session.estimate_s <= left:
            kept.append(session)
            left -= session.estimate_s
        else:
            over.append(session)
    return kept, over


def _num(v) -> float:
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


@dataclass(frozen=True)
class Judgement:
    """A suspect's verdict; effects are the metric's own relative change (+0.14: 14% higher),
    the interval's ends in the same terms."""

    verdict: Verdict
    words: str
    change: float | None = None
    low: float | None = None
    high: float | None = None
    level_change: float | None = None  # the suspect's relaunches against its nights
    reference_change: float | None = None  # the reference's relaunches against its nights
    pairs: int = 0


def t_interval(values: list[float], extra_se: float = 0.0, extra_df: float = math.inf,
               confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` with a two-sided t-interval from their own
    spread, its standard error widened by ``extra_se`` (an independent error of the mean's
    reference point, known to ``extra_df`` degrees of freedom). The t's degrees of freedom
    are Welch-Satterthwaite's for the two errors together: a reference point known from a
    week of nights does not take the few relaunches' t. Infinite ends below two values."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, -math.inf, math.inf
    own = float(np.var(values, ddof=1)) / len(values)
    se = math.sqrt(own + extra_se ** 2)
    df: float = len(values) - 1
    if extra_se > 0:
        spread = own ** 2 / df + (extra_se ** 4 / extra_df if extra_df < math.inf else 0.0)
        # both errors known exactly (relaunches alike, a reference point of infinite df)
        df = se ** 4 / spread if spread > 0 else math.inf
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return mean, mean - half, mean + half


def _history(series: pd.DataFrame, sid: str) -> pd.Series:
    mine = series[series["series_id"] == sid]
    return pd.Series(mine["value"].to_numpy(dtype=float), index=mine["night"].to_numpy())


def _cell_series(series: pd.DataFrame, of, variant: str) -> pd.DataFrame:
    """The rows of ``variant``'s series of the same target, cell and metric as ``of`` (a
    Suspect or a series row)."""
    return series[(series["target"] == of.target) & (series["variant"] == variant)
                  & (series["workload"] == of.workload)
                  & (series["load_point"] == of.load_point)
                  & (series["metric"] == of.metric)]


def reference_series_id(series: pd.DataFrame, suspect: Suspect, reference: str) -> str | None:
    """The reference variant's series of the suspect's cell and metric (same hardware)."""
    mine = _cell_series(series, suspect, reference)
    return None if mine.empty else str(mine["series_id"].iloc[-1])


def suspect_nights(series: pd.DataFrame, suspect: Suspect, nights: int) -> np.ndarray:
    """The suspect's series as it made it a suspect, one value a night (NaN: none): its own
    values, or for a suspect ``against`` a variant its ratio to that variant's series the
    same night -- what ``attribution.attribute`` reads for where its move began."""
    def by_night(sid: str | None) -> np.ndarray:
        out = np.full(nights, np.nan)
        if sid is not None:
            mine = _history(series, sid)
            out[mine.index.to_numpy(dtype=int)] = mine.to_numpy()
        return out

    values = by_night(suspect.series_id)
    if suspect.against is None:
        return values
    ref = by_night(reference_series_id(series, suspect, suspect.against))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ref > 0, values / ref, np.nan)


def _median_error(logs: np.ndarray) -> tuple[float, float]:
    """The standard error of the median of ``logs`` (the baseline nights' ratio) and the
    degrees of freedom it is known to: a robust sigma's from 4 nights, else the plain
    standard deviation's."""
    if len(logs) >= 4:
        return 1.2533 * noise_sigma(logs) / math.sqrt(len(logs)), robust_sigma_df(len(logs))
    return float(np.std(logs, ddof=1)) / math.sqrt(len(logs)), len(logs) - 1.0


def _pct(log_change: float) -> float:
    return math.expm1(log_change)


def judge(suspect: Suspect, values: list[float], ref_values: list[float] | None,
          series: pd.DataFrame, reference: str | None, *, min_change: float,
          launches: int) -> Judgement:
    """The verdict on ``suspect`` from its relaunches' ``values`` and, paired launch by
    launch, its reference's (``ref_values``; None without a reference):

    confirmed     the interval of its move (worse; better for an improvement) against the
                  reference (else against its own nights) is above 0 and its mean at least
                  ``min_change``
    host          not so against the reference, but both sides moved that way against
                  their own nights: the host, not the variant
    dismissed     the interval's far end is under ``min_change``, or under what tonight's
                  night showed by more than ``DISMISS_SIGMAS`` of its nights' noise: that
                  night does not reproduce (one launch's excursion)
    inconclusive  otherwise (more relaunches would tell)
    """
    sign, floor = suspect.sign, math.log1p(min_change)
    label = metric_label(suspect.metric)
    history = _history(series, suspect.series_id)
    base = history[(history.index >= suspect.start) & (history.index < suspect.night)]
    # its relaunches against its own nights (a suspect ``against`` a variant has its level
    # from that variant's night)
    own_level = float(np.median(base)) if suspect.against and len(base) else suspect.level
    level_d = [sign * math.log(v / own_level) for v in values if v and v > 0]
    level_mean = float(np.mean(level_d)) if level_d else None
    pairs: list[float] = []
    extra_se, extra_df, ref_level_d = 0.0, math.inf, []
    against = "against its own nights (no reference: {why})"
    sid = reference_series_id(series, suspect, reference) if reference else None
    if reference and ref_values is not None and sid is not None:
        ref_hist = _history(series, sid)
        both = pd.concat([base, ref_hist], axis=1, join="inner").dropna()
        both = both[(both.iloc[:, 0] > 0) & (both.iloc[:, 1] > 0)]
        if len(both) >= 3:
            logs = np.log(both.iloc[:, 0].to_numpy() / both.iloc[:, 1].to_numpy())
            q0 = float(np.median(logs))
            extra_se, extra_df = _median_error(logs)
            pairs = [sign * (math.log(v / r) - q0) for v, r in zip(values, ref_values,
                                                                   strict=True)
                     if v and r and v > 0 and r > 0]
            ref_level = float(np.median(ref_hist[(ref_hist.index >= suspect.start)
                                                 & (ref_hist.index < suspect.night)]))
            ref_level_d = [sign * math.log(r / ref_level) for r in ref_values if r and r > 0]
            against = f"against {reference}"
    if not pairs:  # no reference, or no history of its ratio: the suspect's own nights
        pairs = level_d
        own_noise = noise_sigma(base.to_numpy(dtype=float)) / own_level if suspect.against \
            else suspect.noise / suspect.level
        extra_se = 1.2533 * own_noise / math.sqrt(max(len(base), 1))
        extra_df = robust_sigma_df(len(base))
        if "{why}" in against:
            against = against.format(why=reference and "its ratio has no history"
                                     or "none usable")
    if len(pairs) < 2:
        return Judgement("inconclusive", f"inconclusive: {len(pairs)} of {launches} "
                         f"relaunches measured {label}", pairs=len(pairs),
                         level_change=_pct(sign * level_mean) if level_mean is not None
                         else None)
    mean, lo, hi = t_interval(pairs, extra_se, extra_df)
    each = f"{launches} relaunches each side" if ref_level_d else f"{launches} relaunches"

    def shown(d: float) -> str:
        return f"{100 * _pct(sign * d):+.0f}"

    ends = sorted((shown(lo), shown(hi)), key=float)
    told = f"{label} {shown(mean)}% [{ends[0]}, {ends[1]}] {against}, {each}"
    ref_mean = float(np.mean(ref_level_d)) if ref_level_d else None
    result = {"change": _pct(sign * mean), "low": _pct(sign * (lo if sign > 0 else hi)),
              "high": _pct(sign * (hi if sign > 0 else lo)),
              "level_change": _pct(sign * level_mean) if level_mean is not None else None,
              "reference_change": _pct(sign * ref_mean) if ref_mean is not None else None,
              "pairs": len(pairs)}
    if lo > 0 and mean >= floor:
        return Judgement("confirmed", f"confirmed: {told}", **result)
    if ref_level_d and len(level_d) >= 2 and len(ref_level_d) >= 2:
        _, level_lo, _ = t_interval(level_d)
        _, ref_lo, _ = t_interval(ref_level_d)
        if level_lo > 0 and ref_lo > 0:
            way = "faster" if suspect.better else "slower"
            return Judgement("host", f"the host: {told}; both sides {way} than their "
                             f"nights ({label} {shown(level_mean)}% and "
                             f"{shown(ref_mean)}%)", **result)
    # the night beyond the relaunches' worst case by more than its own nights' noise: a night
    # raised for being far off shows more than its true change, and against the worst case
    # alone a true +30% step was dismissed 9% of the time (benchmarks/confirm_coverage.py,
    # docs/trends.md)
    if hi < floor or suspect.moved - hi > DISMISS_SIGMAS * suspect.noise / suspect.level:
        night = f"{100 * _pct(sign * suspect.moved):+.0f}%" + (
            f" against {suspect.against}" if suspect.against else "")
        return Judgement("dismissed", f"not confirmed: {told}; the night's {night} did not "
                         "reproduce (one launch's excursion)", **result)
    return Judgement("inconclusive", f"inconclusive: {told}", **result)


def confirmation_row(suspect: Suspect, judgement: Judgement, reference: str | None,
                     launches: int, seconds: float | None, values: list[float],
                     ref_values: list[float] | None, *,
                     canary: dict[str, list[dict]] | None = None) -> dict:
    """A ``confirmations`` row: the suspect, what tonight showed, the verdict; with each
    relaunch's value and the host canary read around it (``canary``: per side, each
    relaunch's ``units`` canary columns)."""
    return {
        "series_id": suspect.series_id, "target": suspect.target, "stack": suspect.stack,
        "variant": suspect.variant, "workload": suspect.workload,
        "load_point": suspect.load_point, "metric": suspect.metric, "source": suspect.source,
        "alert_kind": suspect.alert_kind, "reference": reference, "against": suspect.against,
        "launches": launches,
        "level": suspect.level, "value": suspect.value,
        "night_change_pct": 100 * (suspect.value / suspect.level - 1),
        "change_pct": _pct100(judgement.change), "change_low_pct": _pct100(judgement.low),
        "change_high_pct": _pct100(judgement.high),
        "level_change_pct": _pct100(judgement.level_change),
        "reference_change_pct": _pct100(judgement.reference_change),
        "pairs": judgement.pairs, "verdict": judgement.verdict, "words": judgement.words,
        "seconds": seconds,
        "values_json": json.dumps({"suspect": values, "reference": ref_values,
                                   "canary": canary or {},
                                   "sigmas": {"own": suspect.sigmas,
                                              "relative": suspect.relative_sigmas}}),
    }


def _pct100(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else 100 * v


CONFIRMED_HOST = "the host, re-measured the same morning: {words}"


def with_verdicts(alerts: list[dict], verdicts: list[dict], runs: pd.DataFrame,
                  causes: dict[str, tuple[int, str]]) -> list[dict]:
    """Tonight's ``changes`` rows after the confirmation (``verdicts``: ``confirmations``
    rows): each re-measured alert carries its verdict's words (``confirmation``); one
    dismissed is ``unconfirmed`` (kept, never posted as a regression, its series not
    restarted), one the host moved is a ``host_change``; a quiet series' suspect confirmed
    is a regression, dated to its recorded change's night and said with that cause
    (``causes``, by series: ``(night, cause)``, ``attribution.attribute``'s), else tonight's
    with none."""
    by_series = {v["series_id"]: v for v in verdicts}
    out = []
    for row in alerts:
        found = by_series.pop(row.get("series_id"), None) \
            if row.get("kind") in ALERT_KINDS else None
        if found is None:
            out.append(row)
            continue
        row = {**row, "confirmation": found["words"]}
        if found["verdict"] == "dismissed":
            row["kind"] = "unconfirmed"
        elif found["verdict"] == "host":
            row["kind"], row["cause"] = "host_change", CONFIRMED_HOST.format(
                words=found["words"])
        out.append(row)
    tonight = len(runs) - 1
    for found in by_series.values():
        if found["source"] != "suspect" or found["verdict"] != "confirmed":
            continue
        night, cause = causes.get(found["series_id"], (tonight, NOTHING_CHANGED))
        out.append({
            "series_id": found["series_id"],
            **{k: found[k] for k in ("target", "stack", "variant", "workload", "load_point",
                                     "metric")},
            "kind": "regression", "before": found["level"], "after": found["value"],
            "change_pct": found["night_change_pct"], "drastic": False,
            "change_date": runs["run_date"].iloc[night],
            "change_run_id": runs["run_id"].iloc[night], "nights_since": tonight - night + 1,
            "cause": cause,
            "confirmation": found["words"], "against": found.get("against")})
    return out
