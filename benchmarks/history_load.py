"""How long does a year of one target's history take to load? (a script, not a test)

    .venv/bin/python benchmarks/history_load.py                 # temp dir, removed afterwards
    .venv/bin/python benchmarks/history_load.py --dir /tmp/sb   # kept, and reused when present

Generates ``--nights`` (365) nightly runs of ``--cells`` (2,000) cells each into a local
ResultStore: every column of the cells schema, synthetic values (10 targets x 10 variants x
4 workloads x 5 concurrencies by default). Each night goes through ``ResultStore.publish``
(conform, staging, partition move, manifest last), so readers see exactly what a real
publish leaves; only the column values are built in bulk with numpy.

Then it times, median of ``--repeat`` (3) runs each, loading one target's year:
  load_history          all columns, and a typical projection
  duckdb (views)        duckdb_connection(store) + SQL over the registered committed datasets
  duckdb (read_parquet) DuckDB's own Parquet reader over the hive layout, restricted to the
                        committed run ids read from the manifests (the README recipe)
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from servebench.results.history import duckdb_connection, load_history
from servebench.results.schema import CELLS, LATENCY_METRICS, rows_to_table
from servebench.results.store import ResultStore

PROJECTION = ["run_date", "variant", "workload", "concurrency", "status", "ttft_ms_p50",
              "ttft_ms_p95", "tpot_ms_p50", "output_throughput", "accuracy"]
START = dt.date(2025, 1, 1)


def matrix(n_cells: int) -> list[tuple[str, str, str, int]]:
    targets = [f"target{i}" for i in range(10)]
    variants = [f"v{i}" for i in range(10)]
    workloads = ["chat", "prefix", "long", "short"]
    concurrency = [1, 2, 4, 8, 16]
    full = [(t, v, w, c) for t in targets for v in variants for w in workloads for c in concurrency]
    return (full * (n_cells // len(full) + 1))[:n_cells]


def run_id_for(day: dt.date) -> str:
    return f"scheduled__{day.isoformat()}T00:00:00+00:00"


def night(day: dt.date, cells: list[tuple[str, str, str, int]], rng) -> pa.Table:
    n = len(cells)
    run_id = run_id_for(day)
    t, v, w, c = zip(*cells)
    cols: dict[str, pa.Array] = {
        "run_id": pa.array([run_id] * n), "run_date": pa.array([day] * n, pa.date32()),
        "cell_id": pa.array([f"{a}/{b}/{x}/c{y}" for a, b, x, y in cells]),
        "target": pa.array(t), "stack": pa.array(["llama.cpp"] * n), "variant": pa.array(v),
        "workload": pa.array(w), "concurrency": pa.array(c, pa.int32()),
    }
    status = np.where(rng.random(n) < 0.97, "ok", np.where(rng.random(n) < 0.5, "invalid",
                                                           "failed"))
    cols["status"] = pa.array(status)
    cols["reason"] = pa.array([None if s == "ok" else f"synthetic {s}" for s in status],
                              pa.string())
    conc = np.asarray(c, dtype=float)
    for i, m in enumerate(LATENCY_METRICS):
        base = rng.lognormal(np.log(20.0 * (i + 1)), 0.2, n) * (1 + conc / 16)
        for s, k in (("mean", 1.1), ("p50", 1.0), ("p90", 1.3), ("p95", 1.5), ("p99", 2.0)):
            cols[f"{m}_{s}"] = pa.array(base * k)
    for name, typ in zip(CELLS.names, CELLS.types):
        if name in cols or name == "schema_version":
            continue
        if pa.types.is_floating(typ):
            cols[name] = pa.array(rng.random(n) * 100)
        elif pa.types.is_integer(typ):
            cols[name] = pa.array(rng.integers(0, 1000, n), typ)
        elif pa.types.is_string(typ):
            cols[name] = pa.array([f"{name}-{day.month}"] * n)
        else:  # list<string> (gate_flipped_ids)
            cols[name] = pa.nulls(n, typ)
    cols["accuracy"] = pa.array(rng.random(n))
    cols["error_rate"] = pa.array(rng.random(n) * 0.01)
    return pa.table(cols)


def generate(store: ResultStore, nights: int, n_cells: int) -> float:
    done = set(store.committed_run_ids())
    rng = np.random.default_rng(0)
    cells = matrix(n_cells)
    t0 = time.perf_counter()
    made = 0
    for i in range(nights):
        day = START + dt.timedelta(days=i)
        run_id = run_id_for(day)
        if run_id in done:
            continue
        runs = rows_to_table("runs", [{"run_id": run_id, "run_date": day, "n_cells": n_cells}])
        store.publish(run_id, day, {"runs": runs, "cells": night(day, cells, rng)})
        made += 1
        if made % 50 == 0:
            print(f"  {made} nights written ({time.perf_counter() - t0:.1f} s)", flush=True)
    elapsed = time.perf_counter() - t0
    print(f"generated {made} new night(s) in {elapsed:.1f} s "
          f"({len(done)} already there)", flush=True)
    return elapsed


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="store folder (reused when present; default: a temp dir)")
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--cells", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", default="target3")
    args = ap.parse_args(argv)

    tmp = None if args.dir else tempfile.mkdtemp(prefix="servebench-history-")
    root = Path(args.dir or tmp)
    try:
        store = ResultStore(str(root))
        generate(store, args.nights, args.cells)
        since, until = START, START + dt.timedelta(days=args.nights - 1)
        size = sum(p.stat().st_size for p in (root / "cells").rglob("*.parquet"))
        print(f"store {root}: {len(store.committed_run_ids())} committed runs, cells "
              f"{size / 2**20:.0f} MiB on disk")

        results = []

        def report(label, seconds, rows):
            results.append((label, seconds, rows))
            print(f"  {label:<52} {seconds * 1000:8.0f} ms  {rows:>8} rows", flush=True)

        print(f"one target ({args.target}), {since} .. {until}, median of {args.repeat}:")
        s, t = timed(lambda: load_history(store, "cells", target=args.target, since=since,
                                          until=until), args.repeat)
        report("load_history, all columns", s, t.num_rows)
        s, t = timed(lambda: load_history(store, "cells", target=args.target, since=since,
                                          until=until, columns=PROJECTION), args.repeat)
        report(f"load_history, {len(PROJECTION)} columns", s, t.num_rows)

        sql = (f"select {', '.join(PROJECTION)} from cells where target = $target "
               f"and date between $since and $until order by run_date")
        params = {"target": args.target, "since": since, "until": until}

        def via_views():
            con = duckdb_connection(store)
            return con.sql(sql, params=params).to_arrow_table()

        s, t = timed(via_views, args.repeat)
        report(f"duckdb views (connect + query), {len(PROJECTION)} cols", s, t.num_rows)
        con = duckdb_connection(store)
        s, t = timed(lambda: con.sql(sql, params=params).to_arrow_table(), args.repeat)
        report("duckdb views, query only (connection reused)", s, t.num_rows)
        s, t = timed(lambda: con.sql(sql.replace(", ".join(PROJECTION), "*", 1),
                                     params=params).to_arrow_table(), args.repeat)
        report("duckdb views, query only, all columns", s, t.num_rows)

        import duckdb

        def via_read_parquet():
            ids = store.committed_run_ids()
            native = duckdb.connect()
            q = (f"select {', '.join(PROJECTION)} from read_parquet("
                 f"'{root}/cells/*/*/*.parquet', hive_partitioning = true, "
                 f"hive_types = {{'date': DATE}}) "
                 f"where target = $target and date between $since and $until "
                 f"and run_id in (select unnest($ids)) order by run_date")
            return native.sql(q, params={**params, "ids": ids}).to_arrow_table()

        s, t = timed(via_read_parquet, args.repeat)
        report(f"duckdb read_parquet + manifest ids, {len(PROJECTION)} cols", s, t.num_rows)
        worst = max(sec for label, sec, _ in results if "all columns" not in label)
        print(f"slowest projected load: {worst:.2f} s (goal < 2 s)")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
