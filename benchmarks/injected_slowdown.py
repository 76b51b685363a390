#!/usr/bin/env python3
"""A slowdown nothing records, injected into one variant of a cut of the local default, and
what the morning after says: how many are posted as confirmed regressions the first morning,
how many alerts null nights post, and what the confirmation costs a night.

The cut: the local default's llama.cpp target as two variants (the f16 baseline ``steady``
and a q8_0 ``victim``), one thread and one slot each, its fixed 32x32 workload of 24 requests
at concurrency 1, the local default's trends settings (``trends.min_change`` 0.5%, confirm
3 relaunches a side). ``--baseline`` plain nights are run once; each trial is one more night
on a copy of that history: a null night, or one with a CPU hog pinned to the victim's core
for a share of each tenth of a second (its duty, ``--duty-15``/``--duty-30``; started by a
wrapper of llama-server's binary, as a noisy neighbour would be), staying through the
morning's relaunches. The victim's server is pinned to that core on every night. Trials are
interleaved (null, 15%, null, 30%, ...) so the host's slow spells fall on every kind alike.
The realized slowdown is said beside each kind: how much longer the victim took for its tokens
than steady (output tok/s) on the trial night, over the same ratio's median on the baseline
nights (one night's, so its spread is the night's noise as well as the hog's).

  .venv/bin/python benchmarks/injected_slowdown.py [--trials 10] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from servebench import pipeline
from servebench.results.store import ResultStore
from servebench.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]
WRAPPER = """#!/bin/sh
# llama-server; the victim's pinned to core 0, with a hog of duty $(cat {marker}) beside it
# while {marker} exists
real="{real}"
case "$*" in
  *adder-3m-q8_0.gguf*)
    if [ -e "{marker}" ]; then
      taskset -c 0 "{python}" -c "{hog}" "$(cat {marker})" &
    fi
    exec taskset -c 0 "$real" "$@";;
esac
exec "$real" "$@"
"""
# busy for duty of every 0.1 s, asleep for the rest; gone when its server is (its parent)
HOG = ("import os, sys, time\n"
       "duty, parent = float(sys.argv[1]), os.getppid()\n"
       "while os.getppid() == parent:\n"
       "    t = time.perf_counter()\n"
       "    while time.perf_counter() - t < 0.1 * duty: pass\n"
       "    time.sleep(0.1 * (1 - duty))\n")
SUSPECT = ("ttft_ms_p50", "tpot_ms_p50", "output_throughput")


def sweep(path: Path) -> None:
    data = yaml.safe_load((ROOT / "include/sweeps/local.yaml").read_text())
    common = {"max_num_seqs": 1, "max_model_len": 512, "threads": 1}
    data.update(name="injected", cross_stack=[], workloads=[
        {"kind": "fixed", "name": "fixed-32x32", "input_tokens": 64, "output_tokens": 32,
         "num_requests": 24}])
    data["load"]["concurrency"] = [1]
    data["targets"] = [{"name": "adder", "stack": "llama_cpp", "baseline": "steady",
                        "golden_sets": [], "variants": [
                            {"name": "steady", "model": "build/models/adder-3m-f16.gguf",
                             "quant": "f16", **common},
                            {"name": "victim", "model": "build/models/adder-3m-q8_0.gguf",
                             "quant": "q8_0", **common}]}]
    path.write_text(yaml.safe_dump(data))


def wrapped_bin(work: Path, marker: Path) -> Path:
    real = get_settings().llama_bin
    out = work / "bin"
    out.mkdir(parents=True, exist_ok=True)
    server = out / "llama-server"
    # the marker holds the hog's duty; the wrapper passes it as the hog's argument
    server.write_text(WRAPPER.format(real=real / "llama-server", marker=marker,
                                     python=sys.executable, hog=HOG))
    server.chmod(server.stat().st_mode | stat.S_IEXEC)
    for other in real.iterdir():
        if other.name != "llama-server" and not (out / other.name).exists():
            os.symlink(other, out / other.name)
    return out


def night(sweep_path: Path, data: Path, runs: Path, run_id: str) -> dict:
    os.environ["SERVEBENCH_RESULTS_URI"] = str(data)
    os.environ["SERVEBENCH_WORK_DIR"] = str(runs)
    return pipeline.run_sweep(str(sweep_path), run_id=run_id)


def _ratio(store: ResultStore, run_ids: list[str]) -> list[float]:
    """Per night, how much longer the victim takes for its tokens than steady: steady's
    output tok/s over the victim's."""
    cells = store.read_table("cells", run_ids=run_ids).to_pandas()
    cells = cells[cells["status"] == "ok"]
    out = []
    for run_id in run_ids:
        mine = cells[cells["run_id"] == run_id].set_index("variant")["output_throughput"]
        if {"steady", "victim"} <= set(mine.index):
            out.append(float(mine["steady"] / mine["victim"]))
    return out


def trial(kind: str, duty: float | None, base: Path, work: Path, sweep_path: Path,
          marker: Path, index: int, base_ratio: float) -> dict:
    data = work / f"trial-{index}"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(base, data)
    run_id = f"trial-{index}-{kind.replace('%', 'pct')}"
    if duty is not None:
        marker.write_text(f"{duty}")
    started = time.monotonic()
    try:
        summary = night(sweep_path, data, work / "runs", run_id)
    finally:
        marker.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    store = ResultStore(str(data))
    changes = store.read_table("changes", run_ids=[run_id]).to_pandas()
    found = store.read_table("confirmations", run_ids=[run_id]).to_pandas()
    posted = changes[changes["kind"].isin(["regression", "host_change", "improvement"])]
    victim = posted[(posted["variant"] == "victim") & (posted["kind"] == "regression")]
    confirmed = victim[victim["confirmation"].fillna("").str.startswith("confirmed")]
    [ratio] = _ratio(store, [run_id]) or [float("nan")]
    # the victim's confirmed series its own nights did not make suspects: found against
    # steady's same night alone (trends.confirm.find_suspects)
    against = {r["metric"] for r in found.to_dict("records")
               if r["variant"] == "victim" and r.get("against")}
    return {
        "trial": index, "kind": kind, "duty": duty, "run_id": run_id, "seconds": seconds,
        "realized": ratio / base_ratio - 1,
        "posted": posted[["variant", "metric", "kind"]].to_dict("records"),
        "victim_confirmed": sorted(set(confirmed["metric"]) & set(SUSPECT)),
        "victim_confirmed_against_steady_only": sorted(
            set(confirmed["metric"]) & set(SUSPECT) & against),
        "verdicts": found[["variant", "metric", "verdict"]].to_dict("records"),
        "confirm_s": float(found.drop_duplicates("variant")["seconds"].fillna(0).sum())
        if not found.empty else 0.0,
        "confirmations": summary.get("confirmations", {}),
    }


def report(rows: list[dict]) -> None:
    print("| kind | trials | realized slowdown (median, quartiles) | posted and confirmed the first "
          "morning | of which on steady's night alone | nights posting any alert | alerts "
          "posted | confirm s a night (median, max) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in ("null", "15%", "30%"):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        caught = sum(bool(r["victim_confirmed"]) for r in mine)
        # caught only through a series its own nights did not make a suspect
        alone = sum(bool(r["victim_confirmed"]) and set(r["victim_confirmed"])
                    <= set(r["victim_confirmed_against_steady_only"]) for r in mine)
        alerting = sum(bool(r["posted"]) for r in mine)
        alerts = sum(len(r["posted"]) for r in mine)
        cost = [r["confirm_s"] for r in mine]
        realized = np.nanpercentile([r["realized"] for r in mine], [25, 50, 75])
        print(f"| {kind} | {len(mine)} | {realized[1]:+.0%} ({realized[0]:+.0%}, "
              f"{realized[2]:+.0%}) | "
              f"{'-' if kind == 'null' else f'{caught} of {len(mine)}'} | "
              f"{'-' if kind == 'null' else alone} | "
              f"{alerting} of {len(mine)} | {alerts} | "
              f"{np.median(cost):.0f}, {max(cost):.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10, help="injections of each size; "
                    "twice as many null nights")
    ap.add_argument("--baseline", type=int, default=7)
    ap.add_argument("--duty-15", type=float, default=0.33)
    ap.add_argument("--duty-30", type=float, default=0.5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/servebench-injected"))
    args = ap.parse_args()
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    marker = work / "hog"
    os.environ["SERVEBENCH_LLAMA_BIN"] = str(wrapped_bin(work, marker))
    os.environ.pop("SLACK_BOT_TOKEN", None)
    sweep_path = work / "injected.yaml"
    sweep(sweep_path)
    base = work / "baseline"
    started = time.monotonic()
    for n in range(args.baseline):
        night(sweep_path, base, work / "runs", f"night-{n}")
    base_ratio = float(np.median(_ratio(ResultStore(str(base)),
                                        [f"night-{n}" for n in range(args.baseline)])))
    print(f"{args.baseline} baseline nights in {time.monotonic() - started:.0f} s; "
          f"steady/victim output tok/s {base_ratio:.3f}", flush=True)
    kinds = [("null", None), ("15%", args.duty_15), ("null", None), ("30%", args.duty_30)]
    rows = []
    for i in range(args.trials * 2 * len(kinds) // 2):  # null twice a cycle
        kind, duty = kinds[i % len(kinds)]
        row = trial(kind, duty, base, work, sweep_path, marker, i, base_ratio)
        rows.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(work / f"trial-{i}", ignore_errors=True)
    (work / "trials.json").write_text(json.dumps(rows, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
