"""What each optimization bought, and what it cost in quality: every variant against its
target's baseline variant on the same night, cell by cell (same workload and load point),
for the catalogue's lever metrics, with a 95% interval over both cells' requests (a seeded
bootstrap over the canonical per-request definitions of ``servebench.metrics``) widened by
each cell's launch-to-launch noise from its series; beside them the accuracy delta, the gate
verdict, the engine's telemetry and the unit's memory against the baseline's. How and why:
docs/trends.md#the-lever-tables-intervals.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from servebench.loadgen.modes import CLOSED, SEARCHED_MODES, at_offered_rate
from servebench.metric_catalogue import metric_label, shown_in
from servebench.metrics import e2e_s, tpot_s, ttft_s
from servebench.records import RequestRecord
from servebench.trends.series import series_id
from servebench.trends.sizing import launch_noise

N_BOOT = 1000
Z95 = 1.959964  # the normal's 97.5th percentile: a bootstrap side's half-width in sigmas
# how well a robust (MAD) sigma of n normal nights knows the noise: as well as a plain one of
# about 0.37 n (its asymptotic relative efficiency), the degrees of freedom it is given
MAD_EFFICIENCY = 0.37
REQUESTS_ONLY = "one night's requests only"  # what an interval without launch noise covers
# telemetry columns the lever rows compare, with how far apart two cells must be to say so
ENGINE_COLUMNS = (("prefix_cache_hit_rate", 0.05, "{:.2f}"),
                  ("kv_cache_usage_peak", 0.05, "{:.0%}"),
                  ("requests_waiting_peak", 0.5, "{:.0f}"),
                  ("preemptions", 0.5, "{:.0f}"))


def engine_note(cell: dict, base: dict) -> str | None:
    """``KV peak 64% vs 21%; queued peak 3 vs 0``: the scheduler telemetry where the cell
    differs from its baseline's (None: nowhere, or no telemetry)."""
    parts = []
    for column, apart, fmt in ENGINE_COLUMNS:
        mine, theirs = cell.get(column), base.get(column)
        if mine is None or theirs is None or math.isnan(mine) or math.isnan(theirs):
            continue
        if abs(mine - theirs) >= apart:
            parts.append(f"{metric_label(column)} {fmt.format(mine)} vs {fmt.format(theirs)}")
    return "; ".join(parts) or None
def _pct(mine, theirs) -> float | None:
    """% change of ``mine`` over ``theirs``; None where either is missing (None, NaN) or 0."""
    known = all(v is not None and v == v for v in (mine, theirs))  # NaN != NaN
    return 100 * (float(mine) / float(theirs) - 1) if known and theirs else None


def memory_change(cell: dict, base: dict) -> dict:
    """``memory_pct`` (peak memory vs the baseline's: GPU where both have it, else resident),
    ``memory_basis`` (``gpu`` | ``rss``; None: neither unit measured), ``kv_cache_pct``."""
    basis = "gpu" if _pct(cell.get("peak_device_memory_bytes"),
                          base.get("peak_device_memory_bytes")) is not None else "rss"
    column = "peak_device_memory_bytes" if basis == "gpu" else "peak_rss_bytes"
    memory = _pct(cell.get(column), base.get(column))
    return {"memory_pct": memory, "memory_basis": basis if memory is not None else None,
            "kv_cache_pct": _pct(cell.get("kv_cache_tokens"), base.get("kv_cache_tokens"))}


def energy_change(cell: dict, base: dict) -> dict:
    """``energy_pct``: joules per output token vs the baseline's, where one counter (the
    same ``energy_source``) measured both cells; else None. One reading a cell, no interval:
    a RAPL count is the whole socket's, the load generator's share included."""
    same = cell.get("energy_source") is not None \
        and cell.get("energy_source") == base.get("energy_source")
    return {"energy_pct": _pct(cell.get("energy_j_per_output_token"),
                               base.get("energy_j_per_output_token")) if same else None}


# (column, label) of what _stats bootstraps, in its order: the catalogue's lever table
LEVERS = tuple((m.column, m.label) for m in shown_in("levers"))


@dataclass(frozen=True)
class _Sample:
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # NaN where undefined (one output token)
    e2e_ms: np.ndarray
    throughput: float  # the cell's own, canonical
    cost: float
    closed: bool


def _sample(cell: dict, requests: pd.DataFrame) -> _Sample | None:
    records = RequestRecord.measured(requests, cell["cell_id"])
    if not records or not cell.get("duration_s"):
        return None
    # the canonical per-request definitions (metrics.py); a missing first chunk reads as NaN
    ttft = [(t * 1000 if t is not None else math.nan) for t in map(ttft_s, records)]
    tpot = [(t * 1000 if t is not None else math.nan) for t in map(tpot_s, records)]
    return _Sample(np.asarray(ttft, float), np.asarray(tpot, float),
                   np.asarray([e2e_s(r) * 1000 for r in records], float),
                   float(cell.get("output_throughput") or math.nan),
                   float(cell.get("cost_per_1m_output_tokens") or math.nan),
                   # at an offered rate (open loop, a trace): the rate is the offered one
                   not at_offered_rate(cell.get("load_mode", CLOSED)))


def _percentile(values: np.ndarray, idx: np.ndarray, q: float) -> np.ndarray:
    """The ``q``-th percentile of each resample (rows of ``idx``), NaNs left out (numpy's
    NaN-aware percentile goes row by row: only where there are NaNs)."""
    if np.isnan(values).any():
        return np.nanpercentile(values[idx], q, axis=-1)
    return np.percentile(values[idx], q, axis=-1)


def _stats(s: _Sample, idx: np.ndarray) -> np.ndarray:
    """Each LEVERS statistic (columns, in its order) for each resample (rows of idx)."""
    if s.closed:
        scale = s.e2e_ms.mean() / s.e2e_ms[idx].mean(axis=-1)
        throughput, cost = s.throughput * scale, s.cost / scale
    else:
        throughput = cost = np.full(len(idx), math.nan)
    by_column = {"ttft_ms_p95": _percentile(s.ttft_ms, idx, 95),
                 "tpot_ms_p50": _percentile(s.tpot_ms, idx, 50),
                 "output_throughput": throughput, "cost_per_1m_output_tokens": cost}
    return np.stack([by_column[column] for column, _ in LEVERS], axis=-1)


@dataclass(frozen=True)
class _NightNoise:
    """A cell's series as tonight's detect task judged it: its robust per-night noise
    relative to its level, and the baseline nights it is learnt from."""

    relative: float
    nights: int


def _night_noise(detectability: pd.DataFrame | None) -> dict[str, _NightNoise]:
    """{series_id: its :class:`_NightNoise`} from a night's ``detectability`` rows (None or
    empty: none); a series too short to judge (no noise) or at level 0 is left out."""
    if detectability is None or detectability.empty:
        return {}
    known = detectability[detectability["noise"].notna() & detectability["level"].notna()
                          & detectability["nights"].notna()]
    return {row["series_id"]: _NightNoise(float(row["noise"]) / abs(float(row["level"])),
                                          int(row["nights"]))
            for row in known.to_dict("records") if row["level"]}


def _widen(lo: float, point: float, hi: float, sampling: tuple[float, float],
           night: tuple[_NightNoise, _NightNoise]) -> tuple[float, float, float]:
    """The bootstrap's 95% interval of a ratio (``lo`` < ``point`` < ``hi``, ratios > 0)
    with both cells' launch noise folded in (see the module doc): ``sampling`` is each
    cell's bootstrap sd of its log figure, ``night`` its series' night noise. Returns
    (lo, hi, launch sd of the ratio's log)."""
    launch2 = sum(launch_noise(n.relative, s) ** 2 for n, s in zip(night, sampling,
                                                                   strict=True))
    centre = math.log(point)
    halves = np.array([centre - math.log(lo), math.log(hi) - centre]).clip(min=0.0)
    boot2 = float(np.mean((halves / Z95) ** 2))
    # Welch-Satterthwaite: the sampling part is tonight's (known); each night noise is learnt
    # from its series with MAD_EFFICIENCY * nights degrees of freedom
    unknown = sum(n.relative ** 4 / max(MAD_EFFICIENCY * n.nights, 1.0) for n in night)
    dof = (boot2 + launch2) ** 2 / unknown if unknown > 0 else math.inf
    t = float(stats.t.ppf(0.975, dof)) if math.isfinite(dof) else Z95
    lo_half, hi_half = t * np.sqrt((halves / Z95) ** 2 + launch2)
    return math.exp(centre - lo_half), math.exp(centre + hi_half), math.sqrt(launch2)


def lever_rows(cells: pd.DataFrame, requests: pd.DataFrame,
               detectability: pd.DataFrame | None = None, *, n_boot: int = N_BOOT,
               seed: int = 0) -> list[dict]:
    """One row per ok variant cell that has an ok baseline cell on the same night; its
    intervals hold the launch noise where ``detectability`` (the night's rows, as the detect
    task wrote them) knows both cells' series (``{lever}_launch``: the ratio's launch sd),
    else one night's requests only (``{lever}_launch`` None)."""
    rng = np.random.default_rng(seed)
    noise = _night_noise(detectability)
    ok = cells[cells["status"] == "ok"]
    if "load_mode" in ok.columns:  # an slo cell of each variant ran at its own load
        ok = ok[~ok["load_mode"].isin(SEARCHED_MODES)]
    rows = []
    for cell in ok.to_dict("records"):
        base_name = cell.get("gate_baseline")
        if not isinstance(base_name, str) or base_name == cell["variant"]:
            continue
        base = ok[(ok["target"] == cell["target"]) & (ok["variant"] == base_name)
                  & (ok["workload"] == cell["workload"])
                  & (ok["load_point"] == cell["load_point"])]
        if "length_control" in ok.columns:  # a natural-length cell is not an exact one's peer
            base = base[base["length_control"].fillna("exact")
                        == (cell.get("length_control") or "exact")]
        if base.empty:
            continue
        base = base.iloc[0].to_dict()
        mine, theirs = _sample(cell, requests), _sample(base, requests)
        if mine is None or theirs is None:
            continue
        point = np.array([[cell.get(k, math.nan) for k, _ in LEVERS]], float)
        ref = np.array([[base.get(k, math.nan) for k, _ in LEVERS]], float)
        a = _stats(mine, rng.integers(0, len(mine.e2e_ms), (n_boot, len(mine.e2e_ms))))
        b = _stats(theirs, rng.integers(0, len(theirs.e2e_ms), (n_boot, len(theirs.e2e_ms))))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (point / ref)[0]
            boot = a / b
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: open loop, no interval
            lo, hi = np.nanpercentile(boot, [2.5, 97.5], axis=0)
            sampling = np.nanstd(np.log(a), axis=0, ddof=1), np.nanstd(np.log(b), axis=0,
                                                                         ddof=1)
        row = {k: cell.get(k) for k in ("target", "variant", "workload", "load_point",
                                        "gate_verdict")}
        row["baseline"] = base_name
        row["engine_note"] = engine_note(cell, base)
        row.update(memory_change(cell, base))
        row.update(energy_change(cell, base))
        # what the variant's drafts bought it: its own acceptance, beside its TPOT change
        row["spec_acceptance_rate"] = cell.get("spec_acceptance_rate")
        row["spec_acceptance_length"] = cell.get("spec_acceptance_length")
        acc, base_acc = cell.get("accuracy"), base.get("accuracy")
        row["accuracy_delta_points"] = (100 * (acc - base_acc)
                                        if acc is not None and base_acc is not None else None)
        for i, (key, _) in enumerate(LEVERS):
            nights = (noise.get(series_id(cell, key)), noise.get(series_id(base, key)))
            launch = None
            if (None not in nights and all(v > 0 for v in (lo[i], ratio[i], hi[i]))
                    and np.isfinite([sampling[0][i], sampling[1][i]]).all()):
                lo[i], hi[i], launch = _widen(lo[i], ratio[i], hi[i],
                                              (sampling[0][i], sampling[1][i]), nights)
            row[f"{key}_pct"], row[f"{key}_lo"], row[f"{key}_hi"] = (
                float(100 * (v - 1)) for v in (ratio[i], lo[i], hi[i]))
            row[f"{key}_launch"] = launch
        rows.append(row)
    return rows
