#!/usr/bin/env python3
"""How often the lever table's 95% intervals cover the truth, on a null pair.

Two variants of one target served the same way (``f16-nocache`` against ``f16`` on a workload
whose every prompt is new: the prompt cache cannot matter), so every lever's true change is
0%. Each night each variant's server is launched anew: a lognormal launch factor (sd
``--launch-sd``, 8% by default: issue 44's night-to-night noise of TTFT p95 on the local
default, 9.0% at 24 requests, less its sampling part) on its TTFT and, independently, on its
time per output token; then ``--requests`` closed-loop requests at concurrency 1, each TTFT
and inter-token time lognormal around the launch's (sd ``--request-sd``). Cells are the
canonical metrics of their requests (``servebench.metrics.compute_cell_metrics``, costs from
``servebench.cost``). Each trial has ``--history`` nights before tonight; tonight's
``detectability`` rows carry each series' noise as the detector reads it (its
``baseline_noise`` and outlier-cleaned median over the nights, tonight's included), and
``servebench.levers.lever_rows`` makes tonight's row from the cells, the requests and those
rows -- and once more without them: the interval over one night's requests only. Printed
per lever and history length: how often each interval holds 0%, and its mean width.

  .venv/bin/python benchmarks/lever_coverage.py [--trials 400] [--history 2 9 20 40]
      [--launch-sd 0.08] [--request-sd 0.12] [--requests 24] [--seed 20261205]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd
from servebench.cost import cost_fields
from servebench.levers import LEVERS, lever_rows
from servebench.metrics import compute_cell_metrics
from servebench.records import RequestRecord
from servebench.trends.detect import DetectorSettings, baseline_noise, clean_outliers
from servebench.trends.series import series_id

TTFT_S, ITL_S, TOKENS = 0.010, 0.002, 32  # the cell's typical request
VARIANTS = ("f16", "f16-nocache")  # the baseline, then the variant set against it
METRICS = [key for key, _ in LEVERS]


def _cell(rng, variant: str, night: int, n: int, launch_sd: float, request_sd: float):
    """One launch of ``variant`` serving ``n`` closed-loop requests: (cell row, records)."""
    cell_id = f"t/{variant}/fixed-64x32/c1#{night}"
    ttft = TTFT_S * math.exp(rng.normal(0, launch_sd)) * rng.lognormal(0, request_sd, n)
    itl = ITL_S * math.exp(rng.normal(0, launch_sd)) * rng.lognormal(0, request_sd, n)
    records, at = [], 1000.0
    for i in range(n):
        first = at + ttft[i]
        done = first + (TOKENS - 1) * itl[i]
        records.append(RequestRecord(request_id=f"{cell_id}:{i}", cell_id=cell_id,
                                     scheduled_at=at, sent_at=at, first_chunk_at=first,
                                     done_at=done, output_tokens=TOKENS, http_status=200))
        at = done
    m = compute_cell_metrics(records)
    cell = dict(cell_id=cell_id, target="t", stack="llama_cpp", variant=variant,
                workload="fixed-64x32", load_point="c1", model_file_sha256="a" * 64,
                hardware="cpu", status="ok", gate_baseline=VARIANTS[0], load_mode="closed",
                duration_s=m.duration_s, ttft_ms_p95=m.ttft_ms_p95, tpot_ms_p50=m.tpot_ms_p50,
                output_throughput=m.output_throughput,
                **cost_fields(price_per_hour=1.0, duration_s=m.duration_s,
                              output_tokens=n * TOKENS, n_ok=n))
    return cell, records


def _detectability(nights: list[dict]) -> list[dict]:
    """A ``detectability`` row per metric of one cell's nights (tonight's last), its noise and
    level as the detector reads a baseline without a restart; no noise under the
    ``min_baseline`` nights the detector judges a series from."""
    s = DetectorSettings()
    rows = []
    for metric in METRICS:
        values = np.array([c[metric] for c in nights], float)
        sigma, count = baseline_noise(values, values[:0], None, s)
        level = float(np.median(clean_outliers(values, sigma, s.outlier_sigmas)))
        judged = count >= s.min_baseline
        rows.append({"series_id": series_id(nights[-1], metric), "metric": metric,
                     "nights": count if judged else None, "level": level,
                     "noise": sigma if judged else None})
    return rows


def trial(rng, history: int, n: int, launch_sd: float, request_sd: float, seed: int):
    """(tonight's lever row with the launch noise, the same over its requests only)."""
    tonight, requests, rows = [], [], []
    for variant in VARIANTS:
        nights = [_cell(rng, variant, night, n, launch_sd, request_sd)
                  for night in range(history + 1)]
        cell, records = nights[-1]
        tonight.append(cell)
        requests += [r.to_row() for r in records]
        rows += _detectability([c for c, _ in nights])
    cells, requests = pd.DataFrame(tonight), pd.DataFrame(requests)
    [row] = lever_rows(cells, requests, pd.DataFrame(rows), seed=seed)
    [old] = lever_rows(cells, requests, seed=seed)
    return row, old


def coverage(trials: int, history: int, *, n: int = 24, launch_sd: float = 0.08,
             request_sd: float = 0.12, seed: int = 20261205) -> pd.DataFrame:
    """Per lever: how often the interval holds 0% (``covered``, and ``requests_only`` for
    the interval over one night's requests), their mean widths in points, and the share of
    rows whose interval holds the launch noise (``with_launch``)."""
    rng = np.random.default_rng(seed)
    out = {key: {"covered": 0, "requests_only": 0, "width": 0.0, "width_requests": 0.0,
                 "with_launch": 0} for key in METRICS}
    for i in range(trials):
        row, old = trial(rng, history, n, launch_sd, request_sd, seed + i)
        for key in METRICS:
            o = out[key]
            o["covered"] += row[f"{key}_lo"] <= 0 <= row[f"{key}_hi"]
            o["requests_only"] += old[f"{key}_lo"] <= 0 <= old[f"{key}_hi"]
            o["width"] += row[f"{key}_hi"] - row[f"{key}_lo"]
            o["width_requests"] += old[f"{key}_hi"] - old[f"{key}_lo"]
            o["with_launch"] += row[f"{key}_launch"] is not None
    frame = pd.DataFrame(out).T.astype(float) / trials
    frame.index.name = "lever"
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--history", type=int, nargs="+", default=[2, 9, 20, 40],
                        help="nights before tonight (under 9: too few to judge)")
    parser.add_argument("--launch-sd", type=float, default=0.08)
    parser.add_argument("--request-sd", type=float, default=0.12)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--seed", type=int, default=20261205)
    args = parser.parse_args()
    labels = dict(LEVERS)
    for history in args.history:
        start = time.perf_counter()
        frame = coverage(args.trials, history, n=args.requests, launch_sd=args.launch_sd,
                         request_sd=args.request_sd, seed=args.seed)
        launch = frame["with_launch"].mean()
        print(f"\n{history} nights before tonight, {args.trials} null pairs, launch noise "
              f"known in {launch:.0%} ({time.perf_counter() - start:.0f} s):")
        print(f"  {'lever':<12} {'covers 0%':>10} {'width':>8}   {'requests only':>13} "
              f"{'width':>8}")
        for key, r in frame.iterrows():
            print(f"  {labels[key]:<12} {r['covered']:>10.1%} {r['width']:>6.1f} pts   "
                  f"{r['requests_only']:>13.1%} {r['width_requests']:>6.1f} pts")


if __name__ == "__main__":
    main()
