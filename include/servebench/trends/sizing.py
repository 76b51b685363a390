"""How many requests a cell needs for its series to catch the sweep's ``detect_at_least``.

A series' night-to-night noise (the ``detectability`` table's ``noise``, relative to its
``level``) has two parts: how far a percentile of ``n`` requests falls from the cell's true
one (sampling), and how far the cell itself moves from one server launch to the next
(launch), which no request count removes:

    night^2 = sampling(n)^2 + launch^2,    sampling(n) = sampling(n0) * sqrt(n0 / n)

``sampling(n0)`` is the bootstrap's: the cell's measured requests of that night resampled
with replacement and the percentile recomputed with the canonical per-request definitions of
``servebench.metrics``. The launch part is what the night's noise leaves over. The smallest
step a series catches (``detectable``) scales with its noise (the detector's rules are in
units of it), so the request count that brings it to ``goal`` is the ``n`` at which

    night(n) = night * goal / detectable,

and none does where the launch noise alone is above that: then only repetitions (more
launches per night, as the release gate interleaves) or a quieter host help. The duration is
the cell's own, scaled by the request count (a closed-loop cell's requests take as long
whatever their number).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from servebench.metrics import e2e_s, tpot_s, ttft_s
from servebench.records import RequestRecord

# the cell metrics that are a percentile of its requests: (per-request definition, q)
PER_REQUEST = {
    "ttft_ms_p50": (ttft_s, 50), "ttft_ms_p95": (ttft_s, 95),
    "tpot_ms_p50": (tpot_s, 50), "tpot_ms_p95": (tpot_s, 95),
    "e2e_ms_p95": (e2e_s, 95),
}
N_BOOT = 400


@dataclass(frozen=True)
class CellSize:
    """One cell's series: what it catches now, its noise split, and what would reach
    ``goal``: ``needed`` requests (None: no count does, the launch noise alone is above it)."""

    target: str
    variant: str
    workload: str
    load_point: str
    metric: str
    requests: int
    detectable: float
    goal: float
    night_noise: float  # relative to the level
    sampling_noise: float  # relative, at ``requests``
    launch_noise: float  # relative
    needed: int | None
    needed_s: float | None  # the cell's duration at ``needed`` requests

    @property
    def reason(self) -> str:
        if self.detectable <= self.goal:
            return f"catches {self.detectable:.1%} >= goal {self.goal:.0%} already"
        if self.needed is None:
            return (f"launch-to-launch noise {self.launch_noise:.1%} alone keeps it above "
                    f"{self.goal:.0%}: more launches a night, not more requests")
        return f"{self.needed} requests (~{self.needed_s:.0f} s) to catch {self.goal:.0%}"


def sampling_noise(values: np.ndarray, q: float, *, n_boot: int = N_BOOT,
                   seed: int = 0) -> float | None:
    """Relative standard deviation of the ``q``-th percentile of ``values`` (NaN: undefined
    for that request) over bootstrap resamples of the same size; None under 8 values or at
    a zero percentile."""
    values = np.asarray(values, float)
    values = values[~np.isnan(values)]
    if len(values) < 8:
        return None
    point = float(np.percentile(values, q))
    if point <= 0:
        return None
    rng = np.random.default_rng(seed)
    boot = np.percentile(values[rng.integers(0, len(values), (n_boot, len(values)))], q, axis=1)
    return float(np.std(boot, ddof=1) / point)


def launch_noise(night: float, sampling: float) -> float:
    """The launch-to-launch part of a series' relative ``night`` noise, ``sampling`` of it
    from one night's requests: what the night's noise leaves over, 0 where sampling alone is
    as large. The lever table (``servebench.levers``) folds it into its intervals."""
    return math.sqrt(max(night ** 2 - sampling ** 2, 0.0))


def requests_needed(n: int, detectable: float, goal: float, night: float,
                    sampling: float) -> int | None:
    """The request count at which a series of ``night`` relative noise, ``sampling`` of it
    from ``n`` requests, catches ``goal`` where it now catches ``detectable``; ``n`` where
    it already does; None where no count does."""
    if detectable <= goal:
        return n
    launch2 = launch_noise(night, sampling) ** 2
    room = (night * goal / detectable) ** 2 - launch2
    if room <= 0 or sampling <= 0:
        return None
    return max(n, math.ceil(n * sampling ** 2 / room - 1e-9))  # float noise: 120, not 121


def size_cells(detectability: pd.DataFrame, cells: pd.DataFrame,
               requests: pd.DataFrame) -> list[CellSize]:
    """A :class:`CellSize` for each cell series of one night's ``detectability`` rows whose
    metric is a percentile of requests and whose cell (that night's ``cells`` row) kept its
    ``requests``; series too short to judge (``detectable`` null) or at no level are left
    out."""
    out = []
    rows = detectability[detectability["metric"].isin(PER_REQUEST)
                         & detectability["workload"].notna()
                         & detectability["detectable"].notna()]
    ok = cells[cells["status"] == "ok"]
    for row in rows.to_dict("records"):
        if not row["level"] or row["goal"] is None or row["goal"] != row["goal"]:
            continue
        cell = ok[(ok["target"] == row["target"]) & (ok["variant"] == row["variant"])
                  & (ok["workload"] == row["workload"])
                  & (ok["load_point"] == row["load_point"])]
        if cell.empty:
            continue
        cell = cell.iloc[0]
        mine = requests[(requests["cell_id"] == cell["cell_id"]) & ~requests["warmup"]
                        & requests["ok"]]
        define, q = PER_REQUEST[row["metric"]]
        records = [RequestRecord.from_row(r)
                   for r in mine.to_dict("records")]
        values = np.array([math.nan if (v := define(r)) is None else v for r in records],
                          float)
        sampling = sampling_noise(values, q)
        if sampling is None:
            continue
        night = float(row["noise"]) / abs(float(row["level"]))
        n = len(records)
        detectable = float(row["detectable"])
        needed = (None if not math.isfinite(detectable)
                  else requests_needed(n, detectable, float(row["goal"]), night, sampling))
        duration = cell.get("duration_s")
        out.append(CellSize(
            row["target"], row["variant"], row["workload"], row["load_point"], row["metric"],
            n, detectable, float(row["goal"]), night, min(sampling, night),
            launch_noise(night, sampling), needed,
            None if needed is None or not duration else float(duration) * needed / n))
    return out
