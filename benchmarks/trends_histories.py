"""Generated nightly histories with known changes, made hard the ways real ones are.

Each series is one metric over NIGHTS nights: a level (5 to 1800, as ms or tok/s), noise of
CV 0.8-5% with lag-1 autocorrelation up to 0.5 and, in a third of them, Student-t tails (3 or
5 degrees of freedom, scaled so the robust sigma is the CV); one-night outliers of 4-8 sigma,
some on or next to a change night; nights missing at random; series that start late (a
baseline of 11-25 nights before their change); a second change after the first; linear
drifts over 7-14 nights; changes of variance alone; and golden-set accuracy as proportions of
200 items with no count given. About 30% of the series do not change.

``generate(n, nights, seed)`` returns (history rows in the long format
``servebench trends replay`` reads, events): one event per true change with where it starts
and ends, its size, its noise and what makes it hard. ``benchmarks/trends_replay.py`` scores
alerts against the events.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

STEPS = (0.02, 0.03, 0.05, 0.10, 0.20)
ACCURACY_DROPS = (0.03, 0.05, 0.08)  # points, on 200 items
ACCURACY_ITEMS = 200
# metric, direction; tails (p95) never raise a same-morning alert (series.same_night)
PERF_METRICS = (("ttft_ms_p50", "higher_is_worse"), ("tpot_ms_p50", "higher_is_worse"),
                ("ttft_ms_p95", "higher_is_worse"), ("e2e_ms_p95", "higher_is_worse"),
                ("output_throughput", "lower_is_worse"), ("goodput", "lower_is_worse"))
KINDS = ("none", "step", "drift", "variance", "accuracy")
KIND_P = (0.25, 0.37, 0.12, 0.08, 0.18)


def generate(n_series: int, nights: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    events: list[dict] = []
    for i in range(n_series):
        sid = f"s{i:04d}"
        kind = str(rng.choice(KINDS, p=KIND_P))
        first = int(rng.integers(30, 80)) if rng.random() < 0.2 else 0  # starts late
        late = first > 0
        if kind == "accuracy":
            values, series_events, metric, direction = _accuracy(rng, nights, first, late)
            rho, heavy = 0.0, 0
        else:
            metric, direction = PERF_METRICS[int(rng.integers(len(PERF_METRICS)))]
            values, series_events, rho, heavy = _perf(rng, kind, nights, first, late, direction)
        present = np.ones(nights, dtype=bool)
        present[:first] = False
        gappy = rng.random() < 0.3
        if gappy:
            present &= rng.random(nights) >= rng.uniform(0.03, 0.10)
        present[first] = True
        present[-1] = True
        for event in series_events:
            events.append({"series_id": sid, "metric": metric, "direction": direction,
                           "rho": rho, "heavy": heavy, "late": late, "gappy": gappy, **event})
        if not series_events:
            events.append({"series_id": sid, "metric": metric, "direction": direction,
                           "rho": rho, "heavy": heavy, "late": late, "gappy": gappy,
                           "kind": "none", "start": -1, "end": -1, "rel": 0.0, "cv": 0.0,
                           "sigmas": 0.0, "worse": None, "outlier_near": False,
                           "second": False})
        for night in np.flatnonzero(present):
            rows.append({"series_id": sid, "metric": metric, "direction": direction,
                         "night": int(night),
                         "date": (pd.Timestamp("2026-01-01") + pd.Timedelta(days=int(night)))
                         .date(),
                         "value": float(values[night])})
    return pd.DataFrame(rows), pd.DataFrame(events)


def _change_night(rng, nights: int, first: int, late: bool, room: int = 8) -> int:
    if late:
        return min(first + int(rng.integers(11, 26)), nights - room)
    return int(rng.integers(25, nights - room))


def _perf(rng, kind: str, nights: int, first: int, late: bool, direction: str):
    level = float(rng.choice([5.0, 40.0, 250.0, 1800.0]))
    cv = float(rng.uniform(0.008, 0.05))
    rho = float(rng.choice([0.0, 0.0, 0.2, 0.35, 0.5]))
    heavy = int(rng.choice([3, 5])) if rng.random() < 1 / 3 else 0  # t's degrees of freedom
    t = np.arange(nights)
    mean = np.full(nights, level)
    sd = np.full(nights, cv * level)
    events = []
    up_is_worse = direction == "higher_is_worse"
    if kind == "step":
        c = _change_night(rng, nights, first, late)
        rel = float(rng.choice(STEPS)) * float(rng.choice([-1, 1]))
        mean[c:] *= 1 + rel
        events.append(_event("step", c, c, rel, cv, (rel > 0) == up_is_worse))
        if c + 30 < nights - 8 and rng.random() < 0.3:  # a second change, later
            c2 = int(rng.integers(c + 20, nights - 8))
            rel2 = float(rng.choice(STEPS)) * float(rng.choice([-1, 1]))
            mean[c2:] *= 1 + rel2
            events.append(_event("step", c2, c2, rel2, cv, (rel2 > 0) == up_is_worse,
                                 second=True))
    elif kind == "drift":
        c = _change_night(rng, nights, first, late, room=20)
        length = int(rng.integers(7, 15))
        rel = float(rng.uniform(0.05, 0.20)) * float(rng.choice([-1, 1]))
        mean *= 1 + rel * np.clip((t - c + 1) / length, 0, 1)
        events.append(_event("drift", c, c + length - 1, rel, cv, (rel > 0) == up_is_worse))
    elif kind == "variance":
        c = _change_night(rng, nights, first, late)
        sd[c:] *= rng.uniform(2.0, 3.0)
        events.append(_event("variance", c, c, 0.0, cv, None))
    if heavy:
        # scaled so that 1.4826 * MAD (the robust sigma) is 1
        eps = stats.t.rvs(heavy, size=nights, random_state=rng) / (
            1.4826 * stats.t.ppf(0.75, heavy))
    else:
        eps = rng.normal(size=nights)
    noise = np.empty(nights)
    noise[0] = eps[0]
    for k in range(1, nights):
        noise[k] = rho * noise[k - 1] + math.sqrt(1 - rho * rho) * eps[k]
    values = mean + sd * noise
    for k in _outlier_nights(rng, nights, first, events):
        values[k] += float(rng.choice([-1, 1])) * rng.uniform(4, 8) * sd[k]
    return values, events, rho, heavy


def _accuracy(rng, nights: int, first: int, late: bool):
    p = np.full(nights, float(rng.uniform(0.55, 0.92)))
    events = []
    if rng.random() < 0.65:
        c = _change_night(rng, nights, first, late)
        drop = float(rng.choice(ACCURACY_DROPS))
        sd = math.sqrt(p[0] * (1 - p[0]) / ACCURACY_ITEMS)
        p[c:] -= drop
        events.append({**_event("accuracy", c, c, -drop / p[0], sd / p[0], True),
                       "drop_points": round(100 * drop)})
    values = rng.binomial(ACCURACY_ITEMS, p) / ACCURACY_ITEMS
    return values, events, "accuracy", "lower_is_worse"


def _event(kind: str, start: int, end: int, rel: float, cv: float, worse: bool | None, *,
           second: bool = False) -> dict:
    return {"kind": kind, "start": start, "end": end, "rel": rel, "cv": cv,
            "sigmas": abs(rel) / cv if cv else 0.0, "worse": worse, "outlier_near": False,
            "second": second}


def _outlier_nights(rng, nights: int, first: int, events: list[dict]) -> list[int]:
    out = []
    if rng.random() < 0.35:
        out += [int(k) for k in rng.integers(first, nights, size=int(rng.integers(1, 3)))]
    for event in events:
        if rng.random() < 0.25:  # on the change night or next to it
            k = event["start"] + int(rng.integers(-1, 2))
            if first <= k < nights:
                out.append(k)
                event["outlier_near"] = True
    return out
