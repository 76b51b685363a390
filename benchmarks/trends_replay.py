#!/usr/bin/env python3
"""How well the nightly regression detector works: generated histories, replayed night by night.

Generates SERIES x NIGHTS long-format histories (steps of 2/3/5/10/20% worse or better, linear
drifts over 7-14 nights, variance-only changes, one-night outliers of 4-8 sigma, AR(1) noise,
CV 1-5%, binomial accuracy series, ~30% series with no change), writes them as the Parquet that
`servebench trends replay` reads, replays them through the DAG's detector (timed), and prints:

- worse steps >= 5% at CV <= 2% found within 3 nights (alerted no later than the third night
  after the change night; the share alerted by the second is printed beside it);
- all worse steps found within 7 nights (alerted no later than the seventh night after the
  change night); median delay (nights from the change to the alert);
- false alarms per 100 monitored nights per series: an alert on a series with no change or a
  variance-only change, a "worse" on a better change, or one far from the change.

Beside it, plain Otava with fixed settings (compute_change_points, p 0.001 and 0.0001, no floor,
a change point alerted once two nights stand after it, as ours) on the first OTAVA_SERIES
series -- it costs ~1 ms a night, so not on all of them by default.

  .venv/bin/python benchmarks/trends_replay.py [--series 1000] [--nights 120] [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from otava.analysis import compute_change_points
from servebench.trends.detect import DetectorSettings
from servebench.trends.replay import read_history, replay

STEPS = (0.02, 0.03, 0.05, 0.10, 0.20)


def generate(n_series: int, nights: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(history rows, truth per series)."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    kinds = rng.choice(["none", "step", "drift", "variance", "binomial"], size=n_series,
                       p=[0.28, 0.37, 0.12, 0.08, 0.15])
    for i, kind in enumerate(kinds):
        sid = f"s{i:04d}"
        direction = rng.choice(["higher_is_worse", "lower_is_worse"])
        t = np.arange(nights)
        info = dict(series_id=sid, kind=str(kind), change=-1, end=-1, rel=0.0, cv=0.0,
                    rho=0.0, worse=None)
        binomial_n = None
        if kind == "binomial":
            direction = "lower_is_worse"
            binomial_n = 200
            p = np.full(nights, rng.uniform(0.85, 0.97))
            if rng.random() < 0.6:
                c = int(rng.integers(25, nights - 8))
                drop = rng.uniform(0.03, 0.08)
                p[c:] -= drop
                info.update(change=c, end=c, rel=-drop / p[0], worse=True)
            values = rng.binomial(binomial_n, p) / binomial_n
            info["cv"] = math.sqrt(p[0] * (1 - p[0]) / binomial_n) / p[0]
        else:
            level = float(rng.choice([5.0, 40.0, 250.0, 1800.0]))
            cv = rng.uniform(0.01, 0.05)
            rho = float(rng.choice([0.0, 0.0, 0.2, 0.4]))
            sd = np.full(nights, cv * level)
            mean = np.full(nights, level)
            info.update(cv=cv, rho=rho)
            if kind == "step":
                c = int(rng.integers(25, nights - 8))
                rel = float(rng.choice(STEPS)) * rng.choice([-1, 1])
                mean[c:] *= 1 + rel
                info.update(change=c, end=c, rel=rel,
                            worse=(rel > 0) == (direction == "higher_is_worse"))
            elif kind == "drift":
                c = int(rng.integers(25, nights - 20))
                length = int(rng.integers(7, 15))
                rel = rng.uniform(0.05, 0.20) * rng.choice([-1, 1])
                ramp = np.clip((t - c + 1) / length, 0, 1)
                mean *= 1 + rel * ramp
                info.update(change=c, end=c + length, rel=rel,
                            worse=(rel > 0) == (direction == "higher_is_worse"))
            elif kind == "variance":
                c = int(rng.integers(25, nights - 8))
                sd[c:] *= rng.uniform(2.0, 3.0)
                info.update(change=c, end=c)
            eps = rng.normal(size=nights)
            noise = np.empty(nights)
            noise[0] = eps[0]
            for k in range(1, nights):
                noise[k] = rho * noise[k - 1] + math.sqrt(1 - rho * rho) * eps[k]
            values = mean + sd * noise
            if rng.random() < 0.35:
                for k in rng.choice(nights, size=int(rng.integers(1, 3)), replace=False):
                    values[k] += rng.choice([-1, 1]) * rng.uniform(4, 8) * sd[k]
        info["direction"] = direction
        truth.append(info)
        # typical-request metrics: the detector's same-night guard judges them (a tail
        # statistic's one night it leaves to the nights after: series.same_night)
        metric = ("accuracy" if kind == "binomial" else
                  "ttft_ms_p50" if direction == "higher_is_worse" else "output_throughput")
        for night, value in enumerate(values):
            rows.append(dict(series_id=sid, metric=metric, direction=direction, night=night,
                             date=(pd.Timestamp("2026-01-01") + pd.Timedelta(days=night)).date(),
                             value=float(value), binomial_n=binomial_n))
    return pd.DataFrame(rows), pd.DataFrame(truth)


def plain_otava(history, limit: int, pvalue: float = 0.001, min_nights: int = 10) -> pd.DataFrame:
    rows = []
    for series in history[:limit]:
        start, seen = 0, set()
        for t in range(min_nights, len(series.values)):
            window = series.values[max(start, t + 1 - 60):t + 1]
            offset = max(start, t + 1 - 60)
            points, _ = compute_change_points(window.tolist(), window_len=30, max_pvalue=pvalue)
            for cp in points:
                c = offset + int(cp.index)
                if t - c >= 2 and c >= t - 7 and not any(abs(c - s) <= 2 for s in seen):
                    up = cp.stats.forward_rel_change() > 0
                    worse = up == (series.direction == "higher_is_worse")
                    rows.append(dict(series_id=series.series_id, night_flagged=c,
                                     night_alerted=t, direction="worse" if worse else "better"))
                    seen.add(c)
                    start = c
    return pd.DataFrame(rows, columns=["series_id", "night_flagged", "night_alerted",
                                       "direction"])


def score(alerts: pd.DataFrame, truth: pd.DataFrame, nights: int, min_nights: int = 10) -> dict:
    by_series = {sid: group for sid, group in alerts.groupby("series_id")}
    found2 = []
    found3 = []
    found7 = []
    delays = []
    false_alarms = 0
    false_by_kind: dict[str, int] = {}
    for row in truth.itertuples():
        before = false_alarms
        mine = by_series.get(row.series_id, alerts.iloc[0:0])
        is_step = row.kind in ("step", "binomial") and row.change >= 0
        if row.kind in ("none", "variance") or (row.kind == "binomial" and row.change < 0):
            false_alarms += len(mine)
            if len(mine):
                false_by_kind[row.kind] = false_by_kind.get(row.kind, 0) + len(mine)
            continue
        hits = mine[(mine["night_flagged"] >= row.change - 3)
                    & (mine["night_flagged"] <= row.end + 3)]
        right = hits[hits["direction"] == ("worse" if row.worse else "better")]
        false_alarms += len(mine) - len(right)
        if is_step and row.worse:
            delay = (right["night_alerted"].min() - row.change) if len(right) else math.inf
            found7.append(delay <= 7)
            if abs(row.rel) >= 0.05 - 1e-9 and row.cv <= 0.02:
                found3.append(delay <= 3)
                found2.append(delay <= 2)
            if delay < math.inf:
                delays.append(delay)
        if false_alarms > before:
            false_by_kind[row.kind] = false_by_kind.get(row.kind, 0) + false_alarms - before
    monitored = len(truth) * (nights - min_nights)
    return dict(
        big_quiet_within_3=float(np.mean(found3)) if found3 else math.nan, n_big=len(found3),
        big_quiet_within_2=float(np.mean(found2)) if found2 else math.nan,
        all_within_7=float(np.mean(found7)) if found7 else math.nan, n_all=len(found7),
        median_delay=float(np.median(delays)) if delays else math.nan,
        false_per_100=100.0 * false_alarms / monitored, false_alarms=false_alarms,
        false_by_kind=false_by_kind,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--nights", type=int, default=120)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--otava-series", type=int, default=500)
    args = ap.parse_args()

    frame, truth = generate(args.series, args.nights, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.parquet"
        frame.to_parquet(path, index=False)
        started = time.perf_counter()
        history = read_history(path)
        alerts = replay(history, DetectorSettings())
        elapsed = time.perf_counter() - started
    mine = score(alerts, truth, args.nights)
    print(f"{args.series} series x {args.nights} nights, seed {args.seed}; "
          f"kinds {truth['kind'].value_counts().to_dict()}")
    print(f"servebench detector: replay {elapsed:.1f} s")
    _print(mine)

    subset = truth.iloc[:args.otava_series]
    for pvalue in (1e-3, 1e-4):
        started = time.perf_counter()
        plain = plain_otava(history, args.otava_series, pvalue)
        elapsed = time.perf_counter() - started
        print(f"plain Otava (p {pvalue:g}, fixed), first {args.otava_series} series: "
              f"{elapsed:.1f} s")
        _print(score(plain, subset, args.nights))
    print("servebench detector on the same series:")
    _print(score(alerts[alerts["series_id"].isin(subset["series_id"])], subset, args.nights))


def _print(s: dict) -> None:
    print(f"  worse steps >=5% at CV<=2% within 3 nights: {s['big_quiet_within_3']:.1%} "
          f"(of {s['n_big']}; by the 2nd night after: {s['big_quiet_within_2']:.1%})")
    print(f"  all worse steps within 7 nights:          {s['all_within_7']:.1%} (of {s['n_all']})")
    print(f"  median delay:                             {s['median_delay']:.1f} nights")
    print(f"  false alarms per 100 nights per series:   {s['false_per_100']:.3f} "
          f"({s['false_alarms']} alerts: {s['false_by_kind']})")


if __name__ == "__main__":
    main()
