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

A sweep with ``load.auto_requests`` has its plan size tonight's cells from its newest judged
night (:func:`size_night`): each cell is given the count its series needs, as long as the
seconds the counts add stay within the spec's budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from servebench.config.load import AutoRequests, LoadPoint
from servebench.config.workloads import (
    ChatLengthsWorkload,
    FixedWorkload,
    LongContextWorkload,
)
from servebench.loadgen.modes import LOAD_MODES
from servebench.metrics import e2e_s, tpot_s, ttft_s
from servebench.records import RequestRecord
from servebench.results.store import ResultStore
from servebench.trends.series import nightly_runs

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
        define, q = PER_REQUEST[row["metric"]]
        records = RequestRecord.measured(requests, cell["cell_id"])
        values = np.array([math.nan if (v := define(r)) is None else v for r in records],
                          float)
        sampling = sampling_noise(values, q)
        if sampling is None:
            continue
        night = float(row["noise"]) / abs(float(row["level"]))
        # one night's bootstrap may overshoot the nights' robust noise: then it is all sampling
        sampling = min(sampling, night)
        n = len(records)
        detectable = float(row["detectable"])
        needed = (None if not math.isfinite(detectable)
                  else requests_needed(n, detectable, float(row["goal"]), night, sampling))
        duration = cell.get("duration_s")
        out.append(CellSize(
            row["target"], row["variant"], row["workload"], row["load_point"], row["metric"],
            n, detectable, float(row["goal"]), night, sampling,
            launch_noise(night, sampling), needed,
            None if needed is None or not duration else float(duration) * needed / n))
    return out


# the workloads whose cells a request count can size: more of the same kind of request. Not a
# shared-prefix workload (more requests per prefix raise its cache-hit share: another
# workload), a multi-turn one (its turns are its conversations'), a trace (its own rows)
SIZABLE = (FixedWorkload, LongContextWorkload, ChatLengthsWorkload)


def sizable(workload: object, point: LoadPoint) -> bool:
    """Whether ``load.auto_requests`` sizes the cell of ``workload`` at ``point`` (not an SLO
    search's: its probes are its own)."""
    return isinstance(workload, SIZABLE) and LOAD_MODES[point.mode].sizable


@dataclass(frozen=True)
class CellCount:
    """One of tonight's cells as ``load.auto_requests`` sized it: ``count`` requests where its
    workload asks ``base``; ``wanted``: what its series needs (None: nothing to go by);
    ``added_s``: the seconds ``count`` adds over ``base``; ``why``: how it came to be."""

    cell_id: str
    base: int
    count: int
    wanted: int | None
    added_s: float
    why: str


def size_night(cells: Iterable[tuple[str, int]], sizes: list[CellSize],
               last_cells: pd.DataFrame, auto: AutoRequests) -> list[CellCount]:
    """Tonight's request count for each of ``cells`` ((cell id, its workload's count), the
    ones a count can size) from the newest judged night: its :func:`size_cells` ``sizes`` and
    its ``cells`` rows (``last_cells``: each cell's requests and seconds).

    A cell wants the most its metrics need (:func:`requests_needed`; those that catch their
    goal or that no count helps ask nothing), never less than the count it ran last night:
    the series' noise is still read off nights at that count, so a count that shrank at once
    would undo what the larger one bought. ``auto.max_factor`` caps it. The counts are
    granted within ``auto.budget_s`` added seconds (a cell's seconds per request as last night
    measured it): cells sized on an earlier night first, so a count holds from night to night,
    then the cheapest. A cell left over keeps its workload's count."""
    ok = last_cells[last_cells["status"] == "ok"] if len(last_cells) else last_cells
    last = {r["cell_id"]: r for r in ok.to_dict("records")}
    needs: dict[str, list[CellSize]] = {}
    for size in sizes:
        needs.setdefault(f"{size.target}/{size.variant}/{size.workload}/{size.load_point}",
                         []).append(size)
    wanted: list[tuple[str, int, int, float, str]] = []  # id, base, want, added_s, why
    out: dict[str, CellCount] = {}
    for cid, base in cells:
        row, mine = last.get(cid), needs.get(cid, [])
        ran = int(row["n_requests"]) if row is not None and row.get("n_requests") else None
        seconds = (float(row["duration_s"]) / ran
                   if ran and row.get("duration_s") and row["duration_s"] == row["duration_s"]
                   else None)
        if not mine and not ran:
            out[cid] = CellCount(cid, base, base, None, 0.0,
                                 "no judged night of its series yet")
            continue
        short = [s for s in mine if s.detectable > s.goal]
        helped = [s.needed for s in short if s.needed is not None]
        want = max([ran or base, *helped])
        want = max(base, min(want, math.floor(base * auto.max_factor)))
        if want == base:
            why = ("its series has too few nights to judge yet" if not mine else
                   "every metric catches its goal" if not short else
                   "launch-to-launch noise alone keeps it above its goal"
                   if not helped else "its workload's count is enough")
            out[cid] = CellCount(cid, base, base, want, 0.0, why)
            continue
        if seconds is None:
            out[cid] = CellCount(cid, base, base, want, 0.0,
                                 "no measured seconds per request to price it")
            continue
        worst = max((s for s in short if s.needed is not None),
                    key=lambda s: s.detectable, default=None)
        why = (f"{worst.metric} catches {worst.detectable:.1%} at {worst.requests}, "
               f"goal {worst.goal:.0%}" if worst is not None
               else f"holds last night's {ran}")
        wanted.append((cid, base, want, (want - base) * seconds, why))
    left = auto.budget_s
    # an earlier night's count first (it holds), then the cheapest
    for cid, base, want, added, why in sorted(
            wanted, key=lambda w: (not _was_sized(last.get(w[0]), w[1]), w[3], w[0])):
        if added <= left:
            left -= added
            out[cid] = CellCount(cid, base, want, want, added, f"sized: {why}")
        else:
            out[cid] = CellCount(cid, base, base, want, 0.0,
                                 f"over the budget: {want} would add {added:.0f} s, "
                                 f"{left:.0f} s left ({why})")
    return [out[cid] for cid, _ in cells]


def _was_sized(row: dict | None, base: int) -> bool:
    return row is not None and bool(row.get("n_requests")) and int(row["n_requests"]) > base


def size_from_store(store: ResultStore, sweep_name: str, cells: list[tuple[str, int]],
                    auto: AutoRequests) -> tuple[str | None, list[CellCount]]:
    """:func:`size_night` from the newest of ``sweep_name``'s nights in ``store`` that has
    ``detectability`` rows: (its run id, tonight's counts); (None, every cell at its base)
    where no night of the sweep was judged yet."""
    runs = nightly_runs(store.read_table("runs").to_pandas(), sweep_name)
    judged = set(store.read_table("detectability", columns=["run_id"])
                 .column("run_id").to_pylist())
    runs = runs[runs["run_id"].isin(judged)]
    if runs.empty:
        return None, size_night(cells, [], pd.DataFrame(), auto)
    run_id = runs.iloc[-1]["run_id"]
    rows = store.read_table("detectability", run_ids=[run_id]).to_pandas()
    last = store.read_table("cells", run_ids=[run_id]).to_pandas()
    requests = store.read_table("requests", run_ids=[run_id]).to_pandas()
    return run_id, size_night(cells, size_cells(rows, last, requests), last, auto)
