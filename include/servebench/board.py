"""The Benchmarks board: the page the Airflow UI's "Benchmarks" entry shows (``plugins/
servebench_plugin.py`` mounts :func:`create_app` in the API server), read from the results
store the DAGs publish to.

One page, newest first: the latest runs (cells ok / invalid / failed, what they paid, a link to
each run's HTML report), what the last nights raised (regressions, improvements, newly failing
cells, host changes, gate failures), the quality-gate verdicts of the latest run of each sweep,
the release gates' verdicts of the last weeks (``gate_verdicts``) and, per target, a trend
chart of its variants over the last nights (output tok/s and TTFT p95, change nights marked).
Every value from a run is escaped; the charts are inline PNGs, so the page works inside the
UI's iframe and behind a proxy alike.
"""

from __future__ import annotations

import base64
import logging
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:  # the plugin imports this module in every Airflow process: keep it light
    from servebench.results.store import ResultStore
    from servebench.settings import Settings

log = logging.getLogger(__name__)

RUNS_SHOWN = 15
ALERT_NIGHTS = 7  # alerts raised by the runs of the last week
TREND_METRICS = ("output_throughput", "ttft_ms_p95")
GATE_FAILURES = ("gate_failure", "Quality gate failures")
RELEASE_GATE_DAYS = 30  # release-gate verdicts of the last month
OUTCOMES = {"ship": ("may ship", "improvement"), "blocked": ("blocked", "regression"),
            "needs_person": ("needs a person", "host_change")}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px 24px; color: #1f2933; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin-top: 24px;
border-bottom: 1px solid #ddd; } table { border-collapse: collapse; font-size: 12.5px; }
th, td { border: 1px solid #d5dbe1; padding: 3px 7px; } td.num { text-align: right; }
th { background: #f1f4f7; } .regression, .gate_failure, .newly_failing { color: #c0392b; }
.improvement { color: #1e8449; } .host_change { color: #b9770e; }
img { max-width: 100%; border: 1px solid #eee; margin: 6px 8px 12px 0; }
code { background: #f4f4f4; padding: 1px 4px; } .muted { color: #6b7785; }
"""


def _img(png: bytes, alt: str) -> str:
    return (f'<img alt="{escape(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')


def _num(value, fmt: str) -> str:
    import pandas as pd

    return "-" if value is None or pd.isna(value) else format(value, fmt)


def render_board(store: ResultStore, *, runs_shown: int = RUNS_SHOWN) -> str:
    """The board's HTML from what ``store`` has committed."""
    from servebench.notify.charts import variants_trend_chart
    from servebench.notify.digest import KIND_TITLES, alert_line, fmt_text, gate_lines
    from servebench.trends.nightly import load_history

    out = [("<!doctype html><html><head><meta charset='utf-8'><title>servebench: "
            f"Benchmarks</title><style>{STYLE}</style></head><body>"),
           "<h1>servebench benchmarks</h1>",
           f"<p class='muted'>results: <code>{escape(store.uri)}</code></p>"]
    runs = store.read_table("runs").to_pandas()
    if runs.empty:
        out.append("<p>No committed runs yet: trigger <code>nightly_benchmark</code>.</p>")
        return "\n".join([*out, *_release_gates(store), "</body></html>"])
    runs = runs.sort_values(["logical_date", "finished_at"], ascending=False)

    out.append("<h2>Latest runs</h2><table><tr><th>date</th><th>sweep</th><th>DAG</th>"
               "<th>run</th><th>cells</th><th>ok</th><th>invalid</th><th>failed</th>"
               "<th>paid USD</th><th>report</th></tr>")
    for r in runs.head(runs_shown).to_dict("records"):
        report = f"<a href='report?run_id={escape(quote(r['run_id']), quote=True)}'>open</a>"
        out.append(
            f"<tr><td>{escape(fmt_text(r['run_date']))}</td><td>{escape(r['sweep_name'])}</td>"
            f"<td>{escape(fmt_text(r['dag_id']))}"
            # an ad-hoc trigger: judged against the nights, never one of them
            + (" <span class='muted'>(ad hoc)</span>"
               if r.get("nightly") == False else "")  # noqa: E712 (a numpy bool, or None)
            + f"</td><td><code>{escape(r['run_id'])}</code></td>"
            + "".join(f"<td class='num'>{_num(r[k], 'd')}</td>"
                      for k in ("n_cells", "n_ok", "n_invalid", "n_failed"))
            + f"<td class='num'>{_num(r.get('paid_usd'), '.4f')}</td><td>{report}</td></tr>")
    out.append("</table>")

    recent = runs.head(ALERT_NIGHTS * runs["sweep_name"].nunique())
    alerts = store.read_table("regressions", run_ids=recent["run_id"].tolist()).to_pandas()
    out.append(f"<h2>Raised in the last {ALERT_NIGHTS} nights</h2>")
    if alerts.empty:
        out.append("<p>Nothing: no regressions, improvements, failing cells or gate "
                   "failures.</p>")
    for kind, title in (*KIND_TITLES, GATE_FAILURES):
        rows = alerts[alerts["kind"] == kind].sort_values("run_date", ascending=False)
        if rows.empty:
            continue
        out.append(f"<h3 class='{kind}'>{escape(title)} ({len(rows)})</h3><ul>")
        for row in rows.to_dict("records"):
            line = (alert_line(row) if kind != "gate_failure"
                    else f"{row['target']} / {row['variant']}: {fmt_text(row.get('reason'))}")
            out.append(f"<li>{escape(fmt_text(row['run_date']))}: {escape(line)}"
                       + (f"; cause: {escape(fmt_text(row['cause']))}"
                          if kind in ("regression", "improvement") else "") + "</li>")
        out.append("</ul>")

    latest = runs.drop_duplicates(["sweep_name", "dag_id"])  # newest run of each sweep
    out.append("<h2>Quality gate (latest run of each sweep)</h2>")
    for r in latest.to_dict("records"):
        cells = store.read_table("cells", run_ids=[r["run_id"]]).to_pandas()
        lines = gate_lines(cells)
        out.append(f"<p><strong>{escape(r['sweep_name'])}</strong> "
                   f"({escape(fmt_text(r['run_date']))})</p>")
        out.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"
                   if lines else "<p class='muted'>no gated variants</p>")

    out += _release_gates(store)

    out.append("<h2>Trends</h2>")
    for r in latest.to_dict("records"):
        _, _, series = load_history(store, r["run_id"])
        sweep_alerts = alerts[alerts["run_id"].isin(runs[runs["sweep_name"] == r["sweep_name"]]
                                                    ["run_id"])]
        for target in sorted(series["target"].dropna().unique()):
            pngs = [png for metric in TREND_METRICS
                    if (png := variants_trend_chart(series, target, metric, sweep_alerts))]
            if pngs:
                out.append(f"<h3>{escape(r['sweep_name'])} / {escape(target)}</h3>")
                out += [_img(png, f"{target} trend") for png in pngs]
    out.append("</body></html>")
    return "\n".join(out)


def _release_gates(store: ResultStore) -> list[str]:
    """The release gates of the last ``RELEASE_GATE_DAYS``, newest first: candidate vs
    baseline, what it means for the release, and every metric that did not pass."""
    import datetime as dt

    import pandas as pd

    from servebench.notify.digest import fmt_text
    from servebench.trends.series import metric_label

    since = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=RELEASE_GATE_DAYS)
    rows = store.read_log("gate_verdicts", since=since).to_pandas()
    if rows.empty:
        return []
    out = [f"<h2>Release gates (last {RELEASE_GATE_DAYS} days)</h2><table><tr><th>decided</th>"
           "<th>target</th><th>candidate vs baseline</th><th>outcome</th><th>not passed</th>"
           "<th>run</th></tr>"]
    for run_id, gate in sorted(rows.groupby("run_id"), key=lambda g: g[1]["decided_at"].max(),
                               reverse=True):
        first = gate.iloc[0]
        word, css = OUTCOMES.get(first["outcome"], (first["outcome"], ""))
        open_ = []
        for r in gate[gate["verdict"] != "pass"].to_dict("records"):
            where = (f"{r['workload']} {r['load_point']} " if r["metric"] != "quality" else "")
            what = ("quality" if r["metric"] == "quality" else metric_label(r["metric"]))
            mean = (f" {r['worse_mean']:+.1%} worse" if pd.notna(r["worse_mean"]) else "")
            open_.append(f"{where}{what}: {r['verdict']}{mean}")
        out.append(
            f"<tr><td>{escape(fmt_text(first['decided_at']))}</td>"
            f"<td>{escape(first['target'])}</td>"
            f"<td>{escape(first['candidate'])} vs {escape(fmt_text(first['baseline']))}</td>"
            f"<td class='{css}'><strong>{escape(word)}</strong></td>"
            f"<td>{escape('; '.join(open_) or 'none')}</td>"
            f"<td><code>{escape(run_id)}</code></td></tr>")
    out.append("</table>")
    return out


def run_report(store: ResultStore, run_id: str) -> str | None:
    """The HTML report the digest wrote beside run ``run_id``'s data, if any."""
    from servebench.notify.html import report_path

    found = store.read_table("runs", run_ids=[run_id]).to_pylist()
    data = store.get_bytes(report_path(str(found[0]["run_date"]), run_id)) if found else None
    return data.decode() if data is not None else None


def create_app(settings: Settings | None = None):
    """The FastAPI app the plugin mounts: ``/`` the board, ``/report?run_id=`` a run's HTML
    report. Reading it takes the right to read the DAG runs whose results it shows."""
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
    )
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse

    app = FastAPI(title="servebench benchmarks",
                  dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))])

    def store() -> ResultStore:
        from servebench.connections import open_store
        from servebench.settings import get_settings

        return open_store(settings or get_settings())

    @app.get("/", response_class=HTMLResponse)
    def board() -> str:  # sync: FastAPI runs it in its thread pool (Parquet, matplotlib)
        return render_board(store())

    @app.get("/report", response_class=HTMLResponse)
    def report(run_id: str) -> str:
        text = run_report(store(), run_id)
        if text is None:
            raise HTTPException(status_code=404, detail=f"no report for run {run_id}")
        return text

    return app
