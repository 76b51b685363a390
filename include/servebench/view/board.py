"""The Benchmarks board: the page the Airflow UI's "Benchmarks" entry shows (``plugins/
servebench_plugin.py`` mounts :func:`create_app` in the API server), read from the results
store the DAGs publish to.

The board, newest first: the latest runs (cells ok / invalid / failed, what they paid, a link
to each run's HTML report), what the last nights raised (regressions, improvements, newly
failing cells, host changes, gate failures), the quality-gate verdicts of the latest run of
each sweep, the release gates' verdicts of the last weeks (``gate_verdicts``; one that needed
a person says who decided what, and when) and, per target, trend panels over the last nights
(``notify.panels``: one per workload x load point, a line per variant, each night's value,
run and what changed on hover, change nights marked, what each line catches within three
nights under it), narrowed by a form (target, variant,
workload, load point, metric, nights), and the latest night's latency vs throughput curve of
each variant across its load points. Each raised line is built as HTML and links to its
page (``render_finding``: the series' chart with the noise band, before -> after, the
provenance of the runs on either side of the change, both runs' reports, what the series
caught within three nights before it; for a newly failing cell or a gate failure, its nights
and what it measured); two runs can be put side by side
(``render_compare``, what ``servebench compare`` prints). Every value from a run is escaped;
the charts are inline SVG and PNG, so the pages work inside the UI's iframe and behind a
proxy alike, with nothing fetched at view time.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

from servebench.metric_catalogue import ACCURACY, VIEWS, metric_label

if TYPE_CHECKING:  # the plugin imports this module in every Airflow process: keep it light
    import pandas as pd

    from servebench.results.store import ResultStore
    from servebench.settings import Settings

log = logging.getLogger(__name__)

RUNS_SHOWN = 15
ALERT_NIGHTS = 7  # alerts raised by the runs of the last week
TREND_METRICS = VIEWS["board"]  # the trend panels unless a metric is picked
GATE_FAILURES = ("gate_failure", "Quality gate failures")
RELEASE_GATE_DAYS = 30  # release-gate verdicts of the last month
OUTCOMES = {"ship": ("may ship", "improvement"), "blocked": ("blocked", "regression"),
            "needs_person": ("needs a person", "host_change")}
# a person's decision on a gate that needed one: its colour (unanswered and rejected alike)
PERSON_DECISIONS = {"approved": "improvement", "rejected": "regression"}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px 24px; color: #1f2933; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin-top: 24px;
border-bottom: 1px solid #ddd; } table { border-collapse: collapse; font-size: 12.5px; }
th, td { border: 1px solid #d5dbe1; padding: 3px 7px; } td.num { text-align: right; }
th { background: #f1f4f7; } .regression, .gate_failure, .newly_failing { color: #c0392b; }
.improvement { color: #1e8449; } .host_change { color: #b9770e; } .unconfirmed { color: #6b7785; }
img { max-width: 100%; border: 1px solid #eee; margin: 6px 8px 12px 0; }
form.filters label { margin-right: 10px; } tr.differs td { background: #fff4e5; }
tr.same td { color: #6b7785; }
code { background: #f4f4f4; padding: 1px 4px; } .muted { color: #6b7785; }
"""


def _img(png: bytes, alt: str) -> str:
    return (f'<img alt="{escape(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')


def _num(value, fmt: str) -> str:
    import pandas as pd

    return "-" if value is None or pd.isna(value) else format(value, fmt)


def render_board(store: ResultStore, *, runs_shown: int = RUNS_SHOWN,
                 view: TrendView | None = None) -> str:
    """The board's HTML from what ``store`` has committed; ``view`` narrows its trends."""
    from servebench.notify.charts import NIGHTS_SHOWN, latency_throughput_chart
    from servebench.notify.digest import KIND_TITLES, alert_html, fmt_text, gate_lines
    from servebench.notify.panels import trend_panels
    from servebench.trends.nightly import load_nights

    out = [_head("servebench: Benchmarks"), "<h1>servebench benchmarks</h1>",
           f"<p class='muted'>results: <code>{escape(store.uri)}</code> · "
           "<a href='compare'>compare two runs</a></p>"]
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
    alerts = store.read_table("changes", run_ids=recent["run_id"].tolist()).to_pandas()
    out.append(f"<h2>Raised in the last {ALERT_NIGHTS} nights</h2>")
    if alerts.empty:
        out.append("<p>Nothing: no regressions, improvements, failing cells or gate "
                   "failures.</p>")
    for kind, title in (*KIND_TITLES, GATE_FAILURES):
        rows = alerts[alerts["kind"] == kind].sort_values("run_date", ascending=False)
        if rows.empty:
            continue
        findings = _findings(rows)
        out.append(f"<h3 class='{kind}'>{escape(title)} ({len(findings)})</h3><ul>")
        for row, nights in findings:
            line = (alert_html(row) if kind != "gate_failure" else
                    escape(f"{row['target']} / {row['variant']}: {fmt_text(row.get('reason'))}"))
            out.append(f"<li>{escape(_nights_text(nights))}: {line}"
                       + (f"; cause: {escape(fmt_text(row['cause']))}"
                          if kind in ("regression", "improvement") else "")
                       + f" {_finding_link(row)}</li>")
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

    import pandas as pd

    out.append("<h2 id='trends'>Trends</h2>")
    view = view or TrendView()
    histories = {r["run_id"]: load_nights(store, r["run_id"]) for r in latest.to_dict("records")}
    out.append(_trend_form(view, pd.concat([h[2] for h in histories.values()],
                                           ignore_index=True)))
    for r in latest.to_dict("records"):
        nights, cells, series = histories[r["run_id"]]
        # every change its nights raised, so an older one in the charts' range is marked too
        sweep_alerts = store.read_table("changes",
                                        run_ids=nights["run_id"].tolist()).to_pandas()
        catches = store.read_table("detectability", run_ids=[r["run_id"]]).to_pandas()
        shown = view.select(series)
        for target in sorted(shown["target"].dropna().unique()):
            panels = [html for metric in view.metrics()
                      if (html := trend_panels(shown, target, metric, sweep_alerts,
                                               nights=view.nights or NIGHTS_SHOWN,
                                               detectability=catches))]
            tonight = cells[cells["run_id"] == r["run_id"]]
            curve = latency_throughput_chart(view.select(tonight), target)
            if panels or curve:
                out.append(f"<h3>{escape(r['sweep_name'])} / {escape(target)}</h3>")
                out += panels
                if curve:
                    out.append(_img(curve, f"{target}: latency vs throughput, latest night"))
    out.append("</body></html>")
    return "\n".join(out)


@dataclass(frozen=True)
class TrendView:
    """What the trend section draws: every value None is all of them."""

    target: str | None = None
    variant: str | None = None
    workload: str | None = None
    load_point: str | None = None
    metric: str | None = None
    nights: int | None = None  # the charts' own default

    def select(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows of ``frame`` (series or cells) the view keeps."""
        for column in ("target", "variant", "workload", "load_point"):
            value = getattr(self, column)
            if value and column in frame.columns:
                frame = frame[frame[column] == value]
        return frame

    def metrics(self) -> tuple[str, ...]:
        return (self.metric,) if self.metric else TREND_METRICS


def _trend_form(view: TrendView, series: pd.DataFrame) -> str:
    """A GET form narrowing the trends: one select per dimension, from what the series hold."""
    from servebench.notify.charts import NIGHTS_SHOWN

    def select(name: str, options: list[str], labels: dict | None = None) -> str:
        chosen = getattr(view, name)
        items = ["<option value=''>all</option>"] + [
            f"<option value='{escape(o, quote=True)}'{' selected' if o == chosen else ''}>"
            f"{escape((labels or {}).get(o, o))}</option>" for o in options]
        return f"<label>{name.replace('_', ' ')} <select name='{name}'>{''.join(items)}" \
               "</select></label>"

    def values(column: str) -> list[str]:
        return sorted(str(v) for v in series[column].dropna().unique()) \
            if column in series.columns else []

    metrics = values("metric")
    return ("<form class='filters' method='get' action='#trends'>"
            + "".join(select(c, values(c)) for c in ("target", "variant", "workload",
                                                         "load_point"))
            + select("metric", metrics, {m: metric_label(m) for m in metrics})
            + "<label>nights <input name='nights' type='number' min='2' max='365' "
              f"value='{view.nights or ''}' placeholder='{NIGHTS_SHOWN}'></label> "
              "<button type='submit'>show</button></form>")


def _findings(rows: pd.DataFrame) -> list[tuple[dict, list]]:
    """One kind's alerts, newest first, as findings: the alerts of one series (a cell failing,
    a gate failing, night after night) are one finding, its newest alert with every night it
    was raised on; an alert without a series is a finding of its own."""
    findings: dict[object, tuple[dict, list]] = {}
    for i, row in enumerate(rows.to_dict("records")):
        key = row.get("series_id") if isinstance(row.get("series_id"), str) else i
        if key in findings:
            findings[key][1].append(row["run_date"])
        else:
            findings[key] = (row, [row["run_date"]])
    return list(findings.values())


def _nights_text(nights: list) -> str:
    """The nights a finding was raised on, newest first: one date, or the first and last with
    how many ("2026-12-02 to 2026-12-05, 4 nights")."""
    from servebench.notify.digest import fmt_text

    if len(nights) == 1:
        return fmt_text(nights[0])
    return f"{fmt_text(min(nights))} to {fmt_text(max(nights))}, {len(nights)} nights"


def _finding_link(row: dict) -> str:
    """Where a raised line leads: its page (``render_finding``)."""
    from servebench.trends.nightly import SERIES_KINDS

    if not row.get("series_id"):
        return f"(<a href='{_report_href(row['run_id'])}'>report</a>)"
    href = f"finding?run_id={quote(row['run_id'])}&series_id={quote(row['series_id'])}"
    text = "chart, what changed" if row["kind"] in SERIES_KINDS else "its nights, what changed"
    return f"(<a class='finding' href='{escape(href, quote=True)}'>{text}</a>)"


# what the page of a newly failing cell draws: the first of its series it has (its typical
# request); a gate failure's page draws its variant's accuracy
FAILING_CHARTS = VIEWS["finding"]


def render_finding(store: ResultStore, run_id: str, series_id: str) -> str | None:
    """A raised line's page. A change (regression, improvement, host change): its series'
    chart (change night, before and after levels, the before level's noise band), before ->
    after, its cause. A newly failing cell: its reason, its typical request's nights up to
    the last ok one, what it measured then. A gate failure: its variant's accuracy over the
    nights, tonight's against their level, the gate's reason. Each with the provenance of
    the runs on either side of the change night side by side (what differs first) and both
    runs' reports. None when run ``run_id`` raised nothing for ``series_id``."""
    import numpy as np

    from servebench.notify.charts import trend_chart
    from servebench.trends.attribution import cell_at
    from servebench.trends.detect import noise_sigma
    from servebench.trends.nightly import SERIES_KINDS, load_nights

    alerts = store.read_table("changes", run_ids=[run_id]).to_pandas()
    found = alerts[alerts["series_id"] == series_id]
    if found.empty:
        return None
    alert = found.iloc[0].to_dict()
    runs, cells, series = load_nights(store, run_id)
    change = runs[runs["run_id"] == alert.get("change_run_id")]
    night = int(change["night"].iloc[0]) if not change.empty else None
    points, drawn = _charted(series, alert)
    before_values = (points[points["night"] < night]["value"].to_numpy(dtype=float)
                     if night is not None else np.array([]))
    noise = noise_sigma(before_values) if len(before_values) >= 4 else None
    if alert["kind"] not in SERIES_KINDS and len(before_values):
        drawn["before"] = float(np.median(before_values[-7:]))  # its level before
    # the runs on either side of the change night, and the alert's cell in each
    sides = ([(r.iloc[0].to_dict() if not r.empty else {})
              for r in (runs[runs["night"] == night - 1], change)] if night is not None else [])
    where = {k: alert.get(k) for k in ("target", "stack", "variant", "workload", "load_point")}
    cells_of = [cell_at(cells, side["run_id"], where) or {} if side else {} for side in sides]
    title, rows = _finding_facts(alert, drawn, cells_of)
    out = [_head("servebench: finding"), "<p><a href='./'>&larr; benchmarks</a></p>",
           f"<h1 class='{escape(alert['kind'])}'>{title}</h1>"]
    if isinstance(alert.get("cause"), str) and alert["cause"]:
        out.append(f"<p>cause: <strong>{escape(alert['cause'])}</strong></p>")
    if not points.empty:
        out.append(_img(trend_chart(points, drawn, noise=noise, nights=len(points)),
                        f"{drawn['metric']} over the nights"))
    out.append("<table><tr><th></th><th>before</th><th>after</th><th>change</th></tr>")
    for label, before, after, delta in rows:
        out.append(f"<tr><td>{escape(label)}</td><td class='num'>{before}</td>"
                   f"<td class='num'>{after}</td><td class='num'>{delta}</td></tr>")
    out.append(f"<tr><td>noise (σ of the nights before)</td><td class='num'>"
               f"{_num(noise, '.3g')}</td><td></td><td></td></tr>")
    out.append(_catches_row(store, points, [sides[0].get("run_id") if sides else None,
                                            run_id]))
    out.append("</table>")
    if sides:
        out += _provenance(sides, cells_of)
    out.append("</body></html>")
    return "\n".join(out)


def _catches_row(store: ResultStore, points: pd.DataFrame, run_ids: list) -> str:
    """A finding's table row: what its series caught within three nights as judged the
    night before the change (what it could see coming) and on the night that raised it
    (``detectability``; its baseline restarts at a change raised)."""
    from servebench.notify.detectable import WITHIN, step_text

    if points.empty:
        return ""
    found = store.read_table("detectability", run_ids=[r for r in run_ids if r]).to_pandas()
    found = found[found["series_id"] == points["series_id"].iloc[0]]
    said = [escape(step_text(mine.iloc[0].to_dict())) if not mine.empty else "-"
            for mine in (found[found["run_id"] == r] for r in run_ids)]
    return (f"<tr><td>{WITHIN} (the night before, the night raised)</td>"
            f"<td class='num'>{said[0]}</td><td class='num'>{said[1]}</td><td></td></tr>")


def _charted(series: pd.DataFrame, alert: dict) -> tuple[pd.DataFrame, dict]:
    """(the nights a raised line's page draws, the line as its chart reads it)."""
    from servebench.trends.nightly import SERIES_KINDS

    kind = alert["kind"]
    if kind in SERIES_KINDS:
        return series[series["series_id"] == alert["series_id"]].sort_values("night"), alert
    mine = ((series["target"] == alert.get("target")) & (series["stack"] == alert.get("stack"))
            & (series["variant"] == alert.get("variant")))
    if kind == "gate_failure":
        metrics = (ACCURACY.column,)
    else:
        mine &= ((series["workload"] == alert.get("workload"))
                 & (series["load_point"] == alert.get("load_point")))
        metrics = FAILING_CHARTS
    for metric in metrics:
        points = series[mine & (series["metric"] == metric)].sort_values("night")
        if not points.empty:
            return points, {**alert, "metric": metric, "before": None, "change_pct": None,
                            "after": alert.get("after") if kind == "gate_failure" else None}
    return series.iloc[0:0], {**alert, "before": None, "after": None, "change_pct": None}


def _finding_facts(alert: dict, drawn: dict, cells_of: list[dict]
                   ) -> tuple[str, list[tuple[str, str, str, str]]]:
    """(the page's title as HTML, its before -> after rows: label, before, after, change);
    ``cells_of``: the alert's cell the night before the change night and on it."""
    from servebench.notify.digest import alert_html, fmt_text
    from servebench.trends.nightly import SERIES_KINDS

    kind = alert["kind"]
    label = metric_label(drawn["metric"]) if drawn.get("metric") else ""
    if kind in SERIES_KINDS:
        return (f"{escape(kind.replace('_', ' '))}: {alert_html(alert)}",
                [("level", _num(alert.get("before"), ".4g"), _num(alert.get("after"), ".4g"),
                  f"{_num(alert.get('change_pct'), '+.1f')}%")])
    if kind == "gate_failure":
        before, after = drawn.get("before"), alert.get("after")
        delta = (f"{100 * (after - before):+.1f} points"
                 if before is not None and after is not None and after == after else "")
        return (escape(f"gate failure: {alert.get('target')} / {alert.get('variant')}: "
                       f"{fmt_text(alert.get('reason'))}"),
                [(f"{label} (its nights' level -> tonight)", _num(before, ".3f"),
                  _num(after, ".3f"), delta)])
    # newly failing: the night before, ok, against tonight
    before, now = (cells_of + [{}, {}])[:2]
    rows = [("status", escape(fmt_text(before.get("status"))),
             escape(fmt_text(now.get("status"))), "")]
    if drawn.get("metric"):
        rows.append((label, _num(before.get(drawn["metric"]), ".4g"),
                     _num(now.get(drawn["metric"]), ".4g"), ""))
    return f"newly failing: {alert_html(alert)}", rows


def _provenance(sides: list[dict], cells_of: list[dict]) -> list[str]:
    """The provenance of the runs on either side of the change night (``sides``, with the
    alert's cell in each: ``cells_of``) side by side, what differs first, each run's report
    linked."""
    from servebench.notify.digest import fmt_text
    from servebench.trends.attribution import CELL_PROVENANCE

    out = ["<h2>Provenance around the change</h2><table class='provenance'><tr>"
           "<th>what</th>" + "".join(
               f"<th>{escape(fmt_text(side.get('run_date')))} "
               f"<code>{escape(fmt_text(side.get('run_id')))}</code> "
               f"(<a href='{_report_href(side.get('run_id'))}'>report</a>)</th>"
               for side in sides) + "</tr>"]
    facts = [(k, *(c.get(k) for c in cells_of)) for k in (*CELL_PROVENANCE, "measuring_code")]
    facts += [(k, *(side.get(k) for side in sides)) for k in ("suite_git_sha", "sweep_hash")]
    facts.sort(key=lambda f: fmt_text(f[1]) == fmt_text(f[2]))  # what differs first
    for key, a, b in facts:
        differs = fmt_text(a) != fmt_text(b)
        out.append(f"<tr class='{'differs' if differs else 'same'}'><td>{escape(key)}</td>"
                   f"<td>{_short(a)}</td><td>{_short(b)}</td></tr>")
    out.append("</table>")
    return out


def render_compare(store: ResultStore, run_a: str | None, run_b: str | None) -> str:
    """Two runs side by side, cell by cell (``servebench.view.compare``): pick them from the
    latest runs; each compared statistic a -> b with its change, statuses, gate verdicts."""
    from servebench.notify.digest import fmt_num, fmt_text
    from servebench.view.compare import compare_cells, shown_columns

    runs = store.read_table("runs").to_pandas()
    runs = runs.sort_values(["logical_date", "finished_at"], ascending=False)
    ids = runs["run_id"].tolist()
    if not run_b and ids:
        run_b = ids[0]
    if not run_a and len(ids) > 1:
        run_a = ids[1]

    def pick(name: str, chosen: str | None) -> str:
        options = "".join(
            f"<option value='{escape(r['run_id'], quote=True)}'"
            f"{' selected' if r['run_id'] == chosen else ''}>{escape(fmt_text(r['run_date']))}"
            f" {escape(r['run_id'])}</option>" for r in runs.head(60).to_dict("records"))
        return f"<label>{name} <select name='{name}'>{options}</select></label>"

    out = [_head("servebench: compare"), "<p><a href='./'>&larr; benchmarks</a></p>",
           "<h1>Two runs side by side</h1>",
           f"<form method='get'>{pick('a', run_a)} {pick('b', run_b)} "
           "<button type='submit'>compare</button></form>"]
    if not run_a or not run_b:
        return "\n".join([*out, "<p>Two committed runs are needed.</p></body></html>"])
    cells = store.read_table("cells", run_ids=[run_a, run_b]).to_pandas()
    rows = compare_cells(cells, run_a, run_b) if not cells.empty else []
    columns = shown_columns(rows)
    out.append("<table class='compare'><tr><th>target / variant</th><th>workload</th>"
               "<th>load</th>" + "".join(f"<th>{escape(label)}</th>" for _, label in columns)
               + "<th>status</th><th>gate</th></tr>")
    for r in rows:
        tds = []
        for column, _ in columns:
            va, vb, pct = r[column]
            tds.append(f"<td class='num'>{fmt_num(va)} &rarr; {fmt_num(vb)} "
                       f"({'-' if pct is None else f'{pct:+.1f}%'})</td>")
        out.append(f"<tr><td>{escape(str(r['target']))} / {escape(str(r['variant']))}</td>"
                   f"<td>{escape(str(r['workload']))}</td><td>{escape(str(r['load_point']))}"
                   "</td>" + "".join(tds)
                   + f"<td>{escape(' → '.join(s or '-' for s in r['status']))}</td>"
                   f"<td>{escape(' → '.join(g or '-' for g in r['gate']))}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)


def _report_href(run_id) -> str:
    return escape(f"report?run_id={quote(str(run_id))}", quote=True)


def _head(title: str) -> str:
    from servebench.notify.panels import STYLE as PANELS

    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}{PANELS}</style></head><body>")


def _short(value) -> str:
    from servebench.notify.digest import fmt_text

    text = fmt_text(value)
    return f"<code title='{escape(text, quote=True)}'>{escape(text[:80])}" \
           f"{'…' if len(text) > 80 else ''}</code>"


def _release_gates(store: ResultStore) -> list[str]:
    """The release gates of the last ``RELEASE_GATE_DAYS``, newest first: candidate vs
    baseline, what it means for the release (for one that needed a person: who decided
    what, when, and their comment), and every metric that did not pass."""
    import datetime as dt

    import pandas as pd

    from servebench.notify.digest import fmt_text, fmt_verdict
    from servebench.release.decision import decision_text

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
        said = ""
        if isinstance(first.get("person_decision"), str):  # the person's answer, once given
            word, css = decision_text(first.to_dict()), PERSON_DECISIONS.get(
                first["person_decision"], "regression")
            if isinstance(first.get("person_comment"), str):
                said = f"<br><span class='muted'>{escape(first['person_comment'])}</span>"
        open_ = []
        for r in gate[gate["verdict"] != "pass"].to_dict("records"):
            where = (f"{r['workload']} {r['load_point']} " if r["metric"] != "quality" else "")
            what = ("quality" if r["metric"] == "quality" else metric_label(r["metric"]))
            mean = (f" {r['worse_mean']:+.1%} worse" if pd.notna(r["worse_mean"]) else "")
            open_.append(f"{where}{what}: {fmt_verdict(r['verdict'])}{mean}")
        out.append(
            f"<tr><td>{escape(fmt_text(first['decided_at']))}</td>"
            f"<td>{escape(first['target'])}</td>"
            f"<td>{escape(first['candidate'])} vs {escape(fmt_text(first['baseline']))}</td>"
            f"<td class='{css}'><strong>{escape(word)}</strong>{said}</td>"
            f"<td>{escape('; '.join(open_) or 'none')}</td>"
            f"<td><code>{escape(run_id)}</code></td></tr>")
    out.append("</table>")
    return out


def run_report(store: ResultStore, run_id: str) -> str | None:
    """The HTML report the digest wrote beside run ``run_id``'s data, if any."""
    from servebench.notify.report import report_path

    found = store.read_table("runs", run_ids=[run_id]).to_pylist()
    data = store.get_bytes(report_path(str(found[0]["run_date"]), run_id)) if found else None
    return data.decode() if data is not None else None


def create_app(settings: Settings | None = None):
    """The FastAPI app the plugin mounts: ``/`` the board (its trends narrowed by query
    parameters), ``/finding?run_id=&series_id=`` a raised change's page, ``/compare?a=&b=``
    two runs side by side, ``/report?run_id=`` a run's HTML report. Reading any of it takes
    the right to read the DAG runs whose results it shows."""
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
    def board(target: str | None = None, variant: str | None = None,
              workload: str | None = None, load_point: str | None = None,
              metric: str | None = None, nights: str | None = None) -> str:
        # sync: FastAPI runs it in its thread pool (Parquet, matplotlib). Empty fields are
        # the form's "all"; nights is read leniently (a cleared box is the default)
        view = TrendView(target or None, variant or None, workload or None,
                         load_point or None, metric or None,
                         int(nights) if nights and nights.isdigit() and int(nights) > 1
                         else None)
        return render_board(store(), view=view)

    @app.get("/finding", response_class=HTMLResponse)
    def finding(run_id: str, series_id: str) -> str:
        page = render_finding(store(), run_id, series_id)
        if page is None:
            raise HTTPException(status_code=404,
                                detail=f"run {run_id} raised nothing for {series_id}")
        return page

    @app.get("/compare", response_class=HTMLResponse)
    def compare(a: str | None = None, b: str | None = None) -> str:
        return render_compare(store(), a, b)

    @app.get("/report", response_class=HTMLResponse)
    def report(run_id: str) -> str:
        text = run_report(store(), run_id)
        if text is None:
            raise HTTPException(status_code=404, detail=f"no report for run {run_id}")
        return text

    return app
