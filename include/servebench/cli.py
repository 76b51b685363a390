"""``servebench`` command line: validate a sweep, smoke-test its variants, print a run's
summary."""

from __future__ import annotations

import argparse
import sys

from servebench.config import SpecError
from servebench.notify.digest import gate_lines, summary_table
from servebench.settings import get_settings


def _plan(args: argparse.Namespace) -> int:
    from servebench.pipeline import plan_run

    try:
        plan = plan_run(args.sweep)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"{plan['sweep_file']}: {len(plan['units'])} units OK")
    for unit in plan["units"]:
        print(f"  {unit['stack']:<14} {unit['unit_id']}")
    for warning in plan["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _summary(args: argparse.Namespace) -> int:
    from servebench.pipeline import open_store

    settings = get_settings()
    store = open_store(settings)
    runs = store.read_table("runs").to_pandas()
    if runs.empty:
        print(f"no committed runs under {settings.results_uri}", file=sys.stderr)
        return 1
    if args.run_id:
        run_id = args.run_id
    else:
        run_id = runs.sort_values("finished_at").iloc[-1]["run_id"]
    cells = store.read_table("cells", run_ids=[run_id]).to_pandas()
    run = runs[runs["run_id"] == run_id].iloc[0]
    print(f"run {run_id}  sweep {run['sweep_name']}  git {str(run['suite_git_sha'])[:10]}")
    print(f"hardware: {run['hardware']}")
    print(summary_table(cells))
    gates = gate_lines(cells)
    if gates:
        print("\nquality gate (golden set, same endpoint and sampling):")
        for line in gates:
            print("  " + line)
    print(f"cells: {run['n_ok']} ok, {run['n_invalid']} invalid, {run['n_failed']} failed")
    print(f"results: {settings.results_uri}  (tables runs, cells, requests, evals, regressions)")
    digests = [f for f in store.find(f"digests/date={run['run_date']}") if f.endswith(".md")]
    if digests:
        print("digest: " + ", ".join(digests))
    bad = cells[cells["status"] != "ok"].sort_values("cell_id")
    if args.require_ok and not bad.empty:
        print(f"\nFAILED: {len(bad)} of {len(cells)} cells are not ok:", file=sys.stderr)
        for cell in bad.itertuples():
            reason = str(cell.reason or "").splitlines()[0][:300]
            print(f"  {cell.cell_id}: {cell.status}: {reason}", file=sys.stderr)
        return 1
    return 0


def _smoke(args: argparse.Namespace) -> int:
    import logging
    import tempfile
    from pathlib import Path

    from servebench.config import load_sweep
    from servebench.smoke import smoke_sweep

    logging.basicConfig(level=logging.WARNING)
    settings = get_settings()
    sweep = args.sweep or str(settings.resolve(settings.sweep))
    try:
        spec = load_sweep(sweep)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="servebench-smoke-") as state:
        results = smoke_sweep(spec, settings, Path(state), stacks=set(args.stack or ()))
    for result in results:
        print(("ok    " if result.ok else "FAIL  ") + result.line(),
              file=sys.stdout if result.ok else sys.stderr)
    failed = [r for r in results if not r.ok]
    if failed:
        print(f"{sweep}: {len(failed)} of {len(results)} variants do not serve", file=sys.stderr)
        return 1
    if not results:
        print(f"{sweep}: no launchable variant matched", file=sys.stderr)
        return 1
    return 0


def _trends_replay(args: argparse.Namespace) -> int:
    from servebench.trends.replay import HistoryError, read_history, replay

    try:
        history = read_history(args.history)
    except HistoryError as exc:
        print(exc, file=sys.stderr)
        return 2
    alerts = replay(history)
    alerts.to_csv(args.out, index=False)
    worse = int((alerts["direction"] == "worse").sum())
    print(f"{len(history)} series: {len(alerts)} alerts ({worse} worse, "
          f"{len(alerts) - worse} better) -> {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="servebench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="validate a sweep spec and list its units")
    plan.add_argument("sweep", nargs="?", default=None)
    plan.set_defaults(fn=_plan)
    summary = sub.add_parser("summary", help="print the summary table of a run")
    group = summary.add_mutually_exclusive_group()
    group.add_argument("--run-id")
    group.add_argument("--latest", action="store_true", help="the newest committed run")
    summary.add_argument("--require-ok", action="store_true",
                         help="exit 1, listing them, when any cell is not ok")
    summary.set_defaults(fn=_summary)
    smoke = sub.add_parser("smoke", help="launch each variant once and send it a batch of "
                                         "requests: does it serve at all?")
    smoke.add_argument("sweep", nargs="?", default=None)
    smoke.add_argument("--stack", action="append", help="only variants of this stack")
    smoke.set_defaults(fn=_smoke)
    trends = sub.add_parser("trends", help="nightly change points")
    trends_sub = trends.add_subparsers(dest="trends_command", required=True)
    replay = trends_sub.add_parser(
        "replay", help="replay a long-format history night by night through the detector")
    replay.add_argument("history", help="Parquet: series_id, metric, direction, night, date, "
                                        "value[, binomial_n]")
    replay.add_argument("--out", required=True, help="alerts CSV to write")
    replay.set_defaults(fn=_trends_replay)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
