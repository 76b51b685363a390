#!/usr/bin/env python3
"""What ``load.auto_requests`` buys on the local default, and what it costs a night.

Runs the real nightly DAG (``dag.test``, one logical day apart, marked nightly) on the local
sweep: ``--before`` nights at the workloads' own counts, then ``--after`` nights of the same
sweep with ``load.auto_requests: {budget_s: --budget}``, into a store of its own (``--store``,
emptied first unless ``--analyze-only``). Then it prints, per night, the cells' measured
seconds, request count and wall time of the fixed-64x32 cells (the only sizable workload of the
local default), the detector's own detectable step of their series (median, share that catch
``detect_at_least``), each metric's night-to-night noise (1.4826 MAD of log values) over the
last ``--after`` fixed-count nights against the ``--after`` sized ones, and for every sized
series its detectable step before, times the noise ratio that the sizing predicted and the one
realized (the detector's rules are in units of the noise, at an equal baseline length).

  .venv/bin/python benchmarks/auto_requests.py [--before 10] [--after 5] [--budget 60]
      [--store /tmp/auto-requests] [--analyze-only]

Takes about 4 min a fixed night and 5 a sized one on 2 cores (`make setup` first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "include" / "sweeps" / "local.yaml"
DAY0 = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.UTC)
METRICS = ["ttft_ms_p50", "ttft_ms_p95", "tpot_ms_p50", "tpot_ms_p95", "e2e_ms_p95"]
WORKLOAD = "fixed-64x32"


def run_nights(store: Path, before: int, after: int, budget: float) -> dict[int, float]:
    from airflow.dag_processing.dagbag import DagBag

    sized = store.parent / f"{store.name}-local-auto.yaml"
    data = yaml.safe_load(SWEEP.read_text())
    data["load"]["auto_requests"] = {"budget_s": budget}
    sized.write_text(yaml.safe_dump(data, sort_keys=False))
    os.environ["SERVEBENCH_RESULTS_URI"] = str(store / "data")
    os.environ["SERVEBENCH_WORK_DIR"] = str(store / "runs")
    os.environ.pop("SLACK_BOT_TOKEN", None)  # the digest goes to the store alone
    dag = DagBag(dag_folder=str(ROOT / "dags")).dags["nightly_benchmark"]
    wall = {}
    for night in range(before + after):
        sweep = str(SWEEP if night < before else sized)
        t0 = time.monotonic()
        run = dag.test(logical_date=DAY0 + dt.timedelta(days=night),
                       run_conf={"sweep": sweep, "nightly": True})
        wall[night] = time.monotonic() - t0
        print(f"night {night}: {run.state} in {wall[night]:.0f} s", flush=True)
    return wall


def robust_cv(values: pd.Series) -> float:
    logs = np.log(values.astype(float).dropna())
    if len(logs) < 3:
        return math.nan
    from servebench.trends.detect import robust_sigma
    return robust_sigma(logs.to_numpy())


def analyze(store: Path, before: int, after: int, wall: dict[int, float]) -> None:
    from servebench.results.store import ResultStore
    from servebench.trends.series import nightly_runs
    from servebench.trends.sizing import size_cells

    results = ResultStore(str(store / "data"))
    runs = nightly_runs(results.read_table("runs").to_pandas(), "local")
    night_of = dict(zip(runs["run_id"], runs["night"], strict=True))
    cells = results.read_table("cells").to_pandas()
    cells["night"] = cells["run_id"].map(night_of)
    det = results.read_table("detectability").to_pandas()
    det["night"] = det["run_id"].map(night_of)
    fixed = cells[cells["workload"] == WORKLOAD]
    per = pd.DataFrame({
        "fixed cells' s": fixed.groupby("night")["duration_s"].sum(),
        "requests": fixed.groupby("night")["n_requests"].sum(),
        "all cells' s": cells.groupby("night")["duration_s"].sum()})
    if wall:
        per["night wall s"] = pd.Series(wall)
    print(per.round(1).to_string())
    mine = det[(det["workload"] == WORKLOAD) & det["metric"].isin(METRICS)]
    print(f"\n{WORKLOAD} series: the detector's detectable step (median, share <= goal)")
    for night, rows in mine.groupby("night"):
        found = rows["detectable"].astype(float).dropna()
        if len(found):
            print(f"  night {night}: {len(found)} series, median {found.median():.1%}, "
                  f"{(found <= rows.loc[found.index, 'goal']).mean():.0%} catch their goal")
    ok = fixed[fixed["status"] == "ok"]
    rows = []
    for (target, variant, point), cell in ok.groupby(["target", "variant", "load_point"]):
        for metric in METRICS:
            rows.append({
                "cell": f"{target}/{variant}/{point}", "metric": metric,
                "noise before": robust_cv(cell[cell["night"].between(before - after,
                                                                     before - 1)][metric]),
                "noise after": robust_cv(cell[cell["night"] >= before][metric]),
                "n after": cell[cell["night"] >= before]["n_requests"].max()})
    noise = pd.DataFrame(rows)
    sized = noise[noise["n after"] > noise["n after"].min()]
    print(f"\nnight-to-night noise, median: every {WORKLOAD} cell / the {sized['cell'].nunique()}"
          " sized ones")
    print(pd.concat([noise.groupby("metric")[["noise before", "noise after"]].median(),
                     sized.groupby("metric")[["noise before", "noise after"]].median()
                     .add_suffix(" (sized)")], axis=1).round(4).to_string())
    last = runs[runs["night"] == before - 1]["run_id"].iloc[0]
    sizes = size_cells(results.read_table("detectability", run_ids=[last]).to_pandas(),
                       results.read_table("cells", run_ids=[last]).to_pandas(),
                       results.read_table("requests", run_ids=[last]).to_pandas())
    by = noise.set_index(["cell", "metric"])
    out = []
    for size in sizes:
        key = (f"{size.target}/{size.variant}/{size.load_point}", size.metric)
        if size.workload != WORKLOAD or key not in by.index:
            continue
        n = by.loc[key, "n after"]
        if not n or n <= size.requests:
            continue
        predicted = math.sqrt(size.launch_noise ** 2 + size.sampling_noise ** 2
                              * size.requests / n) / size.night_noise
        realized = by.loc[key, "noise after"] / by.loc[key, "noise before"]
        out.append({"detectable before": size.detectable, "predicted ratio": predicted,
                    "realized ratio": realized, "detectable, predicted": size.detectable
                    * predicted, "detectable, realized": size.detectable * realized})
    if out:
        frame = pd.DataFrame(out)
        print(f"\n{len(frame)} sized series, median:")
        print(frame.median().round(3).to_string())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=int, default=10)
    parser.add_argument("--after", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--store", type=Path, default=Path("/tmp/auto-requests"))
    parser.add_argument("--analyze-only", action="store_true")
    args = parser.parse_args()
    wall = {}
    if not args.analyze_only:
        shutil.rmtree(args.store, ignore_errors=True)
        wall = run_nights(args.store, args.before, args.after, args.budget)
    analyze(args.store, args.before, args.after, wall)


if __name__ == "__main__":
    main()
