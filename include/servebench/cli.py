"""``servebench``: the command line over the library functions the DAGs call (typer + rich).

``validate`` a sweep, ``smoke``-test its variants, print a run's ``summary``, ``compare`` two
runs cell by cell with their gate verdicts, query the ``history`` with DuckDB, (re)write a
run's HTML ``report``, ``trends replay`` a history through the nightly detector, and
``trends redetect`` a sweep's stored nights again.
"""

from __future__ import annotations

import signal
import sys

import click
import typer
from rich.console import Console
from rich.table import Table

from servebench.canary import canary_lines
from servebench.defaults import NIGHTLY_DAG_ID
from servebench.errors import SpecError
from servebench.notify.digest import (
    fmt_num,
    gate_lines,
    memory_lines,
    summary_table,
)
from servebench.notify.energy import energy_lines
from servebench.notify.speculation import speculation_lines
from servebench.settings import get_settings

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Nightly benchmarks of LLM serving stacks, from a terminal: the same "
                       "library functions the DAGs call.")
trends_app = typer.Typer(no_args_is_help=True, help="nightly change points")
app.add_typer(trends_app, name="trends")
console = Console(highlight=False)


def _validate(sweep: str | None) -> int:
    from servebench.pipeline import plan_run

    try:
        plan = plan_run(sweep)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    refused = [u for u in plan["units"] if u.get("refused")]
    print(f"{plan['sweep_file']}: {len(plan['units'])} units OK"
          + (f", {len(refused)} refused on this worker (their cells will be stored failed)"
             if refused else ""))
    for unit in plan["units"]:
        print(f"  {unit['stack']:<14} {unit['unit_id']}"
              + ("  (refused: this worker's hardware)" if unit.get("refused") else ""))
    if plan["requests"]:
        print(f"  {len(plan['requests'])} cells sized by load.auto_requests (the plan task's "
              "log says why)")
    for warning in plan["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _summary(run_id: str | None, require_ok: bool) -> int:
    from servebench.connections import open_store

    settings = get_settings()
    store = open_store(settings)
    runs = store.read_table("runs").to_pandas()
    if runs.empty:
        print(f"no committed runs under {settings.results_uri}", file=sys.stderr)
        return 1
    run_id = run_id or runs.sort_values("finished_at").iloc[-1]["run_id"]
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
    memory = memory_lines(cells)
    if memory:
        print("\nmemory (weights, KV-cache capacity, peak memory from launch to stop):")
        for line in memory:
            print("  " + line)
    energy = energy_lines(cells)
    if energy:
        print("\nenergy (the host's counter over each cell's measured window):")
        for line in energy:
            print("  " + line)
    speculation = speculation_lines(cells)
    if speculation:
        print("\nspeculative decoding (the engine's counters over each cell):")
        for line in speculation:
            print("  " + line)
    host = canary_lines(store.read_table("units").to_pandas(), runs, run_id)
    if host:
        print("\nthe host (its canary before each unit's launch and after its stop):")
        for line in host:
            print("  " + line)
    print(f"cells: {run['n_ok']} ok, {run['n_invalid']} invalid, {run['n_failed']} failed")
    print(f"results: {settings.results_uri}  (tables runs, cells, requests, evals, units, "
          "hosts, changes)")
    digests = [f for f in store.find(f"digests/date={run['run_date']}") if f.endswith(".md")]
    if digests:
        print("digest: " + ", ".join(digests))
    from servebench.plan import REFUSED

    bad = cells[cells["status"] != "ok"].sort_values("cell_id")
    # what this worker's hardware cannot run (W4A16 on vLLM's CPU build without AVX-512F) is
    # no failure of the run: said, not fatal
    refused = bad["reason"].fillna("").str.startswith(REFUSED)
    if require_ok and refused.any():
        variants = sorted(set(bad[refused]["target"] + "/" + bad[refused]["variant"]))
        print(f"\nrefused on this worker's hardware ({refused.sum()} cells): "
              + ", ".join(variants), file=sys.stderr)
        for reason in sorted(set(bad[refused]["reason"])):
            print(f"  {reason.splitlines()[0][:300]}", file=sys.stderr)
    bad = bad[~refused]
    if require_ok and not bad.empty:
        print(f"\nFAILED: {len(bad)} of {len(cells)} cells are not ok:", file=sys.stderr)
        for cell in bad.itertuples():
            reason = str(cell.reason or "").splitlines()[0][:300]
            print(f"  {cell.cell_id}: {cell.status}: {reason}", file=sys.stderr)
        return 1
    return 0


def _smoke(sweep: str | None, stacks: list[str] | None) -> int:
    import logging
    import tempfile
    from pathlib import Path

    from servebench.config import load_sweep
    from servebench.smoke import smoke_sweep

    logging.basicConfig(level=logging.WARNING)
    settings = get_settings()
    sweep = sweep or str(settings.resolve(settings.sweep))
    try:
        spec = load_sweep(sweep)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="servebench-smoke-") as state:
        results = smoke_sweep(spec, settings, Path(state), stacks=set(stacks or ()))
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


def _trends_replay(history_path: str, out: str, detectability: bool = False) -> int:
    from servebench.errors import HistoryError
    from servebench.trends.replay import (
        calibrate,
        calibration_summary,
        read_history,
        replay,
    )

    try:
        history = read_history(history_path)
    except HistoryError as exc:
        print(exc, file=sys.stderr)
        return 2
    alerts = replay(history)
    alerts.to_csv(out, index=False)
    worse = int((alerts["direction"] == "worse").sum())
    print(f"{len(history)} series: {len(alerts)} alerts ({worse} worse, "
          f"{len(alerts) - worse} better) -> {out}")
    if detectability:
        found = calibration_summary(calibrate(history, alerts=alerts))
        print(f"what each series claims to catch, injected at {found['injected']} quiet nights "
              f"({found['judged']} judged; {found['too_short']} too short, "
              f"{found['none_caught']} catching no step): raised within three nights "
              f"{found['raised']:.1%}, half that step {found['raised_half']:.1%}; median "
              f"claim {found['median_step']:.1%}")
    return 0


def compare_runs(run_a: str, run_b: str) -> Table:
    """Cell by cell (``servebench.view.compare``): each compared statistic a -> b with its change,
    both statuses and gate verdicts (a cell one run lacks shows '-' on that side)."""
    from servebench.connections import open_store
    from servebench.view.compare import compare_cells, shown_columns

    store = open_store(get_settings())
    cells = store.read_table("cells", run_ids=[run_a, run_b]).to_pandas()
    for run in (run_a, run_b):
        if not (cells["run_id"] == run).any():
            raise click.BadParameter(f"run {run!r} is not committed in {store.uri}")
    rows = compare_cells(cells, run_a, run_b)
    columns = shown_columns(rows)
    table = Table(title=f"{run_a} -> {run_b}")
    for name in ("target / variant", "workload", "load"):
        table.add_column(name)
    for _, label in columns:
        table.add_column(label, justify="right")
    table.add_column("status")
    table.add_column("gate")
    for r in rows:
        row = [f"{r['target']} / {r['variant']}", str(r["workload"]), str(r["load_point"])]
        for column, _ in columns:
            va, vb, pct = r[column]
            row.append(f"{fmt_num(va)} -> {fmt_num(vb)} "
                       f"({'-' if pct is None else f'{pct:+.1f}%'})")
        row.append(" -> ".join(s or "-" for s in r["status"]))
        row.append(" -> ".join(g or "-" for g in r["gate"]))
        table.add_row(*row)
    return table


def history_table(metric: str, target: str | None, variant: str | None, since: str | None,
                  limit: int) -> Table:
    """The newest ``limit`` ok cells' ``metric`` over committed runs, via DuckDB."""
    import pyarrow as pa

    from servebench.connections import open_store
    from servebench.results.history import duckdb_connection
    from servebench.results.schema import CELLS

    field = CELLS.field(metric) if metric in CELLS.names else None
    if field is None or not (pa.types.is_floating(field.type) or pa.types.is_integer(field.type)):
        numeric = sorted(f.name for f in CELLS if pa.types.is_floating(f.type))
        raise click.BadParameter(f"{metric!r} is not a numeric cells column; one of {numeric}")
    where, params = ["status = 'ok'"], []
    for column, value in (("target", target), ("variant", variant)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    if since:
        where.append("run_date >= CAST(? AS DATE)")
        params.append(since)
    con = duckdb_connection(open_store(get_settings()))
    rows = con.execute(  # the metric is a checked column name, the filters are parameters
        f"select run_date, target, variant, workload, load_point, {metric} from cells "
        f"where {' and '.join(where)} order by run_date desc, target, variant, workload, "
        f"load_point limit {int(limit)}", params).fetchall()
    table = Table(title=f"{metric}, newest first")
    for name in ("date", "target", "variant", "workload", "load"):
        table.add_column(name)
    table.add_column(metric, justify="right")
    for run_date, *key, value in rows:
        table.add_row(str(run_date), *map(str, key), fmt_num(value))
    return table


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_sweep(sweep: str | None, run_id: str | None) -> int:
    """``servebench.run_sweep`` with a progress bar per unit and per cell; interrupted (Ctrl-C,
    SIGTERM), it stops what it started and exits 130."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from servebench import pipeline

    progress = Progress(TextColumn("{task.description:<40}"), BarColumn(),
                        MofNCompleteColumn(), console=console)
    bars: dict[str, int] = {}

    def on_units(plan) -> None:
        bars["units"] = progress.add_task("units", total=len(plan.units))
        bars["cells"] = progress.add_task("cells", total=plan.n_cells)
        progress.start()

    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so every server the run started is
    # stopped and its hosts torn down on the way out
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        summary = pipeline.run_sweep(
            sweep, run_id, on_units=on_units, on_units_done=progress.stop,
            # a recipe's first making takes minutes (llm-compressor); a cached one, none
            on_recipe=lambda unit: print(f"checkpoint of {unit.unit_id}: recipe "
                                         f"{unit.quantized.recipe_hash} -> {unit.quantized.path}",
                                         file=sys.stderr),
            on_unit=lambda unit: progress.update(bars["units"],
                                                 description=f"unit {unit.unit_id}"),
            on_unit_done=lambda unit: progress.advance(bars["units"]),
            on_cell=lambda row: progress.update(
                bars["cells"], advance=1, description=f"cell {row['cell_id']}: {row['status']}"))
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        progress.stop()
        print(f"interrupted ({exc or 'SIGINT'}): the run's servers are stopped and its hosts "
              "torn down; nothing was published", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if summary["stopped"]:
        print(f"the teardown stopped what the run left: {summary['stopped']}", file=sys.stderr)
    print(f"digest: {summary['digest']}")
    return _summary(summary["run_id"], require_ok=False)


# -- commands --------------------------------------------------------------------------------
@app.command("run")
def run_command(sweep: str = typer.Argument(None, help="sweep YAML (default: the settings')"),
                run_id: str = typer.Option(None, "--run-id", help="default: cli__<UTC time>")):
    """Run a sweep end to end without Airflow (its own history: dag_id servebench-cli)."""
    raise typer.Exit(run_sweep(sweep, run_id))


@app.command()
def validate(sweep: str = typer.Argument(None, help="sweep YAML (default: the settings')")):
    """Validate a sweep spec and everything it names; list its units."""
    raise typer.Exit(_validate(sweep))


app.command("plan", hidden=True)(validate)  # its name before `validate`


@app.command("spec-reference")
def spec_reference_command():
    """Print every sweep-spec field (path, type, default, meaning) as a Markdown table."""
    from servebench.spec_reference import spec_reference

    print(spec_reference(), end="")


@app.command()
def summary(run_id: str = typer.Option(None, "--run-id"),
            latest: bool = typer.Option(False, "--latest", help="the newest committed run"),
            require_ok: bool = typer.Option(False, "--require-ok",
                                            help="exit 1, listing them, when a cell is not "
                                                 "ok (cells refused at plan for this "
                                                 "worker's hardware are listed, not fatal)")):
    """Print the summary table of a run (default: the newest)."""
    if run_id and latest:
        raise click.UsageError("--run-id and --latest exclude each other")
    raise typer.Exit(_summary(run_id, require_ok))


@app.command()
def smoke(sweep: str = typer.Argument(None),
          stack: list[str] = typer.Option(None, "--stack", help="only variants of this stack")):
    """Launch each variant once and send it a batch of requests: does it serve at all?"""
    raise typer.Exit(_smoke(sweep, stack))


@app.command()
def compare(run_a: str, run_b: str):
    """Two committed runs cell by cell: latencies, throughput, status and gate verdicts."""
    console.print(compare_runs(run_a, run_b))


@app.command()
def history(metric: str = typer.Option("ttft_ms_p95", help="a numeric cells column"),
            target: str = typer.Option(None), variant: str = typer.Option(None),
            since: str = typer.Option(None, help="YYYY-MM-DD"),
            limit: int = typer.Option(30, min=1)):
    """A metric over the committed history (DuckDB over the Parquet), newest first."""
    console.print(history_table(metric, target, variant, since, limit))


@app.command()
def report(run_id: str):
    """(Re)write a committed run's self-contained HTML report beside the results."""
    from servebench.pipeline import write_report

    try:
        where = write_report(run_id)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    print(where)


@trends_app.command("replay")
def trends_replay(history: str = typer.Argument(..., help="Parquet: series_id, metric, "
                                                          "direction, night, date, value"),
                  out: str = typer.Option(..., "--out", help="alerts CSV to write"),
                  detectability: bool = typer.Option(
                      False, help="also inject, at two quiet nights of each series, a worse "
                                  "step of the size it claims to catch within three nights "
                                  "(and half of it), and say how often each is raised")):
    """Replay a long-format history night by night through the nightly detector."""
    raise typer.Exit(_trends_replay(history, out, detectability))


@trends_app.command("sizing")
def trends_sizing(run_id: str = typer.Option(None, "--run-id",
                                              help="a committed run (default: the newest "
                                                   "with detectability rows)"),
                  all_cells: bool = typer.Option(False, "--all",
                                                 help="also the series that already catch "
                                                      "their goal")):
    """How many requests each cell needs for its series to catch the sweep's
    detect_at_least (trends.sizing: its night noise split into sampling and launch noise)."""
    raise typer.Exit(_trends_sizing(run_id, all_cells))


def _trends_sizing(run_id: str | None, all_cells: bool) -> int:
    from servebench.connections import open_store
    from servebench.trends.sizing import size_cells

    store = open_store(get_settings())
    found = store.read_table("detectability", columns=["run_id", "run_date"]).to_pandas()
    if run_id is None:
        if found.empty:
            print("no committed run has detectability rows yet (the detect task writes them "
                  "once a series has enough nights)", file=sys.stderr)
            return 1
        run_id = found.sort_values(["run_date", "run_id"]).iloc[-1]["run_id"]
    rows = store.read_table("detectability", run_ids=[run_id]).to_pandas()
    if rows.empty:
        raise click.BadParameter(f"run {run_id!r} has no detectability rows", param_hint="--run-id")
    sizes = size_cells(rows, store.read_table("cells", run_ids=[run_id]).to_pandas(),
                       store.read_table("requests", run_ids=[run_id]).to_pandas())
    table = Table("cell", "metric", "n", "catches", "goal", "night", "sampling", "launch",
                  "to catch the goal", title=f"requests to catch detect_at_least, {run_id}")
    for size in sizes:
        if size.detectable <= size.goal and not all_cells:
            continue
        table.add_row(f"{size.target}/{size.variant}/{size.workload}/{size.load_point}",
                      size.metric, str(size.requests), f"{size.detectable:.1%}",
                      f"{size.goal:.0%}", f"{size.night_noise:.1%}",
                      f"{size.sampling_noise:.1%}", f"{size.launch_noise:.1%}", size.reason)
    console.print(table)
    return 0


@trends_app.command("redetect")
def trends_redetect(sweep: str = typer.Argument(..., help="the sweep's name (its `name:`)"),
                    dag: str = typer.Option(NIGHTLY_DAG_ID, "--dag", help="DAG id"),
                    since: str = typer.Option(None, "--since",
                                              help="first night to judge again (YYYY-MM-DD)")):
    """Detect a sweep's committed nights again, oldest first, as the nightly detect task does
    (after an annotation written late, or a new detector); each night's changes replaced."""
    import datetime as dt

    from servebench.trends.step import redetect

    try:
        first = dt.date.fromisoformat(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(f"--since {since!r}: {exc}") from exc
    try:
        nights = redetect(sweep, dag_id=dag, since=first)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    table = Table("night", "run", "alerts")
    for night in nights:
        alerts = ", ".join(f"{kind} {n}" for kind, n in night["alerts"].items())
        table.add_row(str(night["run_date"]), night["run_id"], alerts or "-")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    """The console script; returns the exit status (usage errors: 2)."""
    try:
        result = app(args=argv, prog_name="servebench", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
