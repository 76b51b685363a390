"""The run's HTML report: one self-contained file beside the data (charts inline as data: URIs,
no script, no external asset), for a person who opens it from S3 or a shared folder.

Sections: the run and its provenance, what changed since the nights before (with each change's
chart), the series that cannot catch the sweep's ``trends.detect_at_least``, the summary table, the quality gate, invalid and failed cells, and each variant's
launch command, engine version and model file. Built with the standard library's escaping;
every value that came from a run is escaped.
"""

from __future__ import annotations

import base64
import json
from html import escape

import pandas as pd

from servebench.notify.detectable import blind_lines
from servebench.notify.digest import (
    DIGEST_COLUMNS,
    KIND_TITLES,
    alert_html,
    cell_records,
    confirmation_parts,
    finding_url,
    fmt_text,
    gate_lines,
    is_missing,
    memory_lines,
    slo_lines,
)
from servebench.notify.energy import energy_lines
from servebench.notify.lever_table import lever_caption, lever_columns
from servebench.notify.speculation import speculation_lines

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1180px;
       color: #1f2933; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 12.5px; margin: 8px 0; }
th, td { border: 1px solid #d5dbe1; padding: 3px 7px; } td.num { text-align: right; }
th { background: #f1f4f7; } .regression { color: #c0392b; } .improvement { color: #1e8449; }
.host_change { color: #b9770e; } .unconfirmed { color: #6b7785; }
.status-invalid, .status-failed { color: #c0392b; font-weight: 600; }
img { max-width: 100%; border: 1px solid #eee; margin: 6px 0 14px; }
code { background: #f4f4f4; padding: 1px 4px; } dt { font-weight: 600; }
"""


def report_path(run_date: str, run_id: str) -> str:
    """Where run ``run_id``'s report lives under the store root."""
    from servebench.results.store import encode_run_id

    return f"reports/date={run_date}/{encode_run_id(run_id)}.html"


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _inline_md(text: str) -> str:
    """A digest line in Markdown (bold and code: the load-within-SLO lines) as HTML; a
    raised line is built as HTML by ``digest.alert_html`` instead."""
    out, bold, code = [], False, False
    i = 0
    while i < len(text):
        if text.startswith("**", i) and not code:
            out.append("</strong>" if bold else "<strong>")
            bold, i = not bold, i + 2
        elif text[i] == "`":
            out.append("</code>" if code else "<code>")
            code, i = not code, i + 1
        else:
            out.append(escape(text[i]))
            i += 1
    return "".join(out)


def _table(rows: list[dict], columns=DIGEST_COLUMNS) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h, _, _ in columns)
    body = []
    for row in rows:
        cells = []
        for header, fmt, right in columns:
            value = fmt(row)
            cls = "num" if right else ""
            if header == "status":
                cls = f"status-{escape(value.lower())}"
            cells.append(f'<td class="{cls}">{escape(value)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _lever_table(rows: list[dict]) -> str:
    return _table(rows, lever_columns(rows))


def render_report(cells: pd.DataFrame, run: dict, results_uri: str,
                  changes: pd.DataFrame | None, pngs: dict[str, bytes],
                  levers: list[dict] | None = None, airflow_url: str | None = None,
                  detectability: pd.DataFrame | None = None,
                  confirmations: pd.DataFrame | None = None,
                  host: list[str] | None = None) -> str:
    """The report's HTML. ``pngs`` maps a series_id or ``target:<name>`` to a chart; with
    ``airflow_url`` (the UI's base URL) each raised line links its page in the Benchmarks
    view (absolute: the report is also read as a file, outside the view);
    ``detectability``: the night's table, the series that cannot catch the sweep's step
    named after the alerts; ``host``: what the host canary saw (``servebench.canary``)."""
    sweep = fmt_text(run.get("sweep_name"))
    date = fmt_text(run.get("run_date"))
    out = [f"<!doctype html><html><head><meta charset='utf-8'>"
           f"<title>servebench: {escape(sweep)} {escape(date)}</title>"
           f"<style>{STYLE}</style></head><body>",
           f"<h1>servebench report: {escape(sweep)} ({escape(date)})</h1>", "<dl>"]
    for label, key in (("run", "run_id"), ("sweep file", "sweep_file"),
                       ("suite git sha", "suite_git_sha"), ("hardware", "hardware")):
        out.append(f"<dt>{label}</dt><dd><code>{escape(fmt_text(run.get(key)))}</code></dd>")
    statuses = cells["status"].value_counts() if not cells.empty else {}
    counts = ", ".join(f"{s} {int(statuses.get(s, 0))}" for s in ("ok", "invalid", "failed"))
    out += [f"<dt>cells</dt><dd>{len(cells)} ({escape(counts)})</dd>",
            f"<dt>results</dt><dd><code>{escape(results_uri)}</code></dd></dl>"]

    out.append("<h2>Since the nights before</h2>")
    alerts = changes if changes is not None else pd.DataFrame(columns=["kind"])
    shown = False
    for kind, title in KIND_TITLES:
        rows = alerts[alerts["kind"] == kind].to_dict("records")
        if not rows:
            continue
        shown = True
        out.append(f'<h3 class="{kind}">{escape(title)} ({len(rows)})</h3><ul>')
        for row in rows:
            cause = fmt_text(row.get("cause"))
            page = finding_url(airflow_url, row.get("run_id"), row.get("series_id"))
            link = (f" (<a class='finding' href='{escape(page, quote=True)}'>chart, what "
                    f"changed</a>)" if page else "")
            out.append(f"<li>{alert_html(row)}; cause: {escape(cause)}{link}</li>")
            if row.get("series_id") in pngs:
                out.append(_img(pngs[row["series_id"]], f"{kind}: {row['series_id']}"))
        out.append("</ul>")
    if not shown:
        out.append("<p>No regressions, improvements, newly failing cells or host changes.</p>")
    parts = confirmation_parts(confirmations)
    if parts is not None:
        head, lines = parts
        out += ["<h2>Re-measured the same morning</h2>", f"<p>{escape(head)}</p>", "<ul>",
                *(f"<li><code>{escape(where)}</code> {escape(what)}</li>"
                  for where, what in lines), "</ul>"]
    if host:
        out += ["<h2>The host</h2>", f"<p>{escape(host[0])}</p>"]
        if host[1:]:
            out += ["<ul>", *[f"<li>{escape(line)}</li>" for line in host[1:]], "</ul>"]
    blind = blind_lines(detectability, markdown=False)
    if blind:
        out += ["<h2>What the series cannot see</h2>", f"<p>{blind[0]}</p>"]
        if blind[1:]:
            out += ["<ul>", *[f"<li>{item}</li>" for item in blind[1:]], "</ul>"]

    records = cell_records(cells)
    for target in dict.fromkeys(fmt_text(r.get("target")) for r in records):
        rows = [r for r in records if fmt_text(r.get("target")) == target]
        out += [f"<h2>{escape(target)}</h2>", _table(rows)]
        if f"target:{target}" in pngs:
            out.append(_img(pngs[f"target:{target}"], f"{target}: latency vs throughput"))

    if levers:
        out.append("<h2>What each variant buys (vs its baseline, same night)</h2>")
        out.append(f"<p>{escape(lever_caption(levers))}</p>")
        out.append(_lever_table(levers))
    memory = memory_lines(cells)
    if memory:
        out.append("<h2>Memory</h2><ul>")
        out += [f"<li>{escape(line)}</li>" for line in memory]
        out.append("</ul>")
    energy = energy_lines(cells)
    if energy:
        out.append("<h2>Energy</h2><ul>")
        out += [f"<li>{escape(line)}</li>" for line in energy]
        out.append("</ul>")
    speculation = speculation_lines(cells)
    if speculation:
        out.append("<h2>Speculative decoding</h2><ul>")
        out += [f"<li>{escape(line)}</li>" for line in speculation]
        out.append("</ul>")
    capacity = slo_lines(cells)
    if capacity:
        out.append("<h2>Load within SLO</h2><ul>")
        out += [f"<li>{_inline_md(line)}</li>" for line in capacity]
        out.append("</ul>")
    gates = gate_lines(cells)
    if gates:
        out.append("<h2>Quality gate</h2><ul>")
        out += [f"<li>{escape(line)}</li>" for line in gates]
        out.append("</ul>")
    bad = [r for r in records if fmt_text(r.get("status")) != "ok"]
    out.append("<h2>Invalid and failed cells</h2>")
    if bad:
        out.append("<ul>")
        out += [f"<li><span class='status-{escape(fmt_text(r.get('status')))}'>"
                f"{escape(fmt_text(r.get('status')))}</span> <code>{escape(r['cell_id'])}</code>: "
                f"{escape(fmt_text(r.get('reason')))}</li>" for r in bad]
        out.append("</ul>")
    else:
        out.append("<p>None.</p>")

    out.append("<h2>Provenance</h2><table><tr><th>target / variant</th><th>engine</th>"
               "<th>model file sha256</th><th>launch command</th></tr>")
    if not cells.empty:
        for row in cells.drop_duplicates(["target", "variant"]).to_dict("records"):
            args = row.get("launch_args")
            command = " ".join(json.loads(args)) if isinstance(args, str) else "-"
            model = row.get("model_file_sha256")
            out.append(
                f"<tr><td>{escape(row['target'])} / {escape(row['variant'])}</td>"
                f"<td>{escape(fmt_text(row.get('engine_version')))}"
                + ("" if is_missing(row.get("engine_notes")) else
                   f"<br><small>{escape(str(row['engine_notes']))}</small>") + "</td>"
                f"<td><code>{escape('-' if is_missing(model) else str(model)[:16])}</code></td>"
                f"<td><code>{escape(command)}</code></td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)
