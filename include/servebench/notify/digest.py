"""The run digest: Markdown for Slack/files and a compact fixed-width table for terminals.

Both are plain string formatting over the ``cells`` table (see results.schema); missing columns
and NaN/None values render as "-". Markdown tables are padded so they also read well as plain
text (Slack shows them in a code block, see notify.slack).
"""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import quote

import pandas as pd

from servebench.defaults import BOARD_PATH
from servebench.loadgen.modes import SEARCHED_MODES, is_searched
from servebench.metric_catalogue import BY_COLUMN, metric_label, shown_in
from servebench.notify.energy import energy_lines
from servebench.notify.formatting import (  # noqa: F401 -- the digest's, re-exported
    MISSING,
    Column,
    _col,
    fmt_bytes,
    fmt_errors,
    fmt_int,
    fmt_more_less,
    fmt_num,
    fmt_pct,
    fmt_status,
    fmt_text,
    fmt_verdict,
    is_missing,
    render_table,
)
from servebench.notify.lever_table import lever_caption, lever_table
from servebench.notify.speculation import speculation_lines

SORT_KEYS = ["target", "variant", "workload", "load_mode", "concurrency", "request_rate"]


def _metric_col(column: str) -> Column:
    """A catalogue metric's column: its label, a share as a percentage, else a number."""
    metric = BY_COLUMN[column]
    return _col(metric.label, column, fmt_pct if metric.unit == "share" else fmt_num)


# the catalogue's digest metrics: a cell's, its errors, then its variant's
METRIC_COLUMNS: list[Column] = [
    _col("conc", "concurrency", fmt_int),
    _col("rate/s", "request_rate", fmt_num),  # open-loop cells
    *(_metric_col(m.column) for m in shown_in("digest") if m.level != "variant"),
    ("errors", fmt_errors, True),
    *(_metric_col(m.column) for m in shown_in("digest") if m.level == "variant"),
    _col("gate", "gate_verdict", fmt_verdict, right=False),
    _col("status", "status", fmt_status, right=False),
]
DIGEST_COLUMNS: list[Column] = [
    _col("variant", "variant", fmt_text, False),
    _col("workload", "workload", fmt_text, False),
    *METRIC_COLUMNS,
]


def fmt_load(r: dict) -> str:
    """A cell's load point (``c4``, ``r20``, ``max``, ``trace``); an SLO search's row says what
    it is: the highest load that held, at which the row was measured (``slo (max c4 within
    SLO)``, ``slo (max r6.35 within SLO)``), ``slo (none within SLO)`` where even the first
    probe missed, ``slo (no answer)`` where the search could not tell."""
    if not is_searched(r.get("load_mode")):
        return fmt_text(r.get("load_point"))
    best = r.get("max_load_within_slo")
    if is_missing(best):
        return "slo (no answer)"
    if float(best) <= 0:
        return "slo (none within SLO)"
    load = f"r{fmt_num(best)}" if r.get("slo_search_over") == "rate" else f"c{fmt_int(best)}"
    return f"slo (max {load} within SLO)"


SUMMARY_COLUMNS: list[Column] = [
    _col("stack", "stack", fmt_text, False), *DIGEST_COLUMNS[:2], ("load", fmt_load, False),
    *METRIC_COLUMNS]


def cell_records(cells: pd.DataFrame) -> list[dict]:
    keys = [k for k in SORT_KEYS if k in cells.columns]
    if keys:
        cells = cells.sort_values(keys, na_position="last", kind="stable")
    return cells.to_dict("records")


def summary_table(cells: pd.DataFrame) -> str:
    """Compact fixed-width table for a terminal, one line per cell."""
    if cells.empty:
        return "(no cells)"
    return render_table(SUMMARY_COLUMNS, cell_records(cells), markdown=False)


def gate_lines(cells: pd.DataFrame, max_ids: int = 10) -> list[str]:
    """One line per gated variant: verdict, accuracy with its interval, reason, flipped items;
    a variant that was not judged (its target has no golden set) says only that, and why."""
    if cells.empty or "gate_verdict" not in cells.columns:
        return []
    lines = []
    first = cells.drop_duplicates(["target", "variant"]).to_dict("records")
    for r in first:
        verdict = r.get("gate_verdict")
        if is_missing(verdict):
            continue
        line = f"{fmt_verdict(verdict).upper()} {r['target']}/{r['variant']}: "
        if verdict == "not_judged":
            line += _one_line(r.get("gate_reason"))
        else:
            line += (f"accuracy {fmt_pct(r.get('accuracy'))} "
                     f"[{fmt_pct(r.get('accuracy_ci_low'))}, "
                     f"{fmt_pct(r.get('accuracy_ci_high'))}]")
        if verdict not in ("baseline", "not_judged"):
            line += f" vs {fmt_text(r.get('gate_baseline'))}: {_one_line(r.get('gate_reason'))}"
        if not is_missing(r.get("cross_stack_verdict")):
            line += (f"; across stacks ({fmt_text(r.get('cross_stack_group'))}): "
                     f"{fmt_text(r.get('cross_stack_verdict')).upper()}, "
                     f"{_one_line(r.get('cross_stack_reason'))}")
        flipped = r.get("gate_flipped_ids")
        if flipped is not None and len(flipped):
            shown = ", ".join(list(flipped)[:max_ids])
            more = len(flipped) - max_ids
            line += f"; flipped: {shown}" + (f" (+{more} more)" if more > 0 else "")
        lines.append(line)
    return lines


def memory_lines(cells: pd.DataFrame) -> list[str]:
    """One line per variant whose unit recorded its memory (bench.memory): its weights, KV
    cache's capacity and peak memory, and what that is against its baseline variant's
    (``levers.memory_change``)."""
    from servebench.bench.memory import CELL_COLUMNS
    from servebench.levers import memory_change

    if cells.empty or not set(CELL_COLUMNS) & set(cells.columns):
        return []
    units = cells.drop_duplicates(["target", "variant"]).to_dict("records")
    by_name = {(r["target"], r["variant"]): r for r in units}
    lines = []
    for r in units:
        if all(is_missing(r.get(c)) for c in CELL_COLUMNS):
            continue
        kv = r.get("kv_cache_tokens")
        line = (f"{r['target']}/{r['variant']}: weights {fmt_bytes(r.get('weights_bytes'))}, "
                f"KV cache {MISSING if is_missing(kv) else f'{int(kv):,}'} tokens, peak "
                f"memory {fmt_bytes(r.get('peak_rss_bytes'))}")
        if not is_missing(r.get("peak_device_memory_bytes")):
            line += f", GPU {fmt_bytes(r['peak_device_memory_bytes'])}"
        base = by_name.get((r["target"], r.get("gate_baseline")))
        if base is not None and base is not r:
            change = memory_change(r, base)
            line += (f"; vs {base['variant']}: "
                     f"{fmt_more_less(change['memory_pct'], 'memory')}, "
                     f"{fmt_more_less(change['kv_cache_pct'], 'KV capacity')}")
        lines.append(line)
    return lines


def slo_lines(cells: pd.DataFrame) -> list[str]:
    """Each slo cell's answer (``capacity``): ``adder / f16 / fixed: 4 workers within SLO
    (missed at 5: TTFT p95 27.2 ms > 15; 6 probes)``; an slo cell without an answer says
    why."""
    if "load_mode" not in cells.columns:
        return []
    lines = []
    for r in cell_records(cells[cells["load_mode"].isin(SEARCHED_MODES)]):
        where = " / ".join(fmt_text(r.get(k)) for k in ("target", "variant", "workload"))
        rate = r.get("slo_search_over") == "rate"
        unit, fmt = (" req/s", fmt_num) if rate else (" workers", fmt_int)
        if is_missing(r.get("max_load_within_slo")):
            lines.append(f"`{where}`: no answer ({fmt_text(r.get('status'))}: "
                         f"{_one_line(r.get('reason'))})")
            continue
        probes = json.loads(r["slo_probes_json"]) if not is_missing(
            r.get("slo_probes_json")) else []
        bound = r.get("max_load_failed_at")
        why = next((p.get("why") for p in probes if p.get("load") == bound), None)
        limit = ("its high held" if is_missing(bound) else
                 f"missed at {fmt(bound)}" + (f": {why}" if why else ""))
        status = "" if fmt_text(r.get("status")) == "ok" else \
            f"; **{fmt_text(r.get('status'))}**: {_one_line(r.get('reason'))}"
        lines.append(f"`{where}`: **{fmt(r['max_load_within_slo'])}{unit}** within SLO "
                     f"({limit}; {len(probes)} probes){status}")
    return lines


def _one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(fmt_text(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _cell_label(r: dict) -> str:
    parts = [fmt_text(r.get(k)) for k in ("target", "variant", "workload")]
    if not is_missing(r.get("request_rate")):
        return " / ".join(parts) + f" / rate={fmt_num(r.get('request_rate'))}/s"
    return " / ".join(parts) + f" / c={fmt_int(r.get('concurrency'))}"


def dag_url(airflow_url: str | None, dag_id: Any) -> str | None:
    """The Airflow UI page of a DAG (its runs), when the Airflow base URL is known."""
    if not airflow_url or is_missing(dag_id):
        return None
    return f"{airflow_url.rstrip('/')}/dags/{quote(str(dag_id), safe='')}"


def run_url(airflow_url: str | None, dag_id: Any, run_id: Any) -> str | None:
    """The Airflow UI page of a DAG run, when the Airflow base URL is known."""
    if not airflow_url or is_missing(dag_id) or is_missing(run_id):
        return None
    return (f"{airflow_url.rstrip('/')}/dags/{quote(str(dag_id), safe='')}"
            f"/runs/{quote(str(run_id), safe='')}")


def finding_url(airflow_url: str | None, run_id: Any, series_id: Any) -> str | None:
    """The Benchmarks view's page of a raised line (``board.render_finding``: its chart,
    before -> after, the provenance around it), when the Airflow base URL is known."""
    if not airflow_url or is_missing(run_id) or is_missing(series_id):
        return None
    return (f"{airflow_url.rstrip('/')}{BOARD_PATH}/finding?run_id={quote(str(run_id), safe='')}"
            f"&series_id={quote(str(series_id), safe='')}")


def _header(run: dict, cells: pd.DataFrame, results_uri: str,
            airflow_url: str | None = None) -> list[str]:
    sweep = fmt_text(run.get("sweep_name"))
    date = fmt_text(run.get("run_date") or run.get("logical_date"))
    sha = fmt_text(run.get("suite_git_sha"))
    status = cells["status"].value_counts() if "status" in cells.columns else pd.Series(dtype=int)
    counts = ", ".join(f"{s} {int(status.get(s, 0))}" for s in ("ok", "invalid", "failed"))
    lines = [
        f"# servebench digest: {sweep} ({date})",
        "",
        f"- **run**: `{fmt_text(run.get('run_id'))}`" + (
            f" ([in Airflow]({url}))" if (url := run_url(airflow_url, run.get("dag_id"),
                                                         run.get("run_id"))) else ""),
        f"- **sweep**: {sweep}"
        + (f" (`{run['sweep_file']}`)" if not is_missing(run.get("sweep_file")) else ""),
        f"- **suite git sha**: `{sha[:12]}`",
        f"- **hardware**: {fmt_text(run.get('hardware'))}",
        f"- **cells**: {len(cells)} ({counts})",
        f"- **results**: `{results_uri}`",
    ]
    if not is_missing(run.get("sweep_efficiency")):
        lines.insert(-1, f"- **paid**: {_hours(run.get('paid_s'))} of server time, "
                         f"${fmt_num(run.get('paid_usd'))}; "
                         f"**sweep efficiency** {run['sweep_efficiency']:.1%} "
                         f"({_hours(run.get('measure_s'))} measuring)")
    return lines


def _hours(seconds) -> str:
    if is_missing(seconds):
        return "n/a"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


KIND_TITLES = (("regression", "Regressions"), ("improvement", "Improvements"),
               ("newly_failing", "Newly failing cells"),
               ("host_change", ("Host changes (the target's variants moved together; "
                                "nothing recorded changed)")),
               ("unconfirmed", ("Not confirmed the same morning (the relaunches did not "
                                "reproduce them: kept, not posted as changes)")))


def _alert_parts(r: dict) -> tuple[str | None, str, str, str | None, str]:
    """A raised line's parts, plain text: its headline (the metric and its change; None for
    a newly failing cell), where (target / variant / workload / load point), what it says,
    the night it dates from (None: none) and what follows that. ``alert_line`` writes them
    as Markdown, ``alert_html`` as HTML."""
    where = " / ".join(fmt_text(r.get(k)) for k in ("target", "variant", "workload",
                                                     "load_point") if not is_missing(r.get(k)))
    if r.get("kind") == "newly_failing":
        return None, where, _one_line(r.get("reason")), None, ""
    pct = r.get("change_pct")
    change = MISSING if is_missing(pct) else f"{float(pct):+.1f}%"
    drastic = " (drastic, one night)" if r.get("drastic") is True else ""
    nights = r.get("nights_since")
    nights = MISSING if is_missing(nights) else f"{int(nights)} night{'s' * (int(nights) != 1)}"
    confirmed = r.get("confirmation")
    confirmed = "" if is_missing(confirmed) else f"; {confirmed}"
    # a suspect held to its baseline variant's night: its before is what that night implied
    against = r.get("against")
    against = "" if is_missing(against) else f" (as {fmt_text(against)}'s night implied)"
    return (f"{metric_label(fmt_text(r.get('metric')))} {change}", where,
            f"{_level(r.get('before'))}{against} -> {_level(r.get('after'))} since ",
            fmt_text(r.get("change_date")), f" ({nights}){drastic}{confirmed}")


def alert_line(r: dict, airflow_url: str | None = None, dag_id: str | None = None) -> str:
    """A raised line as Markdown (the digest, Slack): the headline bold, where as code, the
    change night linked to its run when the Airflow URL is known."""
    head, where, text, since, tail = _alert_parts(r)
    url = run_url(airflow_url, dag_id, r.get("change_run_id")) if since is not None else None
    since = f"[{since}]({url})" if url else since or ""
    return (f"**{head}** " if head is not None else "") + f"`{where}`: {text}{since}{tail}"


def alert_html(r: dict) -> str:
    """A raised line as HTML (the Benchmarks view, the run's report): the same words as
    ``alert_line``, every value escaped, no Markdown left."""
    head, where, text, since, tail = _alert_parts(r)
    return ((f"<strong>{escape(head)}</strong> " if head is not None else "")
            + f"<code>{escape(where)}</code>: {escape(text + (since or '') + tail)}")


def _level(v: Any) -> str:
    """A before/after level: like fmt_num, with 3 significant digits below 1 (costs, rates)."""
    if not is_missing(v) and abs(float(v)) < 1:
        return f"{float(v):.3g}"
    return fmt_num(v)


def change_lines(changes: pd.DataFrame, charts: dict[str, str] | None = None,
                 airflow_url: str | None = None, dag_id: str | None = None) -> list[str]:
    """Markdown for the night's alerts, regressions first, grouped into findings (alerts with
    one change night, kind and cause) with the cause said once, each linking its chart and,
    when the Airflow URL is known, the run of its change night and its page in the
    Benchmarks view."""
    charts = charts or {}

    def line(r: dict) -> str:
        chart = charts.get(r.get("series_id"))
        page = finding_url(airflow_url, r.get("run_id"), r.get("series_id"))
        return (alert_line(r, airflow_url, dag_id) + (f" ([chart]({chart}))" if chart else "")
                + (f" ([what changed]({page}))" if page else ""))

    titled = [kind for kind, _ in KIND_TITLES]
    if changes is None or not changes["kind"].isin(titled).any():
        return ["", "## Since the nights before", "",
                "No regressions, improvements, newly failing cells or host changes."]
    out: list[str] = []
    for kind, title in KIND_TITLES:
        rows = changes[changes["kind"] == kind]
        if rows.empty:
            continue
        out += ["", f"## {title} ({len(rows)})", ""]
        for _, finding in rows.groupby("finding", sort=False):
            records = finding.to_dict("records")
            cause = fmt_text(records[0].get("cause"))
            if len(records) == 1:
                out.append(f"- {line(records[0])}; cause: {cause}")
                continue
            out.append(f"- **{len(records)} series** changed on "
                       f"{fmt_text(records[0].get('change_date'))}; cause: {cause}")
            out += [f"  - {line(r)}" for r in records]
    return out


VERDICT_WORDS = {"confirmed": "confirmed", "host": "the host", "dismissed": "not confirmed",
                 "inconclusive": "inconclusive", "over_budget": "over the budget",
                 "not_measured": "not re-measured"}


def confirmation_parts(confirmations: pd.DataFrame | None
                       ) -> tuple[str, list[tuple[str, str]]] | None:
    """The same morning's re-measurement (``confirmations`` rows), plain text: how many
    suspects, by how many relaunches, in what time, each verdict counted; then (where, what)
    for each quiet suspect's verdict that no alert line carries (a confirmed one is a
    regression). None without a suspect. ``confirmation_lines`` writes it as Markdown, the
    report as HTML."""
    if confirmations is None or confirmations.empty:
        return None
    counts = confirmations["verdict"].value_counts()
    said = ", ".join(f"{VERDICT_WORDS[v]} {int(counts[v])}" for v in VERDICT_WORDS
                     if v in counts)
    sessions = confirmations.drop_duplicates(["target", "variant"])
    variants = f"{len(sessions)} variant" + "s" * (len(sessions) != 1)
    head = (f"{len(confirmations)} suspect series of {variants}, each relaunched "
            f"{int(confirmations['launches'].max())} times beside a reference on its host, in "
            f"{_hours(sessions['seconds'].dropna().sum())}: {said}")
    lines = []
    for r in confirmations.to_dict("records"):
        if r.get("source") != "suspect" or r.get("verdict") == "confirmed":
            continue
        where = " / ".join(fmt_text(r.get(k)) for k in ("target", "variant", "workload",
                                                         "load_point"))
        lines.append((where, f"{metric_label(fmt_text(r.get('metric')))} "
                             f"{float(r['night_change_pct']):+.1f}% tonight: "
                             f"{fmt_text(r.get('words'))}"))
    return head, lines


def confirmation_lines(confirmations: pd.DataFrame | None) -> list[str]:
    """``confirmation_parts`` as the digest's Markdown section."""
    parts = confirmation_parts(confirmations)
    if parts is None:
        return []
    head, lines = parts
    return ["", "## Re-measured the same morning", "", f"- **{head}**",
            *(f"- `{where}` {what}" for where, what in lines)]


MISSING_SHOWN = 14  # missing nights named in the digest; past that, a count


def render_digest(cells: pd.DataFrame, run: dict, results_uri: str,
                  changes: pd.DataFrame | None = None,
                  charts: dict[str, str] | None = None,
                  levers: list[dict] | None = None, airflow_url: str | None = None,
                  reaped: list[dict] | None = None, missing: list | None = None,
                  blind: list[str] | None = None,
                  confirmations: pd.DataFrame | None = None,
                  host: list[str] | None = None) -> str:
    """Markdown digest of one run: header, what changed since the nights before (when the
    detect task ran), a table per target, then invalid/failed cells, then the instances the
    janitor had to terminate since the last digest (``reaped`` rows). ``charts`` maps a
    series_id or ``target:<name>`` to a PNG beside the digest; ``airflow_url`` (the UI's base
    URL) links the run and each change's night; ``missing``: the scheduled nights since the
    last one that have no committed run (``trends.series.missing_nights``); ``blind``: the
    lines saying which series cannot catch the sweep's step (``notify.detectable``), after
    the alerts; ``confirmations``: the same morning's re-measurement of the suspects
    (``trends.confirm``), after the alerts; ``host``: what the host canary saw
    (``servebench.canary``), said once after them."""
    charts = charts or {}
    out = _header(run, cells, results_uri, airflow_url)
    if missing:
        shown = ", ".join(f"{t:%Y-%m-%d %H:%M}" for t in missing[:MISSING_SHOWN])
        more = f" and {len(missing) - MISSING_SHOWN} more" if len(missing) > MISSING_SHOWN \
            else ""
        out.insert(2, f"**Missing nights: {shown}{more} (UTC)** -- scheduled, with no "
                      "committed run: they broke before their digest, or never ran.")
        out.insert(3, "")
    if changes is not None:
        out += change_lines(changes, charts, airflow_url, run.get("dag_id"))
    out += confirmation_lines(confirmations)
    out += blind or []
    if host:
        out += ["", "**Host:** " + host[0] + "."] + [f"- {line}." for line in host[1:]]
    records = cell_records(cells)
    if not records:
        return "\n".join(out + ["", "_No cells in this run._"]) + "\n"
    out += ["", f"_Latencies in ms; {metric_label('output_throughput')} over the measured window; "
                "errors = failed/sent requests; accuracy on the golden set._"]
    targets = list(dict.fromkeys(fmt_text(r.get("target")) for r in records))
    for target in targets:
        rows = [r for r in records if fmt_text(r.get("target")) == target]
        # the target as its baseline serves it (another variant may serve another model)
        first = next((r for r in rows if r.get("variant") == r.get("gate_baseline")), rows[0])
        about = ", ".join(
            fmt_text(first.get(k)) for k in ("stack", "model", "engine_version")
            if not is_missing(first.get(k))
        )
        out += ["", f"## {target}" + (f" ({about})" if about else ""), "",
                render_table(DIGEST_COLUMNS, rows, markdown=True)]
        notes = dict.fromkeys(fmt_text(r.get("engine_notes")) for r in rows
                              if not is_missing(r.get("engine_notes")))
        if notes:  # what the numbers cannot show: the engine's limits, an unchecked release
            out += ["", "_Engine notes: " + "; ".join(notes) + "._"]
        if f"target:{target}" in charts:
            out += ["", f"![{target}: latency vs throughput]({charts[f'target:{target}']})"]
    if levers:
        out += ["", "## What each variant buys (vs its baseline, same night)", "",
                f"_{lever_caption(levers)}_", "", lever_table(levers)]
    memory = memory_lines(cells)
    if memory:
        out += ["", "## Memory", "", "_Per variant: weights, the KV cache's capacity, the "
                "serving processes' peak memory (launch to stop)._", ""]
        out += [f"- {line}" for line in memory]
    energy = energy_lines(cells)
    if energy:
        out += ["", "## Energy", "", "_The host's energy counter over each cell's measured "
                "window, where its hardware counts it._", ""]
        out += [f"- {line}" for line in energy]
    speculation = speculation_lines(cells)
    if speculation:
        out += ["", "## Speculative decoding", "", "_Per speculative variant: the engine's "
                "acceptance over its cells, and its greedy answers against the same weights "
                "without speculation._", ""]
        out += [f"- {line}" for line in speculation]
    capacity = slo_lines(cells)
    if capacity:
        out += ["", "## Load within SLO", "",
                "_The most load at which TTFT/TPOT/E2E p95 and the error rate held the "
                "sweep's SLOs; the true limit lies below where a probe missed._", ""]
        out += [f"- {line}" for line in capacity]
    gates = gate_lines(cells)
    if gates:
        out += ["", "## Quality gate", ""] + [f"- {line}" for line in gates]
    bad = [r for r in records if fmt_text(r.get("status")) != "ok"]
    out += ["", "## Invalid and failed cells", ""]
    if bad:
        out += [f"- **{fmt_text(r.get('status'))}** `{_cell_label(r)}`: {_one_line(r.get('reason'))}"
                for r in bad]
    else:
        out.append("None.")
    return "\n".join(out + reaped_lines(reaped or [])) + "\n"


def reaped_lines(reaped: list[dict]) -> list[str]:
    """The janitor's catch, named: every instance a run left behind costs money."""
    if not reaped:
        return []
    out = ["", "## Instances the janitor terminated (last 24 h)", ""]
    for r in reaped:
        up = f", up {r['hours_up']:.1f} h" if not is_missing(r.get("hours_up")) else ""
        out.append(f"- `{r['instance_id']}` ({fmt_text(r.get('instance_type'))}, "
                   f"{fmt_text(r.get('region'))}{up}) of `{fmt_text(r.get('dag_id'))}` "
                   f"run `{fmt_text(r.get('run_id'))}` target `{fmt_text(r.get('target'))}`:"
                   f" {_one_line(r.get('reason'))}")
    return out
