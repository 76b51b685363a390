"""The host canary: a short fixed kernel of known cost, timed on the machine a unit's server
runs on, before its launch and after its stop -- when nothing the suite starts runs beside
it --, so that a night, or a stretch of one, when the host itself was slower shows apart from
the stacks.

Two parts, each the median of :data:`REPS` timings, in milliseconds:

- **cpu**: a pure-Python loop and an in-cache numpy pass over 256 KiB: one core's speed and
  the share of it the scheduler gives (what the load generator's client and a small model's
  decode spend);
- **memory**: one copy of a 64 MiB array, larger than the caches: the memory bandwidth a
  larger model's decode depends on.

It costs about 0.1 s a reading. Where the servers run on another machine than this worker
(static endpoints, pods, instances) the worker's canary would not time their host: the
provisioner says so instead (``Provisioner.canary``), and the columns are null with why.
:func:`canary_night` judges a run's readings against the earlier runs on the same hardware.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from servebench.trends.detect import robust_sigma

REPS = 5
CPU_LOOP = 150_000  # pure-Python iterations per cpu timing (about 10 ms)
SMALL_BYTES = 256 * 1024  # the in-cache numpy pass
SMALL_PASSES = 20
BIG_BYTES = 64 * 1024 * 1024  # the memory pass: past any server CPU's last-level cache
# a night's canary is "moved" beyond its earlier runs' spread by this many robust sigmas and
# by at least MIN_MOVE (a 2-core VM's canary wanders by a few percent from run to run)
SIGMAS = 3.0
MIN_MOVE = 0.05
MIN_EARLIER = 3  # earlier runs needed before a night's canary is judged
EARLIER_RUNS = 14  # at most this many earlier runs make its usual level
PARTS = ("cpu", "memory")


@dataclass(frozen=True)
class CanaryReading:
    """One reading: each part's median time, or None with why it was not measured."""

    cpu_ms: float | None
    memory_ms: float | None
    source: str  # where it ran, or why it did not

    @classmethod
    def unmeasured(cls, why: str) -> CanaryReading:
        return cls(None, None, f"not measured: {why}")


def _cpu_once(small: np.ndarray) -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(CPU_LOOP):
        acc += i * i % 7
    for _ in range(SMALL_PASSES):
        np.multiply(small, 1.0000001, out=small)
    return (time.perf_counter() - t0) * 1e3


def _memory_once(src: np.ndarray, dst: np.ndarray) -> float:
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return (time.perf_counter() - t0) * 1e3


def read_canary(where: str) -> CanaryReading:
    """Time the canary here (``where``: what this machine is to the servers)."""
    small = np.ones(SMALL_BYTES // 8)
    src = np.ones(BIG_BYTES // 8)
    dst = np.zeros_like(src)  # both touched before any timing: no page faults inside one
    _cpu_once(small)  # untimed: a process's first pass is slower (about 15%)
    cpu = statistics.median(_cpu_once(small) for _ in range(REPS))
    memory = statistics.median(_memory_once(src, dst) for _ in range(REPS))
    return CanaryReading(cpu, memory, where)


def unit_columns(before: CanaryReading, after: CanaryReading) -> dict:
    """The ``units`` row's canary columns from the readings around its server's life."""
    return {"canary_before_cpu_ms": before.cpu_ms, "canary_before_memory_ms": before.memory_ms,
            "canary_after_cpu_ms": after.cpu_ms, "canary_after_memory_ms": after.memory_ms,
            "canary_source": before.source if before.source == after.source
            else f"before: {before.source}; after: {after.source}"}


@dataclass(frozen=True)
class CanaryNight:
    """A run's canary against the earlier runs on its hardware: per part its level (the
    median over its units of each unit's mean of before and after), the earlier runs' usual
    level and spread, the night's move where beyond it, and the units read beyond the usual
    level by more than one unit's spread."""

    level: dict[str, float]
    usual: dict[str, float]  # the earlier runs' median level (parts with enough of them)
    noise: dict[str, float]  # robust sigma of the earlier runs' log levels
    earlier: int  # earlier runs with a reading
    moved: dict[str, float]  # part -> relative move of the night, where beyond its noise
    slow_units: list[str]  # units read slower than the usual beyond one unit's spread
    span: tuple[pd.Timestamp, pd.Timestamp] | None  # from the first of them to the last
    n_units: int
    source: str

    def lines(self) -> list[str]:
        """What the digest, the report and ``servebench summary`` say of the host."""
        shown = ", ".join(f"{part} {self.level[part]:.1f} ms" for part in PARTS
                          if part in self.level)
        head = f"host canary ({self.source}): {shown}, median of {self.n_units} units"
        if not self.usual:
            return [(f"{head}; {self.earlier} earlier run(s) on this hardware, "
                     f"{MIN_EARLIER} needed to judge it")]
        against = ", ".join(f"{part} {self.level[part] / self.usual[part] - 1:+.0%} (noise "
                            f"±{np.expm1(self.noise[part]):.1%})" for part in self.usual)
        out = [f"{head}; against the median of its last {self.earlier} runs: {against}"]
        for part, move in self.moved.items():
            way = "slower" if move > 0 else "faster"
            out.append(f"the host was {abs(move):.0%} {way} ({part} canary) than over its last "
                       f"{self.earlier} runs: a move of tonight's figures the same way may be "
                       "the host's")
        if self.span is not None:
            out.append(f"from {self.span[0]:%H:%M} to {self.span[1]:%H:%M} UTC the host read "
                       f"slower than usual around {len(self.slow_units)} of {self.n_units} "
                       f"units ({', '.join(self.slow_units)}): their figures may be the host's")
        return out


def unit_levels(units: pd.DataFrame) -> pd.DataFrame:
    """Per unit and part, the mean of its before and after readings."""
    return pd.DataFrame({part: units[[f"canary_before_{part}_ms", f"canary_after_{part}_ms"]]
                         .mean(axis=1, skipna=True) for part in PARTS}, index=units.index)


def canary_night(units: pd.DataFrame, runs: pd.DataFrame, run_id: str) -> CanaryNight | None:
    """Run ``run_id``'s canary judged against up to :data:`EARLIER_RUNS` earlier runs of the
    same hardware (``units`` and ``runs``: the store's tables); None where it has no
    reading."""
    if "canary_source" not in units.columns or run_id not in set(runs["run_id"]):
        return None
    units = pd.concat([units, unit_levels(units)], axis=1)
    mine = units[(units["run_id"] == run_id) & units[list(PARTS)].notna().any(axis=1)]
    if mine.empty:
        return None
    run = runs[runs["run_id"] == run_id].iloc[0]
    before = runs[(runs["hardware"] == run["hardware"])
                  & (runs["finished_at"] < run["finished_at"])]
    before = before.sort_values("finished_at").tail(EARLIER_RUNS)
    earlier = units[units["run_id"].isin(set(before["run_id"]))]
    per_run = earlier.groupby("run_id")[list(PARTS)].median()
    level, usual, noise, moved = {}, {}, {}, {}
    slow = pd.Series(False, index=mine.index)
    for part in PARTS:
        if mine[part].notna().sum() == 0:
            continue
        level[part] = float(mine[part].median())
        history = per_run[part].dropna()
        if len(history) < MIN_EARLIER:
            continue
        usual[part] = float(history.median())
        noise[part] = robust_sigma(np.log(history.to_numpy()))
        move = float(np.log(level[part] / usual[part]))
        if abs(move) > max(SIGMAS * noise[part], MIN_MOVE):
            moved[part] = float(np.expm1(move))
        # one unit's reading against the usual level, beyond one unit's spread
        unit_logs = np.log(earlier[part].dropna().to_numpy() / usual[part])
        bar = max(SIGMAS * robust_sigma(unit_logs), MIN_MOVE)
        slow |= np.log(mine[part] / usual[part]) > bar
    slow_units = mine[slow]
    span = None
    if not slow_units.empty:
        span = (pd.Timestamp(slow_units["started_at"].min()),
                pd.Timestamp(slow_units["ended_at"].max()))
    sources = mine["canary_source"].dropna()
    return CanaryNight(level, usual, noise, len(per_run.dropna(how="all")), moved,
                       slow_units["unit_id"].tolist(), span, len(mine),
                       str(sources.iloc[0]) if len(sources) else "")


def canary_lines(units: pd.DataFrame, runs: pd.DataFrame, run_id: str) -> list[str]:
    """What the digest, the report and ``servebench summary`` say of run ``run_id``'s host:
    :meth:`CanaryNight.lines`, or why its canary was not read."""
    night = canary_night(units, runs, run_id)
    if night is not None:
        return night.lines()
    if "canary_source" not in units.columns:
        return []
    why = units.loc[units["run_id"] == run_id, "canary_source"].dropna()
    return [f"host canary: {reason}" for reason in dict.fromkeys(why)]
