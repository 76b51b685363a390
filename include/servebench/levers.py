"""What each optimization bought, and what it cost in quality: every variant against its
target's baseline variant on the same night, cell by cell (same workload and load point).

For TTFT p95, TPOT p50, output tokens/s and cost per 1M output tokens: the % change of the
variant's cell against the baseline's, with a 95% bootstrap interval -- both cells' measured
requests resampled with replacement (``N_BOOT`` times, seeded) and the statistic recomputed with
the canonical per-request definitions of ``servebench.metrics``. Throughput is not a per-request
quantity: in a closed-loop cell each worker's rate is its tokens over its mean request time
(Little's law), so a resample's throughput is the cell's scaled by mean E2E over the resample's
mean E2E, and cost per token moves inversely. An open-loop cell's throughput is set by its
arrival rate, so it gets no interval there rather than a false one. Beside them, the accuracy
delta (points), the quality-gate verdict, and what the engine's scheduler did differently
(``engine_note``: KV-cache and queue peaks, preemptions, prefix-cache hit rate, each only where
it differs from the baseline's -- what explains a latency change the levers show). And what it
holds (``memory_change``): the % change of its unit's peak memory (the GPU's where both units
report one, else the process tree's resident memory) and of its KV cache's capacity in tokens,
each one measurement a unit, so without an interval: a quantized variant's case reads "38%
less memory, 100% more KV capacity, this TPOT, this accuracy".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from servebench.records import RequestRecord
from servebench.metrics import e2e_s, tpot_s, ttft_s

N_BOOT = 1000
# telemetry columns the lever rows compare, with how far apart two cells must be to say so
ENGINE_COLUMNS = (("prefix_cache_hit_rate", "prefix-cache hits", 0.05, "{:.2f}"),
                  ("kv_cache_usage_peak", "KV peak", 0.05, "{:.0%}"),
                  ("requests_waiting_peak", "queued peak", 0.5, "{:.0f}"),
                  ("preemptions", "preemptions", 0.5, "{:.0f}"))


def engine_note(cell: dict, base: dict) -> str | None:
    """``KV peak 64% vs 21%; queued peak 3 vs 0``: the scheduler telemetry where the cell
    differs from its baseline's (None: nowhere, or no telemetry)."""
    parts = []
    for column, label, apart, fmt in ENGINE_COLUMNS:
        mine, theirs = cell.get(column), base.get(column)
        if mine is None or theirs is None or math.isnan(mine) or math.isnan(theirs):
            continue
        if abs(mine - theirs) >= apart:
            parts.append(f"{label} {fmt.format(mine)} vs {fmt.format(theirs)}")
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


LEVERS = (("ttft_ms_p95", "TTFT p95"), ("tpot_ms_p50", "TPOT p50"),
          ("output_throughput", "out tok/s"), ("cost_per_1m_output_tokens", "cost/1M tok"))
_RECORD_FIELDS = set(RequestRecord.__dataclass_fields__)


@dataclass(frozen=True)
class _Sample:
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # NaN where undefined (one output token)
    e2e_ms: np.ndarray
    throughput: float  # the cell's own, canonical
    cost: float
    closed: bool


def _sample(cell: dict, requests: pd.DataFrame) -> _Sample | None:
    rows = requests[(requests["cell_id"] == cell["cell_id"]) & ~requests["warmup"]
                    & requests["ok"]]
    if rows.empty or not cell.get("duration_s"):
        return None
    records = [RequestRecord(**{k: v for k, v in r.items() if k in _RECORD_FIELDS})
               for r in rows.to_dict("records")]
    # the canonical per-request definitions (metrics.py); a missing first chunk reads as NaN
    ttft = [(t * 1000 if t is not None else math.nan) for t in map(ttft_s, records)]
    tpot = [(t * 1000 if t is not None else math.nan) for t in map(tpot_s, records)]
    return _Sample(np.asarray(ttft, float), np.asarray(tpot, float),
                   np.asarray([e2e_s(r) * 1000 for r in records], float),
                   float(cell.get("output_throughput") or math.nan),
                   float(cell.get("cost_per_1m_output_tokens") or math.nan),
                   # arrival-driven (open loop, a trace): the rate is the offered one
                   cell.get("load_mode", "closed") not in ("open", "trace"))


def _stats(s: _Sample, idx: np.ndarray) -> np.ndarray:
    """[TTFT p95, TPOT p50, out tok/s, cost per 1M tokens] for each resample (rows of idx)."""
    ttft = np.nanpercentile(s.ttft_ms[idx], 95, axis=-1)
    tpot = np.nanpercentile(s.tpot_ms[idx], 50, axis=-1)
    if s.closed:
        scale = s.e2e_ms.mean() / s.e2e_ms[idx].mean(axis=-1)
        throughput, cost = s.throughput * scale, s.cost / scale
    else:
        throughput = cost = np.full(len(idx), math.nan)
    return np.stack([ttft, tpot, throughput, cost], axis=-1)


def lever_rows(cells: pd.DataFrame, requests: pd.DataFrame, *, n_boot: int = N_BOOT,
               seed: int = 0) -> list[dict]:
    """One row per ok variant cell that has an ok baseline cell on the same night."""
    rng = np.random.default_rng(seed)
    ok = cells[cells["status"] == "ok"]
    if "load_mode" in ok.columns:  # an slo cell of each variant ran at its own load
        ok = ok[ok["load_mode"] != "slo"]
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
            pct = 100 * (point / ref - 1)[0]
            boot = 100 * (a / b - 1)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: open loop, no interval
            lo, hi = np.nanpercentile(boot, [2.5, 97.5], axis=0)
        row = {k: cell.get(k) for k in ("target", "variant", "workload", "load_point",
                                        "gate_verdict")}
        row["baseline"] = base_name
        row["engine_note"] = engine_note(cell, base)
        row.update(memory_change(cell, base))
        acc, base_acc = cell.get("accuracy"), base.get("accuracy")
        row["accuracy_delta_points"] = (100 * (acc - base_acc)
                                        if acc is not None and base_acc is not None else None)
        for i, (key, _) in enumerate(LEVERS):
            row[f"{key}_pct"], row[f"{key}_lo"], row[f"{key}_hi"] = (
                float(pct[i]), float(lo[i]), float(hi[i]))
        rows.append(row)
    return rows
