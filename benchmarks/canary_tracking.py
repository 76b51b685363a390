#!/usr/bin/env python3
"""How much of the cells' run-to-run variance the host canary explains, on a result store.

Takes the committed runs of one sweep on one hardware whose units have canary readings
(``servebench.canary``). Each ok cell's deviation is its log metric (TPOT p50, TTFT p50)
less the median of its series (target, variant, workload, load point) over those runs: what
its launch and the host added that run. Each unit's deviation is the mean of its cells'; its
canary's is the log of its reading (the mean of before and after) less the median of all
units' readings. Printed per metric and canary part, over the units (and over the runs'
medians, with their count): the correlation, the share of the units' variance a fitted line
of the canary explains (R^2; at least 5 points), and the units' deviation spread (robust sigma) before and after
subtracting that line -- what judging on canary-adjusted values would leave.

  .venv/bin/python benchmarks/canary_tracking.py [--store DATA] [--sweep local]
"""

from __future__ import annotations

import argparse

import numpy as np
from servebench.canary import PARTS, unit_levels
from servebench.results.store import ResultStore
from servebench.settings import get_settings
from servebench.trends.detect import robust_sigma

METRICS = ("tpot_ms_p50", "ttft_ms_p50")
KEY = ["target", "variant", "workload", "load_point"]
MIN_POINTS = 5  # a line through fewer says nothing (three runs fit any line almost exactly)


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Correlation, R^2 of y on x, and y's robust sigma after the fitted line."""
    r = float(np.corrcoef(x, y)[0, 1])
    slope, intercept = np.polyfit(x, y, 1)
    return r, r * r, robust_sigma(y - (slope * x + intercept))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="results URI (default: the settings')")
    ap.add_argument("--sweep", default="local")
    args = ap.parse_args()
    store = ResultStore(args.store or get_settings().results_uri)
    runs = store.read_table("runs").to_pandas()
    runs = runs[runs["sweep_name"] == args.sweep]
    units = store.read_table("units", run_ids=list(runs["run_id"])).to_pandas()
    if "canary_source" not in units.columns:
        raise SystemExit("no canary readings in this store")
    units[list(PARTS)] = unit_levels(units)
    units = units.dropna(subset=list(PARTS))
    if units.empty:
        raise SystemExit(f"no canary readings in the runs of sweep {args.sweep!r}")
    read = runs[runs["run_id"].isin(set(units["run_id"]))]
    hardware = read["hardware"].mode().iloc[0]
    read = read[read["hardware"] == hardware]
    units = units[units["run_id"].isin(set(read["run_id"]))]
    cells = store.read_table("cells", run_ids=list(read["run_id"])).to_pandas()
    cells = cells[cells["status"] == "ok"]
    print(f"{len(read)} runs of sweep {args.sweep!r} on {hardware}, {len(units)} units, "
          f"{len(cells)} ok cells")
    for part in PARTS:
        units[f"{part}_dev"] = np.log(units[part]) - np.log(units[part].median())
        spread = robust_sigma(units[f"{part}_dev"].to_numpy())
        print(f"canary {part}: median {units[part].median():.2f} ms, unit-to-unit robust sigma "
              f"{spread:.1%}")
    print("| metric | canary part | level | n | correlation | R^2 | sigma before | sigma after |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for metric in METRICS:
        mine = cells.dropna(subset=[metric])
        mine = mine[mine[metric] > 0].copy()
        mine["dev"] = np.log(mine[metric]) - mine.groupby(KEY)[metric].transform(
            lambda v: np.log(v.median()))
        per_unit = mine.groupby(["run_id", "target", "variant"])["dev"].mean().rename("y")
        joined = units.merge(per_unit.reset_index(), on=["run_id", "target", "variant"])
        for part in PARTS:
            for level, frame in (("unit", joined),
                                 ("run", joined.groupby("run_id")[[f"{part}_dev", "y"]]
                                  .median())):
                x, y = frame[f"{part}_dev"].to_numpy(), frame["y"].to_numpy()
                if len(x) < MIN_POINTS:
                    print(f"| {metric} | {part} | {level} | {len(x)} | - | - | - | - |")
                    continue
                r, r2, after = _fit(x, y)
                print(f"| {metric} | {part} | {level} | {len(x)} | {r:+.2f} | {r2:.2f} | "
                      f"{robust_sigma(y):.1%} | {after:.1%} |")


if __name__ == "__main__":
    main()
